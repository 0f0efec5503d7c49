// More rules of the node core fed by hand: registration, the departure guard, a handoff that waits for gossip to
// re-converge instead of rejecting what it buffered, held deliveries at the edges (a node that leaves while its
// callers wait, the sweep timer, the error a wait ends with), the batching of local deliveries, and the planted bugs
// the simulator proves it catches (each must change what the core does).
import assert from "node:assert/strict";
import { test } from "node:test";
import type { ShardingMember } from "../../../src/sharding/allocation/strategy.ts";
import {
  ClusterShardingConfigurationError,
  NoRebalance,
  NoShardOwnerError,
  ShardingSettings,
  ShardLeaseUnavailableError,
} from "../../../src/sharding/index.ts";
import { PassivateShard, PlanUpdate } from "../../../src/sharding/internal/index.ts";
import {
  departureReady,
  newNodeState,
  requireSameSettings,
  requireType,
  step,
} from "../../../src/sharding/node/node-core.ts";
import {
  a,
  address,
  allUp,
  asks,
  b,
  c,
  caller,
  coordinatorWithPlan,
  Driven,
  delivers,
  follower,
  forwards,
  logs,
  member,
  ofKind,
  refuses,
  rejects,
  schedules,
  sends,
  type,
  view,
} from "./node-harness.ts";

const reconverging = (self: typeof a, members: ShardingMember[] = [member(a), member(b), member(c)]) =>
  view(self, members, { converged: false });

test("register: a type registers once; a second register of the name changes nothing", () => {
  const n = new Driven(b);
  const t = n.t;
  const again = n.feed({ kind: "register", name: type, settings: ShardingSettings.create({ shardCount: 3 }) }, 5);
  assert.deepEqual(again, []);
  assert.equal(n.t, t);
  assert.equal(n.t.settings.shardCount, 8);
});

test("register: the barrier window is the lease duration plus its renewal interval; held queues take the configured bound", () => {
  const n = new Driven(b, { leaseDuration: 1_000, leaseRenewInterval: 300, heldDeliveriesPerShard: 3 });
  assert.equal(n.t.heldLocal.perShardMax, 3);
  assert.equal(n.t.heldForwarded.perShardMax, 3);
  assert.equal(n.t.planSyncArmed, true);
  assert.equal(n.t.reconcileArmed, false);
  assert.equal(n.t.heldSweep, null);
});

test("requireType / requireSameSettings: refuse an unregistered type and other settings with a configuration error", () => {
  const n = new Driven(b);
  assert.equal(requireType(n.state, type), n.t);
  assert.throws(() => requireType(n.state, "Other"), ClusterShardingConfigurationError);
  requireSameSettings(n.t, n.settings.key);
  assert.throws(
    () => requireSameSettings(n.t, "other"),
    (e: unknown) => e instanceof ClusterShardingConfigurationError && e.field === "settingsKey",
  );
  assert.throws(() => n.feed({ kind: "syncPlan", type: "Other" }, 0), ClusterShardingConfigurationError);
});

test("departure guard: a member may leave once no plan places a shard on it, or when no other member could take them", () => {
  const n = coordinatorWithPlan();
  assert.equal(departureReady(n.state, member(b, "Leaving")), false, "b still holds shards");
  const e = member(address(2555));
  assert.equal(departureReady(n.state, e), true, "a member without shards may go");
  // The last node that could host the type: nobody else is Up or Joining.
  const alone = coordinatorWithPlan();
  alone.feed(
    { kind: "view", snapshot: view(a, [member(a, "Leaving"), member(b, "Down"), member(c, "Exiting")]) },
    2_000,
  );
  assert.equal(departureReady(alone.state, member(a, "Leaving")), true);
  alone.feed(
    { kind: "view", snapshot: view(a, [member(a, "Leaving"), member(b, "Joining"), member(c, "Exiting")]) },
    2_000,
  );
  assert.equal(departureReady(alone.state, member(a, "Leaving")), false, "a Joining member can take a's shards");
  // A member is not its own successor.
  const solo = coordinatorWithPlan();
  solo.feed({ kind: "view", snapshot: view(a, [member(a), member(b, "Down"), member(c, "Down")]) }, 2_000);
  assert.equal(departureReady(solo.state, member(a)), true);
});

