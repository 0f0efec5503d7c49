// The node shell's shortcuts for an envelope from another node (node-core.ts coordinatorRouteOwner, forwardEffect,
// ownerDeliveryType), as rules of the core: each answers exactly when the envelope step would do one plain thing (the
// coordinator sends a caller's envelope one hop on, or delivers it here; the owner delivers a forwarded one here) and
// null wherever the step does more or something else (buffer, queue behind a barrier, hold, refuse). The node simulator
// checks the same at every envelope of its histories (test/sim/node-sim.ts, checkRemoteShortcut).
import assert from "node:assert/strict";
import { test } from "node:test";
import { NoRebalance } from "../../../src/sharding/index.ts";
import { ShardingEnvelope } from "../../../src/sharding/internal/index.ts";
import { DirectEnvelope } from "../../../src/sharding/internal/messages.ts";
import {
  coordinatorRouteOwner,
  type Delivery,
  forwardEffect,
  ownerDeliveryType,
} from "../../../src/sharding/node/node-core.ts";
import { onlyDelivers } from "./direct-harness.ts";
import { a, b, c, coordinatorWithPlan, Driven, follower, member, type } from "./node-harness.ts";

/** The coordinator a, and a caller's delivery (from b) to an entity of a shard the plan places on `owner`. */
function atCoordinator(owner = c) {
  // No rebalance policy: an operator's move is then never refused as one the policy would undo.
  const n = coordinatorWithPlan({ rebalance: new NoRebalance() });
  const shard = n.shardOn(owner);
  const id = n.entityIn((s) => s === shard);
  return { n, shard, id, d: n.delivery(id) };
}

/** b, the owner of a shard in a's plan, and a's hop-1 copy of a delivery to it. */
function atOwner() {
  const coordinator = coordinatorWithPlan();
  const n = follower(b, coordinator.update());
  const shard = n.shardOn(b);
  const id = n.entityIn((s) => s === shard);
  return { n, shard, id, d: n.forwardedBy(a, id) };
}

test("coordinator shortcut: a caller's envelope for another node's shard names that owner; the step forwards it there, counted, one hop on", () => {
  const { n, shard, d } = atCoordinator(c);
  const answer = coordinatorRouteOwner(n.state, d, b);
  assert.equal(answer?.t, n.t);
  assert.ok(answer?.owner.equals(c));
  const before = n.stats.forwards;
  const effects = n.envelope(d, b, 2_000);
  assert.equal(effects.length, 1);
  const [forward] = effects;
  assert.equal(forward?.kind, "forward");
  if (forward?.kind !== "forward") return;
  assert.ok(forward.to.equals(c));
  assert.equal(forward.delivery, d);
  assert.equal(forward.envelope.hopCount, 1);
  assert.equal(forward.envelope.coordinator, a.toString());
  assert.equal(forward.envelope.shardId, shard);
  assert.equal(n.stats.forwards, before + 1);
});

test("coordinator shortcut: forwardEffect is the step's forward, and counts it", () => {
  const { n, d } = atCoordinator(c);
  const before = n.stats.forwards;
  const effect = forwardEffect(n.state, d, c);
  assert.equal(n.stats.forwards, before + 1);
  const [stepped] = n.envelope(d, b, 2_000);
  assert.equal(stepped?.kind, "forward");
  if (stepped?.kind !== "forward") return;
  assert.deepEqual(
    { ...effect, envelope: { ...effect.envelope } },
    { ...stepped, envelope: { ...stepped.envelope } },
    "the same effect field by field",
  );
  const tell = { envelope: d.envelope, sender: null };
  assert.equal(forwardEffect(n.state, tell, c).envelope.senderless, true, "a tell's copy says it has no sender");
});

test("coordinator shortcut: an envelope for the coordinator's own shard names the coordinator; the step delivers it here", () => {
  const { n, d } = atCoordinator(a);
  assert.ok(coordinatorRouteOwner(n.state, d, b)?.owner.equals(a));
  assert.ok(onlyDelivers(n.envelope(d, b, 2_000), d));
});

test("coordinator shortcut: null for an envelope built on this node (origin null: the caller-side route takes it)", () => {
  const { n, d } = atCoordinator(c);
  assert.equal(coordinatorRouteOwner(n.state, d, null), null);
});

