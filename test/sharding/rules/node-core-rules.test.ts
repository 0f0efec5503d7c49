// Rules of the sharding node core (src/sharding/node/node-core.ts) that the node simulator does not reach, fed by
// hand with time passed in. Idle passivation: the simulator's shell answers every sweep with nothing passivated and no
// error, so neither the count, nor a failed sweep, nor the halving floor is checked there (docs/mutation.md).
import assert from "node:assert/strict";
import { test } from "node:test";
import { Address, UniqueAddress } from "../../../src/actor/index.ts";
import type { ShardingMember } from "../../../src/sharding/allocation/strategy.ts";
import { ShardingSettings, type ShardingSettingsOptions } from "../../../src/sharding/index.ts";
import {
  PassivateShard,
  PlanSnapshot,
  PlanSnapshotRequest,
  PlanUpdate,
} from "../../../src/sharding/internal/messages.ts";
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

// Node simulator seed 6963: the coordinator elected after the old one crashed bootstrapped without the only other
// member, which was Leaving: it asked Up peers alone for their plans and refused the leaver's snapshot, published
// a fresh plan that placed the leaver's shards on itself while the leaver still held them under the newest plan, and
// the leaver, its departure waiting for those shards, refused that lower generation for good.
test("bootstrap: a new coordinator asks a Leaving member for its plan, takes its snapshot and hands its shards off", () => {
  const leaver = new UniqueAddress(new Address("movie.tcp", "shop", "127.0.0.1", 2550), "u2550");
  const gone = new UniqueAddress(new Address("movie.tcp", "shop", "127.0.0.1", 2549), "u2549");
  let state = newNodeState(self);
  const feed = (input: NodeInput, nowMs: number): NodeEffect[] => {
    const [next, effects] = step(state, input, nowMs);
    state = next;
    return effects;
  };
  const members: ShardingMember[] = [{ uniqueAddress: leaver, status: "Leaving", roles: [] }, up];
  feed({ kind: "membershipChanged", snapshot: { self, members, unreachable: [], converged: true } }, 0);
  const settings = ShardingSettings.create({ shardCount: 4 });
  const registered = feed({ kind: "register", name: type, settings }, 0);
  const asked = registered.flatMap((e) =>
    e.kind === "send" && e.message instanceof PlanSnapshotRequest ? [String(e.to)] : [],
  );
  assert.deepEqual(asked, [String(leaver)], "the leaving member is asked for its plan");
  // Its plan (generation 7, by a coordinator that has since gone): shards 0 and 1 on the leaver, 2 and 3 on `gone`.
  const snapshot = new PlanSnapshot(type, settings.key, String(gone), 7, [
    { shardId: 0, owner: String(leaver) },
    { shardId: 1, owner: String(leaver) },
    { shardId: 2, owner: String(gone) },
    { shardId: 3, owner: String(gone) },
  ]);
  // The only peer asked has answered: the term starts in this step, 400 ms before the bootstrap's deadline.
  const published = feed({ kind: "control", message: snapshot, replyTo: null, origin: leaver }, 100);
  assert.deepEqual(
    published.filter((e) => e.kind === "refused"),
    [],
  );
  assert.equal(state.counters.rejectedEnvelopes, 0, "the snapshot counts");
  const plan = state.types.get(type)!.plan;
  assert.equal(plan.generation, 8, "published above the leaver's generation");
  assert.equal(String(plan.allocations.get(0)), String(leaver), "recovered, not placed afresh");
  const update = published.find((e) => e.kind === "send" && e.message instanceof PlanUpdate);
  assert.equal(update?.kind === "send" ? String(update.to) : null, String(leaver), "the leaver gets the plan");
  // The leaver's shards move by handoff: it is asked to drain them.
  const passivations = published.flatMap((e) =>
    e.kind === "ask" && e.message instanceof PassivateShard ? [e.shard] : [],
  );
  assert.deepEqual(passivations.sort(), [0, 1]);
});

test("repair: a coordinator outside bootstrap republishes above the snapshot a Leaving member sends back", () => {
  const leaver = new UniqueAddress(new Address("movie.tcp", "shop", "127.0.0.1", 2550), "u2550");
  let state = newNodeState(self);
  const feed = (input: NodeInput, nowMs: number): NodeEffect[] => {
    const [next, effects] = step(state, input, nowMs);
    state = next;
    return effects;
  };
  feed({ kind: "membershipChanged", snapshot: { self, members: [up], unreachable: [], converged: true } }, 0);
  const settings = ShardingSettings.create({ shardCount: 2 });
  feed({ kind: "register", name: type, settings }, 0);
  assert.equal(state.types.get(type)!.plan.generation, 1, "alone, it published at once");
  const members: ShardingMember[] = [{ uniqueAddress: leaver, status: "Leaving", roles: [] }, up];
  feed({ kind: "membershipChanged", snapshot: { self, members, unreachable: [], converged: true } }, 10);
  const snapshot = new PlanSnapshot(type, settings.key, String(leaver), 5, [
    { shardId: 0, owner: String(leaver) },
    { shardId: 1, owner: String(leaver) },
  ]);
  const effects = feed({ kind: "control", message: snapshot, replyTo: null, origin: leaver }, 20);
  assert.equal(state.types.get(type)!.plan.generation, 6);
  assert.ok(effects.some((e) => e.kind === "send" && e.message instanceof PlanUpdate && e.to.equals(leaver)));
});
