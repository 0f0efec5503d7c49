// Plan messages and membership changes as rules of the node core (docs/protocol.md §6, §11), fed by hand: who may ask
// for, snapshot and publish a plan, what a member does with a plan it is sent, and what a membership change does to
// ownership (a downed node stops; no coordinator suspends; a departed member's registration is forgotten).
import assert from "node:assert/strict";
import { test } from "node:test";
import { ClusterShardingConfigurationError } from "../../../src/sharding/index.ts";
import { PlanRequest, PlanSnapshot, PlanSnapshotRequest, PlanUpdate } from "../../../src/sharding/internal/index.ts";
import {
  a,
  address,
  allUp,
  b,
  c,
  caller,
  coordinatorWithPlan,
  Driven,
  d,
  follower,
  logs,
  member,
  ofKind,
  schedules,
  sends,
  type,
  view,
} from "./node-harness.ts";

type Control = Extract<Parameters<Driven["feed"]>[0], { kind: "control" }>["message"];
const control = (n: Driven, message: Control, origin: typeof a | null, nowMs = 2_000) =>
  n.feed({ kind: "control", message, replyTo: null, origin }, nowMs);

test("plan sync: a member asks the coordinator for the plan at registration and every 250 ms; the coordinator does not ask itself", () => {
  const n = new Driven(b);
  const [request] = sends(n.registered);
  assert.ok(request!.to.equals(a));
  const message = request!.message as PlanRequest;
  assert.ok(message instanceof PlanRequest);
  assert.deepEqual(
    [message.entityType, message.settingsKey, message.requester, message.knownAuthor, message.knownGeneration],
    [type, n.settings.key, b.toString(), null, 0],
  );
  const [sync] = schedules(n.registered, "planSync");
  assert.equal(sync!.afterMs, 250);
  const again = n.feed({ kind: "timer", timer: sync!.timer }, 250);
  assert.equal(sends(again).length, 1, "asked again");
  assert.equal(schedules(again, "planSync").length, 1, "and re-armed");
  // An explicit sync while the timer is armed asks now but arms no second timer.
  const now = n.feed({ kind: "syncPlan", type }, 260);
  assert.equal(sends(now).length, 1);
  assert.deepEqual(schedules(now, "planSync"), []);
  // Once it holds a's plan, it tells a which one (a can then skip sending it again).
  const coordinator = coordinatorWithPlan();
  const f = follower(b, coordinator.update());
  const known = sends(f.feed({ kind: "syncPlan", type }, 3_000))[0]!.message as PlanRequest;
  assert.equal(known.knownAuthor, a.toString());
  assert.equal(known.knownGeneration, coordinator.t.plan.generation);

  const self = new Driven(a);
  assert.ok(
    !sends(self.registered).some((s) => s.message instanceof PlanRequest),
    "the coordinator reconciles instead",
  );
});

test("plan sync: with no coordinator (re-converging) a member asks nobody", () => {
  const n = new Driven(b, {}, view(b, [member(a), member(b), member(c)], { converged: false }));
  assert.deepEqual(sends(n.registered), []);
  assert.equal(schedules(n.registered, "planSync").length, 1);
});

test("plan request: the coordinator answers with its plan unless the requester already holds this very plan", () => {
  const n = coordinatorWithPlan();
  const generation = n.t.plan.generation;
  const stale = control(n, new PlanRequest(type, n.settings.key, b.toString(), a.toString(), generation - 1), b);
  const [answer] = sends(stale);
  assert.ok(answer!.to.equals(b));
  assert.ok(answer!.message instanceof PlanUpdate);
  assert.equal((answer!.message as PlanUpdate).generation, generation);
  assert.equal((answer!.message as PlanUpdate).coordinator, a.toString());
  const current = control(n, new PlanRequest(type, n.settings.key, b.toString(), a.toString(), generation), b);
  assert.deepEqual(sends(current), [], "b has it already");
  const otherAuthor = control(n, new PlanRequest(type, n.settings.key, b.toString(), c.toString(), generation), b);
  assert.equal(sends(otherAuthor).length, 1, "same generation by another author is another plan");
});

