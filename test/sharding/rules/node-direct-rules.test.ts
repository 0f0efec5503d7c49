// The direct route (docs/protocol.md §8.8) as rules of the node core, fed by hand with time passed in: a caller asks
// for the route through the coordinator (probe behind its deliveries), the owner grants it, the caller then sends
// straight to the owner naming the coordinator and the granted generation; the owner checks every direct delivery and
// refuses the rest with a typed, counted rejection that sends the caller back to the coordinator; a handoff is
// announced to every registered member, whose marker follows its direct deliveries to the old owner, which drains only
// once every marker it waits for arrived (or its sender is Down).
import assert from "node:assert/strict";
import { test } from "node:test";
import { DirectDeliveryRefusedError, NoRebalance } from "../../../src/sharding/index.ts";
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
import type { Delivery } from "../../../src/sharding/node/node-core.ts";
import { cluster, control, direct, directFrom, e, grantedDirect, sent } from "./direct-harness.ts";
import {
  a,
  asks,
  b,
  c,
  coordinatorWithPlan,
  d,
  delivers,
  follower,
  forwards,
  member,
  ofKind,
  rejects,
  type,
  view,
} from "./node-harness.ts";

test("direct: the first delivery goes through the coordinator with a probe behind it; later ones wait for the grant, then go straight to the owner naming the coordinator and the granted generation", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  const id = k.b.entityIn((s) => s === shard);
  const first = k.b.route(k.b.delivery(id), 2_000);
  assert.equal(forwards(first).length, 1);
  assert.ok(forwards(first)[0]!.to.equals(a), "first contact: the coordinator");
  assert.equal(forwards(first)[0]!.envelope.hopCount, 0);
  const [probe] = sent(first, DirectProbe);
  assert.ok(probe!.to.equals(a));
  assert.ok(first.indexOf(forwards(first)[0]!) < first.findIndex((e) => e.kind === "send"), "the probe goes behind it");

  const second = k.b.delivery(id);
  assert.deepEqual(forwards(k.b.route(second, 2_001)), [], "held while the probe is out");

  const [forwarded] = sent(control(k.coordinator, probe!.message, b, 2_002), DirectProbe);
  assert.ok(forwarded!.to.equals(c));
  assert.equal(forwarded!.message.coordinator, a.toString());
  const [grant] = sent(control(k.c, forwarded!.message, a, 2_003), DirectGrant);
  assert.ok(grant!.to.equals(b));
  assert.equal(grant!.message.generation, k.c.t.plan.generation);

  const released = control(k.b, grant!.message, c, 2_004);
  const [out] = forwards(released);
  assert.ok(out!.to.equals(c), "the held delivery goes straight to the owner");
  assert.ok(out!.envelope instanceof DirectEnvelope);
  assert.equal(out!.envelope.hopCount, 2);
  assert.equal((out!.envelope as DirectEnvelope).coordinatorUid, a.uid);
  assert.equal((out!.envelope as DirectEnvelope).generation, grant!.message.generation);
  assert.equal(out!.delivery.sender, second.sender);
  const third = forwards(k.b.route(k.b.delivery(id), 2_005));
  assert.ok(third[0]!.to.equals(c));
  assert.equal(k.b.stats.directRoutes, 2);
});

test("direct: coordinator routing sends no probe and announces no handoff", () => {
  const n = coordinatorWithPlan({ rebalance: new NoRebalance() });
  const bb = follower(b, n.update(), { rebalance: new NoRebalance() });
  const shard = bb.shardOn(c);
  const effects = bb.route(bb.delivery(bb.entityIn((s) => s === shard)), 2_000);
  assert.deepEqual(sent(effects, DirectProbe), []);
  const moved = n.feed({ kind: "moveShard", type, shard: n.shardOn(b), to: c }, 2_000);
  assert.deepEqual(sent(moved, HandoffAnnounce), []);
  const passivate = asks(moved)[0]!.message as PassivateShard;
  assert.equal(passivate.handoffToken, null);
});