test("coordinator shortcut: null for an envelope whose shard is not its entity's (the step refuses it)", () => {
  const { n, id, shard } = atCoordinator(c);
  const wrong = n.shardOn(b);
  assert.notEqual(wrong, shard);
  const e = n.delivery(id).envelope;
  const d: Delivery = {
    envelope: new ShardingEnvelope("User", type, id, wrong, e.settingsKey, 0, null, null, true, null),
    sender: null,
  };
  assert.equal(coordinatorRouteOwner(n.state, d, b), null);
  const effects = n.envelope(d, b, 2_000);
  assert.equal(effects.filter((x) => x.kind === "forward" || x.kind === "deliver").length, 0);
  assert.equal(effects.filter((x) => x.kind === "reject").length, 1);
});

test("coordinator shortcut: null for another settings key (the step refuses it)", () => {
  const { n, id } = atCoordinator(c);
  const e = n.delivery(id).envelope;
  const d: Delivery = {
    envelope: new ShardingEnvelope("User", type, id, e.shardId, "other-key", 0, null, null, true, null),
    sender: null,
  };
  assert.equal(coordinatorRouteOwner(n.state, d, b), null);
  assert.equal(n.envelope(d, b, 2_000).filter((x) => x.kind === "reject").length, 1);
});

test("coordinator shortcut: null for a type not registered here", () => {
  const { n, id } = atCoordinator(c);
  const e = n.delivery(id).envelope;
  const d: Delivery = {
    envelope: new ShardingEnvelope("User", "Other", id, e.shardId, e.settingsKey, 0, null, null, true, null),
    sender: null,
  };
  assert.equal(coordinatorRouteOwner(n.state, d, b), null);
});

test("coordinator shortcut: null for an envelope a former coordinator relays (§8.7: it names its relay)", () => {
  const { n, d } = atCoordinator(c);
  const relayed: Delivery = { envelope: d.envelope.relayedBy(b), sender: d.sender };
  assert.equal(coordinatorRouteOwner(n.state, relayed, b), null);
});

test("coordinator shortcut: null for a forwarded (hop 1) envelope, which is the owner's to take", () => {
  const { n, id } = atCoordinator(a);
  assert.equal(coordinatorRouteOwner(n.state, n.forwardedBy(a, id), a), null);
});

test("coordinator shortcut: null for a direct envelope (the owner's check, §8.8)", () => {
  const { n, d } = atCoordinator(c);
  const direct: Delivery = { envelope: DirectEnvelope.of(d.envelope, a, n.t.plan.generation), sender: d.sender };
  assert.equal(coordinatorRouteOwner(n.state, direct, b), null);
});

test("coordinator shortcut: null for a hop-1 envelope that names no coordinator (a peer's malformed copy: refused)", () => {
  const { n, id, d } = atCoordinator(a);
  const e = d.envelope;
  const odd: Delivery = {
    envelope: new ShardingEnvelope("User", type, id, e.shardId, e.settingsKey, 1, null, null, true, null),
    sender: null,
  };
  assert.equal(coordinatorRouteOwner(n.state, odd, b), null);
  assert.equal(onlyDelivers(n.envelope(odd, b, 2_000), odd), false);
});

test("coordinator shortcut: null for a direct envelope, even one that names no coordinator (the owner's check takes it, §8.8)", () => {
  const { n, id, d } = atCoordinator(a);
  const e = d.envelope;
  const direct: Delivery = {
    envelope: new DirectEnvelope("User", type, id, e.shardId, e.settingsKey, null, true, null, 0, null, 1, "", 0),
    sender: null,
  };
  assert.equal(coordinatorRouteOwner(n.state, direct, b), null);
  assert.equal(onlyDelivers(n.envelope(direct, b, 2_000), direct), false);
});

test("coordinator shortcut: null for the author of the plan once another member is elected (the step holds it)", () => {
  const { n, d } = atCoordinator(c);
  n.feed(
    {
      kind: "view",
      snapshot: { self: a, members: [member(a, "Leaving"), member(b), member(c)], unreachable: [], converged: true },
    },
    2_000,
  );
  assert.ok(n.t.plan.author?.equals(a), "a still authored the plan it holds");
  assert.equal(n.state.view.elected?.equals(a), false);
  assert.equal(coordinatorRouteOwner(n.state, d, b), null);
  assert.equal(
    n.envelope(d, b, 2_000).some((e) => e.kind === "forward"),
    false,
  );
});