test("plan request: the requester must be its sender, with the same settings; a member that is not the coordinator only records it", () => {
  const n = coordinatorWithPlan();
  for (const [message, origin] of [
    [new PlanRequest(type, n.settings.key, c.toString()), b],
    [new PlanRequest(type, n.settings.key, b.toString()), null],
    [new PlanRequest(type, "other-key", b.toString()), b],
  ] as const) {
    const effects = control(n, message, origin);
    assert.deepEqual(sends(effects), []);
    const [refused] = ofKind(effects, "refused");
    assert.ok(refused!.error instanceof ClusterShardingConfigurationError);
    assert.equal(refused!.replyTo, null, "a plan request expects no reply");
  }
  assert.equal(n.stats.rejectedEnvelopes, 3);

  const f = follower(b, n.update());
  assert.deepEqual(sends(control(f, new PlanRequest(type, f.settings.key, c.toString()), c)), []);
  assert.equal(f.t.registrations.get(c.toString()), f.settings.key);
});

test("plan request: a member registering for the first time makes the coordinator reconcile at once", () => {
  const n = coordinatorWithPlan();
  const fresh = control(n, new PlanRequest(type, n.settings.key, d.toString()), d);
  assert.deepEqual(
    schedules(fresh, "reconcile").map((s) => s.afterMs),
    [0],
  );
  assert.equal(sends(fresh).length, 1, "and answers with the plan");
  const again = control(n, new PlanRequest(type, n.settings.key, b.toString(), a.toString(), n.t.plan.generation), b);
  assert.deepEqual(schedules(again, "reconcile"), [], "b was known");
});

test("plan snapshot request: answered with the plan held, or with a plan request when none is held; only from its coordinator", () => {
  const n = coordinatorWithPlan();
  const f = follower(b, n.update());
  const [snapshot] = sends(control(f, new PlanSnapshotRequest(type, f.settings.key, c.toString()), c));
  assert.ok(snapshot!.to.equals(c));
  const body = snapshot!.message as PlanSnapshot;
  assert.ok(body instanceof PlanSnapshot);
  assert.equal(body.generation, n.t.plan.generation);
  assert.equal(body.coordinator, a.toString(), "the plan's author");
  assert.equal(body.assignments.length, 8);

  const empty = new Driven(c);
  const [request] = sends(control(empty, new PlanSnapshotRequest(type, empty.settings.key, a.toString()), a));
  assert.ok(request!.message instanceof PlanRequest);

  const forged = control(f, new PlanSnapshotRequest(type, f.settings.key, a.toString()), c);
  assert.deepEqual(sends(forged), []);
  assert.equal(ofKind(forged, "refused").length, 1);
});

test("plan snapshot: a member ahead of the coordinator makes it publish above that generation; one behind changes nothing", () => {
  const n = coordinatorWithPlan();
  const generation = n.t.plan.generation;
  const assignments = n.update().assignments;
  const behind = control(n, new PlanSnapshot(type, n.settings.key, a.toString(), generation, assignments), b);
  assert.deepEqual(sends(behind), [], "the same plan: nothing to do");
  assert.equal(n.t.plan.generation, generation);
  const lower = control(n, new PlanSnapshot(type, n.settings.key, c.toString(), generation - 1, []), b);
  assert.deepEqual(sends(lower), []);
  const ahead = control(n, new PlanSnapshot(type, n.settings.key, c.toString(), generation + 5, []), b);
  assert.equal(n.t.plan.generation, generation + 6);
  const updates = sends(ahead).filter((s) => s.message instanceof PlanUpdate);
  assert.deepEqual(updates.map((s) => s.to.toString()).sort(), [b.toString(), c.toString()]);
  const conflicting = assignments.map((x) => ({ ...x, owner: a.toString() }));
  control(n, new PlanSnapshot(type, n.settings.key, c.toString(), generation + 6, conflicting), c);
  assert.equal(n.t.plan.generation, generation + 7, "the same generation with other allocations also forces a new one");
  // Not from an Up member: ignored.
  control(n, new PlanSnapshot(type, n.settings.key, c.toString(), generation + 50, []), d);
  assert.equal(n.t.registrations.get(d.toString()), n.settings.key, "a snapshot registers its sender, Up or not");
  const fromSelf = control(n, new PlanSnapshot(type, n.settings.key, c.toString(), generation + 50, []), null);
  assert.deepEqual(ofKind(fromSelf, "refused"), [], "from this node: neither a registration nor a refusal");
  assert.equal(n.t.registrations.has("null"), false);
  assert.equal(n.t.plan.generation, generation + 7);
  // A member that is not the author never publishes.
  const f = follower(b, n.update());
  const fg = f.t.plan.generation;
  assert.deepEqual(sends(control(f, new PlanSnapshot(type, f.settings.key, c.toString(), fg + 5, []), c)), []);
  assert.equal(f.t.plan.generation, fg);
});

