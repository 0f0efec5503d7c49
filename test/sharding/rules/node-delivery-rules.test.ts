// How the node core hands deliveries on, fed by hand: a retry barrier that delivered part of its queue yields (the
// next tick at once, not after the retry interval); a shard's open barrier comes before a handoff's buffer; the typed
// message travels with a forwarded copy; an owner refuses hop-1 traffic for a shard neither placed nor prepared here
// (also before it holds any plan); local batches never mix entity types.
import assert from "node:assert/strict";
import { test } from "node:test";
import { UniqueAddress } from "../../../src/actor/index.ts";
import type { ShardAllocationStrategy, ShardingMember } from "../../../src/sharding/allocation/strategy.ts";
import { ClusterShardingConfigurationError, NoRebalance, NoShardOwnerError } from "../../../src/sharding/index.ts";
import { attachTyped, typedOf } from "../../../src/sharding/internal/codec.ts";
import { PlanRequest, ShardingEnvelope } from "../../../src/sharding/internal/index.ts";
import type { Delivery } from "../../../src/sharding/node/node-core.ts";
import {
  a,
  allUp,
  b,
  c,
  caller,
  coordinatorWithPlan,
  Driven,
  delivers,
  follower,
  forwards,
  member,
  ofKind,
  rejects,
  schedules,
  type,
  view,
} from "./node-harness.ts";

test("barrier: a retry that delivered only part of the queue yields: the next tick comes at once", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(b, coordinator.update());
  const shard = n.shardOn(b);
  const id = n.entityIn((s) => s === shard);
  const [d1, d2] = [n.forwardedBy(a, id), n.forwardedBy(a, id)];
  const opened = n.feed(
    { kind: "delivered", type, shard, retry: false, deliveries: [d1, d2], outcomes: ["lease"] },
    2_000,
  );
  const [tick] = schedules(opened, "barrierTick");
  const retried = n.feed({ kind: "timer", timer: tick!.timer }, 2_025);
  assert.deepEqual(delivers(retried)[0]!.deliveries, [d1, d2]);
  // The provider attempted d1 only (it stopped there): d2 is still queued, so the barrier goes on at once.
  const settled = n.feed(
    { kind: "delivered", type, shard, retry: true, deliveries: [d1, d2], outcomes: ["delivered"] },
    2_030,
  );
  const next = schedules(settled, "barrierTick");
  assert.equal(next.length, 1);
  assert.equal(next[0]!.afterMs, 0, "yield, not the 25 ms retry interval");
  const again = n.feed({ kind: "timer", timer: next[0]!.timer }, 2_030);
  assert.deepEqual(delivers(again)[0]!.deliveries, [d2]);
});

test("barrier: at the coordinator, a delivery of its shard with an open barrier joins the barrier even while a handoff moves the shard", () => {
  const n = coordinatorWithPlan({ rebalance: new NoRebalance() });
  const shard = n.shardOn(a);
  const id = n.entityIn((s) => s === shard);
  const d1 = n.delivery(id);
  n.route(d1, 2_000);
  n.feed({ kind: "delivered", type, shard, retry: false, deliveries: [d1], outcomes: ["lease"] }, 2_001);
  n.feed({ kind: "moveShard", type, shard, to: b }, 2_002);
  assert.ok(n.t.handoffs.has(shard));
  const d2 = n.delivery(id);
  n.route(d2, 2_003);
  assert.deepEqual(n.t.handoffs.get(shard)!.state.buffer, [], "not buffered for the next owner");
  assert.deepEqual(n.t.barrier.clear(), [d1, d2], "queued behind d1 at the old owner, in order");
});

test("routing: the coordinator's forwarded copy carries the caller's typed message (in-process payload)", () => {
  const n = coordinatorWithPlan();
  const shard = n.shardOn(b);
  const d = n.delivery(n.entityIn((s) => s === shard));
  const payload = { order: 42 };
  attachTyped(d.envelope, payload);
  const [forward] = forwards(n.route(d, 2_000));
  assert.equal(forward!.to.toString(), b.toString());
  assert.equal(typedOf(forward!.envelope), payload);
});

