// Routing and owner authorization as rules of the node core (docs/protocol.md §8), fed by hand: a caller's delivery
// goes to the coordinator, the coordinator sends it one hop to the owner its plan names, and an owner accepts only a
// hop-1 envelope from the coordinator it follows for a shard that coordinator placed (or prepared) here.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ClusterShardingConfigurationError, NoShardOwnerError } from "../../../src/sharding/index.ts";
import { PlanRequest, ShardingEnvelope } from "../../../src/sharding/internal/index.ts";
import {
  a,
  allUp,
  asks,
  b,
  c,
  coordinatorWithPlan,
  Driven,
  d,
  delivers,
  follower,
  forwards,
  member,
  refuses,
  rejects,
  type,
  view,
} from "./node-harness.ts";

test("routing: a member's caller sends its delivery to the coordinator, unchanged, and counts a remote route only when asked to", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(b, coordinator.update());
  const d = n.delivery("e1");
  const effects = n.route(d, 2_000);
  assert.deepEqual(
    forwards(effects).map((f) => [f.to.toString(), f.envelope, f.delivery]),
    [[a.toString(), d.envelope, d]],
  );
  assert.equal(n.stats.remoteRoutes, 1);
  n.route(n.delivery("e2"), 2_001, false);
  assert.equal(n.stats.remoteRoutes, 1, "a route that does not count is not counted");
  assert.equal(n.stats.rejectedEnvelopes, 0);
});

test("routing: an unregistered type is refused at once", () => {
  const n = new Driven(b);
  const d = n.delivery("e1");
  const other = {
    envelope: new ShardingEnvelope("User", "Other", "e1", 0, "k", 0, null, null, true, null),
    sender: null,
  };
  const effects = n.route(other, 0);
  assert.equal(refuses(effects).length, 1);
  assert.equal(refuses(effects)[0]!.delivery, other);
  assert.ok(refuses(effects)[0]!.error instanceof NoShardOwnerError);
  assert.equal(n.stats.rejectedEnvelopes, 1);
  assert.ok(d);
});

test("routing: the coordinator sends a delivery for a remote shard one hop to its owner, as a hop-1 copy it signs", () => {
  const n = coordinatorWithPlan();
  const shard = n.shardOn(b);
  const id = n.entityIn((s) => s === shard);
  const d = n.delivery(id);
  const effects = n.route(d, 2_000);
  const [f] = forwards(effects);
  assert.equal(forwards(effects).length, 1);
  assert.ok(f!.to.equals(b));
  assert.equal(f!.delivery, d, "the caller's ref travels with it");
  assert.equal(f!.envelope.hopCount, 1);
  assert.equal(f!.envelope.coordinator, a.toString());
  assert.equal(f!.envelope.entityId, id);
  assert.equal(f!.envelope.shardId, shard);
  assert.equal(f!.envelope.senderless, false);
  assert.equal(n.stats.forwards, 1);
  assert.equal(n.stats.remoteRoutes, 0, "the coordinator's own route is not a remote route");

  const silent = n.delivery(id, null, null);
  const [g] = forwards(n.route(silent, 2_001));
  assert.equal(g!.envelope.senderless, true, "a tell without a sender stays without one at the owner");
  // An envelope not marked senderless whose caller ref is missing is marked at the hop.
  const unmarked = { envelope: n.delivery(id).envelope, sender: null };
  const [h] = forwards(n.route(unmarked, 2_002));
  assert.equal(unmarked.envelope.senderless, false);
  assert.equal(h!.envelope.senderless, true);
  assert.equal(n.stats.forwards, 3);
});

test("routing: the coordinator delivers a shard it owns itself locally, every delivery of one shard in one step in one batch", () => {
  const n = coordinatorWithPlan();
  const shard = n.shardOn(a);
  const id = n.entityIn((s) => s === shard);
  const d = n.delivery(id);
  const effects = n.route(d, 2_000);
  assert.deepEqual(forwards(effects), []);
  assert.deepEqual(delivers(effects), [{ kind: "deliver", type, shard, retry: false, deliveries: [d] }]);
  assert.equal(n.stats.forwards, 0);
});

