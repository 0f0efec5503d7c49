// The shards a node keeps after a stored plan (src/sharding/node/node-core.ts, afterPlanStored) while handoffs prepare
// it to own more. Found with real processes (test/management/graceful-shutdown.test.ts): two prepares whose leases
// were granted together, and the first one's completed handoff stored a plan before the second `prepared` reached the
// core. The provider had already forgotten the second prepare, so that plan's retain released the fresh lease and the
// next plan acquired it again: one ownership transfer cost two epochs. The core now counts its own outstanding
// prepares and keeps them in every retain until their outcome comes back.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Address, UniqueAddress } from "../../../src/actor/index.ts";
import type { ShardingMember } from "../../../src/sharding/allocation/strategy.ts";
import { ShardingSettings } from "../../../src/sharding/index.ts";
import { PlanUpdate, PrepareShard } from "../../../src/sharding/internal/index.ts";
import { toAssignments } from "../../../src/sharding/internal/messages.ts";
import { type NodeEffect, type NodeInput, newNodeState, step } from "../../../src/sharding/node/node-core.ts";

const node = (port: number) => new UniqueAddress(new Address("movie.tcp", "shop", "127.0.0.1", port), `u${port}`);
const [coordinator, self] = [node(2551), node(2552)];
const up = (uniqueAddress: UniqueAddress): ShardingMember => ({ uniqueAddress, status: "Up", roles: [] });
const type = "Ledger";
const settings = ShardingSettings.create({ shardCount: 4 });

/** `self`, a follower of `coordinator`, holding the plan generation 1 (every shard on the coordinator). */
function follower() {
  let state = newNodeState(self);
  const feed = (input: NodeInput): NodeEffect[] => {
    const [next, effects] = step(state, input, 0);
    state = next;
    return effects;
  };
  feed({
    kind: "membershipChanged",
    snapshot: { self, members: [up(coordinator), up(self)], unreachable: [], converged: true },
  });
  feed({ kind: "register", name: type, settings });
  const plan = (generation: number, owners: UniqueAddress[]) =>
    feed({
      kind: "control",
      message: new PlanUpdate(
        type,
        settings.key,
        coordinator.toString(),
        generation,
        toAssignments(new Map(owners.map((o, shard) => [shard, o]))),
      ),
      replyTo: null,
      origin: coordinator,
    });
  const prepare = (shard: number) =>
    feed({
      kind: "control",
      message: new PrepareShard(type, settings.key, shard, coordinator.toString()),
      replyTo: null,
      origin: coordinator,
    });
  const prepared = (shard: number, error: Error | null = null) =>
    feed({
      kind: "prepared",
      type,
      shard,
      coordinator: coordinator.toString(),
      waiter: { kind: "ask", replyTo: null },
      error,
    });
  assert.deepEqual(retained(plan(1, [coordinator, coordinator, coordinator, coordinator])), [[]]);
  return { plan, prepare, prepared };
}

const retained = (effects: NodeEffect[]): number[][] =>
  effects.flatMap((e) => (e.kind === "retainShards" ? [[...e.shards].sort((x, y) => x - y)] : []));

test("a plan stored while a prepare has not answered keeps that shard (its fresh lease is not released)", () => {
  const n = follower();
  for (const shard of [1, 2]) {
    assert.deepEqual(n.prepare(shard).filter((e) => e.kind === "prepareShard").length, 1, `shard ${shard} is prepared`);
  }
  n.prepared(1);
  // Shard 1's handoff completes: the plan lists it here; shard 2's outcome is still on its way to the core.
  assert.deepEqual(retained(n.plan(2, [coordinator, self, coordinator, coordinator])), [[1, 2]]);
  n.prepared(2);
  assert.deepEqual(retained(n.plan(3, [coordinator, self, self, coordinator])), [[1, 2]]);
});

test("once a prepare has answered, a plan that neither lists the shard here nor was authored by its preparer drops it", () => {
  const n = follower();
  n.prepare(3);
  assert.deepEqual(retained(n.plan(2, [coordinator, coordinator, coordinator, coordinator])), [[3]], "still preparing");
  n.prepared(3, new Error("lease held elsewhere"));
  assert.deepEqual(retained(n.plan(3, [coordinator, coordinator, coordinator, coordinator])), [[]], "failed: dropped");
});

test("two prepares of one shard keep it until both have answered", () => {
  const n = follower();
  n.prepare(0);
  n.prepare(0);
  n.prepared(0, new Error("first attempt failed"));
  assert.deepEqual(retained(n.plan(2, [coordinator, coordinator, coordinator, coordinator])), [[0]]);
  n.prepared(0, new Error("second attempt failed"));
  assert.deepEqual(retained(n.plan(3, [coordinator, coordinator, coordinator, coordinator])), [[]]);
});