test("direct: the coordinator forwards a probe only when it would dispatch the shard at once, from the caller it names; otherwise it declines, counted", () => {
  const k = cluster();
  const shard = k.coordinator.shardOn(c);
  const probe = new DirectProbe(type, k.coordinator.settings.key, shard, b.toString(), 7);
  const [forwarded] = sent(control(k.coordinator, probe, b, 2_000), DirectProbe);
  assert.ok(forwarded!.to.equals(c));
  assert.equal(k.coordinator.t.registrations.get(b.toString()), k.coordinator.settings.key, "a probe registers");

  const impostor = control(k.coordinator, probe, c, 2_001);
  assert.equal(ofKind(impostor, "refused").length, 1, "a probe naming another caller is refused");

  const moving = k.coordinator.shardOn(b);
  k.coordinator.feed({ kind: "moveShard", type, shard: moving, to: c }, 2_002);
  const inHandoff = new DirectProbe(type, k.coordinator.settings.key, moving, c.toString(), 8);
  const declined = control(k.coordinator, inHandoff, c, 2_003);
  assert.deepEqual(sent(declined, DirectProbe), [], "not forwarded while the shard is in handoff");
  const [no] = sent(declined, DirectRefused);
  assert.ok(no!.to.equals(c));
  assert.equal(no!.message.owner, a.toString());
  assert.equal(k.coordinator.stats.directProbesDropped, 1);

  const ownShard = k.coordinator.shardOn(a);
  const own = control(
    k.coordinator,
    new DirectProbe(type, k.coordinator.settings.key, ownShard, b.toString(), 9),
    b,
    2_004,
  );
  assert.equal(sent(own, DirectRefused).length, 1, "a shard the coordinator owns needs no direct route");
});

test("direct: a probe from an authenticated node that is not a member is declined, counted, and registers nothing (a handoff would not wait for its marker)", () => {
  const k = cluster();
  const shard = k.coordinator.shardOn(c);
  const dropped = k.coordinator.stats.directProbesDropped;
  const effects = control(
    k.coordinator,
    new DirectProbe(type, k.coordinator.settings.key, shard, d.toString(), 11),
    d,
    2_000,
  );
  assert.deepEqual(sent(effects, DirectProbe), [], "not forwarded to the owner");
  const [no] = sent(effects, DirectRefused);
  assert.ok(no!.to.equals(d), "the caller is told, so what it holds goes through the coordinator at once");
  assert.equal(k.coordinator.t.registrations.has(d.toString()), false);
  assert.equal(k.coordinator.stats.directProbesDropped, dropped + 1);
  // The same probe from a member is forwarded (the check is the membership, nothing else).
  const fromMember = control(
    k.coordinator,
    new DirectProbe(type, k.coordinator.settings.key, shard, b.toString(), 12),
    b,
    2_001,
  );
  assert.equal(sent(fromMember, DirectProbe).length, 1);
  // A member the coordinator sees Joining or Down is declined as well; a Leaving one is still waited for, so it may.
  for (const [status, forwarded] of [
    ["Joining", 0],
    ["Down", 0],
    ["Leaving", 1],
  ] as const) {
    k.coordinator.feed(
      { kind: "view", snapshot: view(a, [member(a), member(b), member(c), member(d, status)]) },
      2_002,
    );
    const probe = new DirectProbe(type, k.coordinator.settings.key, shard, d.toString(), 13);
    const answered = control(k.coordinator, probe, d, 2_003);
    assert.equal(sent(answered, DirectProbe).length, forwarded, `${status}: forwarded`);
    assert.equal(k.coordinator.t.registrations.has(d.toString()), forwarded === 1, `${status}: registered`);
  }
});

test("direct: the owner grants only from the accepting coordinator, for a shard it owns in that coordinator's plan, and not once a drain was asked", () => {
  const k = cluster();
  const key = k.c.settings.key;
  const mine = k.c.shardOn(c);
  const forwarded = new DirectProbe(type, key, mine, b.toString(), 3).forwardedBy(a);
  const [grant] = sent(control(k.c, forwarded, a, 2_000), DirectGrant);
  assert.deepEqual(
    [grant!.message.owner, grant!.message.coordinator, grant!.message.generation, grant!.message.token],
    [c.toString(), a.toString(), k.c.t.plan.generation, 3],
  );
  assert.equal(ofKind(control(k.c, forwarded, b, 2_001), "refused").length, 1, "not from the coordinator");
  const notMine = new DirectProbe(type, key, k.c.shardOn(b), b.toString(), 4).forwardedBy(a);
  assert.equal(sent(control(k.c, notMine, a, 2_002), DirectRefused).length, 1, "another owner's shard: declined");

  control(k.c, new PassivateShard(type, key, mine, a.toString(), b.toString(), 11, [b.toString()]), a, 2_003);
  const afterDrainAsked = control(k.c, new DirectProbe(type, key, mine, b.toString(), 5).forwardedBy(a), a, 2_004);
  assert.deepEqual(sent(afterDrainAsked, DirectGrant), [], "a shard whose drain was asked is not granted");
});