test("routing: a hop-0 envelope from another member's caller is routed by the coordinator's plan", () => {
  const n = coordinatorWithPlan();
  const shard = n.shardOn(c);
  const id = n.entityIn((s) => s === shard);
  const d = n.delivery(id);
  const effects = n.envelope(d, b, 2_000);
  const [f] = forwards(effects);
  assert.equal(forwards(effects).length, 1);
  assert.ok(f!.to.equals(c));
  assert.equal(f!.envelope.hopCount, 1);
  assert.deepEqual(rejects(effects), []);

  const own = n.entityIn((s) => s === n.shardOn(a));
  const local = n.delivery(own);
  assert.deepEqual(
    delivers(n.envelope(local, b, 2_001)).map((e) => e.deliveries),
    [[local]],
  );
});

test("routing: a hop-0 envelope whose shard is not its entity's is rejected, wherever it arrives", () => {
  const n = coordinatorWithPlan();
  const d = n.delivery("e1");
  const wrong = n.shardOf("e1") === 0 ? 1 : 0;
  const e = d.envelope;
  const forged = {
    envelope: new ShardingEnvelope(e.kind, e.entityType, e.entityId, wrong, e.settingsKey, 0, null, null, false, null),
    sender: d.sender,
  };
  const effects = n.envelope(forged, b, 2_000);
  assert.deepEqual(forwards(effects), []);
  assert.deepEqual(delivers(effects), []);
  const [r] = rejects(effects);
  assert.ok(r!.error instanceof ClusterShardingConfigurationError);
  assert.equal((r!.error as ClusterShardingConfigurationError).field, "shardId");
  assert.equal(n.stats.rejectedEnvelopes, 1);
});

test("routing: an envelope of an unknown type or of other settings is rejected with a configuration error", () => {
  const n = coordinatorWithPlan();
  const unknown = {
    envelope: new ShardingEnvelope("User", "Other", "e1", 0, n.settings.key, 0, null, null, false, null),
    sender: null,
  };
  const [r1] = rejects(n.envelope(unknown, b, 2_000));
  assert.ok(r1!.error instanceof ClusterShardingConfigurationError);
  const e = n.delivery("e1").envelope;
  const otherSettings = {
    envelope: new ShardingEnvelope("User", type, "e1", e.shardId, "other-key", 0, null, null, false, null),
    sender: null,
  };
  const effects = n.envelope(otherSettings, b, 2_001);
  const [r2] = rejects(effects);
  assert.ok(r2!.error instanceof ClusterShardingConfigurationError);
  assert.equal((r2!.error as ClusterShardingConfigurationError).field, "settingsKey");
  assert.deepEqual(forwards(effects), []);
  assert.equal(n.stats.rejectedEnvelopes, 2);
});

test("owner authorization: a hop-1 envelope from the coordinator for a shard it placed here is delivered", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(b, coordinator.update());
  const shard = n.shardOn(b);
  const d = n.forwardedBy(
    a,
    n.entityIn((s) => s === shard),
  );
  assert.deepEqual(delivers(n.envelope(d, a, 2_000)), [
    { kind: "deliver", type, shard, retry: false, deliveries: [d] },
  ]);
});

test("owner authorization: a hop-1 envelope is refused from a non-coordinator, signed by another, at another hop, or for a shard placed elsewhere", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(b, coordinator.update());
  const mine = n.entityIn((s) => s === n.shardOn(b));
  const theirs = n.entityIn((s) => s === n.shardOn(c));
  const refused = (d: ReturnType<typeof n.delivery>, origin: typeof a | null) => {
    const effects = n.envelope(d, origin, 2_000);
    assert.deepEqual(delivers(effects), [], "not delivered");
    const [r] = rejects(effects);
    assert.ok(r?.error instanceof ClusterShardingConfigurationError, "rejected with a configuration error");
    return r!.delivery;
  };
  // Sent by c, though signed by a.
  const fromC = n.forwardedBy(a, mine);
  assert.equal(refused(fromC, c), fromC);
  // Sent by a, signed by c.
  refused(n.forwardedBy(c, mine), a);
  // From this node itself, while a is the coordinator.
  refused(n.forwardedBy(a, mine), null);
  // A hop-2 copy.
  const twice = n.forwardedBy(a, mine);
  refused({ envelope: twice.envelope.forwarded(a, false), sender: twice.sender }, a);
  // A shard a placed on c.
  refused(n.forwardedBy(a, theirs), a);
  assert.equal(n.stats.rejectedEnvelopes, 5);
});

