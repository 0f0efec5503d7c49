// Adversarial rules of the direct route (docs/protocol.md §8.8), written by a reviewer who did not write it: each test
// is one attack on the owner's or the caller's checks, fed by hand with time passed in (node-harness.ts).
import assert from "node:assert/strict";
import { test } from "node:test";
import type { UniqueAddress } from "../../../src/actor/index.ts";
import { DirectDeliveryRefusedError, NoShardOwnerError } from "../../../src/sharding/index.ts";
import {
  DirectEnvelope,
  DirectGrant,
  DirectMarker,
  DirectProbe,
  DirectRefused,
  HandoffAnnounce,
  PassivateShard,
  PlanUpdate,
} from "../../../src/sharding/internal/messages.ts";
import { cluster, control, direct, directFrom, e, sent } from "./direct-harness.ts";
import {
  a,
  b,
  c,
  coordinatorWithPlan,
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

/** `update`'s assignments re-authored by `author` at `generation`. */
function reauthored(update: PlanUpdate, author: UniqueAddress, generation: number): PlanUpdate {
  return new PlanUpdate(type, update.settingsKey, author.toString(), generation, update.assignments);
}

test("direct attack: a direct delivery granted under coordinator a, still in flight while e coordinated and a took over again, is refused — it would land behind what e forwarded meanwhile", () => {
  const k = cluster();
  const shard = k.c.shardOn(c);
  const id = k.c.entityIn((s) => s === shard);
  const g = k.c.t.plan.generation;
  // b sent m1 straight to c under a's grant of generation g; m1 is slow.
  const m1 = directFrom(k.c, id, a, g);
  // e joins and coordinates: its plan keeps the shard on c; b's next message m2 goes through e and is delivered.
  k.c.feed({ kind: "membershipChanged", snapshot: view(c, [member(e), member(a), member(b), member(c)]) }, 2_000);
  control(k.c, reauthored(k.update, e, g + 1), e, 2_001);
  assert.equal(delivers(k.c.envelope(k.c.forwardedBy(e, id), e, 2_002)).length, 1, "m2 through e");
  // e leaves: a coordinates again, with a plan that still gives the shard to c.
  k.c.feed(
    { kind: "membershipChanged", snapshot: view(c, [member(e, "Leaving"), member(a), member(b), member(c)]) },
    2_003,
  );
  control(k.c, reauthored(k.update, a, g + 2), a, 2_004);
  assert.ok(k.c.t.plan.author?.equals(a) && k.c.t.plan.allocations.get(shard)?.equals(c));
  // m1 arrives at last: accepting it would deliver it after m2.
  const late = k.c.envelope(m1, b, 2_005);
  assert.deepEqual(delivers(late), [], "m1 must not be delivered behind m2");
  const [rejected] = rejects(late);
  assert.ok(rejected?.error instanceof DirectDeliveryRefusedError, "refused, typed");
  assert.equal(sent(late, DirectRefused).length, 1, "and the sender told");
});

test("direct attack (caller side): a grant of an earlier coordinator term is dropped when the plan's author changes, so it is not spent on a refusal once the old coordinator is elected again", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  const id = k.b.entityIn((s) => s === shard);
  const [probe] = sent(k.b.route(k.b.delivery(id), 2_000), DirectProbe);
  const [forwarded] = sent(control(k.coordinator, probe!.message, b, 2_001), DirectProbe);
  const [grant] = sent(control(k.c, forwarded!.message, a, 2_002), DirectGrant);
  control(k.b, grant!.message, c, 2_003);
  assert.equal(k.b.t.routes.get(shard)?.phase, "direct");
  const g = k.b.t.plan.generation;
  // e joins and coordinates; b stores e's plan.
  k.b.feed({ kind: "membershipChanged", snapshot: view(b, [member(e), member(a), member(b), member(c)]) }, 2_004);
  control(k.b, reauthored(k.update, e, g + 1), e, 2_005);
  assert.ok(k.b.t.plan.author?.equals(e));
  assert.notEqual(k.b.t.routes.get(shard)?.phase, "direct", "the earlier term's grant is dropped");
});