test("plan snapshot: a generation above the bound is refused", () => {
  const n = coordinatorWithPlan();
  const effects = control(n, new PlanSnapshot(type, n.settings.key, c.toString(), 2 ** 40 + 1, []), b);
  assert.equal(ofKind(effects, "refused").length, 1);
  assert.equal(n.t.plan.generation, 1);
  control(n, new PlanSnapshot(type, n.settings.key, c.toString(), 2 ** 40, []), b);
  assert.equal(n.t.plan.generation, 2 ** 40 + 1, "the bound itself is accepted");
});

test("plan update: a member stores the coordinator's plan and keeps only the shards it places here", () => {
  const n = coordinatorWithPlan();
  const f = new Driven(b);
  const effects = control(f, n.update(), a, 10);
  assert.equal(f.t.plan.generation, n.t.plan.generation);
  const [retain] = ofKind(effects, "retainShards");
  const mine = [...n.t.plan.allocations].filter(([, o]) => o.equals(b)).map(([s]) => s);
  assert.deepEqual([...retain!.shards].sort(), mine.sort());
});

test("plan update: an older plan is counted and answered with a snapshot of the newer one", () => {
  const n = coordinatorWithPlan();
  const old = n.update();
  const f = follower(b, old);
  const t = f.t;
  t.plan = { ...t.plan, generation: t.plan.generation + 3 };
  const effects = control(f, old, a);
  assert.equal(f.stats.rejectedEnvelopes, 1);
  const [snapshot] = sends(effects);
  assert.ok(snapshot!.to.equals(a));
  assert.ok(snapshot!.message instanceof PlanSnapshot);
  assert.equal((snapshot!.message as PlanSnapshot).generation, old.generation + 3);
  assert.deepEqual(ofKind(effects, "retainShards"), []);
});

test("plan update: from a sender that is not the coordinator it is refused and the plan kept", () => {
  const n = coordinatorWithPlan();
  const f = new Driven(b);
  const effects = control(f, n.update(), c, 10);
  assert.equal(f.t.plan.generation, 0);
  assert.equal(ofKind(effects, "refused").length, 1);
  assert.deepEqual(ofKind(effects, "retainShards"), []);
  assert.deepEqual(sends(effects), [], "only a generation conflict is answered with a snapshot; a forgery is not");
});

test("plan update: a malformed plan from the coordinator (a shard out of range) is refused without a snapshot reply", () => {
  const n = coordinatorWithPlan();
  const f = follower(b, n.update());
  const bad = new PlanUpdate(type, n.settings.key, a.toString(), 2, [{ shardId: 99, owner: b.toString() }]);
  const effects = control(f, bad, a, 2_000);
  assert.equal(ofKind(effects, "refused").length, 1);
  assert.equal(f.t.plan.generation, 1);
  assert.deepEqual(sends(effects), []);
});