test("coordinator shortcut: null while the shard moves (the step buffers the envelope in the handoff)", () => {
  const { n, shard, d } = atCoordinator(c);
  n.feed({ kind: "moveShard", type, shard, to: b }, 2_000);
  assert.ok(n.t.handoffs.has(shard));
  assert.equal(coordinatorRouteOwner(n.state, d, b), null);
  n.envelope(d, b, 2_010);
  assert.deepEqual(
    n.t.handoffs.get(shard)!.state.buffer.map((x) => x.envelope),
    [d.envelope],
    "buffered, not forwarded",
  );
});

test("coordinator shortcut: null behind the shard's open retry barrier (its own shard: the step queues behind it)", () => {
  const { n, shard, id } = atCoordinator(a);
  const first = n.delivery(id);
  n.route(first, 2_000);
  n.feed({ kind: "delivered", type, shard, retry: false, deliveries: [first], outcomes: ["lease"] }, 2_001);
  assert.ok(n.t.barrier.has(shard));
  const d = n.delivery(id);
  assert.equal(coordinatorRouteOwner(n.state, d, b), null);
  assert.equal(onlyDelivers(n.envelope(d, b, 2_002), d), false);
});

test("coordinator shortcut: null on a member that does not coordinate (the step holds the envelope)", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(b, coordinator.update());
  const d = n.delivery(n.entityIn((s) => s === n.shardOn(c)));
  assert.equal(coordinatorRouteOwner(n.state, d, c), null);
  assert.equal(
    n.envelope(d, c, 2_000).some((e) => e.kind === "forward"),
    false,
  );
});

test("coordinator shortcut: null for an owner that is not Up (the step reconciles before it sends)", () => {
  const { n, d } = atCoordinator(c);
  const leaving = {
    self: a,
    members: [member(a), member(b), member(c, "Leaving")],
    unreachable: [],
    converged: true,
  };
  // The view alone (a `view` input changes nothing else): the plan still places the shard on c, now Leaving.
  n.feed({ kind: "view", snapshot: leaving }, 2_000);
  assert.ok(n.t.plan.allocations.get(d.envelope.shardId)?.equals(c));
  assert.equal(n.state.view.up.has(c.toString()), false);
  assert.equal(coordinatorRouteOwner(n.state, d, b), null);
});

test("coordinator shortcut: null once sharding stopped", () => {
  const { n, d } = atCoordinator(c);
  n.feed({ kind: "stop" }, 2_000);
  assert.equal(coordinatorRouteOwner(n.state, d, b), null);
});

test("coordinator shortcut: null while a delivery is held (the step's held-delivery pass runs first)", () => {
  const { n, d } = atCoordinator(c);
  n.t.heldForwarded.hold(d.envelope.shardId, {
    delivery: n.delivery("e1"),
    deadlineMs: 60_000,
    origin: b,
    countsRemoteRoute: false,
  });
  assert.equal(coordinatorRouteOwner(n.state, d, b), null);
});

test("owner shortcut: the accepting coordinator's hop-1 envelope for a shard of its plan here gets the type; the step delivers it", () => {
  const { n, d } = atOwner();
  assert.equal(ownerDeliveryType(n.state, d, a), n.t);
  assert.ok(onlyDelivers(n.envelope(d, a, 2_000), d));
  assert.equal(n.stats.rejectedEnvelopes, 0);
});

test("owner shortcut: null for a hop-1 envelope from a node that is not the coordinator (the step refuses it)", () => {
  const { n, id } = atOwner();
  const fromC = n.forwardedBy(c, id);
  assert.equal(ownerDeliveryType(n.state, fromC, c), null);
  assert.equal(onlyDelivers(n.envelope(fromC, c, 2_000), fromC), false);
  const d = n.forwardedBy(a, id);
  assert.equal(ownerDeliveryType(n.state, d, c), null, "naming a, sent by c");
  assert.equal(ownerDeliveryType(n.state, d, null), null, "naming a, built here");
});

test("owner shortcut: null for the coordinator's own copy naming another coordinator (the step refuses it)", () => {
  const { n, id } = atOwner();
  const namingC = n.forwardedBy(c, id);
  assert.equal(ownerDeliveryType(n.state, namingC, a), null);
  assert.equal(onlyDelivers(n.envelope(namingC, a, 2_000), namingC), false);
});

test("owner shortcut: null while a delivery is held (the step's held-delivery pass runs first)", () => {
  const { n, d } = atOwner();
  n.t.heldLocal.hold(d.envelope.shardId, {
    delivery: n.delivery("e1"),
    deadlineMs: 60_000,
    origin: null,
    countsRemoteRoute: false,
  });
  assert.equal(ownerDeliveryType(n.state, d, a), null);
});

