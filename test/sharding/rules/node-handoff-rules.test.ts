// Handoffs as rules of the node core (docs/protocol.md §9), fed by hand: the coordinator drives a shard's move
// (passivate the old owner, prepare the new one, complete in its plan, flush what it buffered meanwhile), and an
// owner drains a shard only after its retry barrier has emptied, answering every waiter once.
import assert from "node:assert/strict";
import { test } from "node:test";
import { UniqueAddress } from "../../../src/actor/index.ts";
import type { ShardAllocationStrategy, ShardingMember } from "../../../src/sharding/allocation/strategy.ts";
import {
  ClusterShardingConfigurationError,
  NoRebalance,
  NoShardOwnerError,
  ShardLeaseUnavailableError,
} from "../../../src/sharding/index.ts";
import { PassivateShard, PlanUpdate, PrepareShard } from "../../../src/sharding/internal/index.ts";
import {
  a,
  address,
  asks,
  b,
  c,
  caller,
  coordinatorWithPlan,
  type Driven,
  delivers,
  follower,
  forwards,
  logs,
  member,
  ofKind,
  rejects,
  schedules,
  sends,
  type,
  view,
} from "./node-harness.ts";

/** a moves a shard of b's to c by an operator's request; returns the shard and the step's effects. */
function moveFromBToC(n: Driven, nowMs = 2_000) {
  const shard = n.shardOn(b);
  const effects = n.feed({ kind: "moveShard", type, shard, to: c }, nowMs);
  return { shard, effects, token: n.t.handoffs.get(shard)?.token ?? -1 };
}

test("handoff: a move passivates the old owner first, buffering the shard's traffic, and never routes it to either owner meanwhile", () => {
  const n = coordinatorWithPlan();
  const { shard, effects, token } = moveFromBToC(n);
  const [decided] = ofKind(effects, "shardMoveDecided");
  assert.equal(decided!.decision.kind, "moving");
  const [ask] = asks(effects);
  assert.equal(asks(effects).length, 1);
  assert.ok(ask!.to.equals(b));
  assert.equal(ask!.step, "passivated");
  assert.equal(ask!.token, token);
  assert.equal(ask!.shard, shard);
  assert.ok(ask!.message instanceof PassivateShard);
  const message = ask!.message as PassivateShard;
  assert.deepEqual(
    [message.entityType, message.settingsKey, message.shardId, message.coordinator, message.nextOwner],
    [type, n.settings.key, shard, a.toString(), c.toString()],
  );
  // Coordinator routing: no drain gate, so no handoff token and nobody's marker to wait for (§8.8 is direct-only).
  assert.deepEqual([message.handoffToken, message.waitFor], [null, []]);
  assert.equal(logs(effects, "info").length, 2, "the operator's move and the handoff start are logged");

  const id = n.entityIn((s) => s === shard);
  const first = n.delivery(id);
  const second = n.delivery(id);
  const routed = [...n.route(first, 2_010), ...n.envelope(second, c, 2_020)];
  assert.deepEqual(forwards(routed), []);
  assert.deepEqual(rejects(routed), []);
  assert.deepEqual(
    n.t.handoffs.get(shard)!.state.buffer.map((x) => [x.envelope, x.sender]),
    [first, second].map((x) => [x.envelope, x.sender]),
  );
});

test("handoff: passivated, then prepared, then the plan moves the shard, publishes it, and the buffer goes to the new owner in order", () => {
  const n = coordinatorWithPlan();
  const generation = n.t.plan.generation;
  const { shard, token } = moveFromBToC(n);
  const id = n.entityIn((s) => s === shard);
  const buffered = [n.delivery(id), n.delivery(id), n.delivery(id)];
  for (const [i, d] of buffered.entries()) n.route(d, 2_010 + i);

  const passivated = n.feed({ kind: "handoffReply", type, shard, token, step: "passivated", error: null }, 2_100);
  const [prepare] = asks(passivated);
  assert.ok(prepare!.to.equals(c));
  assert.equal(prepare!.step, "prepared");
  assert.equal(prepare!.token, token);
  const message = prepare!.message as PrepareShard;
  assert.ok(message instanceof PrepareShard);
  assert.deepEqual([message.shardId, message.coordinator, message.settingsKey], [shard, a.toString(), n.settings.key]);
  assert.deepEqual(forwards(passivated), [], "still buffered while c prepares");

  const done = n.feed({ kind: "handoffReply", type, shard, token, step: "prepared", error: null }, 2_500);
  assert.ok(n.t.plan.allocations.get(shard)!.equals(c), "the plan places the shard on c");
  assert.equal(n.t.plan.generation, generation + 1);
  const flushed = forwards(done);
  assert.deepEqual(
    flushed.map((f) => f.delivery),
    buffered,
  );
  for (const f of flushed) {
    assert.ok(f.to.equals(c));
    assert.equal(f.envelope.hopCount, 1);
  }
  const updates = sends(done).filter((s) => s.message instanceof PlanUpdate);
  assert.deepEqual(updates.map((s) => s.to.toString()).sort(), [b.toString(), c.toString()], "the plan is broadcast");
  assert.equal((updates[0]!.message as PlanUpdate).generation, generation + 1);
  assert.equal(n.t.handoffs.has(shard), false, "finished");
  assert.equal(n.stats.handoffShards, 1);
  assert.equal(n.stats.rebalanceMoves, 1);
  assert.equal(n.t.handoffDuration.snapshot().count, 1);
  assert.equal(
    n.t.handoffDuration.snapshot().sum,
    0.5,
    "seconds from the start (2,000 ms) to the completion (2,500 ms)",
  );
  assert.equal(schedules(done, "reconcile").length, 1, "the next reconcile is armed");
  assert.equal(ofKind(done, "retainShards").length, 1);

  // Traffic after the move goes to c directly.
  const after = n.delivery(id);
  assert.ok(forwards(n.route(after, 2_600))[0]!.to.equals(c));
});