test("owner authorization: the coordinator accepts a hop-1 envelope it sent itself (origin null) for its own shard", () => {
  const n = coordinatorWithPlan();
  const shard = n.shardOn(a);
  const d = n.forwardedBy(
    a,
    n.entityIn((s) => s === shard),
  );
  assert.deepEqual(
    delivers(n.envelope(d, null, 2_000)).map((e) => e.deliveries),
    [[d]],
  );
  const [r] = rejects(
    n.envelope(
      n.forwardedBy(
        a,
        n.entityIn((s) => s === shard),
      ),
      b,
      2_001,
    ),
  );
  assert.ok(r?.error instanceof ClusterShardingConfigurationError, "from b, though signed by a");
});

test("owner authorization: without an accepting coordinator (a member unreachable) no forwarded envelope is accepted", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(b, coordinator.update());
  const mine = n.entityIn((s) => s === n.shardOn(b));
  n.feed({ kind: "view", snapshot: view(b, [member(a), member(b), member(c)], { unreachable: [a] }) }, 2_000);
  const [r] = rejects(n.envelope(n.forwardedBy(a, mine), a, 2_000));
  assert.ok(r?.error instanceof ClusterShardingConfigurationError);
});

test("owner authorization: a shard the coordinator prepared here is accepted before any plan places it here", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(b, coordinator.update());
  const shard = n.shardOn(c);
  const id = n.entityIn((s) => s === shard);
  const [r] = rejects(n.envelope(n.forwardedBy(a, id), a, 2_000));
  assert.ok(r, "not before it is prepared");
  n.feed(
    { kind: "prepared", type, shard, coordinator: a.toString(), waiter: { kind: "ask", replyTo: null }, error: null },
    2_001,
  );
  const d = n.forwardedBy(a, id);
  assert.deepEqual(
    delivers(n.envelope(d, a, 2_002)).map((e) => e.deliveries),
    [[d]],
  );
  // A preparation that failed authorizes nothing.
  const other = n.shardOn(a);
  n.feed(
    {
      kind: "prepared",
      type,
      shard: other,
      coordinator: a.toString(),
      waiter: { kind: "ask", replyTo: null },
      error: new Error("no lease"),
    },
    2_003,
  );
  const [r2] = rejects(
    n.envelope(
      n.forwardedBy(
        a,
        n.entityIn((s) => s === other),
      ),
      a,
      2_004,
    ),
  );
  assert.ok(r2);
});

test("owner authorization: a preparation by a former coordinator is forgotten when the coordinator changes", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(c, coordinator.update());
  const shard = n.shardOn(b);
  n.feed(
    { kind: "prepared", type, shard, coordinator: a.toString(), waiter: { kind: "ask", replyTo: null }, error: null },
    2_000,
  );
  assert.equal(n.t.prepared.get(shard), a.toString());
  // a leaves: b becomes the coordinator.
  n.feed({ kind: "membershipChanged", snapshot: view(c, [member(a, "Leaving"), member(b), member(c)]) }, 2_001);
  assert.equal(n.t.prepared.has(shard), false);
});

test("routing: the coordinator never sends to an owner that is not Up; it re-plans the shard first", () => {
  const n = coordinatorWithPlan();
  const shard = n.shardOn(c);
  const id = n.entityIn((s) => s === shard);
  // c is Down in a converged view (the leader will remove it); a reconciles before routing its shards.
  n.feed({ kind: "view", snapshot: view(a, [member(a), member(b), member(c, "Down")]) }, 2_000);
  const d = n.delivery(id);
  const effects = n.route(d, 2_000);
  assert.ok(!forwards(effects).some((f) => f.to.equals(c)), "nothing to c");
  assert.ok(n.t.handoffs.has(shard), "a handoff moves the shard off c");
  assert.deepEqual(n.t.handoffs.get(shard)!.state.buffer, [d], "the delivery waits in the handoff's buffer");
});