// Churn seed 3009 of the node simulator: the membership leader was a node that had just joined and held no plan yet.
// Reading "no shard on it" from its empty plan, it moved a paused Leaving owner on to Exiting and Removed while the
// cluster's plan still gave that owner a shard; the next coordinator handed the shard on without a drain, and the
// owner, resumed, still hosted its entities: one shard live on two nodes.
test("departure guard: a node that holds no plan yet lets no member go while another could take its shards", () => {
  const e = member(address(2555), "Leaving");
  const planless = new Driven(b);
  assert.equal(planless.t.plan.generation, 0);
  assert.equal(departureReady(planless.state, e), false, "no plan: it cannot know e owns nothing");
  const n = follower(b, coordinatorWithPlan().update());
  assert.equal(departureReady(n.state, e), true, "with a plan that places nothing on e, e may go");
  // The planless node itself may go: without a plan it never hosted an entity.
  assert.equal(departureReady(planless.state, member(b, "Leaving")), true);
  // The last node that could host the type may still go without a plan (nowhere to hand shards to).
  planless.feed({ kind: "view", snapshot: view(b, [member(b, "Leaving"), member(c, "Exiting")]) }, 2_000);
  assert.equal(departureReady(planless.state, member(b, "Leaving")), true);
});

test("handoff while gossip re-converges: the coordinator keeps its buffer and completes once the view converges", () => {
  const n = coordinatorWithPlan();
  const shard = n.shardOn(b);
  n.feed({ kind: "moveShard", type, shard, to: c }, 2_000);
  const token = n.t.handoffs.get(shard)!.token;
  const d = n.delivery(n.entityIn((s) => s === shard));
  n.route(d, 2_010);
  n.feed({ kind: "handoffReply", type, shard, token, step: "passivated", error: null }, 2_100);
  // A member joins: not converged, nobody unreachable; a is still the lowest Up member and the author.
  n.feed({ kind: "view", snapshot: reconverging(a) }, 2_150);
  const waiting = n.feed({ kind: "handoffReply", type, shard, token, step: "prepared", error: null }, 2_200);
  assert.deepEqual(forwards(waiting), [], "not flushed yet");
  assert.deepEqual(rejects(waiting), [], "not rejected either");
  assert.equal(logs(waiting, "info").length, 1, "waiting for convergence is logged once");
  const [retry] = schedules(waiting, "handoffRetryComplete");
  assert.equal(retry!.afterMs, 100);
  assert.deepEqual(retry!.timer, { kind: "handoffRetryComplete", type, shard, token });
  assert.ok(n.t.plan.allocations.get(shard)!.equals(b), "the plan still names b");
  const still = n.feed({ kind: "timer", timer: retry!.timer }, 2_300);
  assert.equal(schedules(still, "handoffRetryComplete").length, 1, "again in 100 ms");
  assert.equal(logs(still, "info").length, 0, "logged once per wait, not per round");
  n.feed({ kind: "view", snapshot: allUp(a) }, 2_350);
  const done = n.feed({ kind: "timer", timer: schedules(still, "handoffRetryComplete")[0]!.timer }, 2_400);
  assert.deepEqual(
    forwards(done).map((f) => [f.to.toString(), f.delivery]),
    [[c.toString(), d]],
  );
  assert.ok(n.t.plan.allocations.get(shard)!.equals(c));
});