test("handoff: a reply that carries another handoff's token, or the wrong step, changes nothing", () => {
  const n = coordinatorWithPlan();
  const { shard, token } = moveFromBToC(n);
  const stale = n.feed(
    { kind: "handoffReply", type, shard, token: token + 100, step: "passivated", error: null },
    2_100,
  );
  assert.deepEqual(asks(stale), []);
  assert.equal(n.t.handoffs.get(shard)!.state.phase, "passivating");
  const early = n.feed({ kind: "handoffReply", type, shard, token, step: "prepared", error: null }, 2_100);
  assert.deepEqual(early, []);
  assert.equal(n.t.handoffs.get(shard)!.state.phase, "passivating");
  assert.deepEqual(
    n.feed({ kind: "handoffReply", type: "Other", shard, token, step: "passivated", error: null }, 2_100),
    [],
  );
});

test("handoff: a failed step is retried after 100 ms with the same token; a lease failure counts as a lease retry", () => {
  const n = coordinatorWithPlan();
  const { shard, token } = moveFromBToC(n);
  const failed = n.feed(
    {
      kind: "handoffReply",
      type,
      shard,
      token,
      step: "passivated",
      error: new ShardLeaseUnavailableError(type, shard),
    },
    2_100,
  );
  assert.equal(n.stats.leaseRetries, 1);
  assert.equal(logs(failed, "warn").length, 1);
  const [retry] = schedules(failed, "handoffAttempt");
  assert.equal(retry!.afterMs, 100);
  assert.deepEqual(retry!.timer, { kind: "handoffAttempt", type, shard, token });
  const again = n.feed({ kind: "timer", timer: retry!.timer }, 2_200);
  assert.ok(asks(again)[0]!.to.equals(b), "b is asked again");
  assert.equal(asks(again)[0]!.token, token);
  // Another failure, not a lease one, is not a lease retry; a remote lease failure (by class name) is.
  n.feed({ kind: "handoffReply", type, shard, token, step: "passivated", error: new Error("timeout") }, 2_300);
  assert.equal(n.stats.leaseRetries, 1);
  n.feed({ kind: "timer", timer: retry!.timer }, 2_400);
  const remote = Object.assign(new Error("lease"), { remoteClass: "ShardLeaseUnavailableError" });
  n.feed({ kind: "handoffReply", type, shard, token, step: "passivated", error: remote }, 2_500);
  assert.equal(n.stats.leaseRetries, 2);
  // A retry timer of another token does nothing.
  assert.deepEqual(n.feed({ kind: "timer", timer: { ...retry!.timer, token: token + 1 } }, 2_600), []);
});

test("handoff: when the coordinator owns the shard it drains it locally; when it is the next owner it prepares locally", () => {
  const n = coordinatorWithPlan({ rebalance: new NoRebalance() });
  const shard = n.shardOn(a);
  const effects = n.feed({ kind: "moveShard", type, shard, to: b }, 2_000);
  const token = n.t.handoffs.get(shard)!.token;
  assert.deepEqual(asks(effects), []);
  assert.deepEqual(ofKind(effects, "drainShard"), [{ kind: "drainShard", type, shard }]);
  const drained = n.feed({ kind: "drained", type, shard, error: null }, 2_100);
  assert.ok(asks(drained)[0]!.to.equals(b), "then b prepares");
  assert.equal(asks(drained)[0]!.step, "prepared");

  const other = n.shardOn(c);
  const moved = n.feed({ kind: "moveShard", type, shard: other, to: a }, 2_200);
  const otherToken = n.t.handoffs.get(other)!.token;
  assert.notEqual(otherToken, token);
  n.feed({ kind: "handoffReply", type, shard: other, token: otherToken, step: "passivated", error: null }, 2_300);
  assert.ok(asks(moved)[0]!.to.equals(c));
  const prepare = n.feed(
    { kind: "handoffReply", type, shard: other, token: otherToken, step: "passivated", error: null },
    2_300,
  );
  assert.deepEqual(prepare, [], "a repeated passivated reply does nothing");
  assert.equal(n.t.handoffs.get(other)!.state.phase, "preparing");
});

