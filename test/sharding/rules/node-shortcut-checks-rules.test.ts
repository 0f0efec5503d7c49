// The node shell's shortcuts (node-core.ts localDeliveryType, ownerDeliveryType, coordinatorRouteOwner,
// callerRouteTarget) one condition at a time: each case makes one condition of a shortcut false while the others
// hold, and checks that the shortcut answers null (not a throw) where the full step does something other than its
// plain branch, or answers where the step takes it. Written from the scoped mutation runs of the shortcut region
// (m24-shortcuts, m24-shortcuts2; docs/mutation.md).
import assert from "node:assert/strict";
import { test } from "node:test";
import { NoRebalance } from "../../../src/sharding/index.ts";
import { CoordinatorFlush, PlanUpdate } from "../../../src/sharding/internal/index.ts";
import {
  callerRouteTarget,
  coordinatorRouteOwner,
  localDeliveryType,
  ownerDeliveryType,
} from "../../../src/sharding/node/node-core.ts";
import { e, onlyDelivers } from "./direct-harness.ts";
import { a, b, c, coordinatorWithPlan, type Driven, follower, member, type, view } from "./node-harness.ts";

/** `n`'s plan without `shard` (a user strategy that leaves it unplaced). */
function unplace(n: Driven, shard: number) {
  const plan = n.t.plan;
  const allocations = new Map(plan.allocations);
  allocations.delete(shard);
  n.t.plan = { ...plan, allocations };
}

test("local delivery: null while this coordinator's callers still flush the change from the coordinator they last routed through (nothing held yet)", () => {
  const n = coordinatorWithPlan();
  const id = n.entityIn((s) => s === n.shardOn(a));
  // a's callers last routed through b (b coordinated before): the held pass starts a flush through b at the next step.
  n.t.via = b;
  assert.equal(localDeliveryType(n.state, n.delivery(id)), null, "the held pass has a change to flush");
  n.feed({ kind: "membershipChanged", snapshot: n.state.view.snapshot }, 2_000);
  assert.notEqual(n.t.flush, null, "the flush runs");
  assert.equal(n.t.heldLocal.size, 0, "nothing held");
  const d = n.delivery(id);
  assert.equal(localDeliveryType(n.state, d), null, "a flush runs");
  assert.equal(onlyDelivers(n.route(d, 2_001), d), false, "the step holds it behind the flush");
});

test("local delivery: null, not a throw, for a shard the coordinator's plan leaves unplaced", () => {
  const n = coordinatorWithPlan();
  const shard = n.shardOn(a);
  unplace(n, shard);
  assert.equal(localDeliveryType(n.state, n.delivery(n.entityIn((s) => s === shard))), null);
});

test("coordinator shortcut: null, not a throw, for a shard its plan leaves unplaced (the step rejects the envelope)", () => {
  const n = coordinatorWithPlan({ rebalance: new NoRebalance() });
  const shard = n.shardOn(c);
  unplace(n, shard);
  assert.equal(coordinatorRouteOwner(n.state, n.delivery(n.entityIn((s) => s === shard)), b), null);
});

test("owner shortcut: null while the owner still holds another coordinator's plan placing the shard here (the step refuses the envelope)", () => {
  const coordinator = coordinatorWithPlan();
  const update = coordinator.update();
  const n = follower(c, update);
  const shard = n.shardOn(c);
  n.feed({ kind: "membershipChanged", snapshot: view(c, [member(e), member(a), member(b), member(c)]) }, 2_000);
  n.feed(
    {
      kind: "control",
      message: new PlanUpdate(type, update.settingsKey, e.toString(), update.generation + 1, update.assignments),
      replyTo: null,
      origin: e,
    },
    2_001,
  );
  n.feed(
    { kind: "membershipChanged", snapshot: view(c, [member(e, "Leaving"), member(a), member(b), member(c)]) },
    2_002,
  );
  assert.ok(n.state.view.accepting?.equals(a) && n.t.plan.author?.equals(e));
  const d = n.forwardedBy(
    a,
    n.entityIn((s) => s === shard),
  );
  assert.equal(ownerDeliveryType(n.state, d, a), null);
  assert.equal(onlyDelivers(n.envelope(d, a, 2_003), d), false);
});