test("owner: hop-1 traffic from the coordinator for a shard placed on another member, or before any plan, is refused", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(b, coordinator.update());
  const elsewhere = n.shardOn(c);
  const d = n.forwardedBy(
    a,
    n.entityIn((s) => s === elsewhere),
  );
  const [rejected] = rejects(n.envelope(d, a, 2_000));
  assert.ok(rejected!.error instanceof ClusterShardingConfigurationError, String(rejected?.error));
  // A member that has not received any plan yet (no author) refuses it the same way.
  const fresh = new Driven(b);
  const early = fresh.forwardedBy(
    a,
    fresh.entityIn((s) => s === elsewhere),
  );
  const [refused] = rejects(fresh.envelope(early, a, 2_000));
  assert.ok(refused!.error instanceof ClusterShardingConfigurationError, String(refused?.error));
});

test("local batches: deliveries of two entity types for the same shard number in one step get one deliver effect each", () => {
  const n = coordinatorWithPlan({ rebalance: new NoRebalance() });
  const other = "Invoice";
  n.feed({ kind: "register", name: other, settings: n.settings }, 1_000);
  for (const peer of [b, c]) {
    n.feed(
      {
        kind: "control",
        message: new PlanRequest(other, n.settings.key, peer.toString()),
        replyTo: null,
        origin: peer,
      },
      1_010,
    );
  }
  n.feed({ kind: "timer", timer: { kind: "reconcile", type: other } }, 2_000);
  const otherPlan = n.state.types.get(other)!.plan;
  assert.equal(otherPlan.author?.equals(a), true);
  const shard = [...n.t.plan.allocations].find(([s, o]) => o.equals(a) && otherPlan.allocations.get(s)?.equals(a))?.[0];
  assert.ok(shard !== undefined, "a shard number both types place on a");
  const mine = n.delivery(n.entityIn((s) => s === shard));
  n.feed({ kind: "view", snapshot: view(a, [member(a), member(b), member(c)], { converged: false }) }, 3_000);
  n.route(mine, 3_000);
  const invoice = invoiceDelivery(n, other, shard);
  n.feed({ kind: "route", delivery: invoice, countsRemoteRoute: true }, 3_000);
  const flushed = n.feed({ kind: "membershipChanged", snapshot: allUp(a) }, 3_010);
  assert.deepEqual(
    delivers(flushed)
      .map((e) => [e.type, e.shard, e.deliveries])
      .sort(),
    [
      [other, shard, [invoice]],
      [type, shard, [mine]],
    ].sort(),
  );
});

/** Places shards round-robin over the Up members, except shard 0: nowhere (a user strategy may leave one unplaced). */
class LeavesShardZero implements ShardAllocationStrategy {
  readonly configurationKey = "LeavesShardZero";
  allocate(shardId: number, members: readonly ShardingMember[]): UniqueAddress | null {
    if (shardId === 0) return null;
    const up = members
      .filter((m) => m.status === "Up")
      .map((m) => m.uniqueAddress)
      .sort(UniqueAddress.compare);
    return up[shardId % up.length] ?? null;
  }
}

test("routing: a delivery for a shard the plan leaves unplaced is rejected with NoShardOwnerError", () => {
  const n = coordinatorWithPlan({ allocation: new LeavesShardZero() });
  assert.equal(n.t.plan.allocations.has(0), false);
  const d = n.delivery(n.entityIn((s) => s === 0));
  const [rejected] = rejects(n.route(d, 2_000));
  assert.equal(rejected?.delivery, d);
  assert.ok(rejected!.error instanceof NoShardOwnerError, String(rejected!.error));
});

test("owner: a shard placed here by a former coordinator's plan is not authorized for the new coordinator's traffic", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(b, coordinator.update());
  const shard = n.shardOn(b);
  // a is downed: b is now the coordinator, still holding a's plan (it has authored none of its own).
  n.feed({ kind: "view", snapshot: view(b, [member(a, "Down"), member(b), member(c)]) }, 2_000);
  assert.equal(n.t.plan.author?.equals(a), true);
  const d = n.forwardedBy(
    b,
    n.entityIn((s) => s === shard),
  );
  const [rejected] = rejects(n.envelope(d, null, 2_010));
  assert.ok(rejected!.error instanceof ClusterShardingConfigurationError, String(rejected?.error));
});

