// The node shell's shortcut for a direct envelope at its owner (node-core.ts directDeliveryType), as rules of the core:
// it answers exactly when the owner's envelope step would only hand the envelope to this node's provider, and null
// wherever the step does more or something else (refuse it with a typed, counted rejection, queue it behind a barrier,
// hold it, re-own a drained shard). The node simulator checks the same at every envelope of its histories
// (test/sim/node-sim.ts, checkRemoteShortcut).
import assert from "node:assert/strict";
import { test } from "node:test";
import { DirectDeliveryRefusedError, NoRebalance, type ShardingSettingsOptions } from "../../../src/sharding/index.ts";
import { DirectEnvelope } from "../../../src/sharding/internal/messages.ts";
import {
  callerOwnDirect,
  callerRouteTarget,
  type Delivery,
  directDeliveryType,
  type NodeEffect,
  ownerDeliveryType,
  routedDirect,
} from "../../../src/sharding/node/node-core.ts";
import { direct, directFrom, onlyDelivers, ownerWithOwnGrant } from "./direct-harness.ts";
import { a, b, c, coordinatorWithPlan, type Driven, follower, member, rejects, type, view } from "./node-harness.ts";

/** c, the owner of a shard in a's direct-routing plan, and b's direct envelope to an entity of it. */
function atOwner(options: ShardingSettingsOptions = direct) {
  const coordinator = coordinatorWithPlan(options);
  const n = follower(c, coordinator.update(), options);
  const shard = n.shardOn(c);
  const id = n.entityIn((s) => s === shard);
  return { n, shard, id, d: directFrom(n, id, a, n.t.plan.generation) };
}

/** The reasons of the direct-delivery refusals among `effects`. */
function refusedFor(effects: NodeEffect[]): string[] {
  return rejects(effects).flatMap((r) => (r.error instanceof DirectDeliveryRefusedError ? [r.error.reason] : []));
}

/** The shortcut says null, and the step does something other than the one plain delivery. */
function declined(n: Driven, d: Delivery, nowMs = 2_000): NodeEffect[] {
  assert.equal(directDeliveryType(n.state, d), null);
  const effects = n.envelope(d, b, nowMs);
  assert.ok(!onlyDelivers(effects, d), `the step did only the delivery: ${effects.map((e) => e.kind).join(", ")}`);
  return effects;
}

test("direct shortcut: a direct envelope under the accepting coordinator's grant for a shard owned here names its type; the step only delivers it", () => {
  const { n, d } = atOwner();
  assert.equal(directDeliveryType(n.state, d), n.t);
  // Not the forwarded envelope's shortcut: each kind of envelope has one.
  assert.equal(ownerDeliveryType(n.state, d, b), null);
  const refusals = n.stats.directRefusals;
  assert.ok(onlyDelivers(n.envelope(d, b, 2_000), d));
  assert.equal(n.stats.directRefusals, refusals);
});

test("direct shortcut: whoever sent it (another member, this node's own caller) the answer is the same, as the owner checks the grant and not the sender", () => {
  const { n, id, d } = atOwner();
  assert.equal(directDeliveryType(n.state, d), n.t);
  const own = directFrom(n, id, a, n.t.plan.generation);
  assert.equal(directDeliveryType(n.state, own), n.t);
  assert.ok(onlyDelivers(n.envelope(own, null, 2_000), own));
  assert.ok(onlyDelivers(n.envelope(d, a, 2_001), d));
});

test("direct shortcut: a forwarded (hop-1) envelope is not a direct one", () => {
  const { n, id } = atOwner();
  const forwarded = n.forwardedBy(a, id);
  assert.equal(directDeliveryType(n.state, forwarded), null);
});

test("direct shortcut: a grant of another coordinator than the accepting one is refused by the step, counted", () => {
  const { n, id } = atOwner();
  const d = directFrom(n, id, b, n.t.plan.generation);
  const before = n.stats.directRefusals;
  assert.deepEqual(refusedFor(declined(n, d)), ["coordinator"]);
  assert.equal(n.stats.directRefusals, before + 1);
});