/** b's probe for `shard` (its first delivery goes through a), forwarded by a to c: returns the probe c receives. */
function probeAtOwner(k: ReturnType<typeof cluster>, shard: number, nowMs: number): DirectProbe {
  const id = k.b.entityIn((s) => s === shard);
  const [probe] = sent(k.b.route(k.b.delivery(id), nowMs), DirectProbe);
  const [forwarded] = sent(control(k.coordinator, probe!.message, b, nowMs + 1), DirectProbe);
  return forwarded!.message;
}

test("direct attack: a grant naming a generation past the caller's plan (hostile, 2^40) is not taken; the caller stays on the coordinator route", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  const id = k.b.entityIn((s) => s === shard);
  const probe = probeAtOwner(k, shard, 2_000);
  const hostile = new DirectGrant(type, k.b.settings.key, shard, c.toString(), a.toString(), 2 ** 40, probe.token);
  control(k.b, hostile, c, 2_002);
  assert.notEqual(k.b.t.routes.get(shard)?.phase, "direct");
  const next = forwards(k.b.route(k.b.delivery(id), 2_003));
  assert.ok(next.length === 1 && next[0]!.to.equals(a), "through the coordinator");
  assert.ok(!(next[0]!.envelope instanceof DirectEnvelope));
});

test("direct attack: a grant from a node the caller's plan does not give the shard to is not taken, even naming itself as owner with the probe's token", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  const probe = probeAtOwner(k, shard, 2_000);
  const g = k.b.t.plan.generation;
  // a (the coordinator, not the owner) grants in its own name.
  control(k.b, new DirectGrant(type, k.b.settings.key, shard, a.toString(), a.toString(), g, probe.token), a, 2_002);
  assert.notEqual(k.b.t.routes.get(shard)?.phase, "direct");
});

test("direct attack: a grant that arrives after the handoff's announcement (another link) is not taken: the shard stays on the coordinator route and the marker went first", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  const id = k.b.entityIn((s) => s === shard);
  const probe = probeAtOwner(k, shard, 2_000);
  const [grant] = sent(control(k.c, probe, a, 2_002), DirectGrant);
  const announced = control(
    k.b,
    new HandoffAnnounce(type, k.b.settings.key, shard, a.toString(), c.toString(), 77),
    a,
    2_003,
  );
  assert.equal(sent(announced, DirectMarker).length, 1, "b's marker to c");
  control(k.b, grant!.message, c, 2_004);
  assert.notEqual(
    k.b.t.routes.get(shard)?.phase,
    "direct",
    "a grant after the announcement would send behind the marker",
  );
  const next = forwards(k.b.route(k.b.delivery(id), 2_005));
  assert.ok(next.length === 1 && next[0]!.to.equals(a));
});

test("direct attack: a refusal from a node that is not the granting owner does not end the route", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  const id = k.b.entityIn((s) => s === shard);
  const probe = probeAtOwner(k, shard, 2_000);
  const [grant] = sent(control(k.c, probe, a, 2_002), DirectGrant);
  control(k.b, grant!.message, c, 2_003);
  assert.equal(k.b.t.routes.get(shard)?.phase, "direct");
  control(k.b, new DirectRefused(type, k.b.settings.key, shard, a.toString()), a, 2_004);
  assert.equal(k.b.t.routes.get(shard)?.phase, "direct", "a's refusal names a, not the owner c");
  assert.equal(k.b.stats.directFallbacks, 0);
  const [next] = forwards(k.b.route(k.b.delivery(id), 2_005));
  assert.ok(next!.to.equals(c) && next!.envelope instanceof DirectEnvelope);
});

// The owner's refusal for want of an accepting coordinator was not monotone (docs/protocol.md §8.8): refused while the
// owner's view was re-converging, accepted once it had converged. The owner now holds such a direct delivery (in order,
// bounded, with a deadline) and decides on it once it has an accepting coordinator, so the caller is never sent to the
// coordinator for that want alone. Each test below fails with the hold planted off (refuseDirectWithoutCoordinator).