test("direct: the owner accepts a direct delivery only under the accepting coordinator, for its own shard, in its ownership's generations; anything else is a typed, counted refusal and the sender is told", () => {
  const k = cluster();
  const mine = k.c.shardOn(c);
  const id = k.c.entityIn((s) => s === mine);
  const g = k.c.t.plan.generation;
  const ok = k.c.envelope(directFrom(k.c, id, a, g), b, 2_000);
  assert.equal(delivers(ok).length, 1);
  assert.deepEqual(rejects(ok), []);

  const cases: [Delivery, string][] = [
    [directFrom(k.c, id, b, g), "coordinator"],
    [
      directFrom(
        k.c,
        k.c.entityIn((s) => s === k.c.shardOn(b)),
        a,
        g,
      ),
      "owner",
    ],
    [directFrom(k.c, id, a, g + 1), "generation"],
  ];
  for (const [[d, reason], i] of cases.map((x, j) => [x, j] as const)) {
    const effects = k.c.envelope(d, b, 2_001 + i);
    assert.deepEqual(delivers(effects), [], reason);
    const [rejected] = rejects(effects);
    assert.ok(rejected!.error instanceof DirectDeliveryRefusedError, reason);
    assert.equal((rejected!.error as DirectDeliveryRefusedError).reason, reason);
    const [told] = sent(effects, DirectRefused);
    assert.ok(told!.to.equals(b), `${reason}: the sender is told`);
    assert.equal(told!.message.owner, c.toString());
  }
  assert.equal(k.c.stats.directRefusals, 3);
  assert.equal(k.c.stats.rejectedEnvelopes, 3);
});

test("direct: a grant of an earlier ownership never counts — the shard moved away and back, and the old generation is refused", () => {
  const k = cluster();
  const shard = k.c.shardOn(c);
  const id = k.c.entityIn((s) => s === shard);
  const g = k.c.t.plan.generation;
  const planWith = (generation: number, owner: typeof a) => {
    const u = k.coordinator.update();
    const assignments = u.assignments.map((x) =>
      x.shardId === shard ? { shardId: shard, owner: owner.toString() } : x,
    );
    return new PlanUpdate(type, u.settingsKey, a.toString(), generation, assignments);
  };
  control(k.c, planWith(g + 1, b), a, 2_000);
  control(k.c, planWith(g + 2, c), a, 2_001);
  const stale = rejects(k.c.envelope(directFrom(k.c, id, a, g), b, 2_002));
  assert.equal((stale[0]!.error as DirectDeliveryRefusedError).reason, "generation");
  assert.equal(delivers(k.c.envelope(directFrom(k.c, id, a, g + 2), b, 2_003)).length, 1);
});

test("direct: a refusal sends the caller back to the coordinator (counted), and it asks again only after the cooling period", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  grantedDirect(k, shard, 2_000);
  const id = k.b.entityIn((s) => s === shard);
  control(k.b, new DirectRefused(type, k.b.settings.key, shard, c.toString()), c, 2_010);
  assert.equal(k.b.stats.directFallbacks, 1);
  const back = k.b.route(k.b.delivery(id), 2_011);
  assert.ok(forwards(back)[0]!.to.equals(a));
  assert.deepEqual(sent(back, DirectProbe), [], "no probe while cooling");
  const later = k.b.route(k.b.delivery(id), 2_600);
  assert.ok(forwards(later)[0]!.to.equals(a));
  assert.equal(sent(later, DirectProbe).length, 1, "probed again after directProbeRetryMs");
  assert.equal(
    ofKind(control(k.b, new DirectRefused(type, k.b.settings.key, shard, c.toString()), b, 2_601), "refused").length,
    1,
    "a refusal must come from the node it names",
  );
});

