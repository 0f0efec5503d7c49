// Rules of the sharding node core (src/sharding/node/node-core.ts) that the node simulator does not reach, fed by
// hand with time passed in. Idle passivation: the simulator's shell answers every sweep with nothing passivated and no
// error, so neither the count, nor a failed sweep, nor the halving floor is checked there (docs/mutation.md).
import assert from "node:assert/strict";
import { test } from "node:test";
import { Address, UniqueAddress } from "../../../src/actor/index.ts";
import type { ShardingMember } from "../../../src/sharding/allocation/strategy.ts";
import { ShardingSettings, type ShardingSettingsOptions } from "../../../src/sharding/index.ts";
import { type NodeEffect, type NodeInput, newNodeState, step } from "../../../src/sharding/node/node-core.ts";

const self = new UniqueAddress(new Address("movie.tcp", "shop", "127.0.0.1", 2551), "u2551");
const type = "Order";
const up: ShardingMember = { uniqueAddress: self, status: "Up", roles: [] };

/** A one-node cluster with `type` registered; returns a feed function and the register step's effects. */
function node(options: ShardingSettingsOptions) {
  let state = newNodeState(self);
  const feed = (input: NodeInput, nowMs = 0): NodeEffect[] => {
    const [next, effects] = step(state, input, nowMs);
    state = next;
    return effects;
  };
  feed({ kind: "membershipChanged", snapshot: { self, members: [up], unreachable: [], converged: true } });
  const settings = ShardingSettings.create({ shardCount: 4, ...options });
  const registered = feed({ kind: "register", name: type, settings });
  return { feed, registered, counters: () => state.counters };
}

const idleSweeps = (effects: NodeEffect[]) =>
  effects.flatMap((e) => (e.kind === "schedule" && e.timer.kind === "idleSweep" ? [e.afterMs] : []));
const warnings = (effects: NodeEffect[]) => effects.filter((e) => e.kind === "log" && e.level === "warn").length;

test("idle passivation: a sweep every half idle timeout asks the shell to passivate, counts what it did, and re-arms", () => {
  const n = node({ idleTimeout: 1_000 });
  assert.deepEqual(idleSweeps(n.registered), [500]);
  const fired = n.feed({ kind: "timer", timer: { kind: "idleSweep", type } }, 500);
  assert.deepEqual(
    fired.filter((e) => e.kind === "passivateIdle"),
    [{ kind: "passivateIdle", type, idleTimeoutMs: 1_000 }],
  );
  const swept = n.feed({ kind: "idleSwept", type, passivated: 3, error: null }, 501);
  assert.equal(n.counters().idlePassivations, 3);
  assert.deepEqual(idleSweeps(swept), [500], "the next sweep");
  n.feed({ kind: "idleSwept", type, passivated: 2, error: null }, 1_001);
  assert.equal(n.counters().idlePassivations, 5, "passivations add up");
});

test("idle passivation: a failed sweep is logged and ends sweeping; no idle timeout, no sweep", () => {
  const n = node({ idleTimeout: 1_000 });
  const failed = n.feed({ kind: "idleSwept", type, passivated: 4, error: new Error("provider down") }, 500);
  assert.deepEqual(idleSweeps(failed), []);
  assert.equal(warnings(failed), 1);
  assert.equal(n.counters().idlePassivations, 0, "a failed sweep's count is not taken");

  const off = node({ idleTimeout: null });
  assert.deepEqual(idleSweeps(off.registered), []);
  assert.deepEqual(off.feed({ kind: "timer", timer: { kind: "idleSweep", type } }, 500), []);
  assert.deepEqual(off.feed({ kind: "idleSwept", type, passivated: 1, error: null }, 500), []);
  assert.equal(off.counters().idlePassivations, 0);
  assert.deepEqual(off.feed({ kind: "idleSwept", type: "Unknown", passivated: 1, error: null }, 500), []);
});

test("idle passivation: below the halving floor (20 ms) a sweep runs every idle timeout, from the floor on every half", () => {
  assert.deepEqual(idleSweeps(node({ idleTimeout: 19 }).registered), [19]);
  assert.deepEqual(idleSweeps(node({ idleTimeout: 20 }).registered), [10]);
  assert.deepEqual(idleSweeps(node({ idleTimeout: 40 }).registered), [20]);
});