test("handoff while gossip re-converges: a retried attempt waits for convergence, then passivates; a lost term aborts", () => {
  const n = coordinatorWithPlan();
  const shard = n.shardOn(b);
  n.feed({ kind: "moveShard", type, shard, to: c }, 2_000);
  const token = n.t.handoffs.get(shard)!.token;
  const d = n.delivery(n.entityIn((s) => s === shard));
  n.route(d, 2_010);
  const failed = n.feed(
    { kind: "handoffReply", type, shard, token, step: "passivated", error: new Error("timeout") },
    2_100,
  );
  const [attempt] = schedules(failed, "handoffAttempt");
  n.feed({ kind: "view", snapshot: reconverging(a) }, 2_150);
  const settling = n.feed({ kind: "timer", timer: attempt!.timer }, 2_200);
  assert.deepEqual(asks(settling), [], "b is not asked while the view re-converges");
  assert.deepEqual(rejects(settling), []);
  assert.equal(logs(settling, "info").length, 1);
  const [again] = schedules(settling, "handoffAttempt");
  assert.equal(again!.afterMs, 100);
  n.feed({ kind: "view", snapshot: allUp(a) }, 2_250);
  const resumed = n.feed({ kind: "timer", timer: again!.timer }, 2_300);
  assert.ok(asks(resumed)[0]!.to.equals(b), "converged: b is asked again");
  assert.equal(asks(resumed)[0]!.step, "passivated");
  // Failed once more, and now a member is unreachable: the term is lost and the handoff ends. Its buffer is not
  // rejected: it waits with this node's held deliveries for the next coordinator (the flush, docs/protocol.md §8.7).
  const failedAgain = n.feed(
    { kind: "handoffReply", type, shard, token, step: "passivated", error: new Error("x") },
    2_400,
  );
  n.feed({ kind: "view", snapshot: view(a, [member(a), member(b), member(c)], { unreachable: [c] }) }, 2_450);
  const heldBefore = n.t.heldLocal.size + n.t.heldForwarded.size;
  const lost = n.feed({ kind: "timer", timer: schedules(failedAgain, "handoffAttempt")[0]!.timer }, 2_500);
  assert.deepEqual(rejects(lost), []);
  assert.equal(n.t.handoffs.has(shard), false);
  assert.equal(n.t.heldLocal.size + n.t.heldForwarded.size, heldBefore + 1, "the buffered delivery is held");
});

test("handoff: an attempt whose previous owner is down skips the drain and prepares the next owner", () => {
  const n = coordinatorWithPlan();
  const shard = n.shardOn(b);
  n.feed({ kind: "moveShard", type, shard, to: c }, 2_000);
  const token = n.t.handoffs.get(shard)!.token;
  const failed = n.feed(
    { kind: "handoffReply", type, shard, token, step: "passivated", error: new Error("gone") },
    2_100,
  );
  // b is Down now (still listed): its entities stopped with it, there is nothing to drain.
  n.feed({ kind: "view", snapshot: view(a, [member(a), member(b, "Down"), member(c)]) }, 2_150);
  const next = n.feed({ kind: "timer", timer: schedules(failed, "handoffAttempt")[0]!.timer }, 2_200);
  assert.deepEqual(
    asks(next).map((x) => [x.to.toString(), x.step]),
    [[c.toString(), "prepared"]],
  );
});

test("a handoff step that throws is logged, and the coordinator goes on", () => {
  const n = coordinatorWithPlan();
  const shard = n.shardOn(b);
  n.feed({ kind: "moveShard", type, shard, to: c }, 2_000);
  const token = n.t.handoffs.get(shard)!.token;
  n.feed({ kind: "handoffReply", type, shard, token, step: "passivated", error: null }, 2_100);
  // The plan's author changes under the handoff (as if another coordinator's plan was stored): completing fails.
  n.t.plan = { ...n.t.plan, author: b };
  const effects = n.feed({ kind: "handoffReply", type, shard, token, step: "prepared", error: null }, 2_200);
  assert.ok(logs(effects, "warn").length >= 1, "the failed completion is a warning");
  assert.equal(n.t.handoffs.has(shard), false, "aborted");
  assert.ok(n.t.plan.allocations.get(shard)!.equals(b), "the plan did not move the shard");
  assert.deepEqual(ofKind(effects, "retainShards"), []);
});

