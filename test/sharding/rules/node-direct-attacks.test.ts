// Adversarial rules of the direct route (docs/protocol.md §8.8), written by a reviewer who did not write it: each test
// is one attack on the owner's or the caller's checks, fed by hand with time passed in (node-harness.ts).
import assert from "node:assert/strict";
import { test } from "node:test";
import type { UniqueAddress } from "../../../src/actor/index.ts";
import { DirectDeliveryRefusedError, NoRebalance } from "../../../src/sharding/index.ts";
import {
  DirectEnvelope,
  DirectGrant,
  DirectMarker,
  DirectProbe,
  DirectRefused,
  HandoffAnnounce,
  PlanUpdate,
} from "../../../src/sharding/internal/messages.ts";
import type { ControlMessage, Delivery, NodeEffect } from "../../../src/sharding/node/node-core.ts";
import {
  a,
  address,
  b,
  c,
  coordinatorWithPlan,
  type Driven,
  delivers,
  follower,
  forwards,
  member,
  rejects,
  sends,
  type,
  view,
} from "./node-harness.ts";

const direct = { routing: "direct" as const, rebalance: new NoRebalance() };
/** A joiner whose address sorts before a's: while Up it is the coordinator; once it leaves, a is again. */
const e: UniqueAddress = address(2550);

function control(n: Driven, message: ControlMessage, origin: UniqueAddress | null, nowMs: number): NodeEffect[] {
  return n.feed({ kind: "control", message, replyTo: null, origin }, nowMs);
}

function cluster() {
  const coordinator = coordinatorWithPlan(direct);
  const update = coordinator.update();
  return { coordinator, update, b: follower(b, update, direct), c: follower(c, update, direct) };
}

function sent<T>(
  effects: NodeEffect[],
  cls: abstract new (...args: never[]) => T,
): { to: UniqueAddress; message: T }[] {
  return sends(effects).flatMap((x) => (x.message instanceof cls ? [{ to: x.to, message: x.message as T }] : []));
}

function directFrom(n: Driven, entityId: string, coordinator: UniqueAddress, generation: number): Delivery {
  const d = n.delivery(entityId);
  return { envelope: DirectEnvelope.of(d.envelope, coordinator, generation), sender: d.sender };
}

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

test("direct attack: refusals are monotone within one ownership (§8.8) — a direct delivery refused while the owner had no accepting coordinator, then a later one under the same grant", {
  todo: "breaks: the later one is accepted; with the caller's fallback in between that is a reorder (next test)",
}, () => {
  const k = cluster();
  const shard = k.c.shardOn(c);
  const id = k.c.entityIn((s) => s === shard);
  const g = k.c.t.plan.generation;
  k.c.feed(
    { kind: "membershipChanged", snapshot: view(c, [member(a), member(b), member(c)], { unreachable: [b] }) },
    2_000,
  );
  const first = k.c.envelope(directFrom(k.c, id, a, g), b, 2_001);
  assert.equal((rejects(first)[0]!.error as DirectDeliveryRefusedError).reason, "coordinator");
  k.c.feed({ kind: "membershipChanged", snapshot: view(c, [member(a), member(b), member(c)]) }, 2_002);
  const second = k.c.envelope(directFrom(k.c, id, a, g), b, 2_003);
  assert.deepEqual(delivers(second), [], "m2 must not be delivered once m1 (same grant) was refused");
});

test("direct attack: a direct delivery refused while the owner saw a member unreachable sends the caller to the coordinator; a later direct one of the same grant, still in flight, must not be accepted behind what the coordinator then forwarded", {
  todo: "breaks: m2 is delivered after m3. Raising a per-shard floor past the refused grant fixes this test but makes the first direct delivery after a lost DirectRefused fail typed, which the node simulator's liveness check rejects (seeds 89, 164 in direct mode): not applied, see docs/protocol.md §8.8 (Limits)",
}, () => {
  const k = cluster();
  const shard = k.c.shardOn(c);
  const id = k.c.entityIn((s) => s === shard);
  const g = k.c.t.plan.generation;
  // b sends m1, m2 straight to c under a's grant of generation g. m1 reaches c while c sees b unreachable: refused,
  // and b is told; b's next message m3 goes through a.
  k.c.feed(
    { kind: "membershipChanged", snapshot: view(c, [member(a), member(b), member(c)], { unreachable: [b] }) },
    2_000,
  );
  const first = k.c.envelope(directFrom(k.c, id, a, g), b, 2_001);
  assert.equal((rejects(first)[0]!.error as DirectDeliveryRefusedError).reason, "coordinator");
  assert.equal(sent(first, DirectRefused).length, 1);
  k.c.feed({ kind: "membershipChanged", snapshot: view(c, [member(a), member(b), member(c)]) }, 2_002);
  assert.equal(delivers(k.c.envelope(k.c.forwardedBy(a, id), a, 2_003)).length, 1, "m3 through a");
  // m2 arrives last: accepting it delivers it after m3.
  const late = k.c.envelope(directFrom(k.c, id, a, g), b, 2_004);
  assert.deepEqual(delivers(late), [], "m2 must not be delivered behind m3");
});