test("direct attack: a direct delivery that reaches its owner while the owner has no accepting coordinator is held, not refused; it is delivered, ahead of the same grant's later ones, once the view converges", () => {
  const k = cluster();
  const shard = k.c.shardOn(c);
  const id = k.c.entityIn((s) => s === shard);
  const g = k.c.t.plan.generation;
  k.c.feed(
    { kind: "membershipChanged", snapshot: view(c, [member(a), member(b), member(c)], { unreachable: [b] }) },
    2_000,
  );
  const m1 = directFrom(k.c, id, a, g);
  const m2 = directFrom(k.c, id, a, g);
  const held = [...k.c.envelope(m1, b, 2_001), ...k.c.envelope(m2, b, 2_002)];
  assert.deepEqual(rejects(held), [], "not refused for want of an accepting coordinator");
  assert.deepEqual(sent(held, DirectRefused), [], "and the caller is not sent to the coordinator");
  assert.deepEqual(delivers(held), [], "nor delivered unchecked");
  assert.equal(k.c.t.heldDirect.countOf(shard), 2);
  const converged = k.c.feed(
    { kind: "membershipChanged", snapshot: view(c, [member(a), member(b), member(c)]) },
    2_003,
  );
  assert.deepEqual(
    delivers(converged).flatMap((e) => e.deliveries),
    [m1, m2],
    "both delivered, in their order, in the step that restored the coordinator",
  );
  const m3 = directFrom(k.c, id, a, g);
  assert.deepEqual(
    delivers(k.c.envelope(m3, b, 2_004)).flatMap((e) => e.deliveries),
    [m3],
  );
  assert.equal(k.c.stats.directRefusals, 0);
});

test("direct attack: the caller's direct stream is not split by its owner's unconverged view — no refusal sends it to the coordinator, so its later message goes directly, behind the earlier one (no per-sender reorder)", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  const id = k.b.entityIn((s) => s === shard);
  // b holds c's grant for the shard.
  const [probe] = sent(k.b.route(k.b.delivery(id), 2_000), DirectProbe);
  const [forwarded] = sent(control(k.coordinator, probe!.message, b, 2_001), DirectProbe);
  const [grant] = sent(control(k.c, forwarded!.message, a, 2_002), DirectGrant);
  control(k.b, grant!.message, c, 2_003);
  assert.equal(k.b.t.routes.get(shard)?.phase, "direct");
  // c sees b unreachable for a moment; b's m1 reaches c then. Whatever c answers goes back to b.
  k.c.feed(
    { kind: "membershipChanged", snapshot: view(c, [member(a), member(b), member(c)], { unreachable: [b] }) },
    2_004,
  );
  const [m1] = forwards(k.b.route(k.b.delivery(id), 2_005));
  assert.ok(m1?.to.equals(c) && m1.envelope instanceof DirectEnvelope, "m1 straight to c");
  const atOwner = k.c.envelope(m1.delivery, b, 2_006);
  for (const r of sent(atOwner, DirectRefused)) control(k.b, r.message as DirectRefused, c, 2_007);
  // b's next message m3: had c refused m1, it would go through a and could reach c before a later direct one of
  // the same grant, which c accepts once its view converged (the reorder). It must go directly, behind m1.
  const [m3] = forwards(k.b.route(k.b.delivery(id), 2_008));
  assert.ok(m3 !== undefined, "m3 sent");
  assert.ok(m3.to.equals(c) && m3.envelope instanceof DirectEnvelope, "m3 straight to c: the route was not split");
  const held = k.c.envelope(m3.delivery, b, 2_009);
  const converged = k.c.feed(
    { kind: "membershipChanged", snapshot: view(c, [member(a), member(b), member(c)]) },
    2_010,
  );
  assert.deepEqual(
    [...atOwner, ...held, ...converged].flatMap((e) => (e.kind === "deliver" ? e.deliveries : [])),
    [m1.delivery, m3.delivery],
    "m1 then m3, at c",
  );
  assert.equal(k.b.stats.directFallbacks, 0);
});