test("held: a node that starts leaving refuses fresh calls at once, and what it held fails in that step too (it never routes again)", () => {
  const n = new Driven(c, { heldDeliveryTimeout: 1_000 }, reconverging(c));
  const d = n.delivery("e1");
  const [sweep] = schedules(n.route(d, 0), "heldSweep");
  assert.equal(n.stats.heldDeliveries, 1);
  const left = n.feed(
    { kind: "membershipChanged", snapshot: reconverging(c, [member(a), member(b), member(c, "Leaving")]) },
    10,
  );
  assert.deepEqual(forwards(left), []);
  // Waiting for the deadline could not help: an ask would time out at its caller instead of failing typed.
  assert.deepEqual(
    rejects(left).map((r) => [r.delivery, r.error instanceof NoShardOwnerError]),
    [[d, true]],
  );
  const fresh = n.delivery("e2");
  assert.deepEqual(
    refuses(n.route(fresh, 20)).map((r) => r.delivery),
    [fresh],
  );
  assert.deepEqual(rejects(n.feed({ kind: "timer", timer: sweep!.timer }, 1_000)), [], "nothing is left to expire");
});

test("held: a node that left the membership remembers its last status: still departing, never routing again", () => {
  const n = new Driven(c, {}, view(c, [member(a), member(b), member(c, "Leaving")], { converged: false }));
  n.feed({ kind: "membershipChanged", snapshot: reconverging(c, [member(a), member(b)]) }, 10);
  const d = n.delivery("e1");
  assert.equal(refuses(n.route(d, 20)).length, 1);
  assert.equal(n.stats.heldDeliveries, 0);
});

test("held: the sweep is armed for the earliest deadline only, at the deadline (never in the past), and a stale sweep does nothing", () => {
  const n = new Driven(c, { heldDeliveryTimeout: 1_000 }, reconverging(c));
  const first = n.route(n.delivery("e1"), 0);
  assert.deepEqual(
    schedules(first, "heldSweep").map((s) => s.afterMs),
    [1_000],
  );
  const sameDeadline = n.route(n.delivery("e2", 1_000), 0);
  assert.deepEqual(schedules(sameDeadline, "heldSweep"), [], "the same deadline needs no second sweep");
  const earlier = n.route(n.delivery("e3", 200), 100);
  assert.deepEqual(
    schedules(earlier, "heldSweep").map((s) => s.afterMs),
    [200],
  );
  const sweep = schedules(earlier, "heldSweep")[0]!;
  const expired = n.feed({ kind: "timer", timer: sweep.timer }, 300);
  assert.equal(rejects(expired).length, 1);
  assert.equal(logs(expired, "warn").length, 1, "an expiry is a warning");
  assert.deepEqual(
    schedules(expired, "heldSweep").map((s) => s.afterMs),
    [700],
    "re-armed for the next deadline",
  );
  const nothing = n.feed({ kind: "timer", timer: sweep.timer }, 400);
  assert.deepEqual(nothing, [], "a sweep with another id is stale");
  // A sweep that finds nothing due logs nothing and re-arms for what is held.
  const late = schedules(expired, "heldSweep")[0]!;
  const early = n.feed({ kind: "timer", timer: late.timer }, 900);
  assert.deepEqual(rejects(early), []);
  assert.deepEqual(logs(early, "warn"), []);
  assert.deepEqual(
    schedules(early, "heldSweep").map((s) => s.afterMs),
    [100],
  );
  // A deadline already behind the clock is swept at once.
  const n2 = new Driven(c, { heldDeliveryTimeout: 1_000 }, reconverging(c));
  n2.route(n2.delivery("e1"), 0);
  const t = n2.t;
  t.heldSweep = null;
  const past = n2.route(n2.delivery("e2", 1), 5_000);
  assert.deepEqual(
    schedules(past, "heldSweep").map((s) => s.afterMs),
    [1],
  );
});

