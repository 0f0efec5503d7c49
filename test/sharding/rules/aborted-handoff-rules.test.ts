// A handoff the coordinator aborts after its old owner drained (docs/protocol.md §9.4, "an aborted handoff") leaves
// two things behind: the old owner's provider refuses the shard as handing off, and the next owner may hold a
// preparation, and the shard's lease, that the coordinator no longer stands by. The node simulator's operator-move
// seed 2490 met both: the plan's owner (still the old one) was refused and then fenced out of its own shard until its
// retry window ended, after healing. The rules: the first delivery routed to a node for a shard it drained, with no
// plan stored since, tells its provider to keep its shards again (the plan still places the shard there); and the
// coordinator cancels the stale preparation as soon as its grace ends, not at the node's next plan request.
import assert from "node:assert/strict";
import { test } from "node:test";
import { NoRebalance } from "../../../src/sharding/index.ts";
import { PassivateShard, PlanUpdate } from "../../../src/sharding/internal/index.ts";
import { coordinatorRouteOwner, localDeliveryType, ownerDeliveryType } from "../../../src/sharding/node/node-core.ts";
import {
  a,
  abortedAfterPrepare,
  b,
  c,
  cancels,
  coordinatorWithPlan,
  delivers,
  follower,
  ofKind,
  schedules,
  type,
} from "./node-harness.ts";

/** b, following a's plan, after a's drain of one of its shards completed (the coordinator moves it to c). */
function drainedOwner() {
  const coordinator = coordinatorWithPlan();
  const n = follower(b, coordinator.update());
  const shard = n.shardOn(b);
  const passivate = new PassivateShard(type, n.settings.key, shard, a.toString(), c.toString());
  n.feed({ kind: "control", message: passivate, replyTo: null, origin: a }, 2_000);
  n.feed({ kind: "drained", type, shard, error: null }, 2_100);
  return { n, shard, id: n.entityIn((s) => s === shard) };
}

test("a shard routed to its drained owner again (the handoff was aborted) is kept by its provider, then delivered", () => {
  const { n, shard, id } = drainedOwner();
  assert.equal(n.t.plan.allocations.get(shard)?.toString(), b.toString(), "the plan still places the shard on b");
  const effects = n.envelope(n.forwardedBy(a, id), a, 2_300);
  const retains = ofKind(effects, "retainShards");
  assert.equal(retains.length, 1, "the provider is told which shards it keeps");
  assert.ok(retains[0]!.shards.has(shard), "the drained shard among them");
  const order = effects.map((e) => e.kind).filter((k) => k === "retainShards" || k === "deliver");
  assert.deepEqual(order, ["retainShards", "deliver"], "kept before the delivery reaches the provider");
  // Once: the next delivery goes straight on.
  const next = n.envelope(n.forwardedBy(a, id), a, 2_310);
  assert.deepEqual(ofKind(next, "retainShards"), []);
  assert.equal(delivers(next).length, 1);
});

test("a drained shard's next plan keeps or releases it; no delivery afterwards retains again", () => {
  const { n, shard, id } = drainedOwner();
  // The plan (generation + 1) moves the shard to c: b's provider is told to release it, once.
  const moved = [...n.t.plan.allocations].map(([s, o]) => ({ shardId: s, owner: (s === shard ? c : o).toString() }));
  const update = new PlanUpdate(type, n.settings.key, a.toString(), n.t.plan.generation + 1, moved);
  const stored = n.feed({ kind: "control", message: update, replyTo: null, origin: a }, 2_200);
  const retains = ofKind(stored, "retainShards");
  assert.equal(retains.length, 1);
  assert.equal(retains[0]!.shards.has(shard), false);
  assert.equal(n.t.drainedHere.size, 0, "a stored plan settles what the drain left");
  assert.deepEqual(ofKind(n.envelope(n.forwardedBy(a, id), a, 2_300), "retainShards"), []);
});

test("a failed drain is kept again at the next delivery too (its provider marked the shard draining first)", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(b, coordinator.update());
  const shard = n.shardOn(b);
  const passivate = new PassivateShard(type, n.settings.key, shard, a.toString(), c.toString());
  n.feed({ kind: "control", message: passivate, replyTo: null, origin: a }, 2_000);
  n.feed({ kind: "drained", type, shard, error: new Error("stop failed") }, 2_100);
  const id = n.entityIn((s) => s === shard);
  assert.equal(ofKind(n.envelope(n.forwardedBy(a, id), a, 2_300), "retainShards").length, 1);
});