test("direct: a probe that gets no answer releases the shard's held deliveries through the coordinator, in order", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  const id = k.b.entityIn((s) => s === shard);
  const probeEffects = k.b.route(k.b.delivery(id), 2_000);
  const [timer] = probeEffects.flatMap((e) =>
    e.kind === "schedule" && e.timer.kind === "probeExpired" ? [e.timer] : [],
  );
  const held = [k.b.delivery(id), k.b.delivery(id)];
  for (const d of held) assert.deepEqual(forwards(k.b.route(d, 2_001)), []);
  const released = k.b.feed({ kind: "timer", timer: timer! }, 2_500);
  assert.deepEqual(
    forwards(released).map((f) => [f.to.toString(), f.delivery.sender]),
    held.map((d) => [a.toString(), d.sender]),
  );
});

test("direct: a caller that owns the shard delivers locally through the owner's check once it holds its own grant", () => {
  const k = cluster();
  const shard = k.b.shardOn(b);
  const id = k.b.entityIn((s) => s === shard);
  const [probe] = sent(k.b.route(k.b.delivery(id), 2_000), DirectProbe);
  const [forwarded] = sent(control(k.coordinator, probe!.message, b, 2_001), DirectProbe);
  assert.ok(forwarded!.to.equals(b));
  control(k.b, forwarded!.message, a, 2_002);
  assert.equal(k.b.t.routes.get(shard)?.phase, "direct");
  const local = k.b.route(k.b.delivery(id), 2_003);
  assert.deepEqual(forwards(local), []);
  assert.ok(delivers(local)[0]!.deliveries[0]!.envelope instanceof DirectEnvelope);
});

test("direct: a handoff is announced to every registered member, and the passivate names its token and the members the old owner waits for", () => {
  const k = cluster();
  const shard = k.coordinator.shardOn(b);
  const effects = k.coordinator.feed({ kind: "moveShard", type, shard, to: c }, 2_000);
  const token = k.coordinator.t.handoffs.get(shard)!.token;
  const announced = sent(effects, HandoffAnnounce);
  assert.deepEqual(announced.map((x) => x.to.toString()).sort(), [b.toString(), c.toString()]);
  for (const x of announced) {
    assert.deepEqual([x.message.shardId, x.message.previousOwner, x.message.token], [shard, b.toString(), token]);
  }
  const passivate = asks(effects)[0]!;
  assert.ok(passivate.to.equals(b));
  const message = passivate.message as PassivateShard;
  assert.equal(message.handoffToken, token);
  assert.deepEqual(message.waitFor, [c.toString()], "neither the coordinator nor the old owner itself");
  assert.ok(
    effects.findIndex((e) => e.kind === "send" && e.to.equals(b)) < effects.indexOf(passivate),
    "the old owner hears the announcement before the passivate, on the same link",
  );
});

test("direct: the announcement ends a member's grant and sends its marker to the old owner, behind its direct deliveries", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  const grant = grantedDirect(k, shard, 2_000);
  const id = k.b.entityIn((s) => s === shard);
  assert.ok(forwards(k.b.route(k.b.delivery(id), 2_010))[0]!.to.equals(c));
  const announce = new HandoffAnnounce(type, k.b.settings.key, shard, a.toString(), c.toString(), 42);
  const [marker] = sent(control(k.b, announce, a, 2_011), DirectMarker);
  assert.ok(marker!.to.equals(c));
  assert.deepEqual(
    [marker!.message.caller, marker!.message.coordinator, marker!.message.token],
    [b.toString(), a.toString(), 42],
  );
  const after = k.b.route(k.b.delivery(id), 2_012);
  assert.ok(forwards(after)[0]!.to.equals(a), "the coordinator route from now on");
  assert.equal(forwards(after)[0]!.envelope.hopCount, 0);
  const late = control(k.b, grant, c, 2_013);
  assert.equal(k.b.t.routes.get(shard)?.phase, "cooling", "a late copy of the old grant opens nothing");
  assert.deepEqual(late, []);
  assert.equal(ofKind(control(k.b, announce, c, 2_014), "refused").length, 1, "only the coordinator announces");
});