test("direct shortcut: a generation newer than the plan's, or older than this ownership's start, is refused by the step", () => {
  const { n, id } = atOwner();
  const before = n.stats.directRefusals;
  assert.deepEqual(refusedFor(declined(n, directFrom(n, id, a, n.t.plan.generation + 1))), ["generation"]);
  const since = n.t.ownedSince.get(n.shardOf(id)) ?? 1;
  assert.deepEqual(refusedFor(declined(n, directFrom(n, id, a, since - 1))), ["generation"]);
  assert.equal(n.stats.directRefusals, before + 2);
});

test("direct shortcut: a shard the plan places on another member is refused by the step", () => {
  const { n } = atOwner();
  const elsewhere = n.shardOn(b);
  const id = n.entityIn((s) => s === elsewhere);
  const before = n.stats.directRefusals;
  assert.deepEqual(refusedFor(declined(n, directFrom(n, id, a, n.t.plan.generation))), ["owner"]);
  assert.equal(n.stats.directRefusals, before + 1);
});

test("direct shortcut: an envelope of other settings, or of a type routed through the coordinator, is not delivered", () => {
  const { n, id } = atOwner();
  const d = directFrom(n, id, a, n.t.plan.generation);
  const other = DirectEnvelope.of(
    { ...d.envelope, settingsKey: `${d.envelope.settingsKey}|other` } as DirectEnvelope,
    a,
    n.t.plan.generation,
  );
  assert.equal(rejects(declined(n, { envelope: other, sender: d.sender })).length, 1);
  // The same cluster with coordinator routing: a direct envelope is refused there ("routing").
  const coordinatorRouted = atOwner({ routing: "coordinator" as const, rebalance: new NoRebalance() });
  const sameKey = DirectEnvelope.of(
    coordinatorRouted.n.delivery(coordinatorRouted.id).envelope,
    a,
    coordinatorRouted.n.t.plan.generation,
  );
  const before = coordinatorRouted.n.stats.directRefusals;
  assert.deepEqual(refusedFor(declined(coordinatorRouted.n, { envelope: sameKey, sender: null })), ["routing"]);
  assert.equal(coordinatorRouted.n.stats.directRefusals, before + 1);
});

test("direct shortcut: an envelope whose shard is not its entity's is rejected by the step", () => {
  const { n, shard } = atOwner();
  const foreign = n.entityIn((s) => s !== shard);
  const d = n.delivery(foreign);
  const forged = DirectEnvelope.of({ ...d.envelope, shardId: shard } as DirectEnvelope, a, n.t.plan.generation);
  assert.equal(rejects(declined(n, { envelope: forged, sender: d.sender })).length, 1);
});

test("direct shortcut: behind an open retry barrier of the shard the step queues the envelope instead", () => {
  const { n, shard, id, d } = atOwner();
  n.feed({ kind: "delivered", type, shard, retry: false, deliveries: [d], outcomes: ["lease"] }, 2_000);
  assert.ok(n.t.barrier.has(shard));
  const effects = declined(n, directFrom(n, id, a, n.t.plan.generation), 2_001);
  assert.equal(effects.length, 0, "queued behind the barrier, nothing else");
});

test("direct shortcut: once a drain of the shard began, or after it drained here, the step does not simply deliver", () => {
  const closed = atOwner();
  closed.n.t.directClosed.add(closed.shard);
  const before = closed.n.stats.directRefusals;
  assert.deepEqual(refusedFor(declined(closed.n, closed.d)), ["draining"]);
  assert.equal(closed.n.stats.directRefusals, before + 1, "a drain begun refuses direct deliveries");
  // Drained here (an aborted handoff): the step re-owns the shard before delivering (docs/protocol.md §9.4).
  const drained = atOwner();
  drained.n.t.drainedHere.add(drained.shard);
  assert.equal(directDeliveryType(drained.n.state, drained.d), null);
});