test("publishing: the coordinator sends its plan to Up, Leaving and Exiting members, never to itself, a Joining or a Down one", () => {
  const n = coordinatorWithPlan();
  const e = address(2555);
  n.feed(
    {
      kind: "view",
      snapshot: view(a, [
        member(a),
        member(b, "Leaving"),
        member(c, "Exiting"),
        member(d, "Joining"),
        member(e, "Down"),
      ]),
    },
    2_000,
  );
  // A snapshot ahead of the plan, from an Up member (a itself is the only one left), makes a publish.
  const effects = control(n, new PlanSnapshot(type, n.settings.key, c.toString(), 10, []), a);
  assert.equal(n.t.plan.generation, 11);
  assert.deepEqual(
    sends(effects)
      .map((s) => s.to.toString())
      .sort(),
    [b.toString(), c.toString()],
  );
});

test("membership: a downed node stops sharding; a removed one too, unless it left gracefully", () => {
  const downed = new Driven(b);
  const effects = downed.feed(
    { kind: "membershipChanged", snapshot: view(b, [member(a), member(b, "Down"), member(c)]) },
    10,
  );
  assert.deepEqual(ofKind(effects, "stopSharding"), [{ kind: "stopSharding" }]);
  assert.equal(logs(effects, "warn").length, 1);

  const removed = new Driven(b);
  const gone = removed.feed({ kind: "membershipChanged", snapshot: view(b, [member(a), member(c)]) }, 10);
  assert.equal(ofKind(gone, "stopSharding").length, 1, "removed without leaving");

  const left = new Driven(b);
  left.feed({ kind: "membershipChanged", snapshot: view(b, [member(a), member(b, "Leaving"), member(c)]) }, 10);
  const afterLeave = left.feed({ kind: "membershipChanged", snapshot: view(b, [member(a), member(c)]) }, 20);
  assert.deepEqual(ofKind(afterLeave, "stopSharding"), []);

  const exited = new Driven(b);
  exited.feed({ kind: "membershipChanged", snapshot: view(b, [member(a), member(b, "Exiting"), member(c)]) }, 10);
  assert.deepEqual(
    ofKind(exited.feed({ kind: "membershipChanged", snapshot: view(b, [member(a), member(c)]) }, 20), "stopSharding"),
    [],
  );

  const never = new Driven(b, {}, view(b, [member(a), member(c)]));
  assert.deepEqual(ofKind(never.joined, "stopSharding"), [], "a node not yet listed is not removed");
  assert.deepEqual(ofKind(never.registered, "stopSharding"), []);
});

test("membership: without a coordinator ownership is suspended: kept while a member is unreachable, released when this node exits", () => {
  const n = new Driven(b);
  const unreachable = n.feed(
    { kind: "membershipChanged", snapshot: view(b, [member(a), member(b), member(c)], { unreachable: [c] }) },
    10,
  );
  assert.deepEqual(ofKind(unreachable, "suspendOwnership"), [{ kind: "suspendOwnership", type, release: false }]);
  const exiting = n.feed(
    {
      kind: "membershipChanged",
      snapshot: view(b, [member(a), member(b, "Exiting"), member(c)], { converged: false }),
    },
    20,
  );
  assert.deepEqual(ofKind(exiting, "suspendOwnership"), [{ kind: "suspendOwnership", type, release: true }]);
  const reconverging = n.feed(
    { kind: "membershipChanged", snapshot: view(b, [member(a), member(b), member(c)], { converged: false }) },
    30,
  );
  assert.deepEqual(ofKind(reconverging, "suspendOwnership"), [], "an Up member re-converging keeps its entities");
  assert.deepEqual(ofKind(n.feed({ kind: "membershipChanged", snapshot: allUp(b) }, 40), "suspendOwnership"), []);
});

test("membership: the coordinator forgets the registration of a member that left, so placement no longer uses it", () => {
  const n = coordinatorWithPlan();
  assert.equal(n.t.registrations.has(c.toString()), true);
  n.feed({ kind: "membershipChanged", snapshot: view(a, [member(a), member(b), member(c, "Leaving")]) }, 2_000);
  assert.equal(n.t.registrations.has(c.toString()), true, "still a member");
  n.feed({ kind: "membershipChanged", snapshot: view(a, [member(a), member(b)]) }, 2_100);
  assert.equal(n.t.registrations.has(c.toString()), false);
  assert.equal(n.t.registrations.has(b.toString()), true);
});

