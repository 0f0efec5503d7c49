// The checks of the direct route (docs/protocol.md §8.8) one condition at a time, as rules of the node core fed by
// hand: when a caller probes, when its grant still counts, when the coordinator forwards a probe, when the owner
// grants, which grants and refusals a caller takes. Each test makes one condition false and the others true, so
// removing that condition from the core makes the test fail (written from the scoped mutation run m24-direct,
// docs/mutation.md).
import assert from "node:assert/strict";
import { test } from "node:test";
import type { UniqueAddress } from "../../../src/actor/index.ts";
import {
  ClusterShardingConfigurationError,
  DirectDeliveryRefusedError,
  NoRebalance,
} from "../../../src/sharding/index.ts";
import { attachTyped, typedOf } from "../../../src/sharding/internal/codec.ts";
import {
  CancelPreparations,
  DirectEnvelope,
  DirectGrant,
  DirectMarker,
  DirectProbe,
  DirectRefused,
  HandoffAnnounce,
  PassivateShard,
  PlanUpdate,
} from "../../../src/sharding/internal/messages.ts";
import type { NodeEffect } from "../../../src/sharding/node/node-core.ts";
import { cluster, control, direct, e, grantedDirect, sent } from "./direct-harness.ts";
import {
  a,
  asks,
  b,
  c,
  coordinatorWithPlan,
  Driven,
  d,
  follower,
  forwards,
  logs,
  member,
  ofKind,
  rejects,
  sends,
  type,
  view,
} from "./node-harness.ts";

/** `update` with `shard` given to `owner` (or left unplaced when `owner` is null), at `generation`, by `author`. */
function moved(update: PlanUpdate, shard: number, owner: UniqueAddress | null, generation: number, author = a) {
  const assignments = update.assignments.flatMap((x) =>
    x.shardId !== shard ? [x] : owner === null ? [] : [{ shardId: shard, owner: owner.toString() }],
  );
  return new PlanUpdate(type, update.settingsKey, author.toString(), generation, assignments);
}

/** The one forward of `effects`: to whom, and whether it is a direct copy. */
function onlyForward(effects: NodeEffect[]) {
  const all = forwards(effects);
  assert.equal(all.length, 1, "exactly one forward");
  return { to: all[0]!.to.toString(), direct: all[0]!.envelope instanceof DirectEnvelope };
}

test("direct caller: a grant its plan no longer backs (a newer plan of the same coordinator gave the shard to the coordinator; the announcement lost) is dropped — the delivery goes through the coordinator, and no probe follows for the coordinator's own shard", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  grantedDirect(k, shard, 2_000);
  control(k.b, moved(k.update, shard, a, k.update.generation + 1), a, 2_010);
  const effects = k.b.route(k.b.delivery(k.b.entityIn((s) => s === shard)), 2_011);
  assert.deepEqual(onlyForward(effects), { to: a.toString(), direct: false });
  assert.deepEqual(sent(effects, DirectProbe), [], "the coordinator owns the shard: nothing to probe");
  assert.equal(k.b.t.routes.has(shard), false, "the grant is dropped");
  assert.equal(k.b.stats.directRoutes, 0);
});

test("direct caller: a grant for a shard a newer plan leaves unplaced is dropped without a throw; the delivery goes through the coordinator, unprobed", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  grantedDirect(k, shard, 2_000);
  control(k.b, moved(k.update, shard, null, k.update.generation + 1), a, 2_010);
  assert.equal(k.b.t.plan.allocations.has(shard), false);
  const effects = k.b.route(k.b.delivery(k.b.entityIn((s) => s === shard)), 2_011);
  assert.deepEqual(onlyForward(effects), { to: a.toString(), direct: false });
  assert.deepEqual(sent(effects, DirectProbe), [], "no owner: nothing to probe");
  assert.equal(k.b.t.routes.has(shard), false);
});