test("direct shortcut: without an accepting coordinator the step holds the envelope; a stopped node answers nothing", () => {
  const { n, d } = atOwner();
  // b unreachable and the view not converged: c accepts no coordinator's grant until its view settles on one.
  n.feed(
    {
      kind: "membershipChanged",
      snapshot: view(c, [member(a), member(b), member(c)], { converged: false, unreachable: [b] }),
    },
    1_500,
  );
  assert.equal(n.state.view.accepting, null);
  const effects = declined(n, d);
  assert.deepEqual(
    effects.filter((e) => e.kind === "deliver" || e.kind === "reject"),
    [],
    "neither delivered nor rejected",
  );
  assert.equal(n.t.heldDirect.size, 1, "held, not refused");
  const stopped = atOwner();
  stopped.n.feed({ kind: "stop" }, 2_000);
  assert.equal(directDeliveryType(stopped.n.state, stopped.d), null);
});

test("direct shortcut: while an earlier direct envelope of the shard is still held, a later one waits its turn (the step releases the held one first)", () => {
  const { n, id, d } = atOwner();
  const unsettled = view(c, [member(a), member(b), member(c)], { converged: false, unreachable: [b] });
  n.feed({ kind: "membershipChanged", snapshot: unsettled }, 1_500);
  const first = directFrom(n, id, a, n.t.plan.generation);
  n.envelope(first, b, 1_600);
  assert.equal(n.t.heldDirect.size, 1);
  // The view settles (a view input alone releases nothing): the held envelope goes out at the next step, before d.
  n.feed({ kind: "view", snapshot: view(c, [member(a), member(b), member(c)]) }, 1_700);
  assert.ok(n.state.view.accepting?.equals(a));
  assert.equal(directDeliveryType(n.state, d), null);
  const effects = n.envelope(d, b, 1_800);
  const delivered = effects.flatMap((e) => (e.kind === "deliver" ? e.deliveries : []));
  assert.deepEqual(delivered, [first, d], "the held envelope first, then the new one");
});

test("direct shortcut: a plan authored by another coordinator than the accepting one is refused by the step", () => {
  const { n, d } = atOwner();
  n.t.plan = { ...n.t.plan, author: b };
  const before = n.stats.directRefusals;
  assert.deepEqual(refusedFor(declined(n, d)), ["coordinator"]);
  assert.equal(n.stats.directRefusals, before + 1);
});

test("own direct shortcut: a member's caller that owns the shard under its own grant delivers the direct envelope here, counted, as the step does", () => {
  const { n, shard, id } = ownerWithOwnGrant();
  const d = n.delivery(id);
  assert.equal(callerRouteTarget(n.state, d), null, "no send: the owner is this node");
  const own = callerOwnDirect(n.state, d);
  assert.equal(own?.t, n.t);
  assert.ok(own?.coordinator.equals(a));
  const envelope = own?.delivery.envelope;
  assert.ok(envelope instanceof DirectEnvelope);
  assert.equal(envelope.generation, n.t.plan.generation);
  assert.equal(envelope.coordinatorUid, a.uid);
  assert.equal(own?.delivery.sender, d.sender);
  const before = n.stats.directRoutes;
  const effects = n.route(d, 2_100);
  const [only] = effects;
  assert.equal(effects.length, 1);
  assert.equal(only?.kind, "deliver");
  if (only?.kind !== "deliver") return;
  assert.equal(only.shard, shard);
  assert.ok(only.deliveries[0]?.envelope instanceof DirectEnvelope);
  assert.equal(n.stats.directRoutes, before + 1);
});