test("membership: a change of coordinator re-applies the stored plan (retain), the same coordinator does not", () => {
  const n = coordinatorWithPlan();
  const f = follower(b, n.update());
  const same = f.feed({ kind: "membershipChanged", snapshot: allUp(b) }, 2_000);
  assert.deepEqual(ofKind(same, "retainShards"), []);
  const changed = f.feed(
    { kind: "membershipChanged", snapshot: view(b, [member(a, "Leaving"), member(b), member(c)]) },
    2_100,
  );
  assert.equal(ofKind(changed, "retainShards").length, 1);
});

test("reconcile: a timer at a member that is no longer the coordinator does nothing but disarm", () => {
  const n = coordinatorWithPlan();
  n.feed({ kind: "view", snapshot: view(a, [member(a, "Leaving"), member(b), member(c)]) }, 2_000);
  const effects = n.feed({ kind: "timer", timer: { kind: "reconcile", type } }, 2_100);
  assert.deepEqual(sends(effects), []);
  assert.equal(n.t.reconcileArmed, false);
});

test("control: a message for a type not registered here is refused; a timer for one is ignored", () => {
  const n = coordinatorWithPlan();
  const effects = control(n, new PlanRequest("Other", n.settings.key, b.toString()), b);
  assert.equal(ofKind(effects, "refused").length, 1);
  assert.deepEqual(n.feed({ kind: "timer", timer: { kind: "planSync", type: "Other" } }, 2_000), []);
  const failed = n.feed({ kind: "controlSendFailed", type, peer: b, error: new Error("closed") }, 2_000);
  assert.equal(logs(failed, "error").length, 1);
  assert.equal(n.stats.rejectedEnvelopes, 2);
});

test("control: a refused message that expects no reply is answered to nobody; a snapshot request from this node is refused", () => {
  const n = coordinatorWithPlan();
  const replyTo = caller();
  const refused = n.feed(
    { kind: "control", message: new PlanRequest(type, n.settings.key, c.toString()), replyTo, origin: b },
    2_000,
  );
  assert.equal(ofKind(refused, "refused")[0]!.replyTo, null, "a plan request is not answered");
  const self = control(n, new PlanSnapshotRequest(type, n.settings.key, a.toString()), null);
  assert.equal(ofKind(self, "refused").length, 1);
  assert.ok(ofKind(self, "refused")[0]!.error instanceof ClusterShardingConfigurationError, "refused as unauthorized");
  assert.deepEqual(sends(self), []);
});

test("plan update: the coordinator's own older plan (origin null) is counted as stale and answered to nobody", () => {
  const n = coordinatorWithPlan();
  const old = n.update();
  n.feed({ kind: "syncPlan", type }, 2_000);
  const t = n.t;
  t.plan = { ...t.plan, generation: t.plan.generation + 1 };
  const effects = control(n, old, null);
  assert.deepEqual(sends(effects), []);
  assert.deepEqual(ofKind(effects, "refused"), []);
  assert.equal(n.stats.rejectedEnvelopes, 1);
});

test("plan update: a member with no plan yet refuses a generation-0 update from the coordinator and answers with a snapshot naming itself at generation 0", () => {
  const n = coordinatorWithPlan();
  const f = new Driven(b);
  const zero = new PlanUpdate(type, n.settings.key, a.toString(), 0, [{ shardId: 0, owner: b.toString() }]);
  const effects = control(f, zero, a, 10);
  const [refused] = ofKind(effects, "refused");
  assert.ok(
    refused?.error instanceof ClusterShardingConfigurationError && refused.error.field === "generation",
    `refused for its generation, got ${String(refused?.error)}`,
  );
  const [reply] = sends(effects);
  assert.ok(reply!.to.equals(a));
  const snapshot = reply!.message as PlanSnapshot;
  assert.ok(snapshot instanceof PlanSnapshot);
  assert.equal(snapshot.generation, 0);
  assert.equal(snapshot.coordinator, b.toString(), "a plan without an author is sent under this node's name");
  assert.equal(f.t.plan.generation, 0);
});