test("direct caller: a grant under a coordinator that went Down is dropped before the new coordinator's plan arrives — the delivery goes to the new coordinator, and no probe goes to it under the old plan", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  grantedDirect(k, shard, 2_000);
  k.b.feed(
    { kind: "membershipChanged", snapshot: view(b, [member(e), member(a, "Down"), member(b), member(c)]) },
    2_010,
  );
  assert.ok(k.b.state.view.routing?.equals(e));
  assert.ok(k.b.t.plan.author?.equals(a), "e's plan has not arrived");
  const effects = k.b.route(k.b.delivery(k.b.entityIn((s) => s === shard)), 2_011);
  assert.deepEqual(onlyForward(effects), { to: e.toString(), direct: false });
  assert.deepEqual(sent(effects, DirectProbe), [], "a probe waits for a plan authored by the coordinator it goes to");
  assert.equal(k.b.t.routes.has(shard), false);
});

test("direct caller: a member that holds no plan yet sends its delivery to the coordinator and probes nothing (it knows no owner)", () => {
  const n = new Driven(b, direct);
  assert.equal(n.t.plan.author, null);
  const effects = n.route(n.delivery("e1"), 2_000);
  assert.deepEqual(onlyForward(effects), { to: a.toString(), direct: false });
  assert.deepEqual(sent(effects, DirectProbe), []);
});

test("direct caller: the cooling period ends exactly directProbeRetryMs after the refusal — a delivery at that instant probes again", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  grantedDirect(k, shard, 2_000);
  const id = k.b.entityIn((s) => s === shard);
  control(k.b, new DirectRefused(type, k.b.settings.key, shard, c.toString()), c, 2_010);
  const route = k.b.t.routes.get(shard);
  assert.equal(route?.phase, "cooling");
  const untilMs = route?.phase === "cooling" ? route.untilMs : Number.NaN;
  assert.deepEqual(sent(k.b.route(k.b.delivery(id), untilMs - 1), DirectProbe), [], "still cooling 1 ms before");
  assert.equal(sent(k.b.route(k.b.delivery(id), untilMs), DirectProbe).length, 1, "probed again at the end");
});

test("direct coordinator: a probe handed to the core without a transport sender (origin null) is refused as a configuration error", () => {
  const k = cluster();
  const probe = new DirectProbe(type, k.coordinator.settings.key, k.coordinator.shardOn(c), b.toString(), 7);
  const effects = control(k.coordinator, probe, null, 2_000);
  const [refused] = ofKind(effects, "refused");
  assert.ok(refused!.error instanceof ClusterShardingConfigurationError, String(refused!.error));
  assert.deepEqual(sent(effects, DirectProbe), [], "not forwarded");
});

/** The probe b sends for `shard` through a, as the coordinator receives it. */
function probeOf(k: ReturnType<typeof cluster>, shard: number, token = 7): DirectProbe {
  return new DirectProbe(type, k.coordinator.settings.key, shard, b.toString(), token);
}

/** `effects` decline b's probe: a DirectRefused to b, no probe forwarded, no refused control. */
function declinedToB(effects: NodeEffect[], why: string) {
  assert.deepEqual(ofKind(effects, "refused"), [], `${why}: judged, not thrown on`);
  assert.deepEqual(sent(effects, DirectProbe), [], `${why}: not forwarded`);
  const told = sent(effects, DirectRefused);
  assert.equal(told.length, 1, `${why}: declined`);
  assert.ok(told[0]!.to.equals(b), why);
}

test("direct coordinator: a former coordinator that still authors its plan declines a probe once another member is elected, and a node whose view elects nobody declines it too", () => {
  const k = cluster();
  const shard = k.coordinator.shardOn(c);
  k.coordinator.feed(
    { kind: "membershipChanged", snapshot: view(a, [member(e), member(a), member(b), member(c)]) },
    2_000,
  );
  assert.ok(k.coordinator.state.view.elected?.equals(e) && k.coordinator.t.plan.author?.equals(a));
  declinedToB(control(k.coordinator, probeOf(k, shard), b, 2_001), "another member is elected");
  k.coordinator.feed(
    { kind: "membershipChanged", snapshot: view(a, [member(a), member(b), member(c)], { unreachable: [c] }) },
    2_002,
  );
  assert.equal(k.coordinator.state.view.elected, null);
  declinedToB(control(k.coordinator, probeOf(k, shard, 8), b, 2_003), "nobody is elected");
});