test("direct: the old owner drains only after the marker of every member it waits for; direct deliveries before the marker are delivered, after the drain refused", () => {
  const k = cluster();
  const shard = k.c.shardOn(c);
  const id = k.c.entityIn((s) => s === shard);
  const key = k.c.settings.key;
  const g = k.c.t.plan.generation;
  const asked = control(
    k.c,
    new PassivateShard(type, key, shard, a.toString(), b.toString(), 42, [b.toString()]),
    a,
    2_000,
  );
  assert.deepEqual(ofKind(asked, "drainShard"), [], "no drain before b's marker");
  assert.equal(delivers(k.c.envelope(directFrom(k.c, id, a, g), b, 2_001)).length, 1, "sent before the marker");
  const wrongToken = control(k.c, new DirectMarker(type, key, shard, b.toString(), a.toString(), 41), b, 2_002);
  assert.deepEqual(ofKind(wrongToken, "drainShard"), [], "a marker of another handoff does not count");
  assert.equal(
    ofKind(control(k.c, new DirectMarker(type, key, shard, b.toString(), a.toString(), 42), a, 2_003), "refused")
      .length,
    1,
    "a marker must come from the member it names",
  );
  const marked = control(k.c, new DirectMarker(type, key, shard, b.toString(), a.toString(), 42), b, 2_004);
  assert.equal(ofKind(marked, "drainShard").length, 1);
  const late = k.c.envelope(directFrom(k.c, id, a, g), b, 2_005);
  assert.equal((rejects(late)[0]!.error as DirectDeliveryRefusedError).reason, "draining");
});

test("direct: a marker that arrives before the passivate counts, and a member Down (or gone) is no longer waited for", () => {
  const k = cluster();
  const shard = k.c.shardOn(c);
  const key = k.c.settings.key;
  control(k.c, new DirectMarker(type, key, shard, b.toString(), a.toString(), 42), b, 2_000);
  const early = control(
    k.c,
    new PassivateShard(type, key, shard, a.toString(), b.toString(), 42, [b.toString()]),
    a,
    2_001,
  );
  assert.equal(ofKind(early, "drainShard").length, 1, "b's marker came first");

  const other =
    k.c.shardOn(c) === shard
      ? [...k.c.t.plan.allocations].find(([s, o]) => s !== shard && o.equals(c))?.[0]
      : undefined;
  assert.notEqual(other, undefined, "c owns a second shard");
  const waiting = control(
    k.c,
    new PassivateShard(type, key, other!, a.toString(), b.toString(), 43, [b.toString()]),
    a,
    2_002,
  );
  assert.deepEqual(ofKind(waiting, "drainShard"), []);
  const downed = k.c.feed(
    { kind: "membershipChanged", snapshot: view(c, [member(a), member(b, "Down"), member(c)]) },
    2_003,
  );
  assert.equal(ofKind(downed, "drainShard").length, 1, "b is Down: its marker is not waited for");
});

test("direct: while the old owner still drains, the coordinator announces again every 300 ms with the same token, so a lost copy or marker never holds the drain", () => {
  const k = cluster();
  const shard = k.coordinator.shardOn(a);
  const moved = k.coordinator.feed({ kind: "moveShard", type, shard, to: c }, 2_000);
  const token = k.coordinator.t.handoffs.get(shard)!.token;
  assert.deepEqual(ofKind(moved, "drainShard"), [], "a local drain waits for b's and c's markers too");
  const [retry] = moved.flatMap((e) => (e.kind === "schedule" && e.timer.kind === "announceRetry" ? [e] : []));
  assert.equal(retry!.afterMs, 300);
  const again = k.coordinator.feed({ kind: "timer", timer: retry!.timer }, 2_300);
  const copies = sent(again, HandoffAnnounce);
  assert.deepEqual(copies.map((x) => x.to.toString()).sort(), [b.toString(), c.toString()]);
  assert.ok(copies.every((x) => x.message.token === token));
  const key = k.coordinator.settings.key;
  control(k.coordinator, new DirectMarker(type, key, shard, b.toString(), a.toString(), token), b, 2_301);
  const drained = control(
    k.coordinator,
    new DirectMarker(type, key, shard, c.toString(), a.toString(), token),
    c,
    2_302,
  );
  assert.equal(ofKind(drained, "drainShard").length, 1, "every marker in: the coordinator drains its own shard");
  k.coordinator.feed({ kind: "drained", type, shard, error: null }, 2_400);
  const later = k.coordinator.feed({ kind: "timer", timer: retry!.timer }, 2_600);
  assert.deepEqual(sent(later, HandoffAnnounce), [], "no announcement once the handoff left its drain");
});