test("owner: hop-1 traffic from the coordinator for a shard its plan leaves unplaced is refused as unauthorized", () => {
  const coordinator = coordinatorWithPlan({ allocation: new LeavesShardZero() });
  const n = follower(b, coordinator.update(), { allocation: new LeavesShardZero() });
  const d = n.forwardedBy(
    a,
    n.entityIn((s) => s === 0),
  );
  const [rejected] = rejects(n.envelope(d, a, 2_000));
  assert.ok(rejected!.error instanceof ClusterShardingConfigurationError, String(rejected?.error));
});

/** A caller's hop-0 tell of entity type `name` whose entity falls in `shard`. */
function invoiceDelivery(n: Driven, name: string, shard: number): Delivery {
  const settings = n.state.types.get(name)!.settings;
  for (let i = 0; i < 1_000; i++) {
    const entityId = `i${i}`;
    if (settings.partitioner.shardFor(name, entityId, settings.shardCount) !== shard) continue;
    const envelope = new ShardingEnvelope("User", name, entityId, shard, settings.key, 0, null, null, false, null);
    return { envelope, sender: caller() };
  }
  throw new Error("no entity id found");
}

test("barrier: a handoff's buffer flushed to this node queues behind the shard's open barrier, never overtaking it", () => {
  // a delivers d0 to its own shard; the outcome comes back only after the shard moved to b and, in a second handoff,
  // back to a while d1 waited in that handoff's buffer. d0 failed transiently, so its barrier opened behind the
  // buffer's back: the flushed d1 must queue behind d0, not go to the provider first.
  const n = coordinatorWithPlan({ rebalance: new NoRebalance() });
  const shard = n.shardOn(a);
  const id = n.entityIn((s) => s === shard);
  const d0 = n.delivery(id);
  assert.deepEqual(
    delivers(n.route(d0, 2_000)).map((e) => e.deliveries),
    [[d0]],
  );
  n.feed({ kind: "moveShard", type, shard, to: b }, 2_001);
  n.feed({ kind: "drained", type, shard, error: null }, 2_002);
  const toB = n.t.handoffs.get(shard)!.token;
  n.feed({ kind: "handoffReply", type, shard, token: toB, step: "prepared", error: null }, 2_003);
  assert.ok(n.t.plan.allocations.get(shard)!.equals(b), "moved to b");
  n.feed({ kind: "moveShard", type, shard, to: a }, 2_004);
  const back = n.t.handoffs.get(shard)!.token;
  const d1 = n.delivery(id);
  n.route(d1, 2_005);
  assert.deepEqual(n.t.handoffs.get(shard)!.state.buffer, [d1], "d1 waits in the handoff's buffer");
  const opened = n.feed({ kind: "delivered", type, shard, retry: false, deliveries: [d0], outcomes: ["lease"] }, 2_006);
  const [tick] = schedules(opened, "barrierTick");
  assert.ok(tick, "d0's barrier opened");
  const passivated = n.feed({ kind: "handoffReply", type, shard, token: back, step: "passivated", error: null }, 2_007);
  const [prepare] = ofKind(passivated, "prepareShard");
  const done = n.feed(
    { kind: "prepared", type, shard, coordinator: a.toString(), waiter: prepare!.waiter, error: null },
    2_008,
  );
  assert.ok(n.t.plan.allocations.get(shard)!.equals(a), "back at a");
  assert.deepEqual(delivers(done), [], "d1 is not handed to the provider ahead of d0");
  const retried = n.feed({ kind: "timer", timer: tick!.timer }, 2_031);
  assert.deepEqual(
    delivers(retried).map((e) => e.deliveries),
    [[d0, d1]],
    "one retry, d0 first",
  );
});
