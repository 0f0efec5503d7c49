// What the coordinator feeds into a reconcile and when it runs one, fed by hand (docs/protocol.md §8): the snapshot
// peers (Up / Leaving members other than itself), the placement members (itself and the members registered with its
// settings), one armed reconcile timer at a time, no second snapshot round while a bootstrap round is scheduled, no
// reconcile at a node that is not the elected coordinator, and the retained shards of a freshly authored plan.
import assert from "node:assert/strict";
import { test } from "node:test";
import { UniqueAddress } from "../../../src/actor/index.ts";
import type { ShardAllocationStrategy, ShardingMember } from "../../../src/sharding/allocation/strategy.ts";
import { ClusterShardingConfigurationError } from "../../../src/sharding/index.ts";
import { PlanRequest, PlanSnapshotRequest, PlanUpdate } from "../../../src/sharding/internal/index.ts";
import {
  a,
  b,
  c,
  coordinatorWithPlan,
  Driven,
  d,
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

const planRequest = (n: Driven, from: typeof a, nowMs: number) =>
  n.feed(
    {
      kind: "control",
      message: new PlanRequest(type, n.settings.key, from.toString()),
      replyTo: null,
      origin: from,
    },
    nowMs,
  );

const owners = (n: Driven) => new Set([...n.t.plan.allocations.values()].map((o) => o.toString()));

test("reconcile: a new coordinator asks its Up peers for snapshots (not itself, not a Joining member) and arms the bootstrap's next round", () => {
  const n = new Driven(a, {}, view(a, [member(a), member(b), member(c), member(d, "Joining")]));
  const asked = sends(n.registered).filter((s) => s.message instanceof PlanSnapshotRequest);
  assert.deepEqual(asked.map((s) => s.to.toString()).sort(), [b.toString(), c.toString()]);
  const rounds = schedules(n.registered, "reconcile");
  assert.equal(rounds.length, 1, "the bootstrap's next round is scheduled once");
  assert.equal(rounds[0]!.afterMs, 100);
  assert.equal(n.t.reconcileArmed, true);
});

test("reconcile: while a bootstrap round is scheduled, a plan request does not start another snapshot round", () => {
  const n = new Driven(a);
  assert.ok(n.t.plan.bootstrap !== null);
  const effects = planRequest(n, b, 10);
  assert.deepEqual(effects, [], "no snapshot requests, no plan (none authored yet), no second timer");
});

test("reconcile: placement uses only this node and the members that registered the type with its settings", () => {
  const n = new Driven(a);
  planRequest(n, b, 10);
  const authored = n.feed({ kind: "timer", timer: { kind: "reconcile", type } }, 1_000);
  assert.equal(n.t.plan.generation, 1);
  assert.deepEqual(owners(n), new Set([a.toString(), b.toString()]), "c never registered: it gets no shard");
  // A freshly authored plan tells the local provider which shards to keep: exactly those placed here.
  const retained = ofKind(authored, "retainShards");
  assert.equal(retained.length, 1);
  const mine = [...n.t.plan.allocations].filter(([, o]) => o.equals(a)).map(([s]) => s);
  assert.deepEqual([...retained[0]!.shards].sort(), mine.sort());
});

test("reconcile: one reconcile timer armed at a time; a second new member while one is armed schedules nothing more", () => {
  const n = new Driven(a, {}, view(a, [member(a), member(b), member(c), member(d)]));
  planRequest(n, b, 10);
  n.feed({ kind: "timer", timer: { kind: "reconcile", type } }, 1_000);
  assert.equal(n.t.reconcileArmed, false);
  const first = planRequest(n, c, 1_010);
  assert.deepEqual(
    schedules(first, "reconcile").map((s) => s.afterMs),
    [0],
    "a new member: reconcile at once",
  );
  const second = planRequest(n, d, 1_011);
  assert.deepEqual(schedules(second, "reconcile"), [], "already armed");
  assert.equal(sends(second).length, 1, "d still gets the plan");
});

test("reconcile: a reconcile timer at a node that is not the elected coordinator does nothing", () => {
  const coordinator = coordinatorWithPlan();
  const n = follower(c, coordinator.update());
  const plan = n.t.plan;
  assert.deepEqual(n.feed({ kind: "timer", timer: { kind: "reconcile", type } }, 2_000), []);
  assert.equal(n.t.plan, plan);
  // With no coordinator at all (nobody Up yet) the timer does nothing either.
  const alone = new Driven(a, {}, view(a, [member(a, "Joining"), member(b, "Joining")]));
  assert.deepEqual(alone.feed({ kind: "timer", timer: { kind: "reconcile", type } }, 2_000), []);
});

test("handoff: a handoff already completing is not aborted when its next owner is downed; the completion decides", () => {
  const n = coordinatorWithPlan();
  const shard = n.shardOn(b);
  n.feed({ kind: "moveShard", type, shard, to: c }, 2_000);
  const token = n.t.handoffs.get(shard)!.token;
  n.feed({ kind: "handoffReply", type, shard, token, step: "passivated", error: null }, 2_100);
  const buffered = n.delivery(n.entityIn((s) => s === shard));
  n.route(buffered, 2_150);
  n.feed({ kind: "view", snapshot: view(a, [member(a), member(b), member(c)], { converged: false }) }, 2_200);
  n.feed({ kind: "handoffReply", type, shard, token, step: "prepared", error: null }, 2_250);
  assert.equal(n.t.handoffs.get(shard)!.state.phase, "completing");
  const effects = n.feed(
    { kind: "membershipChanged", snapshot: view(a, [member(a), member(b), member(c, "Down")]) },
    2_300,
  );
  assert.deepEqual(rejects(effects), [], "c prepared the shard: its buffer is not rejected by an abort");
  assert.equal(n.t.handoffs.get(shard)?.state.phase, "completing");
});

/** Places shards round-robin over the Up members, or throws while `broken` (a weight function returning 0). */
class Breakable implements ShardAllocationStrategy {
  readonly configurationKey = "Breakable";
  broken = true;
  allocate(shardId: number, members: readonly ShardingMember[]): UniqueAddress | null {
    if (this.broken) throw new ClusterShardingConfigurationError("weight 0");
    const up = members
      .filter((m) => m.status === "Up")
      .map((m) => m.uniqueAddress)
      .sort(UniqueAddress.compare);
    return up[shardId % up.length] ?? null;
  }
}

test("reconcile: a coordinator whose first allocation failed tries again at the next delivery, not only at the next timer", () => {
  const strategy = new Breakable();
  const n = new Driven(a, { allocation: strategy });
  planRequest(n, b, 10);
  planRequest(n, c, 10);
  const failed = n.feed({ kind: "timer", timer: { kind: "reconcile", type } }, 1_000);
  assert.equal(logs(failed, "error").length, 1);
  const before = n.t.plan;
  assert.equal(before.author, null, "no plan yet");
  assert.equal(n.t.reconcileArmed, false);
  strategy.broken = false;
  const d = n.delivery("e1");
  const routed = n.route(d, 1_010);
  assert.equal(n.t.plan.author?.equals(a), true, "authored in this step");
  assert.equal(forwards(routed).length + delivers(routed).length, 1, "and the delivery went on by it");
});

test("reconcile: a coordinator whose first allocation failed tries again at the next plan request and answers it with the plan", () => {
  const strategy = new Breakable();
  const n = new Driven(a, { allocation: strategy });
  planRequest(n, b, 10);
  planRequest(n, c, 10);
  n.feed({ kind: "timer", timer: { kind: "reconcile", type } }, 1_000);
  const before = n.t.plan;
  assert.equal(before.author, null);
  strategy.broken = false;
  const answered = planRequest(n, b, 1_010);
  assert.equal(n.t.plan.author?.equals(a), true, "authored in this step");
  assert.ok(sends(answered).some((s) => s.to.equals(b) && s.message instanceof PlanUpdate));
});

test("reconcile: a new coordinator asks its peers for snapshots in address order, whatever the order of the membership list", () => {
  const n = new Driven(a, {}, view(a, [member(c), member(a), member(b)]));
  const asked = sends(n.registered).filter((s) => s.message instanceof PlanSnapshotRequest);
  assert.deepEqual(
    asked.map((s) => s.to.toString()),
    [b.toString(), c.toString()],
  );
});

test("reconcile: a coordinator whose first allocation failed does not reconcile at an input that routes nothing (a stale timer): only a delivery, a plan request or its timer tries again", () => {
  const strategy = new Breakable();
  const n = new Driven(a, { allocation: strategy });
  planRequest(n, b, 10);
  planRequest(n, c, 10);
  n.feed({ kind: "timer", timer: { kind: "reconcile", type } }, 1_000);
  assert.equal(n.t.plan.author, null, "no plan yet");
  strategy.broken = false;
  // The held-delivery pass runs at every step; with nothing held it asks nothing of the plan.
  const stale = n.feed({ kind: "timer", timer: { kind: "heldSweep", type, id: 987_654 } }, 1_010);
  assert.deepEqual(logs(stale), []);
  assert.equal(n.t.plan.author, null, "not authored by a step that routes nothing");
  assert.equal(n.t.heldLocal.size + n.t.heldForwarded.size, 0);
});