test("direct coordinator: an elected member that does not author its plan yet (collecting snapshots) declines a probe, though the plan it holds places the shard on an Up owner", () => {
  const k = cluster();
  // a goes Down: b is elected and starts its snapshot bootstrap, still holding a's plan.
  k.b.feed({ kind: "membershipChanged", snapshot: view(b, [member(a, "Down"), member(b), member(c)]) }, 2_000);
  assert.ok(k.b.state.view.elected?.equals(b));
  assert.equal(k.b.t.plan.author?.equals(b) === true, false, "not the author yet");
  const shard = k.b.shardOn(c);
  const probe = new DirectProbe(type, k.b.settings.key, shard, c.toString(), 9);
  const effects = control(k.b, probe, c, 2_001);
  assert.deepEqual(ofKind(effects, "refused"), []);
  assert.deepEqual(sent(effects, DirectProbe), [], "not forwarded");
  assert.equal(sent(effects, DirectRefused).length, 1, "declined");
});

test("direct coordinator: a probe for a shard its plan leaves unplaced is declined, not thrown on", () => {
  const k = cluster();
  const shard = k.coordinator.shardOn(c);
  const plan = k.coordinator.t.plan;
  const allocations = new Map(plan.allocations);
  allocations.delete(shard);
  k.coordinator.t.plan = { ...plan, allocations };
  declinedToB(control(k.coordinator, probeOf(k, shard), b, 2_000), "unplaced");
});

test("direct owner: a probe forwarded by the accepting coordinator is declined while the owner still holds another coordinator's plan (which places the shard here)", () => {
  const k = cluster();
  const shard = k.c.shardOn(c);
  const g = k.update.generation;
  // e joins and coordinates; c stores e's plan (the shard still on c). e leaves; a is accepted again, and its new plan
  // has not reached c yet.
  k.c.feed({ kind: "membershipChanged", snapshot: view(c, [member(e), member(a), member(b), member(c)]) }, 2_000);
  control(k.c, moved(k.update, shard, c, g + 1, e), e, 2_001);
  k.c.feed(
    { kind: "membershipChanged", snapshot: view(c, [member(e, "Leaving"), member(a), member(b), member(c)]) },
    2_002,
  );
  assert.ok(k.c.state.view.accepting?.equals(a) && k.c.t.plan.author?.equals(e));
  const effects = control(k.c, probeOf(k, shard).forwardedBy(a), a, 2_003);
  assert.deepEqual(sent(effects, DirectGrant), [], "no grant under a plan a did not author");
  declinedToB(effects, "another coordinator's plan");
});

test("direct owner: a member with no plan yet, or whose plan leaves the shard unplaced, declines a forwarded probe — judged, not thrown on", () => {
  const k = cluster();
  const shard = k.c.shardOn(c);
  const fresh = new Driven(c, direct);
  declinedToB(control(fresh, probeOf(k, shard).forwardedBy(a), a, 2_000), "no plan");
  const stored = control(k.c, moved(k.update, shard, null, k.update.generation + 1), a, 2_001);
  assert.deepEqual(ofKind(stored, "refused"), [], "a plan that unplaces an owned shard is stored, not thrown on");
  assert.equal(k.c.t.ownedSince.has(shard), false, "its ownership ends");
  declinedToB(control(k.c, probeOf(k, shard).forwardedBy(a), a, 2_002), "unplaced");
});

test("direct owner: its own probe declined at home (a drain of the shard was asked meanwhile) cools its route locally — no message to itself", () => {
  const k = cluster();
  const shard = k.b.shardOn(b);
  const id = k.b.entityIn((s) => s === shard);
  const [probe] = sent(k.b.route(k.b.delivery(id), 2_000), DirectProbe);
  const [forwarded] = sent(control(k.coordinator, probe!.message, b, 2_001), DirectProbe);
  assert.ok(forwarded!.to.equals(b));
  const key = k.b.settings.key;
  control(k.b, new PassivateShard(type, key, shard, a.toString(), c.toString(), 11, [c.toString()]), a, 2_002);
  const effects = control(k.b, forwarded!.message, a, 2_003);
  assert.deepEqual(sends(effects), [], "nothing sent to itself");
  assert.equal(k.b.t.routes.get(shard)?.phase, "cooling");
  assert.equal(k.b.stats.directProbesDropped, 1);
});