test("owner shortcut: a Leaving owner (it routes through no coordinator) whose callers last routed through the coordinator still takes a's forwarded envelope, as the step delivers it", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(b, coordinator.update());
  const shard = n.shardOn(b);
  n.t.via = a;
  n.feed({ kind: "membershipChanged", snapshot: view(b, [member(a), member(b, "Leaving"), member(c)]) }, 2_000);
  assert.equal(n.state.view.routing, null);
  assert.ok(n.state.view.accepting?.equals(a));
  const d = n.forwardedBy(
    a,
    n.entityIn((s) => s === shard),
  );
  assert.equal(ownerDeliveryType(n.state, d, a), n.t);
  assert.ok(onlyDelivers(n.envelope(d, a, 2_001), d));
});

test("caller shortcut: null while a former coordinator's forwarded envelopes are held here (the step's held pass runs first)", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(b, coordinator.update());
  const id = n.entityIn(() => true);
  n.t.heldForwarded.hold(n.shardOf(id), {
    delivery: n.delivery(id),
    deadlineMs: 60_000,
    origin: c,
    countsRemoteRoute: false,
  });
  assert.equal(callerRouteTarget(n.state, n.delivery(id)), null);
  n.t.heldForwarded.takeAll();
  n.t.pendingMarkers.set(c.toString(), new CoordinatorFlush(type, n.settings.key, c.toString(), a.toString(), 1));
  assert.equal(callerRouteTarget(n.state, n.delivery(id)), null, "a marker waits");
});

test("owner shortcut: answers while this node's own callers flush a coordinator change (nothing held), as the step delivers the envelope", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(b, coordinator.update());
  const shard = n.shardOn(b);
  // b's callers last routed through c: the next step starts a flush of that change through c.
  n.t.via = c;
  n.feed({ kind: "membershipChanged", snapshot: n.state.view.snapshot }, 2_000);
  assert.notEqual(n.t.flush, null);
  assert.equal(n.t.heldLocal.size + n.t.heldForwarded.size, 0);
  const d = n.forwardedBy(
    a,
    n.entityIn((s) => s === shard),
  );
  assert.equal(ownerDeliveryType(n.state, d, a), n.t);
  assert.ok(onlyDelivers(n.envelope(d, a, 2_001), d));
});

test("local delivery: null at a former coordinator that still authors its plan once another member is elected, and at an elected member not yet author of the plan it holds", () => {
  const n = coordinatorWithPlan();
  const own = n.shardOn(a);
  n.feed({ kind: "membershipChanged", snapshot: view(a, [member(e), member(a), member(b), member(c)]) }, 2_000);
  assert.ok(n.state.view.routing?.equals(e) && n.t.plan.author?.equals(a));
  const d = n.delivery(n.entityIn((s) => s === own));
  assert.equal(localDeliveryType(n.state, d), null, "a routes through e now");
  assert.equal(onlyDelivers(n.route(d, 2_001), d), false);

  const coordinator = coordinatorWithPlan();
  const f = follower(b, coordinator.update());
  f.feed({ kind: "membershipChanged", snapshot: view(b, [member(a, "Down"), member(b), member(c)]) }, 2_000);
  assert.ok(f.state.view.elected?.equals(b) && f.t.plan.author?.equals(a), "elected, still holding a's plan");
  const mine = f.delivery(f.entityIn((s) => s === f.shardOn(b)));
  assert.equal(localDeliveryType(f.state, mine), null, "not the author yet");
  assert.equal(onlyDelivers(f.route(mine, 2_001), mine), false);
});

test("owner shortcut: null, not a throw, for a shard the accepting coordinator's plan leaves unplaced; coordinator shortcut: null at an elected member not yet author of the plan it holds", () => {
  const coordinator = coordinatorWithPlan();
  const f = follower(b, coordinator.update());
  const shard = f.shardOn(b);
  unplace(f, shard);
  assert.equal(
    ownerDeliveryType(
      f.state,
      f.forwardedBy(
        a,
        f.entityIn((s) => s === shard),
      ),
      a,
    ),
    null,
  );

  const g = follower(b, coordinator.update());
  g.feed({ kind: "membershipChanged", snapshot: view(b, [member(a, "Down"), member(b), member(c)]) }, 2_000);
  assert.ok(g.state.view.elected?.equals(b) && g.t.plan.author?.equals(a));
  const d = g.delivery(g.entityIn((s) => s === g.shardOn(c)));
  assert.equal(coordinatorRouteOwner(g.state, d, c), null);
});