test("handoff: a local preparation answers the handoff, and the move completes with the shard placed here", () => {
  const n = coordinatorWithPlan({ rebalance: new NoRebalance() });
  const shard = n.shardOn(c);
  n.feed({ kind: "moveShard", type, shard, to: a }, 2_000);
  const token = n.t.handoffs.get(shard)!.token;
  const passivated = n.feed({ kind: "handoffReply", type, shard, token, step: "passivated", error: null }, 2_100);
  const [prepare] = ofKind(passivated, "prepareShard");
  assert.deepEqual(prepare, {
    kind: "prepareShard",
    type,
    shard,
    coordinator: a.toString(),
    waiter: { kind: "handoff", token },
  });
  const done = n.feed(
    { kind: "prepared", type, shard, coordinator: a.toString(), waiter: prepare!.waiter, error: null },
    2_200,
  );
  assert.ok(n.t.plan.allocations.get(shard)!.equals(a));
  assert.equal(n.t.handoffs.has(shard), false);
  const [retained] = ofKind(done, "retainShards");
  assert.ok(retained!.shards.has(shard), "the shard is kept here");
  assert.equal(n.t.prepared.has(shard), false, "once planned here it is no longer only prepared");
});

test("handoff: a next owner that is downed aborts the handoff at once and rejects what it buffered", () => {
  const n = coordinatorWithPlan();
  const { shard } = moveFromBToC(n);
  const id = n.entityIn((s) => s === shard);
  const buffered = [n.delivery(id), n.delivery(id)];
  for (const [i, d] of buffered.entries()) n.route(d, 2_010 + i);
  const effects = n.feed(
    { kind: "membershipChanged", snapshot: view(a, [member(a), member(b), member(c, "Down")]) },
    2_100,
  );
  assert.deepEqual(
    rejects(effects).map((r) => r.delivery),
    buffered,
  );
  for (const r of rejects(effects)) assert.ok(r.error instanceof NoShardOwnerError);
  assert.equal(n.t.handoffs.has(shard), false);
  assert.equal(logs(effects, "warn").length, 1, "an abort that rejected deliveries is a warning");
  assert.equal(n.stats.handoffShards, 0);
  assert.equal(n.stats.rebalanceMoves, 0);
  assert.equal(n.t.handoffDuration.snapshot().count, 0, "an aborted handoff is not timed");
});

test("handoff: a handoff whose next owner is still Up survives a membership change; one to a removed owner does not", () => {
  const n = coordinatorWithPlan();
  const { shard } = moveFromBToC(n);
  n.feed({ kind: "membershipChanged", snapshot: view(a, [member(a), member(b), member(c)]) }, 2_100);
  assert.ok(n.t.handoffs.has(shard));
  n.feed({ kind: "membershipChanged", snapshot: view(a, [member(a), member(b)]) }, 2_200);
  assert.equal(n.t.handoffs.has(shard), false, "c is gone");
});

test("handoff: an abort that rejected nothing is logged at info, not warn", () => {
  const n = coordinatorWithPlan();
  moveFromBToC(n);
  const effects = n.feed(
    { kind: "membershipChanged", snapshot: view(a, [member(a), member(b), member(c, "Down")]) },
    2_100,
  );
  assert.equal(logs(effects, "warn").length, 0);
  assert.deepEqual(
    logs(effects)
      .filter((l) => l.message === "sharding handoff aborted")
      .map((l) => l.level),
    ["info"],
  );
});

test("handoff: a second move of a shard already moving starts no second handoff", () => {
  const n = coordinatorWithPlan();
  const { shard, token } = moveFromBToC(n);
  const again = n.feed({ kind: "moveShard", type, shard, to: a }, 2_050);
  assert.deepEqual(asks(again), []);
  assert.equal(n.t.handoffs.get(shard)!.token, token);
});