test("direct: a drain waits for its markers at most 2 s — then it is abandoned, nothing drained, and the coordinator's ask fails so the handoff retries", () => {
  const k = cluster();
  const shard = k.c.shardOn(c);
  const key = k.c.settings.key;
  const asked = control(
    k.c,
    new PassivateShard(type, key, shard, a.toString(), b.toString(), 42, [b.toString()]),
    a,
    2_000,
  );
  const [expiry] = asked.flatMap((e) => (e.kind === "schedule" && e.timer.kind === "drainGateExpired" ? [e] : []));
  assert.equal(expiry!.afterMs, 2_000);
  const expired = k.c.feed({ kind: "timer", timer: expiry!.timer }, 4_000);
  assert.deepEqual(ofKind(expired, "drainShard"), [], "nothing drained");
  const [ack] = ofKind(expired, "ack");
  assert.ok(ack!.error !== null, "the passivate's ask fails");
  assert.equal(k.c.t.drains.has(shard), false, "no drain left pending to fire later");
  const late = control(k.c, new DirectMarker(type, key, shard, b.toString(), a.toString(), 42), b, 4_001);
  assert.deepEqual(ofKind(late, "drainShard"), [], "a late marker starts nothing");
});

test("direct: a passivate for a shard this node does not own (a late copy) drains at once, as in coordinator routing", () => {
  const k = cluster();
  const shard = k.c.shardOn(b);
  const key = k.c.settings.key;
  const asked = control(
    k.c,
    new PassivateShard(type, key, shard, a.toString(), c.toString(), 42, [b.toString()]),
    a,
    2_000,
  );
  assert.equal(ofKind(asked, "drainShard").length, 1);
});

test("direct: a burst past the held bound while the probe is out is not refused — the waiting deliveries and it go through the coordinator, in order, a new probe follows them at once, and only its grant opens the route", () => {
  const coordinator = coordinatorWithPlan({ ...direct, heldDeliveriesPerShard: 3 });
  const bb = follower(b, coordinator.update(), { ...direct, heldDeliveriesPerShard: 3 });
  const shard = bb.shardOn(c);
  const id = bb.entityIn((s) => s === shard);
  const first = bb.delivery(id);
  const [given] = sent(bb.route(first, 2_000), DirectProbe);
  const waiting = [bb.delivery(id), bb.delivery(id), bb.delivery(id)];
  for (const d of waiting) assert.deepEqual(forwards(bb.route(d, 2_001)), []);
  const burst = bb.delivery(id);
  const effects = bb.route(burst, 2_002);
  assert.deepEqual(ofKind(effects, "refuse"), [], "the caller is not refused");
  assert.deepEqual(
    forwards(effects).map((f) => [f.to.toString(), f.delivery.sender]),
    [...waiting, burst].map((d) => [a.toString(), d.sender]),
  );
  // One new probe, to the coordinator, behind the burst's delivery on that link.
  const [again, ...more] = sent(effects, DirectProbe);
  assert.deepEqual(more, []);
  assert.ok(again!.to.equals(a));
  assert.notEqual(again!.message.token, given!.message.token);
  const order = effects.filter((e) => e.kind === "forward" || e.kind === "send");
  assert.equal(order.at(-1)?.kind, "send", "the probe comes after every forwarded delivery");
  assert.equal(bb.t.routes.get(shard)?.phase, "probing");
  assert.equal(bb.stats.directBurstProbes, 1, "counted");
  // The burst goes on: it waits for the new probe's answer again.
  const next = bb.delivery(id);
  assert.deepEqual(forwards(bb.route(next, 2_003)), []);
  const grant = (token: number) =>
    new DirectGrant(type, bb.settings.key, shard, c.toString(), a.toString(), bb.t.plan.generation, token);
  // The given-up probe's grant is no grant for what went through the coordinator after it: ignored.
  assert.deepEqual(forwards(control(bb, grant(given!.message.token), c, 2_004)), []);
  assert.equal(bb.t.routes.get(shard)?.phase, "probing");
  const opened = control(bb, grant(again!.message.token), c, 2_005);
  assert.equal(bb.t.routes.get(shard)?.phase, "direct");
  assert.deepEqual(
    forwards(opened).map((f) => [f.to.toString(), f.delivery.sender]),
    [[c.toString(), next.sender]],
    "the waiting delivery goes straight to the owner",
  );
});