test("direct caller: a grant is taken only from the owner it names (the transport sender), and only for the probe out: none out, or another token, changes nothing", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  const key = k.b.settings.key;
  const g = k.b.t.plan.generation;
  const unasked = control(k.b, new DirectGrant(type, key, shard, c.toString(), a.toString(), g, 1), c, 2_000);
  assert.deepEqual(unasked, [], "no probe out: ignored, not thrown on");
  assert.equal(k.b.t.routes.has(shard), false);
  const id = k.b.entityIn((s) => s === shard);
  const [probe] = sent(k.b.route(k.b.delivery(id), 2_001), DirectProbe);
  const token = probe!.message.token;
  control(k.b, new DirectGrant(type, key, shard, c.toString(), a.toString(), g, token + 1), c, 2_002);
  assert.equal(k.b.t.routes.get(shard)?.phase, "probing", "another probe's grant: still waiting");
  const forged = control(k.b, new DirectGrant(type, key, shard, c.toString(), a.toString(), g, token), a, 2_003);
  const [refused] = ofKind(forged, "refused");
  assert.ok(refused?.error instanceof ClusterShardingConfigurationError, "a grant naming c must come from c");
  assert.equal(k.b.t.routes.get(shard)?.phase, "probing");
  control(k.b, new DirectGrant(type, key, shard, c.toString(), a.toString(), g, token), c, 2_004);
  assert.equal(k.b.t.routes.get(shard)?.phase, "direct", "the right one is taken");
});

test("direct caller: a grant that arrives while the caller's view routes through no coordinator is not taken (the shard cools)", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  const id = k.b.entityIn((s) => s === shard);
  const [probe] = sent(k.b.route(k.b.delivery(id), 2_000), DirectProbe);
  const [forwarded] = sent(control(k.coordinator, probe!.message, b, 2_001), DirectProbe);
  const [grant] = sent(control(k.c, forwarded!.message, a, 2_002), DirectGrant);
  k.b.feed(
    { kind: "membershipChanged", snapshot: view(b, [member(a), member(b), member(c)], { converged: false }) },
    2_003,
  );
  assert.equal(k.b.state.view.routing, null);
  assert.ok(k.b.state.view.accepting?.equals(a), "a is still accepted, and authors b's plan");
  const effects = control(k.b, grant!.message, c, 2_004);
  assert.deepEqual(ofKind(effects, "refused"), []);
  assert.equal(k.b.t.routes.get(shard)?.phase, "cooling");
});

test("direct caller: a grant for a shard its newer plan (same coordinator) leaves unplaced is not taken, nor thrown on", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  const id = k.b.entityIn((s) => s === shard);
  const [probe] = sent(k.b.route(k.b.delivery(id), 2_000), DirectProbe);
  const [forwarded] = sent(control(k.coordinator, probe!.message, b, 2_001), DirectProbe);
  const [grant] = sent(control(k.c, forwarded!.message, a, 2_002), DirectGrant);
  control(k.b, moved(k.update, shard, null, k.update.generation + 1), a, 2_003);
  const effects = control(k.b, grant!.message, c, 2_004);
  assert.deepEqual(ofKind(effects, "refused"), []);
  assert.equal(k.b.t.routes.get(shard)?.phase, "cooling");
});

test("direct caller: a refusal for a shard with no route is ignored — no fallback counted, nothing cooled, not thrown on", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  const effects = control(k.b, new DirectRefused(type, k.b.settings.key, shard, c.toString()), c, 2_000);
  assert.deepEqual(effects, []);
  assert.equal(k.b.stats.directFallbacks, 0);
  assert.equal(k.b.t.routes.has(shard), false);
});

test("direct caller: a probe the coordinator declines cools the shard at once, and the deliveries held behind the probe go through the coordinator", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  const id = k.b.entityIn((s) => s === shard);
  k.b.route(k.b.delivery(id), 2_000);
  const waiting = k.b.delivery(id);
  assert.deepEqual(forwards(k.b.route(waiting, 2_001)), [], "held while the probe is out");
  const declined = control(k.b, new DirectRefused(type, k.b.settings.key, shard, a.toString()), a, 2_002);
  assert.equal(k.b.t.routes.get(shard)?.phase, "cooling");
  assert.deepEqual(
    forwards(declined).map((f) => [f.to.toString(), f.delivery]),
    [[a.toString(), waiting]],
  );
  assert.equal(k.b.stats.directFallbacks, 0, "a declined probe is no fallback from a grant");
});