test("handoff: only the coordinator moves a shard; a member refuses an operator's move", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(b, coordinator.update());
  const effects = n.feed({ kind: "moveShard", type, shard: n.shardOn(b), to: c }, 2_000);
  const [decided] = ofKind(effects, "shardMoveDecided");
  assert.notEqual(decided!.decision.kind, "moving");
  assert.equal(n.t.handoffs.size, 0);
  assert.deepEqual(asks(effects), []);
});

test("passivation: a drain asked by the coordinator drains the shard once, and answers every waiter when it is done", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(b, coordinator.update());
  const shard = n.shardOn(b);
  const ask = (replyTo: ReturnType<typeof caller>) =>
    n.feed(
      {
        kind: "control",
        message: new PassivateShard(type, n.settings.key, shard, a.toString(), c.toString()),
        replyTo,
        origin: a,
      },
      2_000,
    );
  const [r1, r2] = [caller(), caller()];
  assert.deepEqual(ofKind(ask(r1), "drainShard"), [{ kind: "drainShard", type, shard }]);
  assert.deepEqual(ofKind(ask(r2), "drainShard"), [], "a drain already running is shared");
  const done = n.feed({ kind: "drained", type, shard, error: null }, 2_100);
  assert.deepEqual(ofKind(done, "ack"), [
    { kind: "ack", replyTo: r1, error: null },
    { kind: "ack", replyTo: r2, error: null },
  ]);
  // A new ask after the drain drains again.
  assert.equal(ofKind(ask(caller()), "drainShard").length, 1);
  const error = new Error("stop failed");
  const failed = n.feed({ kind: "drained", type, shard, error }, 2_200);
  assert.equal(ofKind(failed, "ack")[0]!.error, error, "a failed drain answers with its error");
  assert.deepEqual(n.feed({ kind: "drained", type: "Other", shard, error: null }, 2_300), []);
});

test("passivation: a drain or prepare not sent by the current coordinator is refused, and the asker is answered", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(b, coordinator.update());
  const shard = n.shardOn(b);
  const replyTo = caller();
  const cases = [
    { message: new PassivateShard(type, n.settings.key, shard, a.toString(), null), origin: c },
    { message: new PassivateShard(type, n.settings.key, shard, c.toString(), null), origin: a },
    { message: new PassivateShard(type, "other-key", shard, a.toString(), null), origin: a },
    { message: new PassivateShard(type, n.settings.key, shard, a.toString(), null), origin: null },
    { message: new PrepareShard(type, n.settings.key, shard, a.toString()), origin: c },
    { message: new PrepareShard(type, n.settings.key, shard, b.toString()), origin: b },
  ];
  for (const [i, { message, origin }] of cases.entries()) {
    const effects = n.feed({ kind: "control", message, replyTo, origin }, 2_000 + i);
    assert.deepEqual(ofKind(effects, "drainShard"), [], `case ${i}`);
    assert.deepEqual(ofKind(effects, "prepareShard"), [], `case ${i}`);
    const [refused] = ofKind(effects, "refused");
    assert.equal(refused!.replyTo, replyTo, `case ${i}: the asker is answered`);
    assert.equal(refused!.origin, origin);
  }
  assert.equal(n.stats.rejectedEnvelopes, cases.length);
});

test("passivation: a prepare from the coordinator prepares the shard and answers the asker when it is ready", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(c, coordinator.update());
  const shard = n.shardOn(b);
  const replyTo = caller();
  const effects = n.feed(
    { kind: "control", message: new PrepareShard(type, n.settings.key, shard, a.toString()), replyTo, origin: a },
    2_000,
  );
  assert.deepEqual(ofKind(effects, "prepareShard"), [
    { kind: "prepareShard", type, shard, coordinator: a.toString(), waiter: { kind: "ask", replyTo } },
  ]);
  const done = n.feed(
    { kind: "prepared", type, shard, coordinator: a.toString(), waiter: { kind: "ask", replyTo }, error: null },
    2_100,
  );
  assert.deepEqual(ofKind(done, "ack"), [{ kind: "ack", replyTo, error: null }]);
  assert.equal(n.t.prepared.get(shard), a.toString());
  assert.deepEqual(
    n.feed(
      {
        kind: "prepared",
        type: "Other",
        shard,
        coordinator: a.toString(),
        waiter: { kind: "ask", replyTo },
        error: null,
      },
      2_200,
    ),
    [],
  );
});