test("held: a sweep after the queues were flushed does nothing; an expired forwarded envelope is rejected too", () => {
  const n = new Driven(a, { heldDeliveryTimeout: 500 }, reconverging(a));
  const fromB = n.delivery("e1");
  const held = n.envelope(fromB, b, 0);
  const [sweep] = schedules(held, "heldSweep");
  const expired = n.feed({ kind: "timer", timer: sweep!.timer }, 500);
  assert.deepEqual(
    rejects(expired).map((r) => r.delivery),
    [fromB],
  );
  assert.equal(n.stats.heldExpired, 1);
  assert.deepEqual(schedules(expired, "heldSweep"), [], "nothing left to sweep");
  assert.equal(n.t.heldSweep, null);
});

test("held: while this node is the coordinator but still bootstrapping, a caller that cannot wait gets NoShardOwnerError for its shard", () => {
  const n = new Driven(a, { awaitCoordinator: false });
  const d = n.delivery("e1");
  const [refused] = refuses(n.route(d, 10));
  assert.ok(refused!.error instanceof NoShardOwnerError);
  assert.equal((refused!.error as NoShardOwnerError).shardId, d.envelope.shardId);
  assert.equal((refused!.error as NoShardOwnerError).entityType, type);
  // A forwarded envelope that cannot wait is rejected, not refused.
  const fromB = n.delivery("e2");
  const effects = n.envelope(fromB, b, 20);
  assert.deepEqual(refuses(effects), []);
  assert.deepEqual(
    rejects(effects).map((r) => r.delivery),
    [fromB],
  );
});

test("held: a full forwarded queue rejects the envelope (its ask fails) and counts it", () => {
  const n = new Driven(a, { heldDeliveriesPerShard: 1 }, reconverging(a));
  n.envelope(n.delivery("e1"), b, 0);
  const second = n.delivery("e1");
  const effects = n.envelope(second, b, 1);
  assert.deepEqual(
    rejects(effects).map((r) => r.delivery),
    [second],
  );
  assert.deepEqual(refuses(effects), []);
  assert.equal(n.stats.heldRefused, 1);
  assert.equal(n.stats.heldDeliveries, 1);
});

test("held: a held caller's delivery is not counted as a remote route when its route does not count", () => {
  const n = new Driven(c, {}, reconverging(c));
  n.route(n.delivery("e1"), 0, false);
  n.route(n.delivery("e2"), 0, true);
  const routed = n.feed({ kind: "membershipChanged", snapshot: allUp(c) }, 10);
  assert.equal(forwards(routed).length, 2);
  assert.equal(n.stats.remoteRoutes, 1);
});

test("local batches: deliveries of one shard in one step share one deliver effect; other shards and retries get their own", () => {
  const n = coordinatorWithPlan({ rebalance: new NoRebalance() });
  const shards = [...n.t.plan.allocations].filter(([, o]) => o.equals(a)).map(([s]) => s);
  assert.ok(shards.length >= 2);
  const [s1, s2] = shards as [number, number];
  const id1 = n.entityIn((s) => s === s1);
  const id2 = n.entityIn((s) => s === s2);
  // Hold three calls (two shards) while re-converging, then flush them in one step.
  n.feed({ kind: "view", snapshot: view(a, [member(a), member(b), member(c)], { converged: false }) }, 2_000);
  const held = [n.delivery(id1), n.delivery(id2), n.delivery(id1)];
  for (const d of held) n.route(d, 2_000);
  const flushed = n.feed({ kind: "membershipChanged", snapshot: allUp(a) }, 2_010);
  assert.deepEqual(
    delivers(flushed).map((e) => [e.shard, e.deliveries]),
    [
      [s1, [held[0], held[2]]],
      [s2, [held[1]]],
    ],
  );
});

