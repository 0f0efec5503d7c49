// Edges of the node core fed by hand: a send that failed, a placement strategy that throws, a coordinator's snapshot
// bootstrap, a conflicting plan, a handoff's next owner that departs in any phase of the move, a local drain that
// fails under a handoff, and which prepared shards a stored plan keeps.
import assert from "node:assert/strict";
import { test } from "node:test";
import { UniqueAddress } from "../../../src/actor/index.ts";
import type { ShardAllocationStrategy, ShardingMember } from "../../../src/sharding/allocation/strategy.ts";
import { ClusterShardingConfigurationError, NoShardOwnerError } from "../../../src/sharding/index.ts";
import { PlanRequest, PlanSnapshot, PlanSnapshotRequest, PlanUpdate } from "../../../src/sharding/internal/index.ts";
import {
  a,
  allUp,
  asks,
  b,
  c,
  coordinatorWithPlan,
  Driven,
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

test("a send that failed rejects its delivery and counts it", () => {
  const n = new Driven(b);
  const d = n.delivery("e1");
  const error = new Error("connection closed");
  const effects = n.feed({ kind: "sendFailed", delivery: d, error }, 0);
  assert.deepEqual(effects, [{ kind: "reject", delivery: d, error }]);
  assert.equal(n.stats.rejectedEnvelopes, 1);
});

/** Round-robin placement by shard id over the sorted Up members, until told to throw. */
class Breakable implements ShardAllocationStrategy {
  readonly configurationKey = "Breakable";
  broken = false;
  allocate(shardId: number, members: readonly ShardingMember[]): UniqueAddress | null {
    if (this.broken) throw new ClusterShardingConfigurationError("weight 0");
    const up = members
      .filter((m) => m.status === "Up")
      .map((m) => m.uniqueAddress)
      .sort(UniqueAddress.compare);
    return up[shardId % up.length] ?? null;
  }
}

test("a placement strategy that throws leaves the plan as it is; routing to an owner that is not Up then fails closed", () => {
  const strategy = new Breakable();
  const n = coordinatorWithPlan({ allocation: strategy });
  const before = n.t.plan;
  strategy.broken = true;
  n.feed({ kind: "view", snapshot: view(a, [member(a), member(b), member(c, "Leaving")]) }, 2_000);
  const reconciled = n.feed({ kind: "timer", timer: { kind: "reconcile", type } }, 2_000);
  assert.equal(logs(reconciled, "error").length, 1, "the failure is logged");
  assert.equal(n.t.plan, before, "the plan is unchanged");
  // A caller's delivery for c's shard: c is not Up and no new plan can be made, so it fails, counted.
  const shard = n.shardOn(c);
  const d = n.delivery(n.entityIn((s) => s === shard));
  const effects = n.route(d, 2_010);
  assert.deepEqual(forwards(effects), []);
  const [r] = rejects(effects);
  assert.equal(r!.delivery, d, "rejected (the call was accepted), not refused");
  assert.ok(r!.error instanceof NoShardOwnerError);
  assert.equal((r!.error as NoShardOwnerError).shardId, shard);
  // Another member's envelope for that shard is rejected the same way; one for b's shard still goes to b.
  const fromB = n.delivery(n.entityIn((s) => s === shard));
  assert.deepEqual(
    rejects(n.envelope(fromB, b, 2_020)).map((x) => x.delivery),
    [fromB],
  );
  const toB = n.delivery(n.entityIn((s) => s === n.shardOn(b)));
  assert.ok(forwards(n.envelope(toB, b, 2_030))[0]!.to.equals(b));
});

test("a held envelope from another member that cannot be routed when the authority returns is rejected, not dropped", () => {
  const strategy = new Breakable();
  const n = coordinatorWithPlan({ allocation: strategy });
  strategy.broken = true;
  const shard = n.shardOn(c);
  // Re-converging: c is leaving. b's caller's envelope for c's shard waits here.
  n.feed(
    { kind: "view", snapshot: view(a, [member(a), member(b), member(c, "Leaving")], { converged: false }) },
    2_000,
  );
  const fromB = n.delivery(n.entityIn((s) => s === shard));
  assert.deepEqual(rejects(n.envelope(fromB, b, 2_000)), []);
  assert.equal(n.stats.heldDeliveries, 1);
  const converged = n.feed(
    { kind: "membershipChanged", snapshot: view(a, [member(a), member(b), member(c, "Leaving")]) },
    2_100,
  );
  assert.deepEqual(
    rejects(converged).map((x) => x.delivery),
    [fromB],
  );
  assert.ok(rejects(converged)[0]!.error instanceof NoShardOwnerError);
});

test("bootstrap: a new coordinator takes its peers' snapshots while collecting, and counts one it cannot take", () => {
  const n = new Driven(a);
  const [request] = sends(n.registered).filter((s) => s.message instanceof PlanSnapshotRequest);
  assert.ok(request, "the bootstrap asks its peers for snapshots");
  n.feed(
    { kind: "control", message: new PlanRequest(type, n.settings.key, b.toString()), replyTo: null, origin: b },
    5,
  );
  n.feed(
    { kind: "control", message: new PlanRequest(type, n.settings.key, c.toString()), replyTo: null, origin: c },
    5,
  );
  // b held generation 7 of an older coordinator, placing every shard on b.
  const assignments = Array.from({ length: 8 }, (_, shardId) => ({ shardId, owner: b.toString() }));
  const accepted = n.feed(
    {
      kind: "control",
      message: new PlanSnapshot(type, n.settings.key, c.toString(), 7, assignments),
      replyTo: null,
      origin: b,
    },
    10,
  );
  assert.deepEqual(ofKind(accepted, "refused"), []);
  assert.deepEqual(
    sends(accepted),
    [],
    "c has not answered with a snapshot: collecting goes on, nobody is asked again",
  );
  assert.equal(n.t.plan.generation, 0, "no term started yet");
  assert.equal(n.stats.rejectedEnvelopes, 0);
  // From a node that is not an Up member: not taken, counted.
  const stranger = new UniqueAddress(a.address, "u-stranger");
  n.feed(
    {
      kind: "control",
      message: new PlanSnapshot(type, n.settings.key, c.toString(), 9, assignments),
      replyTo: null,
      origin: stranger,
    },
    11,
  );
  assert.equal(n.stats.rejectedEnvelopes, 1);
  assert.equal(n.t.registrations.get(b.toString()), n.settings.key, "a snapshot also registers its sender");
  const published = n.feed({ kind: "timer", timer: { kind: "reconcile", type } }, 600);
  assert.ok(n.t.plan.author?.equals(a));
  assert.ok(n.t.plan.generation > 7, "published above the snapshot it took");
  assert.ok(n.t.plan.generation < 10, "not above the one it refused");
  assert.ok(sends(published).some((s) => s.message instanceof PlanUpdate));
});

test("plan update: a conflicting plan at the same generation is refused and answered with a snapshot of ours", () => {
  const n = coordinatorWithPlan();
  const f = follower(b, n.update());
  const u = n.update();
  const conflicting = new PlanUpdate(
    type,
    u.settingsKey,
    u.coordinator,
    u.generation,
    u.assignments.map((x) => ({ ...x, owner: c.toString() })),
  );
  const effects = f.feed({ kind: "control", message: conflicting, replyTo: null, origin: a }, 2_000);
  assert.equal(ofKind(effects, "refused").length, 1);
  const [snapshot] = sends(effects);
  assert.ok(snapshot!.to.equals(a));
  assert.ok(snapshot!.message instanceof PlanSnapshot);
  // The same plan again is a duplicate: nothing sent, nothing refused.
  const duplicate = f.feed({ kind: "control", message: u, replyTo: null, origin: a }, 2_001);
  assert.deepEqual(sends(duplicate), []);
  assert.deepEqual(ofKind(duplicate, "refused"), []);
  assert.deepEqual(ofKind(duplicate, "retainShards"), []);
  // From this node itself (origin null) a conflict is refused but answered to nobody.
  const self = f.feed({ kind: "control", message: conflicting, replyTo: null, origin: null }, 2_002);
  assert.deepEqual(sends(self), []);
});

/** a moves b's shard to c and brings the handoff to `phase`. */
function handoffIn(phase: "passivating" | "preparing" | "waiting") {
  const n = coordinatorWithPlan();
  const shard = n.shardOn(b);
  n.feed({ kind: "moveShard", type, shard, to: c }, 2_000);
  const token = n.t.handoffs.get(shard)!.token;
  if (phase === "preparing")
    n.feed({ kind: "handoffReply", type, shard, token, step: "passivated", error: null }, 2_100);
  if (phase === "waiting") {
    n.feed({ kind: "handoffReply", type, shard, token, step: "passivated", error: new Error("timeout") }, 2_100);
  }
  assert.equal(n.t.handoffs.get(shard)!.state.phase, phase);
  const d = n.delivery(n.entityIn((s) => s === shard));
  n.route(d, 2_150);
  return { n, shard, d };
}

test("handoff: a next owner that departs aborts the handoff whether it is passivating, preparing or waiting to retry", () => {
  for (const phase of ["passivating", "preparing", "waiting"] as const) {
    const { n, shard, d } = handoffIn(phase);
    const effects = n.feed(
      { kind: "membershipChanged", snapshot: view(a, [member(a), member(b), member(c, "Removed")]) },
      2_200,
    );
    assert.deepEqual(
      rejects(effects).map((r) => r.delivery),
      [d],
      phase,
    );
    assert.equal(n.t.handoffs.has(shard), false, phase);
  }
});

test("handoff: a departing previous owner or an unrelated change leaves a handoff to an Up next owner running", () => {
  const { n, shard } = handoffIn("preparing");
  const effects = n.feed(
    { kind: "membershipChanged", snapshot: view(a, [member(a), member(b, "Down"), member(c)]) },
    2_200,
  );
  assert.deepEqual(rejects(effects), []);
  assert.equal(n.t.handoffs.get(shard)!.state.phase, "preparing");
});

test("handoff: a handoff completing while gossip re-converges is not aborted when its next owner departs; it waits its rounds", () => {
  const { n, shard, d } = handoffIn("preparing");
  const token = n.t.handoffs.get(shard)!.token;
  n.feed({ kind: "view", snapshot: view(a, [member(a), member(b), member(c)], { converged: false }) }, 2_200);
  n.feed({ kind: "handoffReply", type, shard, token, step: "prepared", error: null }, 2_250);
  assert.equal(n.t.handoffs.get(shard)!.state.phase, "completing");
  const effects = n.feed(
    { kind: "membershipChanged", snapshot: view(a, [member(a), member(b), member(c, "Down")], { converged: false }) },
    2_300,
  );
  assert.deepEqual(rejects(effects), [], "c prepared the shard: the completion is not aborted here");
  assert.ok(n.t.handoffs.has(shard));
  assert.ok(d);
});

test("handoff: a local drain that fails under a handoff is a failed step, retried after 100 ms", () => {
  const n = coordinatorWithPlan();
  const shard = n.shardOn(a);
  n.feed({ kind: "moveShard", type, shard, to: c }, 2_000);
  const token = n.t.handoffs.get(shard)!.token;
  const failed = n.feed({ kind: "drained", type, shard, error: new Error("entity stuck") }, 2_100);
  assert.equal(n.t.handoffs.get(shard)!.state.phase, "waiting");
  assert.deepEqual(asks(failed), [], "c is not asked to prepare");
  assert.equal(logs(failed, "warn").length, 1);
  const [retry] = schedules(failed, "handoffAttempt");
  assert.deepEqual(retry!.timer, { kind: "handoffAttempt", type, shard, token });
  const again = n.feed({ kind: "timer", timer: retry!.timer }, 2_200);
  assert.deepEqual(ofKind(again, "drainShard"), [{ kind: "drainShard", type, shard }], "drained again");
  // A local preparation that fails is a failed step too.
  const drained = n.feed({ kind: "drained", type, shard, error: null }, 2_300);
  assert.equal(asks(drained)[0]!.step, "prepared");
});

test("a stored plan keeps the shards it places here and those the plan's author prepared here; others' preparations are dropped", () => {
  const n = coordinatorWithPlan();
  const f = follower(b, n.update());
  const preparedByA = f.shardOn(c);
  const others = [...f.t.plan.allocations].filter(([, o]) => o.equals(a)).map(([s]) => s);
  const preparedByC = others[0]!;
  const ask = { kind: "ask" as const, replyTo: null };
  f.feed({ kind: "prepared", type, shard: preparedByA, coordinator: a.toString(), waiter: ask, error: null }, 2_000);
  f.t.prepared.set(preparedByC, c.toString());
  const u = n.update();
  const next = new PlanUpdate(type, u.settingsKey, u.coordinator, u.generation + 1, u.assignments);
  const effects = f.feed({ kind: "control", message: next, replyTo: null, origin: a }, 2_100);
  const [retain] = ofKind(effects, "retainShards");
  const mine = [...f.t.plan.allocations].filter(([, o]) => o.equals(b)).map(([s]) => s);
  assert.deepEqual(
    [...retain!.shards].sort((x, y) => x - y),
    [...mine, preparedByA].sort((x, y) => x - y),
  );
  assert.ok(!retain!.shards.has(preparedByC));
  // A shard prepared here and now planned here is no longer only prepared.
  const moved = new PlanUpdate(
    type,
    u.settingsKey,
    u.coordinator,
    u.generation + 2,
    u.assignments.map((x) => (x.shardId === preparedByA ? { ...x, owner: b.toString() } : x)),
  );
  f.feed({ kind: "control", message: moved, replyTo: null, origin: a }, 2_200);
  assert.equal(f.t.prepared.has(preparedByA), false);
  assert.ok(allUp(b));
});