test("passivation: a shard with deliveries waiting in its retry barrier drains only after the barrier has emptied", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(b, coordinator.update());
  const shard = n.shardOn(b);
  const d = n.forwardedBy(
    a,
    n.entityIn((s) => s === shard),
  );
  n.envelope(d, a, 2_000);
  const opened = n.feed({ kind: "delivered", type, shard, retry: false, deliveries: [d], outcomes: ["lease"] }, 2_001);
  const [tick] = schedules(opened, "barrierTick");
  assert.equal(tick!.afterMs, 25);
  const replyTo = caller();
  const asked = n.feed(
    {
      kind: "control",
      message: new PassivateShard(type, n.settings.key, shard, a.toString(), c.toString()),
      replyTo,
      origin: a,
    },
    2_010,
  );
  assert.deepEqual(ofKind(asked, "drainShard"), [], "not while a delivery waits to be retried");
  const retried = n.feed({ kind: "timer", timer: tick!.timer }, 2_026);
  const [retry] = delivers(retried);
  assert.deepEqual(retry, { kind: "deliver", type, shard, retry: true, deliveries: [d] });
  const settled = n.feed(
    { kind: "delivered", type, shard, retry: true, deliveries: [d], outcomes: ["delivered"] },
    2_027,
  );
  assert.deepEqual(
    ofKind(settled, "drainShard"),
    [{ kind: "drainShard", type, shard }],
    "the barrier emptied: drain now",
  );
  assert.deepEqual(ofKind(n.feed({ kind: "drained", type, shard, error: null }, 2_100), "ack"), [
    { kind: "ack", replyTo, error: null },
  ]);
});

test("stop: buffered handoff traffic is rejected, drain asks are answered with an error, and nothing runs after", () => {
  const n = coordinatorWithPlan();
  const { shard, token } = moveFromBToC(n);
  const d = n.delivery(n.entityIn((s) => s === shard));
  n.route(d, 2_010);
  const own = n.shardOn(a);
  const replyTo = caller();
  n.feed(
    {
      kind: "control",
      message: new PassivateShard(type, n.settings.key, own, a.toString(), null),
      replyTo,
      origin: null,
    },
    2_020,
  );
  const stopped = n.feed({ kind: "stop" }, 2_030);
  assert.deepEqual(
    rejects(stopped).map((r) => r.delivery),
    [d],
  );
  const [ack] = ofKind(stopped, "ack");
  assert.equal(ack!.replyTo, replyTo);
  assert.ok(ack!.error instanceof NoShardOwnerError);
  assert.equal(n.t.handoffs.size, 0);
  assert.equal(n.t.drains.size, 0);
  assert.deepEqual(n.feed({ kind: "handoffReply", type, shard, token, step: "passivated", error: null }, 2_040), []);
  assert.deepEqual(n.feed({ kind: "drained", type, shard: own, error: null }, 2_040), []);
  const late = n.delivery("e1");
  const refused = n.route(late, 2_050);
  assert.equal(ofKind(refused, "refuse")[0]!.delivery, late, "a caller after stop is refused");
  const [moved] = ofKind(n.feed({ kind: "moveShard", type, shard, to: c }, 2_060), "shardMoveDecided");
  assert.equal(moved!.decision.kind, "refused");
  assert.equal(moved!.decision.kind === "refused" && moved!.decision.reason, "ShardingStopped");
  assert.equal(moved!.decision.shard, shard);
  assert.deepEqual(delivers(n.route(late, 2_070)), []);
});

test("passivation: without an accepting coordinator (a member unreachable) a drain ask is refused as unauthorized, never thrown on", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(b, coordinator.update());
  const shard = n.shardOn(b);
  n.feed(
    { kind: "membershipChanged", snapshot: view(b, [member(a), member(b), member(c)], { unreachable: [c] }) },
    2_000,
  );
  assert.equal(n.state.view.accepting, null, "the scenario needs a view without an accepting coordinator");
  const replyTo = caller();
  const message = new PassivateShard(type, n.settings.key, shard, a.toString(), null);
  const effects = n.feed({ kind: "control", message, replyTo, origin: a }, 2_010);
  const [refused] = ofKind(effects, "refused");
  assert.ok(
    refused?.error instanceof ClusterShardingConfigurationError,
    `refused as unauthorized, got ${String(refused?.error)}`,
  );
  assert.equal(refused.replyTo, replyTo);
  assert.deepEqual(ofKind(effects, "drainShard"), []);
});

test("handoff: an attempt timer for a shard whose handoff has ended (none running) does nothing", () => {
  const n = coordinatorWithPlan();
  const { shard, token } = moveFromBToC(n);
  n.feed({ kind: "membershipChanged", snapshot: view(a, [member(a), member(b), member(c, "Down")]) }, 2_010);
  assert.equal(n.t.handoffs.has(shard), false, "aborted: its next owner was downed");
  const plan = n.t.plan;
  assert.deepEqual(n.feed({ kind: "timer", timer: { kind: "handoffAttempt", type, shard, token } }, 2_100), []);
  assert.equal(n.t.plan, plan);
});