test("delivered: a delivery without an outcome and no barrier to join is rejected as lease-unavailable", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(b, coordinator.update());
  const shard = n.shardOn(b);
  const d = n.forwardedBy(
    a,
    n.entityIn((s) => s === shard),
  );
  const effects = n.feed({ kind: "delivered", type, shard, retry: false, deliveries: [d], outcomes: [] }, 2_000);
  assert.deepEqual(
    rejects(effects).map((r) => r.delivery),
    [d],
  );
  assert.ok(rejects(effects)[0]!.error instanceof ShardLeaseUnavailableError);
  assert.throws(
    () => n.feed({ kind: "delivered", type, shard, retry: false, deliveries: [], outcomes: ["delivered"] }, 2_001),
    "more outcomes than deliveries is a broken shell",
  );
});

test("barrier: a delivery routed by the coordinator to itself joins an open barrier of its shard", () => {
  const n = coordinatorWithPlan();
  const shard = n.shardOn(a);
  const id = n.entityIn((s) => s === shard);
  const d1 = n.delivery(id);
  n.route(d1, 2_000);
  n.feed({ kind: "delivered", type, shard, retry: false, deliveries: [d1], outcomes: ["lease"] }, 2_001);
  const d2 = n.delivery(id);
  assert.deepEqual(delivers(n.route(d2, 2_002)), [], "queued behind d1");
  assert.deepEqual(n.t.barrier.clear(), [d1, d2]);
});

test("barrier: a full barrier rejects the delivery that does not fit", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(b, coordinator.update());
  const shard = n.shardOn(b);
  const id = n.entityIn((s) => s === shard);
  const first = n.forwardedBy(a, id);
  n.feed({ kind: "delivered", type, shard, retry: false, deliveries: [first], outcomes: ["lease"] }, 2_000);
  let rejected: ReturnType<typeof rejects> = [];
  let sent = 1;
  while (rejected.length === 0 && sent < 2_000) {
    rejected = rejects(n.envelope(n.forwardedBy(a, id), a, 2_001));
    sent++;
  }
  assert.equal(sent, 1_025, "1,024 wait; the next is rejected");
  assert.ok(rejected[0]!.error instanceof ClusterShardingConfigurationError);
});

test("planted bugs change behaviour: the simulator's proof that it catches them needs each to take effect", () => {
  // skipPlanGenerationCheck: an older plan replaces a newer one.
  const coordinator = coordinatorWithPlan();
  const old = coordinator.update();
  const buggy = new Driven(b);
  buggy.state = { ...newNodeState(b, undefined, { skipPlanGenerationCheck: true }) };
  step(buggy.state, { kind: "membershipChanged", snapshot: allUp(b) }, 0);
  step(buggy.state, { kind: "register", name: type, settings: buggy.settings }, 0);
  const newer = new PlanUpdate(type, old.settingsKey, old.coordinator, old.generation + 2, old.assignments);
  step(buggy.state, { kind: "control", message: newer, replyTo: null, origin: a }, 10);
  const [, storedOld] = step(buggy.state, { kind: "control", message: old, replyTo: null, origin: a }, 20);
  assert.equal(buggy.state.types.get(type)!.plan.generation, old.generation, "the older plan was stored");
  assert.equal(ofKind(storedOld, "retainShards").length, 1, "and applied as any stored plan is");

  // acceptForwardFromAnyone: a hop-1 envelope from a non-coordinator is delivered.
  const open = newNodeState(b, undefined, { acceptForwardFromAnyone: true });
  step(open, { kind: "membershipChanged", snapshot: allUp(b) }, 0);
  step(open, { kind: "register", name: type, settings: buggy.settings }, 0);
  const f = follower(b, old);
  const shard = f.shardOn(c);
  const d = f.forwardedBy(
    c,
    f.entityIn((s) => s === shard),
  );
  const [, effects] = step(open, { kind: "envelope", delivery: d, origin: c }, 10);
  assert.equal(delivers(effects).length, 1);

  // flushBeforeDrained: an owner reports a drain done before it drained; a coordinator goes on at once.
  const hasty = newNodeState(b, undefined, { flushBeforeDrained: true });
  step(hasty, { kind: "membershipChanged", snapshot: allUp(b) }, 0);
  step(hasty, { kind: "register", name: type, settings: buggy.settings }, 0);
  step(hasty, { kind: "control", message: old, replyTo: null, origin: a }, 10);
  const replyTo = caller();
  const [, drained] = step(
    hasty,
    {
      kind: "control",
      message: new PassivateShard(type, old.settingsKey, f.shardOn(b), a.toString(), c.toString()),
      replyTo,
      origin: a,
    },
    20,
  );
  assert.deepEqual(ofKind(drained, "ack"), [{ kind: "ack", replyTo, error: null }], "answered before the drain");
  assert.equal(ofKind(drained, "drainShard").length, 1);

  const driver = coordinatorWithPlan();
  driver.state = { ...driver.state, bugs: { flushBeforeDrained: true } };
  const moved = driver.feed({ kind: "moveShard", type, shard: driver.shardOn(b), to: c }, 2_000);
  const askSteps = asks(moved).map((x) => x.step);
  assert.deepEqual(askSteps, ["passivated", "prepared"], "prepares c without waiting for b");
  assert.equal(asks(moved)[0]!.token, -1);
  // The old owner is still asked as without the bug: the PassivateShard names the next owner.
  const passivate = asks(moved)[0]!.message;
  assert.ok(passivate instanceof PassivateShard);
  assert.equal(passivate.nextOwner, c.toString());
});