test("direct owner: the previous owner hears the announcement of its own shard's handoff and sends no marker (to itself)", () => {
  const k = cluster();
  const shard = k.c.shardOn(c);
  const announce = new HandoffAnnounce(type, k.c.settings.key, shard, a.toString(), c.toString(), 42);
  const effects = control(k.c, announce, a, 2_000);
  assert.deepEqual(sent(effects, DirectMarker), []);
  assert.deepEqual(ofKind(effects, "refused"), []);
});

test("direct owner: a marker handed to the core without a transport sender (origin null) is refused as a configuration error", () => {
  const k = cluster();
  const marker = new DirectMarker(type, k.c.settings.key, k.c.shardOn(c), b.toString(), a.toString(), 42);
  const [refused] = ofKind(control(k.c, marker, null, 2_000), "refused");
  assert.ok(refused?.error instanceof ClusterShardingConfigurationError, String(refused?.error));
});

/** The PassivateShard a sends c for `shard`: a gated drain (token 42) waiting for the markers of `waitFor`. */
function gatedPassivate(k: ReturnType<typeof cluster>, shard: number, waitFor: UniqueAddress[], token = 42) {
  const key = k.c.settings.key;
  return new PassivateShard(type, key, shard, a.toString(), b.toString(), token, waitFor.map(String));
}

test("direct owner: a gated passivate for a shard its plan leaves unplaced drains at once, not thrown on", () => {
  const k = cluster();
  const shard = k.c.shardOn(c);
  control(k.c, moved(k.update, shard, null, k.update.generation + 1), a, 2_000);
  const effects = control(k.c, gatedPassivate(k, shard, [b]), a, 2_001);
  assert.deepEqual(ofKind(effects, "refused"), []);
  assert.equal(ofKind(effects, "drainShard").length, 1);
});

test("direct owner: a gated drain waits for no member that is gone from the view (not listed, or listed Removed)", () => {
  const k = cluster();
  const shard = k.c.shardOn(c);
  const effects = control(k.c, gatedPassivate(k, shard, [d]), a, 2_000);
  assert.deepEqual(ofKind(effects, "refused"), []);
  assert.equal(ofKind(effects, "drainShard").length, 1, "d is not in c's view: its marker is not waited for");
  const other = [...k.c.t.plan.allocations].find(([s, o]) => s !== shard && o.equals(c))![0];
  k.c.feed({ kind: "membershipChanged", snapshot: view(c, [member(a), member(b, "Removed"), member(c)]) }, 2_001);
  const removed = control(k.c, gatedPassivate(k, other, [b], 43), a, 2_002);
  assert.equal(ofKind(removed, "drainShard").length, 1, "b is listed Removed: its marker is not waited for");
});

test("direct owner: a gated drain starts once its coordinator is no longer the accepting one (a direct delivery naming it is refused from then on)", () => {
  const k = cluster();
  const shard = k.c.shardOn(c);
  assert.deepEqual(
    ofKind(control(k.c, gatedPassivate(k, shard, [b]), a, 2_000), "drainShard"),
    [],
    "b's marker awaited",
  );
  const changed = k.c.feed(
    { kind: "membershipChanged", snapshot: view(c, [member(e), member(a), member(b), member(c)]) },
    2_001,
  );
  assert.ok(k.c.state.view.accepting?.equals(e));
  assert.equal(ofKind(changed, "drainShard").length, 1, "no longer a's gate to keep");
});