test("handoff: an attempt that finds the next owner no longer Up (Leaving) aborts instead of passivating again", () => {
  const n = coordinatorWithPlan();
  const { shard, token } = moveFromBToC(n);
  const d1 = n.delivery(n.entityIn((s) => s === shard));
  n.route(d1, 2_001);
  n.feed({ kind: "membershipChanged", snapshot: view(a, [member(a), member(b), member(c, "Leaving")]) }, 2_010);
  assert.ok(n.t.handoffs.has(shard), "a Leaving next owner does not abort the handoff by itself");
  const failed = n.feed(
    { kind: "handoffReply", type, shard, token, step: "passivated", error: new Error("busy") },
    2_020,
  );
  const [retry] = schedules(failed, "handoffAttempt");
  const effects = n.feed({ kind: "timer", timer: retry!.timer }, 2_120);
  assert.deepEqual(asks(effects), [], "no second passivation");
  assert.equal(n.t.handoffs.has(shard), false, "aborted");
  assert.deepEqual(
    rejects(effects).map((r) => r.delivery),
    [d1],
  );
});

test("handoff: while gossip re-converges (the term only settling) an operator's move is refused", () => {
  const n = coordinatorWithPlan();
  n.feed(
    { kind: "membershipChanged", snapshot: view(a, [member(a), member(b), member(c)], { converged: false }) },
    2_000,
  );
  assert.equal(n.state.view.elected, null);
  assert.ok(n.state.view.accepting?.equals(a), "still the accepting coordinator: the term is settling");
  const shard = n.shardOn(b);
  const effects = n.feed({ kind: "moveShard", type, shard, to: c }, 2_010);
  const [decided] = ofKind(effects, "shardMoveDecided");
  assert.equal(decided!.decision.kind, "refused");
  assert.equal(n.t.handoffs.size, 0);
});

test("stop: a local drain a handoff waits for is not answered with an ack (only remote asks are)", () => {
  const n = coordinatorWithPlan({ rebalance: new NoRebalance() });
  const shard = n.shardOn(a);
  const moving = n.feed({ kind: "moveShard", type, shard, to: b }, 2_000);
  assert.equal(ofKind(moving, "drainShard").length, 1, "a drains its own shard for the handoff");
  const stopped = n.feed({ kind: "stop" }, 2_010);
  assert.deepEqual(ofKind(stopped, "ack"), []);
});

test("handoff: a finished handoff is logged at info (one line per start and end)", () => {
  const n = coordinatorWithPlan({ rebalance: new NoRebalance() });
  const shard = n.shardOn(c);
  n.feed({ kind: "moveShard", type, shard, to: a }, 2_000);
  const token = n.t.handoffs.get(shard)!.token;
  const passivated = n.feed({ kind: "handoffReply", type, shard, token, step: "passivated", error: null }, 2_100);
  const [prepare] = ofKind(passivated, "prepareShard");
  const done = n.feed(
    { kind: "prepared", type, shard, coordinator: a.toString(), waiter: prepare!.waiter, error: null },
    2_200,
  );
  const finished = logs(done).filter((l) => l.message === "sharding handoff finished");
  assert.deepEqual(
    finished.map((l) => [l.level, l.fields.outcome]),
    [["info", "done"]],
  );
});

test("handoff: a reply for a shard with no handoff running does nothing", () => {
  const n = coordinatorWithPlan();
  const shard = n.shardOn(b);
  assert.equal(n.t.handoffs.has(shard), false);
  assert.deepEqual(n.feed({ kind: "handoffReply", type, shard, token: 7, step: "passivated", error: null }, 2_000), []);
});

// Operator-move seed 2490 (coordinator routing): a move's handoff drained its old owner b, then aborted (the paused
// coordinator found its plan authored elsewhere at completion). The plan still places the shard on b and no new plan
// comes, so b's provider, told to drain it, refused it for good: every delivery went into the retry barrier and was
// rejected, and the history was not live after healing.
test("passivation: an owner whose drain ran for a handoff that then aborted re-owns the shard at its next delivery — the provider is told to retain it before the delivery", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(b, coordinator.update());
  const shard = n.shardOn(b);
  const id = n.entityIn((s) => s === shard);
  const passivate = new PassivateShard(type, n.settings.key, shard, a.toString(), c.toString());
  n.feed({ kind: "control", message: passivate, replyTo: caller(), origin: a }, 2_000);
  n.feed({ kind: "drained", type, shard, error: null }, 2_100);
  // The handoff aborted at the coordinator: its plan still places the shard on b, and it forwards to b again.
  const first = n.envelope(n.forwardedBy(a, id), a, 2_200);
  const kinds = first.flatMap((e) => (e.kind === "retainShards" || e.kind === "deliver" ? [e.kind] : []));
  assert.deepEqual(kinds, ["retainShards", "deliver"], "retain first, then the delivery");
  assert.ok(ofKind(first, "retainShards")[0]!.shards.has(shard), "the shard is retained again");
  const second = n.envelope(n.forwardedBy(a, id), a, 2_201);
  assert.deepEqual(ofKind(second, "retainShards"), [], "once");
  assert.equal(delivers(second).length, 1);
});