test("direct: the steps while a probe is out leave the shard's held deliveries in place, touched by no later step (a burst stays linear)", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  const id = k.b.entityIn((s) => s === shard);
  k.b.route(k.b.delivery(id), 2_000);
  const waiting = Array.from({ length: 50 }, () => k.b.delivery(id));
  for (const d of waiting) k.b.route(d, 2_001);
  const queue = k.b.t.heldLocal;
  const hold = queue.hold.bind(queue);
  let holds = 0;
  queue.hold = (s, h) => {
    holds++;
    return hold(s, h);
  };
  try {
    // Fifty more of the same burst, and calls to another shard: each step's held pass leaves the fifty alone.
    for (let i = 0; i < 50; i++) k.b.route(k.b.delivery(k.b.entityIn((s) => s === k.b.shardOn(a))), 2_002 + i);
    assert.equal(holds, 0, "no step took a waiting delivery out and put it back");
    const more = Array.from({ length: 50 }, () => k.b.delivery(id));
    for (const d of more) k.b.route(d, 2_100);
    assert.equal(holds, 50, "each new one held once");
    assert.deepEqual(
      queue.list().map((h) => h.delivery),
      [...waiting, ...more],
      "in order",
    );
  } finally {
    queue.hold = hold;
  }
});

test("direct: deliveries held for a probe under a coordinator that went Down go to the new coordinator in order, before any later delivery, and the probe is dropped", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  const id = k.b.entityIn((s) => s === shard);
  assert.equal(sent(k.b.route(k.b.delivery(id), 2_000), DirectProbe).length, 1);
  const waiting = [k.b.delivery(id), k.b.delivery(id)];
  for (const d of waiting) assert.deepEqual(forwards(k.b.route(d, 2_001)), [], "held while the probe is out");
  // e is elected (a is Down): the probe under a is dropped as the held pass meets it, so the waiting deliveries go
  // first; a held pass that left the shard alone would let the next delivery (routed under e) overtake them.
  const changed = k.b.feed(
    { kind: "membershipChanged", snapshot: view(b, [member(e), member(a, "Down"), member(b), member(c)]) },
    2_010,
  );
  const later = k.b.delivery(id);
  const effects = [...changed, ...k.b.route(later, 2_011)];
  assert.deepEqual(
    forwards(effects).map((f) => [f.to.toString(), f.delivery]),
    [...waiting, later].map((d) => [e.toString(), d]),
  );
  assert.equal(k.b.t.routes.get(shard)?.phase === "probing", false, "no probe under the old coordinator is left");
});

test("direct: a delivery held while the probe is out is counted once and keeps its deadline through every later step", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  const id = k.b.entityIn((s) => s === shard);
  k.b.route(k.b.delivery(id), 2_000);
  const waiting = k.b.delivery(id);
  assert.deepEqual(forwards(k.b.route(waiting, 2_001)), [], "held while the probe is out");
  const deadline = 2_001 + k.b.settings.heldDeliveryTimeout;
  assert.equal(k.b.stats.heldDeliveries, 1);
  assert.deepEqual(
    k.b.t.heldLocal.list().map((h) => h.deadlineMs),
    [deadline],
  );
  // Later steps (another shard's call) run the held pass, which takes the delivery and, the probe still out, holds it
  // again in its place: not a new delivery, so not counted again and not given a later deadline.
  const other = k.b.entityIn((s) => s === k.b.shardOn(a));
  k.b.route(k.b.delivery(other), 2_500);
  k.b.route(k.b.delivery(other), 2_600);
  assert.equal(k.b.stats.heldDeliveries, 1, "counted once");
  assert.deepEqual(
    k.b.t.heldLocal.list().map((h) => ({ d: h.delivery, deadlineMs: h.deadlineMs })),
    [{ d: waiting, deadlineMs: deadline }],
    "the same delivery with its first deadline",
  );
});