test("direct owner: a retried attempt's gate (the same handoff asked again) waits its own full 2 s; the first timer re-arms for the rest", () => {
  const k = cluster();
  const shard = k.c.shardOn(c);
  const first = control(k.c, gatedPassivate(k, shard, [b]), a, 2_000);
  const [expiry] = first.flatMap((x) => (x.kind === "schedule" && x.timer.kind === "drainGateExpired" ? [x] : []));
  control(k.c, gatedPassivate(k, shard, [b]), a, 3_000);
  const early = k.c.feed({ kind: "timer", timer: expiry!.timer }, 4_000);
  assert.deepEqual(ofKind(early, "ack"), [], "the newer gate still waits");
  const [again] = early.flatMap((x) => (x.kind === "schedule" && x.timer.kind === "drainGateExpired" ? [x] : []));
  assert.equal(again?.afterMs, 1_000, "for the rest of the newer gate's time");
  const expired = k.c.feed({ kind: "timer", timer: again!.timer }, 5_000);
  assert.equal(ofKind(expired, "ack").length, 2, "both asks fail once it has waited its full time");
  assert.ok(ofKind(expired, "ack").every((x) => x.error !== null));
  assert.equal(logs(expired, "warn").length, 1, "giving up is a warning");
  // The retried passivate's own timer comes due as well: the gate is gone, so it does nothing.
  assert.deepEqual(k.c.feed({ kind: "timer", timer: expiry!.timer }, 5_001), []);
});

test("direct owner: a gate timer does nothing once its drain started, or for an older handoff's gate", () => {
  const k = cluster();
  const shard = k.c.shardOn(c);
  const key = k.c.settings.key;
  const first = control(k.c, gatedPassivate(k, shard, [b]), a, 2_000);
  const [expiry] = first.flatMap((x) => (x.kind === "schedule" && x.timer.kind === "drainGateExpired" ? [x] : []));
  const marked = control(k.c, new DirectMarker(type, key, shard, b.toString(), a.toString(), 42), b, 2_001);
  assert.equal(ofKind(marked, "drainShard").length, 1);
  assert.deepEqual(k.c.feed({ kind: "timer", timer: expiry!.timer }, 4_000), [], "the drain runs: no expiry");

  const other = [...k.c.t.plan.allocations].find(([s, o]) => s !== shard && o.equals(c))![0];
  const older = control(k.c, gatedPassivate(k, other, [b], 50), a, 4_001);
  const [olderExpiry] = older.flatMap((x) => (x.kind === "schedule" && x.timer.kind === "drainGateExpired" ? [x] : []));
  control(k.c, gatedPassivate(k, other, [b], 51), a, 4_002);
  assert.deepEqual(k.c.feed({ kind: "timer", timer: olderExpiry!.timer }, 6_001), [], "token 50's gate was replaced");
  assert.equal(k.c.t.drains.has(other), true, "the drain still waits for handoff 51's marker");
});

test("direct caller: a probe through a coordinator that went Down no longer holds the shard's deliveries — they go to the new coordinator at once", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  const id = k.b.entityIn((s) => s === shard);
  assert.equal(sent(k.b.route(k.b.delivery(id), 2_000), DirectProbe).length, 1);
  k.b.feed(
    { kind: "membershipChanged", snapshot: view(b, [member(e), member(a, "Down"), member(b), member(c)]) },
    2_001,
  );
  assert.ok(k.b.state.view.routing?.equals(e));
  const next = k.b.delivery(id);
  const effects = k.b.route(next, 2_002);
  assert.deepEqual(onlyForward(effects), { to: e.toString(), direct: false });
  assert.equal(forwards(effects)[0]!.delivery, next);
  assert.equal(k.b.t.heldLocal.size, 0);
  assert.equal(k.b.stats.heldDeliveries, 0, "not held even for the step");
  assert.equal(k.b.t.routes.has(shard), false, "the old coordinator's probe is forgotten");
});

test("direct caller: the direct copy carries the caller's typed (in-process) payload", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  grantedDirect(k, shard, 2_000);
  const delivery = k.b.delivery(k.b.entityIn((s) => s === shard));
  const payload = { order: 7 };
  attachTyped(delivery.envelope, payload);
  const [out] = forwards(k.b.route(delivery, 2_010));
  assert.ok(out!.envelope instanceof DirectEnvelope);
  assert.equal(typedOf(out!.envelope), payload);
});

test("direct caller: under the planted directWithoutGrant bug the plan alone opens the direct route (the simulator's proof that it catches the bug needs it to take effect)", () => {
  const k = cluster();
  k.b.state = { ...k.b.state, bugs: { directWithoutGrant: true } };
  const shard = k.b.shardOn(c);
  const id = k.b.entityIn((s) => s === shard);
  const first = k.b.route(k.b.delivery(id), 2_000);
  assert.deepEqual(onlyForward(first), { to: a.toString(), direct: false });
  assert.deepEqual(sent(first, DirectProbe), [], "no probe, no grant");
  const route = k.b.t.routes.get(shard);
  assert.equal(route?.phase, "direct");
  assert.deepEqual(onlyForward(k.b.route(k.b.delivery(id), 2_001)), { to: c.toString(), direct: true });
});