test("passivation: no re-own while a drain of the shard runs again (a retried attempt), nor for a shard whose plan moved it on", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(b, coordinator.update());
  const shard = n.shardOn(b);
  const id = n.entityIn((s) => s === shard);
  const passivate = new PassivateShard(type, n.settings.key, shard, a.toString(), c.toString());
  n.feed({ kind: "control", message: passivate, replyTo: caller(), origin: a }, 2_000);
  n.feed({ kind: "drained", type, shard, error: null }, 2_100);
  n.feed({ kind: "control", message: passivate, replyTo: caller(), origin: a }, 2_150);
  assert.deepEqual(ofKind(n.envelope(n.forwardedBy(a, id), a, 2_160), "retainShards"), [], "a drain runs");
  n.feed({ kind: "drained", type, shard, error: null }, 2_200);
  // The handoff completed: the new plan moves the shard to c, and its retain leaves the shard out.
  const moved = coordinator.update();
  const update = new PlanUpdate(
    type,
    moved.settingsKey,
    moved.coordinator,
    moved.generation + 1,
    moved.assignments.map((x) => (x.shardId === shard ? { shardId: shard, owner: c.toString() } : x)),
  );
  const stored = n.feed({ kind: "control", message: update, replyTo: null, origin: a }, 2_300);
  assert.equal(ofKind(stored, "retainShards")[0]!.shards.has(shard), false);
  assert.equal(n.t.drainedHere.size, 0, "the plan's retain told the provider what it keeps");
});

test("handoff: a handoff that ends because the term was lost holds its buffer for the callers' flush markers, but rejects it when the type does not await a coordinator", () => {
  const z = address(2550);
  for (const awaitCoordinator of [true, false]) {
    const n = coordinatorWithPlan({ awaitCoordinator });
    const { shard } = moveFromBToC(n);
    const id = n.entityIn((s) => s === shard);
    const buffered = [n.delivery(id), n.delivery(id)];
    for (const [i, d] of buffered.entries()) n.route(d, 2_010 + i);
    // z, a lower address, comes Up: a's term is lost, and the handoff ends in that step.
    const effects = n.feed(
      { kind: "membershipChanged", snapshot: view(a, [member(z), member(a), member(b), member(c)]) },
      2_100,
    );
    assert.equal(n.t.handoffs.has(shard), false, "ended");
    if (awaitCoordinator) {
      // Held, and (this node's own callers' deliveries) relayed to z at once by this node's flush through itself.
      assert.deepEqual(rejects(effects), []);
      assert.deepEqual(
        forwards(effects)
          .filter((f) => f.to.equals(z))
          .map((f) => f.delivery),
        buffered,
        "relayed to the new coordinator",
      );
    } else {
      assert.deepEqual(
        rejects(effects).map((r) => r.delivery),
        buffered,
        "rejected",
      );
      assert.equal(n.t.heldForwarded.size, 0);
    }
  }
});

test("handoff: a late reply of an earlier handoff of the shard does nothing to a later handoff of it, whatever else took tokens in between", () => {
  // Handoff tokens come from the node's one counter, which the retry barrier's ticks (and probes, gates, sweeps) draw
  // on too: a later handoff of the shard must never reuse an earlier one's token, or that handoff's late reply would
  // drive the new one (here: skip the new owner's passivation).
  const n = coordinatorWithPlan({ rebalance: new NoRebalance() });
  const first = moveFromBToC(n);
  // A lease failure on a shard a owns opens its retry barrier, whose tick takes a token.
  const own = n.shardOn(a);
  const d = n.delivery(n.entityIn((s) => s === own));
  assert.equal(delivers(n.route(d, 2_010)).length, 1);
  const opened = n.feed(
    { kind: "delivered", type, shard: own, retry: false, deliveries: [d], outcomes: ["lease"] },
    2_020,
  );
  assert.equal(schedules(opened, "barrierTick").length, 1);
  const { shard } = first;
  n.feed({ kind: "handoffReply", type, shard, token: first.token, step: "passivated", error: null }, 2_100);
  n.feed({ kind: "handoffReply", type, shard, token: first.token, step: "prepared", error: null }, 2_200);
  assert.ok(n.t.plan.allocations.get(shard)?.equals(c), "the first handoff moved the shard to c");
  const back = n.feed({ kind: "moveShard", type, shard, to: b }, 3_000);
  assert.equal(asks(back)[0]?.step, "passivated", "the second handoff asks c to passivate");
  const late = n.feed(
    { kind: "handoffReply", type, shard, token: first.token, step: "passivated", error: null },
    3_100,
  );
  assert.deepEqual(asks(late), [], "the first handoff's late reply prepares nobody");
  assert.equal(n.t.handoffs.get(shard)?.state.phase, "passivating");
});