test("own direct shortcut: no grant yet, a grant from another coordinator, a drain begun or coordinator routing answer null", () => {
  const probing = atOwner();
  assert.equal(callerOwnDirect(probing.n.state, probing.n.delivery(probing.id)), null, "no grant");
  const closed = ownerWithOwnGrant();
  closed.n.t.directClosed.add(closed.shard);
  const d = closed.n.delivery(closed.id);
  assert.equal(callerOwnDirect(closed.n.state, d), null, "a drain begun: the step refuses it");
  const effects = closed.n.route(d, 2_100);
  assert.ok(!effects.some((e) => e.kind === "deliver"), "not delivered");
  const stale = ownerWithOwnGrant();
  stale.n.t.plan = { ...stale.n.t.plan, author: b };
  assert.equal(callerOwnDirect(stale.n.state, stale.n.delivery(stale.id)), null, "the plan of another coordinator");
  const byCoordinator = atOwner({ routing: "coordinator" as const, rebalance: new NoRebalance() });
  assert.equal(callerOwnDirect(byCoordinator.n.state, byCoordinator.n.delivery(byCoordinator.id)), null);
});

test("own direct shortcut: a route granted by another owner, or under another coordinator, is not this node's own: the step does not deliver here", () => {
  for (const stale of [
    { owner: b, coordinator: a },
    { owner: c, coordinator: b },
  ]) {
    const k = ownerWithOwnGrant();
    const granted = k.n.t.routes.get(k.shard);
    assert.equal(granted?.phase, "direct");
    if (granted?.phase !== "direct") return;
    k.n.t.routes.set(k.shard, { ...granted, ...stale });
    const d = k.n.delivery(k.id);
    assert.equal(callerOwnDirect(k.n.state, d), null);
    const effects = k.n.route(d, 2_100);
    assert.ok(
      !effects.some((e) => e.kind === "deliver"),
      `${stale.owner.address.port}/${stale.coordinator.address.port}`,
    );
  }
});

test("own direct shortcut: applying it counts a direct route and routes this node's callers through the coordinator", () => {
  const { n, id } = ownerWithOwnGrant();
  const own = callerOwnDirect(n.state, n.delivery(id));
  assert.ok(own !== null);
  n.t.via = null;
  const before = n.stats.directRoutes;
  routedDirect(n.state, own);
  assert.equal(n.stats.directRoutes, before + 1);
  assert.ok(n.state.types.get(type)?.via?.equals(a));
});

test("own direct shortcut: while this node's callers flush a coordinator change, the step holds the delivery", () => {
  const { n, id } = ownerWithOwnGrant();
  n.t.flush = { token: 1, via: b, target: a, sinceMs: 2_050 };
  const d = n.delivery(id);
  assert.equal(callerOwnDirect(n.state, d), null);
  assert.ok(!n.route(d, 2_100).some((e) => e.kind === "deliver"));
});

test("direct shortcut: a direct envelope of a type not registered here answers null, not a throw", () => {
  const { n, d } = atOwner();
  const types = n.state.types;
  const registered = types.get(type)!;
  types.delete(type);
  assert.equal(directDeliveryType(n.state, d), null);
  types.set(type, registered);
  assert.equal(directDeliveryType(n.state, d), n.t);
});

test("own direct shortcut: a caller's delivery of a type not registered here answers null, not a throw", () => {
  const { n, id } = ownerWithOwnGrant();
  const types = n.state.types;
  const registered = types.get(type)!;
  types.delete(type);
  assert.equal(callerOwnDirect(n.state, n.delivery(id)), null);
  types.set(type, registered);
  assert.notEqual(callerOwnDirect(n.state, n.delivery(id)), null);
});

test("own direct shortcut: while the view routes through no coordinator (gossip re-converging), the step holds the caller's delivery though the owner would still accept its grant; the shortcut answers null", () => {
  const { n, id } = ownerWithOwnGrant();
  n.feed(
    { kind: "membershipChanged", snapshot: view(c, [member(a), member(b), member(c)], { converged: false }) },
    2_050,
  );
  assert.equal(n.state.view.routing, null);
  assert.ok(n.state.view.accepting?.equals(a), "the grant's coordinator is still accepted");
  const d = n.delivery(id);
  assert.equal(callerOwnDirect(n.state, d), null);
  const effects = n.route(d, 2_100);
  assert.ok(!effects.some((e) => e.kind === "deliver"), "held, not delivered");
  assert.equal(n.t.heldLocal.size, 1);
});