test("direct attack: a direct delivery held past its deadline or past the shard's bound fails typed (NoShardOwnerError) without a refusal: the caller keeps its route, a gap and never a reorder", () => {
  const coordinator = coordinatorWithPlan({ ...direct, heldDeliveriesPerShard: 2, heldDeliveryTimeout: 500 });
  const owner = follower(c, coordinator.update(), { ...direct, heldDeliveriesPerShard: 2, heldDeliveryTimeout: 500 });
  const shard = owner.shardOn(c);
  const id = owner.entityIn((s) => s === shard);
  const g = owner.t.plan.generation;
  owner.feed(
    { kind: "membershipChanged", snapshot: view(c, [member(a), member(b), member(c)], { unreachable: [b] }) },
    2_000,
  );
  const [m1, m2, m3] = [0, 1, 2].map(() => directFrom(owner, id, a, g));
  const first = [...owner.envelope(m1!, b, 2_001), ...owner.envelope(m2!, b, 2_002)];
  const sweep = schedules(first, "heldSweep");
  assert.equal(sweep.length, 1, "one sweep armed for the earliest deadline");
  const full = owner.envelope(m3!, b, 2_003);
  assert.ok(rejects(full)[0]?.error instanceof NoShardOwnerError, "past the bound: fails typed");
  assert.deepEqual(sent(full, DirectRefused), [], "without sending the caller to the coordinator");
  const expired = owner.feed({ kind: "timer", timer: sweep[0]!.timer }, 2_502);
  assert.deepEqual(
    rejects(expired).map((r) => r.delivery),
    [m1, m2],
    "past their deadline, in order",
  );
  assert.ok(rejects(expired).every((r) => r.error instanceof NoShardOwnerError));
  assert.deepEqual(sent(expired, DirectRefused), []);
  assert.equal(owner.t.heldDirect.size, 0);
  assert.equal(owner.stats.directRefusals, 0);
});

test("direct attack: a gated drain does not start while direct deliveries sent before the caller's marker wait for an accepting coordinator; once it has one they are delivered, then the shard drains", () => {
  const k = cluster();
  const shard = k.c.shardOn(c);
  const id = k.c.entityIn((s) => s === shard);
  const key = k.c.settings.key;
  const g = k.c.t.plan.generation;
  control(k.c, new PassivateShard(type, key, shard, a.toString(), b.toString(), 42, [b.toString()]), a, 2_000);
  k.c.feed(
    { kind: "membershipChanged", snapshot: view(c, [member(a), member(b), member(c)], { unreachable: [b] }) },
    2_001,
  );
  const m1 = directFrom(k.c, id, a, g);
  const held = k.c.envelope(m1, b, 2_002);
  assert.deepEqual(rejects(held), [], "sent before b's marker: not refused");
  const marked = control(k.c, new DirectMarker(type, key, shard, b.toString(), a.toString(), 42), b, 2_003);
  assert.deepEqual(ofKind(marked, "drainShard"), [], "m1 still waits: no drain behind its back");
  const converged = k.c.feed(
    { kind: "membershipChanged", snapshot: view(c, [member(a), member(b), member(c)]) },
    2_004,
  );
  const kinds = converged.flatMap((e) => (e.kind === "deliver" || e.kind === "drainShard" ? [e.kind] : []));
  assert.deepEqual(kinds, ["deliver", "drainShard"], "m1 delivered, then the shard drains");
  assert.deepEqual(delivers(converged)[0]!.deliveries, [m1]);
});

test("direct attack: with awaitCoordinator off, a direct delivery that finds its owner without an accepting coordinator fails at once (NoShardOwnerError), still without a refusal", () => {
  const options = { ...direct, awaitCoordinator: false };
  const coordinator = coordinatorWithPlan(options);
  const owner = follower(c, coordinator.update(), options);
  const shard = owner.shardOn(c);
  const id = owner.entityIn((s) => s === shard);
  const g = owner.t.plan.generation;
  owner.feed(
    { kind: "membershipChanged", snapshot: view(c, [member(a), member(b), member(c)], { unreachable: [b] }) },
    2_000,
  );
  const effects = owner.envelope(directFrom(owner, id, a, g), b, 2_001);
  assert.ok(rejects(effects)[0]?.error instanceof NoShardOwnerError);
  assert.deepEqual(sent(effects, DirectRefused), [], "the caller keeps its route");
  assert.equal(owner.t.heldDirect.size, 0);
  assert.equal(owner.stats.directRefusals, 0);
});