/** Round-robin over the Up members, except the shards in `unplaced`: nowhere (a user strategy may place no owner). */
class Unplacing implements ShardAllocationStrategy {
  readonly configurationKey = "Unplacing";
  readonly unplaced = new Set<number>();
  allocate(shardId: number, members: readonly ShardingMember[]): UniqueAddress | null {
    if (this.unplaced.has(shardId)) return null;
    const up = members
      .filter((m) => m.status === "Up")
      .map((m) => m.uniqueAddress)
      .sort(UniqueAddress.compare);
    return up[shardId % up.length] ?? null;
  }
}

/** a's plan places a shard on b; then the strategy places it nowhere and b leaves: its handoff goes to nobody. */
function handoffToNobody() {
  const allocation = new Unplacing();
  const n = coordinatorWithPlan({ allocation, rebalance: new NoRebalance() });
  const shard = n.shardOn(b);
  allocation.unplaced.add(shard);
  const leaving = view(a, [member(a), member(b, "Leaving"), member(c)]);
  const all = n.feed({ kind: "membershipChanged", snapshot: leaving }, 2_000);
  const started = all.filter((e) => e.kind !== "ask" || e.shard === shard);
  const running = n.t.handoffs.get(shard);
  assert.ok(running !== undefined, "a handoff of the shard runs");
  assert.equal(running.state.next, null);
  return { n, shard, started, token: running.token };
}

test("handoff: a shard whose owner leaves and that the strategy places nowhere is passivated and then left unplaced, with no next owner to prepare", () => {
  const { n, shard, started, token } = handoffToNobody();
  assert.deepEqual(logs(started, "error"), []);
  const [ask] = asks(started);
  assert.ok(ask?.to.equals(b), "the leaving owner is asked to passivate");
  const message = ask!.message as PassivateShard;
  assert.ok(message instanceof PassivateShard);
  assert.equal(message.nextOwner, null);
  const done = n.feed({ kind: "handoffReply", type, shard, token, step: "passivated", error: null }, 2_100);
  assert.deepEqual(logs(done, "error"), []);
  assert.deepEqual(asks(done), [], "nobody to prepare");
  assert.equal(n.t.plan.allocations.has(shard), false, "the shard is unplaced");
  assert.equal(n.t.handoffs.has(shard), false);
});

test("handoff: an aborted handoff with no next owner starts no preparation grace (nobody prepared)", () => {
  const { n, shard, token } = handoffToNobody();
  const failed = n.feed(
    { kind: "handoffReply", type, shard, token, step: "passivated", error: new Error("timeout") },
    2_100,
  );
  const [retry] = schedules(failed, "handoffAttempt");
  assert.ok(retry !== undefined);
  // Another coordinator is elected (an Up member whose address sorts first): the next attempt aborts.
  const e = address(2550);
  n.feed(
    { kind: "membershipChanged", snapshot: view(a, [member(e), member(a), member(b, "Leaving"), member(c)]) },
    2_150,
  );
  const aborted = n.feed({ kind: "timer", timer: retry.timer }, 2_200);
  assert.equal(n.t.handoffs.has(shard), false, "aborted");
  assert.deepEqual(logs(aborted, "error"), []);
  assert.deepEqual(schedules(aborted, "preparationGrace"), []);
});

test("handoff: under the planted flushBeforeDrained bug a handoff to nobody still asks its old owner, naming no next owner (no throw)", () => {
  const allocation = new Unplacing();
  const n = coordinatorWithPlan({ allocation, rebalance: new NoRebalance() });
  n.state = { ...n.state, bugs: { flushBeforeDrained: true } };
  const shard = n.shardOn(b);
  allocation.unplaced.add(shard);
  const leaving = view(a, [member(a), member(b, "Leaving"), member(c)]);
  const started = n.feed({ kind: "membershipChanged", snapshot: leaving }, 2_000);
  assert.deepEqual(logs(started, "error"), []);
  const [ask] = asks(started).filter((x) => x.shard === shard);
  const message = ask?.message;
  assert.ok(message instanceof PassivateShard);
  assert.equal(message.nextOwner, null);
  assert.equal(n.t.plan.allocations.has(shard), false, "the bug went on at once: the shard is unplaced");
});
