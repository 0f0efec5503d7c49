// The node shell's shortcut for a local caller (node-core.ts localDeliveryType, routeLocally), as rules of the core:
// it answers a type exactly when the route step would hand the delivery to this node's own provider and do nothing
// else, and null wherever the step does more (forward, buffer, queue behind a barrier, refuse). The node simulator
// checks the same at every caller's route of its histories (test/sim/node-sim.ts, checkLocalDelivery).
import assert from "node:assert/strict";
import { test } from "node:test";
import { ShardingEnvelope } from "../../../src/sharding/internal/index.ts";
import { type Delivery, localDeliveryType, routeLocally } from "../../../src/sharding/node/node-core.ts";
import { a, b, c, coordinatorWithPlan, Driven, follower, type } from "./node-harness.ts";

/** The coordinator a, and a caller's delivery to an entity of a shard the plan places on `owner`. */
function routed(owner = a) {
  const n = coordinatorWithPlan();
  const shard = n.shardOn(owner);
  const id = n.entityIn((s) => s === shard);
  return { n, shard, id };
}

/** True when `effects` are exactly one fresh `deliver` of `d` alone. */
function onlyDelivers(n: Driven, d: Delivery, nowMs: number): boolean {
  const effects = n.route(d, nowMs);
  const [e] = effects;
  return (
    effects.length === 1 && e?.kind === "deliver" && !e.retry && e.deliveries.length === 1 && e.deliveries[0] === d
  );
}

test("local delivery: the coordinator's caller, for a shard it owns, gets its type; the route step is that one delivery", () => {
  const { n, shard, id } = routed();
  const d = n.delivery(id);
  assert.equal(localDeliveryType(n.state, d), n.t);
  assert.deepEqual(n.route(d, 2_000), [{ kind: "deliver", type, shard, retry: false, deliveries: [d] }]);
  assert.ok(n.t.via?.equals(a), "the step's one state change: its callers route through a");
  assert.equal(n.stats.rejectedEnvelopes, 0);
});

test("local delivery: routeLocally makes the route step's one state change, so the next answer is the same", () => {
  const { n, id } = routed();
  const d = n.delivery(id);
  const t = localDeliveryType(n.state, d)!;
  const before = t.via;
  routeLocally(n.state, t);
  assert.equal(before, null, "no caller had routed yet");
  assert.ok(t.via?.equals(a));
  assert.equal(localDeliveryType(n.state, n.delivery(id)), n.t);
  assert.ok(onlyDelivers(n, n.delivery(id), 2_000), "the step agrees after the shortcut");
});

test("local delivery: null for a shard owned by another node (the step forwards it one hop)", () => {
  const { n, id } = routed(b);
  const d = n.delivery(id);
  assert.equal(localDeliveryType(n.state, d), null);
  assert.equal(onlyDelivers(n, d, 2_000), false);
});

test("local delivery: null on a member that does not coordinate, even for its own shard (the step forwards to a)", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(b, coordinator.update());
  const d = n.delivery(n.entityIn((s) => s === n.shardOn(b)));
  assert.equal(localDeliveryType(n.state, d), null);
  assert.equal(onlyDelivers(n, d, 2_000), false);
});

test("local delivery: null behind the shard's open retry barrier (the step queues the delivery behind it)", () => {
  const { n, shard, id } = routed();
  const first = n.delivery(id);
  n.route(first, 2_000);
  n.feed({ kind: "delivered", type, shard, retry: false, deliveries: [first], outcomes: ["lease"] }, 2_001);
  const d = n.delivery(id);
  assert.equal(localDeliveryType(n.state, d), null);
  assert.equal(onlyDelivers(n, d, 2_002), false);
  assert.ok(n.t.barrier.has(shard));
});

test("local delivery: null while the shard moves (the step buffers the delivery in the handoff)", () => {
  const { n, shard, id } = routed();
  n.feed({ kind: "moveShard", type, shard, to: c }, 2_000);
  assert.ok(n.t.handoffs.has(shard));
  const d = n.delivery(id);
  assert.equal(localDeliveryType(n.state, d), null);
  assert.equal(onlyDelivers(n, d, 2_010), false);
  assert.deepEqual(n.t.handoffs.get(shard)!.state.buffer, [d]);
});

test("local delivery: null once sharding stopped (the step refuses the call)", () => {
  const { n, id } = routed();
  n.feed({ kind: "stop" }, 2_000);
  const d = n.delivery(id);
  assert.equal(localDeliveryType(n.state, d), null);
  assert.equal(onlyDelivers(n, d, 2_001), false);
});

test("local delivery: null for a coordinator still collecting plan snapshots (the step holds the delivery)", () => {
  const n = new Driven(a);
  assert.ok(n.state.view.elected?.equals(a));
  assert.equal(n.t.plan.author, null, "bootstrapping: no plan of its own yet");
  const d = n.delivery("e1");
  assert.equal(localDeliveryType(n.state, d), null);
  assert.equal(onlyDelivers(n, d, 20), false);
  assert.equal(n.t.heldLocal.size, 1);
});

test("local delivery: null for a type not registered here (the step refuses the call)", () => {
  const { n } = routed();
  const other = {
    envelope: new ShardingEnvelope("User", "Other", "e1", 0, n.settings.key, 0, null, null, true, null),
    sender: null,
  };
  assert.equal(localDeliveryType(n.state, other), null);
  assert.equal(onlyDelivers(n, other, 2_000), false);
});

test("local delivery: null (not a throw) while this node routes through no coordinator (its view does not converge)", () => {
  const { n, id } = routed();
  n.feed({ kind: "membershipChanged", snapshot: { ...n.state.view.snapshot, converged: false } }, 2_000);
  assert.equal(n.state.view.routing, null);
  assert.equal(localDeliveryType(n.state, n.delivery(id)), null);
});