test("owner shortcut: null for a shard the coordinator's plan places elsewhere (the step refuses it)", () => {
  const { n } = atOwner();
  const other = n.forwardedBy(
    a,
    n.entityIn((s) => s === n.shardOn(c)),
  );
  assert.equal(ownerDeliveryType(n.state, other, a), null);
  assert.equal(onlyDelivers(n.envelope(other, a, 2_000), other), false);
});

test("owner shortcut: null for a caller's (hop 0) envelope, and for a hop beyond 1", () => {
  const { n, id } = atOwner();
  assert.equal(ownerDeliveryType(n.state, n.delivery(id), a), null);
  const twice: Delivery = { envelope: n.forwardedBy(a, id).envelope.forwarded(a, false), sender: null };
  assert.equal(ownerDeliveryType(n.state, twice, a), null);
});

test("owner shortcut: null for another settings key", () => {
  const { n, id } = atOwner();
  const e = n.forwardedBy(a, id).envelope;
  const d: Delivery = {
    envelope: new ShardingEnvelope("User", type, id, e.shardId, "other-key", 1, a.toString(), null, true, null),
    sender: null,
  };
  assert.equal(ownerDeliveryType(n.state, d, a), null);
  assert.equal(onlyDelivers(n.envelope(d, a, 2_000), d), false);
});

test("owner shortcut: null behind the shard's open retry barrier (the step queues behind it)", () => {
  const { n, shard, id, d } = atOwner();
  n.envelope(d, a, 2_000);
  n.feed({ kind: "delivered", type, shard, retry: false, deliveries: [d], outcomes: ["lease"] }, 2_001);
  assert.ok(n.t.barrier.has(shard));
  const next = n.forwardedBy(a, id);
  assert.equal(ownerDeliveryType(n.state, next, a), null);
  assert.equal(onlyDelivers(n.envelope(next, a, 2_002), next), false);
});

test("owner shortcut: null once sharding stopped", () => {
  const { n, d } = atOwner();
  n.feed({ kind: "stop" }, 2_000);
  assert.equal(ownerDeliveryType(n.state, d, a), null);
});

test("owner shortcut: a shard prepared here by the accepting coordinator counts as authorized", () => {
  const { n } = atOwner();
  const shard = n.shardOn(c);
  const id = n.entityIn((s) => s === shard);
  n.t.prepared.set(shard, a.toString());
  const d = n.forwardedBy(a, id);
  assert.equal(ownerDeliveryType(n.state, d, a), n.t);
  assert.ok(onlyDelivers(n.envelope(d, a, 2_000), d));
  n.t.prepared.set(shard, c.toString());
  assert.equal(ownerDeliveryType(n.state, n.forwardedBy(a, id), a), null, "prepared by another coordinator");
});

test("coordinator shortcut: null (not a throw) while the view elects no coordinator", () => {
  const { n, d } = atCoordinator(c);
  n.feed({ kind: "membershipChanged", snapshot: { ...n.state.view.snapshot, converged: false } }, 2_000);
  assert.equal(n.state.view.elected, null);
  assert.equal(coordinatorRouteOwner(n.state, d, b), null);
});

test("owner shortcut: null for a type not registered here (the step refuses it), and under the planted bug that accepts forwards from anyone", () => {
  const { n, id, d } = atOwner();
  const e = d.envelope;
  const other: Delivery = {
    envelope: new ShardingEnvelope("User", "Other", id, e.shardId, e.settingsKey, 1, a.toString(), null, true, null),
    sender: null,
  };
  assert.equal(ownerDeliveryType(n.state, other, a), null);
  assert.equal(ownerDeliveryType(n.state, d, a), n.t, "the type's own copy does get it");
  Object.assign(n.state.bugs, { acceptForwardFromAnyone: true });
  assert.equal(ownerDeliveryType(n.state, d, a), null, "the planted bug takes the full step");
});

test("coordinator shortcut: null (not a throw) at an elected coordinator that holds no plan yet (the step holds the envelope)", () => {
  const n = new Driven(a);
  assert.equal(n.t.plan.author, null);
  const id = n.entityIn(() => true);
  assert.equal(coordinatorRouteOwner(n.state, n.delivery(id), b), null);
});

test("owner shortcut: null (not a throw) at a member that holds no plan yet (the step refuses the envelope)", () => {
  const n = new Driven(b);
  assert.equal(n.t.plan.author, null);
  const id = n.entityIn(() => true);
  assert.equal(ownerDeliveryType(n.state, n.forwardedBy(a, id), a), null);
});