test("plan request: a former coordinator that still holds the plan it authored answers no plan request once another is elected", () => {
  const n = coordinatorWithPlan();
  n.feed({ kind: "membershipChanged", snapshot: view(a, [member(a, "Leaving"), member(b), member(c)]) }, 2_000);
  assert.ok(n.state.view.elected?.equals(b), "b is elected");
  assert.ok(n.t.plan.author?.equals(a), "a still holds its own plan");
  for (const [i, requester] of [c, d].entries()) {
    const effects = control(n, new PlanRequest(type, n.settings.key, requester.toString()), requester, 2_010 + i);
    assert.deepEqual(sends(effects), [], `${requester}: only the elected coordinator answers`);
    assert.deepEqual(schedules(effects, "reconcile"), [], `${requester}: nor reconciles`);
  }
  assert.equal(n.t.registrations.get(d.toString()), n.settings.key, "the request is still recorded");
  // With no coordinator elected at all (gossip re-converging) the request is recorded and answered by nobody.
  n.feed(
    { kind: "membershipChanged", snapshot: view(a, [member(a), member(b), member(c)], { converged: false }) },
    3_000,
  );
  assert.equal(n.state.view.elected, null);
  const effects = control(n, new PlanRequest(type, n.settings.key, c.toString()), c, 3_010);
  assert.deepEqual(ofKind(effects, "refused"), [], "judged, never thrown on");
  assert.deepEqual(sends(effects), []);
});

test("plan request: a member already registered asking again makes the coordinator reconcile nothing (no timer armed)", () => {
  const n = coordinatorWithPlan();
  assert.equal(n.t.reconcileArmed, false, "the scenario needs no reconcile armed");
  const again = control(n, new PlanRequest(type, n.settings.key, b.toString()), b);
  assert.deepEqual(schedules(again, "reconcile"), [], "b was known");
  assert.equal(n.t.reconcileArmed, false);
  assert.equal(sends(again).length, 1, "b still gets the plan it does not hold");
});

test("plan update: the coordinator's own conflicting plan (origin null) is refused and answered to nobody", () => {
  const n = coordinatorWithPlan();
  const mine = n.update();
  const conflicting = new PlanUpdate(
    type,
    mine.settingsKey,
    mine.coordinator,
    mine.generation,
    mine.assignments.map((x) => ({ ...x, owner: a.toString() })),
  );
  const effects = control(n, conflicting, null);
  const [refused] = ofKind(effects, "refused");
  assert.ok(refused?.error instanceof ClusterShardingConfigurationError && refused.error.field === "generation");
  assert.deepEqual(sends(effects), [], "no snapshot to send back: it came from this node");
});

test("membership: without a coordinator, a node its view lists as Removed releases its ownership, as an Exiting one does", () => {
  const n = new Driven(b);
  const removed = n.feed(
    {
      kind: "membershipChanged",
      snapshot: view(b, [member(a), member(b, "Removed"), member(c)], { converged: false }),
    },
    10,
  );
  assert.deepEqual(ofKind(removed, "stopSharding"), [], "listed, not gone: not put out");
  assert.deepEqual(ofKind(removed, "suspendOwnership"), [{ kind: "suspendOwnership", type, release: true }]);
});

test("bootstrap: a new coordinator asks an Exiting member for its plan snapshot too, and takes it", () => {
  const n = new Driven(a, {}, view(a, [member(a), member(b), member(c, "Exiting")]));
  const asked = sends(n.registered).filter((s) => s.message instanceof PlanSnapshotRequest);
  assert.deepEqual(asked.map((s) => s.to.toString()).sort(), [b.toString(), c.toString()]);
  const assignments = Array.from({ length: 8 }, (_, shardId) => ({ shardId, owner: c.toString() }));
  control(n, new PlanSnapshot(type, n.settings.key, c.toString(), 4, assignments), c, 20);
  assert.equal(n.stats.rejectedEnvelopes, 0, "an Exiting member's snapshot counts");
  assert.equal(n.t.plan.bootstrap?.candidate?.generation, 4);
});