test("the coordinator cancels an aborted handoff's preparation when its grace ends, unasked", () => {
  const { n, moving, aborted } = abortedAfterPrepare({ rebalance: new NoRebalance() });
  const grace = n.settings.leaseDuration / 2;
  const timers = schedules(aborted, "preparationGrace");
  assert.equal(timers.length, 1, "the grace is timed from the abort");
  assert.equal(timers[0]!.afterMs, grace);
  const timer = timers[0]!.timer;
  assert.deepEqual(timer, { kind: "preparationGrace", type, node: c.toString(), shard: moving });
  // Fired early (a clock that ran slow), it waits for the next request; at the end of the grace it cancels.
  assert.deepEqual(cancels(n.feed({ kind: "timer", timer }, 2_020 + grace - 1)), []);
  assert.deepEqual(cancels(n.feed({ kind: "timer", timer }, 2_020 + grace)), [{ to: c.toString(), shards: [moving] }]);
});

test("no unasked cancel when the move started again to the same node, or this node no longer authors the plan", () => {
  const again = abortedAfterPrepare({ rebalance: new NoRebalance() });
  const timer = schedules(again.aborted, "preparationGrace")[0]!.timer;
  again.n.feed({ kind: "moveShard", type, shard: again.moving, to: c }, 2_400);
  assert.equal(again.n.t.handoffs.get(again.moving)?.state.next?.toString(), c.toString());
  assert.deepEqual(cancels(again.n.feed({ kind: "timer", timer }, 9_000)), [], "stood by again");

  const deposed = abortedAfterPrepare({ rebalance: new NoRebalance() });
  const later = schedules(deposed.aborted, "preparationGrace")[0]!.timer;
  deposed.n.t.plan = { ...deposed.n.t.plan, author: b };
  assert.deepEqual(cancels(deposed.n.feed({ kind: "timer", timer: later }, 9_000)), [], "not the author");
});

test("the shell's shortcuts leave a drained shard's next delivery to the step (which retains it first)", () => {
  const { n, id } = drainedOwner();
  assert.equal(ownerDeliveryType(n.state, n.forwardedBy(a, id), a), null, "owner side");
  // The coordinator itself as the drained owner: a local caller, and another node's caller, both routed here.
  const coordinator = coordinatorWithPlan();
  const shard = coordinator.shardOn(a);
  const own = coordinator.entityIn((s) => s === shard);
  const other = coordinator.entityIn((s) => s !== shard && coordinator.t.plan.allocations.get(s)?.equals(b) === true);
  assert.notEqual(localDeliveryType(coordinator.state, coordinator.delivery(own)), null, "before the drain");
  assert.notEqual(coordinatorRouteOwner(coordinator.state, coordinator.delivery(own), b), null, "before the drain");
  coordinator.t.drainedHere.add(shard);
  assert.equal(localDeliveryType(coordinator.state, coordinator.delivery(own)), null);
  assert.equal(coordinatorRouteOwner(coordinator.state, coordinator.delivery(own), b), null);
  // A shard forwarded on to its owner elsewhere is no business of this node's provider.
  coordinator.t.drainedHere.add(coordinator.shardOf(other));
  assert.notEqual(coordinatorRouteOwner(coordinator.state, coordinator.delivery(other), c), null);
});

test("a drained shard whose drain started again is not kept again by the next delivery (the new drain stands)", () => {
  const { n, shard, id } = drainedOwner();
  const again = new PassivateShard(type, n.settings.key, shard, a.toString(), c.toString());
  const started = n.feed({ kind: "control", message: again, replyTo: null, origin: a }, 2_200);
  assert.equal(ofKind(started, "drainShard").length, 1, "the drain runs again");
  assert.ok(n.t.drainedHere.has(shard));
  const effects = n.envelope(n.forwardedBy(a, id), a, 2_300);
  assert.deepEqual(ofKind(effects, "retainShards"), [], "not re-owned under a running drain");
});