test("held: a node its own view does not list yet (and never listed) has not departed: its callers are held, not refused", () => {
  const n = new Driven(c, {}, view(c, [member(a), member(b)]));
  const d = n.delivery("e1");
  const effects = n.route(d, 0);
  assert.deepEqual(refuses(effects), []);
  assert.equal(n.stats.heldDeliveries, 1);
});

test("held: a node that reads itself Leaving in the newest view refuses its callers, before that membership change is handled", () => {
  const n = new Driven(c, {}, reconverging(c));
  // A `view` input updates the view only (its reaction, membershipChanged, comes later): the status read is the view's.
  n.feed({ kind: "view", snapshot: reconverging(c, [member(a), member(b), member(c, "Leaving")]) }, 10);
  assert.equal(n.state.lastSelfStatus, "Up", "the last handled change still says Up");
  const d = n.delivery("e1");
  assert.deepEqual(
    refuses(n.route(d, 20)).map((r) => r.delivery),
    [d],
  );
  assert.equal(n.stats.heldDeliveries, 0);
});

test("held: a caller that cannot wait gets the no-coordinator error while none is elected, or while this node is not Up to route", () => {
  const isNoCoordinator = (e: Error | undefined) =>
    e instanceof NoShardOwnerError && e.entityType === "cluster" && e.shardId === -1;
  // Gossip re-converging, nobody unreachable: no coordinator elected.
  const unconverged = new Driven(c, { awaitCoordinator: false }, reconverging(c));
  assert.equal(unconverged.state.view.elected, null);
  const [first] = refuses(unconverged.route(unconverged.delivery("e1"), 10));
  assert.ok(isNoCoordinator(first?.error), `no coordinator, got ${String(first?.error)}`);
  // a is elected, but this node is still Joining: it routes through nobody.
  const joining = new Driven(c, { awaitCoordinator: false }, view(c, [member(a), member(b), member(c, "Joining")]));
  assert.ok(joining.state.view.elected?.equals(a));
  assert.equal(joining.state.view.routing, null);
  const [second] = refuses(joining.route(joining.delivery("e1"), 10));
  assert.ok(isNoCoordinator(second?.error), `no coordinator to route through, got ${String(second?.error)}`);
});