test("direct coordinator: a handoff is not announced to an Up member that never registered the type, nor does the old owner wait for its marker", () => {
  const k = cluster();
  k.coordinator.feed(
    { kind: "membershipChanged", snapshot: view(a, [member(a), member(b), member(c), member(d)]) },
    2_000,
  );
  assert.equal(k.coordinator.t.registrations.has(d.toString()), false);
  const shard = k.coordinator.shardOn(b);
  const effects = k.coordinator.feed({ kind: "moveShard", type, shard, to: c }, 2_001);
  const announced = sent(effects, HandoffAnnounce).map((x) => x.to.toString());
  assert.deepEqual(announced.sort(), [b.toString(), c.toString()], "d does not know the type");
  const passivate = asks(effects)[0]!.message as PassivateShard;
  assert.deepEqual(passivate.waitFor, [c.toString()]);
});

test("direct owner: with coordinator routing a direct envelope is refused for its routing even while no coordinator is accepted (not held)", () => {
  const plain = { rebalance: new NoRebalance() };
  const coordinator = coordinatorWithPlan(plain);
  const cc = follower(c, coordinator.update(), plain);
  cc.feed(
    { kind: "membershipChanged", snapshot: view(c, [member(a), member(b), member(c)], { unreachable: [a] }) },
    2_000,
  );
  assert.equal(cc.state.view.accepting, null);
  const shard = cc.shardOn(c);
  const delivery = cc.delivery(cc.entityIn((s) => s === shard));
  const envelope = DirectEnvelope.of(delivery.envelope, a, cc.t.plan.generation);
  const effects = cc.envelope({ envelope, sender: delivery.sender }, b, 2_001);
  const [rejected] = rejects(effects);
  assert.ok(rejected?.error instanceof DirectDeliveryRefusedError, String(rejected?.error));
  assert.equal((rejected.error as DirectDeliveryRefusedError).reason, "routing");
  assert.equal(cc.t.heldDirect.size, 0);
});

/** c's direct envelope for an entity of `shard`, naming `coordinator` and `generation`. */
function directAt(n: Driven, shard: number, coordinator: UniqueAddress, generation: number) {
  const delivery = n.delivery(n.entityIn((s) => s === shard));
  return { envelope: DirectEnvelope.of(delivery.envelope, coordinator, generation), sender: delivery.sender };
}

/** The reason of the one DirectDeliveryRefusedError among `effects`' rejections. */
function refusedFor(effects: NodeEffect[]): string {
  const [rejected] = rejects(effects);
  assert.ok(rejected?.error instanceof DirectDeliveryRefusedError, String(rejected?.error));
  return rejected.error.reason;
}

test("direct owner: under the planted refuseDirectWithoutCoordinator bug a direct envelope with no accepting coordinator is refused for its coordinator, not held (the simulator's proof needs it to take effect)", () => {
  const k = cluster();
  k.c.state = { ...k.c.state, bugs: { refuseDirectWithoutCoordinator: true } };
  k.c.feed(
    { kind: "membershipChanged", snapshot: view(c, [member(a), member(b), member(c)], { unreachable: [a] }) },
    2_000,
  );
  assert.equal(k.c.state.view.accepting, null);
  const effects = k.c.envelope(directAt(k.c, k.c.shardOn(c), a, k.c.t.plan.generation), b, 2_001);
  assert.equal(refusedFor(effects), "coordinator");
  assert.equal(k.c.t.heldDirect.size, 0);
});

test("direct owner: a member with no plan, or whose plan leaves the shard unplaced, refuses a direct envelope (coordinator, owner) — judged, not thrown on", () => {
  const k = cluster();
  const shard = k.c.shardOn(c);
  const fresh = new Driven(c, direct);
  assert.equal(refusedFor(fresh.envelope(directAt(fresh, shard, a, 1), b, 2_000)), "coordinator");
  control(k.c, moved(k.update, shard, null, k.update.generation + 1), a, 2_001);
  assert.equal(refusedFor(k.c.envelope(directAt(k.c, shard, a, k.update.generation), b, 2_002)), "owner");
});