test("routing: a member that is not Up at all routes nothing; a caller of a node with no membership is held", () => {
  const n = new Driven(b, {}, view(b, [member(a), member(b, "Joining"), member(c)]));
  const effects = n.route(n.delivery("e1"), 0);
  assert.deepEqual(forwards(effects), []);
  assert.deepEqual(refuses(effects), []);
  assert.equal(n.stats.heldDeliveries, 1);
  assert.ok(allUp(b));
});

test("routing: a delivery to an Up owner is sent on without reconciling; a rebalance a new member makes possible waits for the reconcile timer", () => {
  const n = coordinatorWithPlan();
  n.feed({ kind: "membershipChanged", snapshot: view(a, [member(a), member(b), member(c), member(d)]) }, 2_000);
  n.feed(
    { kind: "control", message: new PlanRequest(type, n.settings.key, d.toString()), replyTo: null, origin: d },
    2_000,
  );
  assert.equal(n.t.reconcileArmed, true, "d's registration armed a reconcile");
  const shard = n.shardOn(b);
  const effects = n.route(n.delivery(n.entityIn((s) => s === shard)), 2_010);
  assert.ok(forwards(effects)[0]!.to.equals(b), "to the owner the plan names");
  assert.deepEqual(asks(effects), [], "no handoff started by a delivery");
  assert.equal(n.t.handoffs.size, 0);
  // The timer does start the rebalance: the delivery above would have started it too, had it reconciled.
  const reconciled = n.feed({ kind: "timer", timer: { kind: "reconcile", type } }, 2_020);
  assert.ok(n.t.handoffs.size > 0, "the reconcile moves shards to d");
  assert.ok(asks(reconciled).length > 0);
});

test("owner authorization: a preparation by the current coordinator survives a membership change that keeps that coordinator", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(c, coordinator.update());
  const shard = n.shardOn(b);
  n.feed(
    { kind: "prepared", type, shard, coordinator: a.toString(), waiter: { kind: "ask", replyTo: null }, error: null },
    2_000,
  );
  // d joins: a is still the coordinator.
  n.feed({ kind: "membershipChanged", snapshot: view(c, [member(a), member(b), member(c), member(d)]) }, 2_001);
  assert.equal(n.t.prepared.get(shard), a.toString());
  const fwd = n.forwardedBy(
    a,
    n.entityIn((s) => s === shard),
  );
  assert.deepEqual(
    delivers(n.envelope(fwd, a, 2_002)).map((e) => e.deliveries),
    [[fwd]],
  );
});

test("relays: an envelope another node relayed, held here while no coordinator was elected, fails as soon as the view elects another coordinator", () => {
  const n = new Driven(b, {}, view(b, [member(a), member(b), member(c)], { converged: false }));
  const call = n.delivery("e1");
  const relayed = { envelope: call.envelope.relayedBy(c), sender: call.sender };
  assert.deepEqual(rejects(n.envelope(relayed, c, 10)), [], "held while nobody is elected");
  assert.equal(n.t.heldForwarded.size, 1);
  const elected = n.feed({ kind: "membershipChanged", snapshot: allUp(b) }, 20);
  assert.deepEqual(
    rejects(elected).map((r) => r.delivery),
    [relayed],
    "a relayed envelope is never relayed again: it fails now, not at its deadline",
  );
  assert.equal(n.t.heldForwarded.size, 0);
});

test("relays: a relayed envelope held at the elected coordinator while it bootstraps survives a membership change and is routed once it authors a plan", () => {
  const n = new Driven(a);
  const call = n.delivery("e1");
  const relayed = { envelope: call.envelope.relayedBy(c), sender: call.sender };
  assert.deepEqual(rejects(n.envelope(relayed, c, 10)), []);
  assert.equal(n.t.heldForwarded.size, 1, "held: a has no plan yet");
  const changed = n.feed(
    { kind: "membershipChanged", snapshot: view(a, [member(a), member(b), member(c), member(d)]) },
    20,
  );
  assert.deepEqual(rejects(changed), [], "a is still the coordinator: nothing to reject");
  assert.equal(n.t.heldForwarded.size, 1);
  const authored = n.feed({ kind: "timer", timer: { kind: "reconcile", type } }, 1_000);
  assert.ok(n.t.plan.author?.equals(a));
  const routed = [...forwards(authored).map((f) => f.delivery), ...delivers(authored).flatMap((x) => x.deliveries)];
  assert.deepEqual(routed, [relayed]);
});