test("held: before its first membership view a node's caller that cannot wait gets the no-coordinator error, naming no unreachable member", () => {
  // The view before any membership snapshot (view.ts's emptyView) lists nobody, so nobody is unreachable either: the
  // error must not name a member (the unreachable error tells the operator to down that member).
  let state = newNodeState(c);
  const settings = ShardingSettings.create({ shardCount: 8, awaitCoordinator: false });
  [state] = step(state, { kind: "register", name: type, settings }, 0);
  assert.equal(state.view.elected, null);
  const d = new Driven(c, { awaitCoordinator: false }).delivery("e1"); // another node's core builds the delivery only
  const [, effects] = step(state, { kind: "route", delivery: d, countsRemoteRoute: true }, 10);
  const [refused] = refuses(effects);
  const error = refused?.error;
  assert.ok(error instanceof NoShardOwnerError, `refused with NoShardOwnerError, got ${String(error)}`);
  assert.equal(error.entityType, "cluster");
  assert.equal(error.shardId, -1);
  assert.equal(error.unreachableMember, null);
});

test("stop: a node whose callers wait for a coordinator change's flush sends no marker once stopped", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(c, coordinator.update());
  n.route(n.delivery("e1"), 2_000);
  assert.ok(n.t.via?.equals(a), "c's callers last sent to a");
  const changed = n.feed(
    { kind: "membershipChanged", snapshot: view(c, [member(a, "Leaving"), member(b), member(c)]) },
    2_010,
  );
  assert.equal(sends(changed).length > 0, true, "the flush marker went to a");
  const stopped = n.feed({ kind: "stop" }, 2_020);
  assert.deepEqual(sends(stopped), [], "nothing sent after stop");
  assert.deepEqual(schedules(stopped, "flushRetry"), []);
  assert.equal(n.t.flush, null);
});

test("held: a sweep that fires again after the last one emptied the queues (none armed) does nothing", () => {
  const n = new Driven(c, { heldDeliveryTimeout: 1_000 }, reconverging(c));
  const [sweep] = schedules(n.route(n.delivery("e1"), 0), "heldSweep");
  const expired = n.feed({ kind: "timer", timer: sweep!.timer }, 1_000);
  assert.equal(rejects(expired).length, 1);
  assert.equal(n.t.heldSweep, null, "nothing held: no sweep armed");
  assert.deepEqual(n.feed({ kind: "timer", timer: sweep!.timer }, 1_001), [], "a duplicate timer is stale");
});

test("held: a sweep re-arms for the earliest deadline left across both queues (a caller's own and other members' envelopes)", () => {
  const n = new Driven(c, { heldDeliveryTimeout: 1_000 }, reconverging(c));
  n.route(n.delivery("e1"), 0); // deadline 1,000
  const [sweep] = schedules(n.route(n.delivery("e2", 200), 0), "heldSweep"); // deadline 200
  n.envelope(n.delivery("e3", 500), b, 0); // another member's ask, held here: deadline 500
  assert.equal(n.t.heldForwarded.size, 1);
  const expired = n.feed({ kind: "timer", timer: sweep!.timer }, 200);
  assert.equal(rejects(expired).length, 1);
  assert.deepEqual(
    schedules(expired, "heldSweep").map((s) => s.afterMs),
    [300],
    "next at 500, the forwarded envelope's deadline",
  );
});

test("handoff: an attempt whose previous owner is listed as Removed skips the drain too", () => {
  const n = coordinatorWithPlan();
  const shard = n.shardOn(b);
  n.feed({ kind: "moveShard", type, shard, to: c }, 2_000);
  const token = n.t.handoffs.get(shard)!.token;
  const failed = n.feed(
    { kind: "handoffReply", type, shard, token, step: "passivated", error: new Error("gone") },
    2_100,
  );
  n.feed({ kind: "view", snapshot: view(a, [member(a), member(b, "Removed"), member(c)]) }, 2_150);
  const next = n.feed({ kind: "timer", timer: schedules(failed, "handoffAttempt")[0]!.timer }, 2_200);
  assert.deepEqual(
    asks(next).map((x) => [x.to.toString(), x.step]),
    [[c.toString(), "prepared"]],
  );
});