test("direct owner: a direct delivery for a shard behind an open retry barrier queues behind it, not delivered ahead", () => {
  const k = cluster();
  const shard = k.c.shardOn(c);
  const first = k.c.forwardedBy(
    a,
    k.c.entityIn((s) => s === shard),
  );
  k.c.envelope(first, a, 2_000);
  k.c.feed({ kind: "delivered", type, shard, retry: false, deliveries: [first], outcomes: ["lease"] }, 2_001);
  assert.ok(k.c.t.barrier.has(shard));
  const effects = k.c.envelope(directAt(k.c, shard, a, k.c.t.plan.generation), b, 2_002);
  assert.deepEqual(ofKind(effects, "deliver"), [], "behind the barrier");
  assert.deepEqual(rejects(effects), []);
});

test("direct caller that owns the shard: its own direct delivery refused at home (a drain started) cools its route locally — no message to itself, the call fails typed", () => {
  const k = cluster();
  const shard = k.b.shardOn(b);
  const id = k.b.entityIn((s) => s === shard);
  const [probe] = sent(k.b.route(k.b.delivery(id), 2_000), DirectProbe);
  const [forwarded] = sent(control(k.coordinator, probe!.message, b, 2_001), DirectProbe);
  control(k.b, forwarded!.message, a, 2_002);
  assert.equal(k.b.t.routes.get(shard)?.phase, "direct");
  // An ungated passivate (as coordinator routing sends): the drain starts, the route stays.
  const key = k.b.settings.key;
  const drained = control(k.b, new PassivateShard(type, key, shard, a.toString(), c.toString(), null, []), a, 2_003);
  assert.equal(ofKind(drained, "drainShard").length, 1);
  const effects = k.b.route(k.b.delivery(id), 2_004);
  assert.equal(refusedFor(effects), "draining");
  assert.deepEqual(sends(effects), [], "nothing sent to itself");
  assert.equal(k.b.t.routes.get(shard)?.phase, "cooling");
  assert.equal(k.b.stats.directFallbacks, 1);
});

test("direct owner: a newer plan that keeps the shard here does not restart its ownership — a direct delivery naming the earlier generation of the same ownership is accepted", () => {
  const k = cluster();
  const shard = k.c.shardOn(c);
  const g = k.update.generation;
  control(k.c, moved(k.update, shard, c, g + 1), a, 2_000);
  const effects = k.c.envelope(directAt(k.c, shard, a, g), b, 2_001);
  assert.deepEqual(rejects(effects), []);
  assert.equal(ofKind(effects, "deliver").length, 1);
});

test("direct owner: a shard drained away and placed here again takes direct deliveries again (its closed mark ends with the ownership)", () => {
  const k = cluster();
  const shard = k.c.shardOn(c);
  const g = k.update.generation;
  const key = k.c.settings.key;
  control(k.c, new PassivateShard(type, key, shard, a.toString(), b.toString(), null, []), a, 2_000);
  k.c.feed({ kind: "drained", type, shard, error: null }, 2_010);
  assert.equal(refusedFor(k.c.envelope(directAt(k.c, shard, a, g), b, 2_011)), "draining");
  control(k.c, moved(k.update, shard, b, g + 1), a, 2_020);
  control(k.c, moved(k.update, shard, c, g + 2), a, 2_030);
  const effects = k.c.envelope(directAt(k.c, shard, a, g + 2), b, 2_040);
  assert.deepEqual(rejects(effects), []);
  assert.equal(ofKind(effects, "deliver").length, 1);
});

test("direct owner: a member with no plan yet forgets a cancelled preparation without a throw (its plan has no author)", () => {
  const n = new Driven(c, direct);
  assert.equal(n.t.plan.author, null);
  n.t.prepared.set(3, a.toString());
  const effects = control(n, new CancelPreparations(type, n.settings.key, a.toString(), [3]), a, 2_000);
  assert.deepEqual(ofKind(effects, "refused"), []);
  assert.equal(n.t.prepared.has(3), false);
  assert.equal(ofKind(effects, "retainShards").length, 1);
});
