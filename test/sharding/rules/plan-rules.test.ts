// Rules of the coordinator's plan core (src/sharding/coordinator/plan.ts), one scenario per rule, at the level of the
// pure functions so they survive any rewrite of the shells. Each was written against a mutant that kept every other
// test green (docs/mutation.md).
import assert from "node:assert/strict";
import { test } from "node:test";
import type { UniqueAddress } from "../../../src/actor/index.ts";
import {
  acceptPlanUpdate,
  acceptSnapshot,
  completeHandoffInPlan,
  emptyPlan,
  localShards,
  type PlanEffect,
  type PlanState,
  reconcilePlan,
  sameAllocations,
} from "../../../src/sharding/coordinator/plan.ts";
import { LeastLoadedAllocation, RateLimitedRebalance } from "../../../src/sharding/index.ts";
import { AllocationPlanner } from "../../../src/sharding/internal/index.ts";
import { addr, bySystem, member } from "../fixtures/members.ts";

const a = addr("a");
const b = addr("b");
const c = addr("c");
const planner = new AllocationPlanner(
  4,
  new LeastLoadedAllocation(),
  new RateLimitedRebalance({ threshold: 1, maxConcurrent: 4 }),
);
const window = 500; // bootstrapSnapshotWindowMs
const up = { originIsPlanMember: true };

function reconcile(state: PlanState, self: UniqueAddress, members: string[], nowMs: number, handoffs: number[] = []) {
  return reconcilePlan(state, {
    self,
    coordinator: self,
    members: members.map((m) => member(m)),
    planner,
    handoffs: new Set(handoffs),
    nowMs,
  });
}

const kinds = (effects: PlanEffect[]) => effects.map((e) => e.kind);
const moves = (effects: PlanEffect[]) =>
  effects.flatMap((e) =>
    e.kind === "startHandoff" ? [[e.shardId, e.previous?.address.system ?? null, e.next?.address.system ?? null]] : [],
  );
const plan = (...owners: UniqueAddress[]) => new Map(owners.map((o, i) => [i, o]));

/** A bootstrapping state of coordinator `a` with peers, as the first reconcile leaves it. */
function bootstrapping(nowMs = 0): PlanState {
  const [s, effects] = reconcile(emptyPlan, a, ["a", "b", "c"], nowMs);
  assert.deepEqual(kinds(effects), ["requestSnapshots", "scheduleReconcile"]);
  return s;
}

test("bootstrap: a higher-generation snapshot arriving after a lower one replaces it", () => {
  let s = bootstrapping();
  [s] = acceptSnapshot(s, { allocations: plan(b, b, b, b), generation: 3 }, { origin: b, ...up, nowMs: 10 });
  [s] = acceptSnapshot(s, { allocations: plan(c, c, c, c), generation: 7 }, { origin: c, ...up, nowMs: 20 });
  assert.equal(s.bootstrap?.candidate?.generation, 7);
  const [published] = reconcile(s, a, ["a", "b", "c"], window);
  assert.equal(published.generation, 8, "the new term publishes above the highest generation any node stored");
  assert.deepEqual(bySystem(published.allocations), [
    [0, "c"],
    [1, "c"],
    [2, "c"],
    [3, "c"],
  ]);
});

test("bootstrap: a lower-generation snapshot after a higher one is counted but changes nothing", () => {
  let s = bootstrapping();
  [s] = acceptSnapshot(s, { allocations: plan(c, c, c, c), generation: 7 }, { origin: c, ...up, nowMs: 10 });
  const [after, counted] = acceptSnapshot(s, { allocations: plan(b), generation: 6 }, { origin: b, ...up, nowMs: 20 });
  assert.equal(counted, true);
  assert.equal(after.bootstrap?.candidate, s.bootstrap?.candidate, "the higher candidate stays");
  assert.deepEqual([...(after.bootstrap?.answered ?? [])].sort(), [b.toString(), c.toString()].sort());
});

test("bootstrap: the term starts before the deadline once every peer asked has answered with a snapshot", () => {
  let s = bootstrapping(1000);
  [s] = acceptSnapshot(s, { allocations: plan(c, c, c, c), generation: 7 }, { origin: c, ...up, nowMs: 1010 });
  // one peer still silent: keep collecting (and keep asking) until the deadline
  const [waiting, asked] = reconcile(s, a, ["a", "b", "c"], 1020);
  assert.deepEqual(kinds(asked), ["requestSnapshots", "scheduleReconcile"]);
  assert.notEqual(waiting.bootstrap, null);
  // a refused snapshot (a member that receives no plans) does not count as an answer
  const [refused, taken] = acceptSnapshot(
    s,
    { allocations: plan(b), generation: 2 },
    { origin: b, originIsPlanMember: false, nowMs: 1020 },
  );
  assert.equal(taken, false);
  assert.notEqual(reconcile(refused, a, ["a", "b", "c"], 1030)[0].bootstrap, null);
  // b answers too, with a lower generation: nothing more can be learnt, the term starts at once above the best
  [s] = acceptSnapshot(s, { allocations: plan(b), generation: 2 }, { origin: b, ...up, nowMs: 1030 });
  const [done, published] = reconcile(s, a, ["a", "b", "c"], 1030);
  assert.equal(done.bootstrap, null);
  assert.equal(done.generation, 8);
  assert.equal(kinds(published)[0], "broadcast");
});

test("bootstrap: snapshots are taken strictly before the deadline, and the deadline is first reconcile + window", () => {
  const s = bootstrapping(1000);
  assert.equal(s.bootstrap?.deadlineMs, 1000 + window);
  const snap = { allocations: plan(b), generation: 2 };
  assert.equal(acceptSnapshot(s, snap, { origin: b, ...up, nowMs: 1000 + window - 1 })[1], true);
  assert.equal(acceptSnapshot(s, snap, { origin: b, ...up, nowMs: 1000 + window })[1], false);
  // a later reconcile inside the window keeps the first deadline (it does not restart the window)
  const [again, effects] = reconcile(s, a, ["a", "b", "c"], 1000 + window - 1);
  assert.deepEqual(kinds(effects), ["requestSnapshots", "scheduleReconcile"]);
  assert.equal(again.bootstrap?.deadlineMs, 1000 + window);
  const [done, published] = reconcile(again, a, ["a", "b", "c"], 1000 + window);
  assert.equal(done.bootstrap, null);
  assert.equal(kinds(published)[0], "broadcast");
});

test("bootstrap: a snapshot generation must be a positive integer", () => {
  const s = bootstrapping();
  for (const generation of [0, -1, 1.5, Number.NaN]) {
    assert.throws(
      () => acceptSnapshot(s, { allocations: plan(b), generation }, { origin: b, ...up, nowMs: 1 }),
      /snapshot generation must be positive/,
      `generation ${generation}`,
    );
  }
  assert.equal(acceptSnapshot(s, { allocations: plan(b), generation: 1 }, { origin: b, ...up, nowMs: 1 })[1], true);
});

test("bootstrap: an equal-generation snapshot with the same plan is a duplicate, not a replacement", () => {
  let s = bootstrapping();
  [s] = acceptSnapshot(s, { allocations: plan(b, c), generation: 4 }, { origin: b, ...up, nowMs: 1 });
  const [same, ok] = acceptSnapshot(s, { allocations: plan(b, c), generation: 4 }, { origin: c, ...up, nowMs: 2 });
  assert.equal(ok, true);
  assert.equal(same.bootstrap?.candidate, s.bootstrap?.candidate, "the candidate is kept, not replaced");
  assert.ok(same.bootstrap?.answered.has(c.toString()), "c's answer counts");
  // the same shards with another owner, or one shard fewer, conflict
  assert.throws(
    () => acceptSnapshot(s, { allocations: plan(b, b), generation: 4 }, { origin: c, ...up, nowMs: 2 }),
    /Conflicting/,
  );
  assert.throws(
    () => acceptSnapshot(s, { allocations: plan(b), generation: 4 }, { origin: c, ...up, nowMs: 2 }),
    /Conflicting/,
  );
});

test("a new coordinator that holds a plan and hears no snapshot keeps that plan: moves go through handoffs", () => {
  // b authored generation 4: every shard on b. Now a is coordinator and b, c are Up; nobody answers the snapshot request.
  const held: PlanState = { allocations: plan(b, b, b, b), author: b, generation: 4, bootstrap: null };
  let [s, effects] = reconcile(held, a, ["a", "b", "c"], 0);
  assert.deepEqual(kinds(effects), ["requestSnapshots", "scheduleReconcile"]);
  assert.equal(s.bootstrap?.candidate?.generation, 4, "its own plan is the first candidate");
  [s, effects] = reconcile(s, a, ["a", "b", "c"], window);
  assert.equal(s.generation, 5);
  assert.ok(s.author?.equals(a));
  assert.deepEqual(
    bySystem(s.allocations),
    [
      [0, "b"],
      [1, "b"],
      [2, "b"],
      [3, "b"],
    ],
    "the published plan is the held one: ownership changes only when a handoff completes",
  );
  assert.equal(kinds(effects)[0], "broadcast");
  const started = moves(effects);
  assert.ok(started.length > 0, "the rebalance towards a and c starts as handoffs");
  for (const [, previous] of started) assert.equal(previous, "b");
});

test("a lone new coordinator that holds a plan republishes it at once, one generation up", () => {
  const held: PlanState = { allocations: plan(a, a, a, a), author: b, generation: 9, bootstrap: null };
  const [s, effects] = reconcile(held, a, ["a"], 0);
  assert.equal(s.generation, 10);
  assert.deepEqual(localShards(s, a), [0, 1, 2, 3]);
  assert.deepEqual(kinds(effects), ["broadcast"]);
});

test("a fresh initial plan starts no handoff and schedules nothing, even with handoffs of an old term running", () => {
  const [s, effects] = reconcile(emptyPlan, a, ["a"], 0, [2]);
  assert.equal(s.generation, 1);
  assert.deepEqual(kinds(effects), ["broadcast"]);
});

test("a coordinator that authored the plan reconciles without a new bootstrap", () => {
  const own: PlanState = { allocations: plan(a, a, a, a), author: a, generation: 3, bootstrap: null };
  const [s, effects] = reconcile(own, a, ["a", "b"], 0);
  assert.equal(s, own, "no new generation: ownership changes only when a handoff completes");
  assert.deepEqual(kinds(effects), ["startHandoff", "startHandoff", "scheduleReconcile"]);
  // nothing to do: no effect at all
  const [, idle] = reconcile(own, a, ["a"], 0);
  assert.deepEqual(idle, []);
  // a running handoff keeps the reconcile loop going
  const [, waiting] = reconcile(own, a, ["a"], 0, [1]);
  assert.deepEqual(kinds(waiting), ["scheduleReconcile"]);
});

test("bootstrap snapshot peers: Up members other than self, sorted; no peers means no waiting", () => {
  const [, effects] = reconcilePlan(emptyPlan, {
    self: b,
    coordinator: b,
    members: [member("d"), member("a", { status: "Joining" }), member("b"), member("c")],
    planner,
    handoffs: new Set(),
    nowMs: 0,
  });
  const request = effects[0];
  assert.equal(request?.kind, "requestSnapshots");
  assert.deepEqual(request?.kind === "requestSnapshots" ? request.peers.map((p) => p.address.system) : [], ["c", "d"]);
  const [s, lone] = reconcilePlan(emptyPlan, {
    self: b,
    coordinator: b,
    members: [member("a", { status: "Leaving" }), member("b")],
    planner,
    handoffs: new Set(),
    nowMs: 0,
  });
  assert.deepEqual(kinds(lone), ["broadcast"]);
  assert.equal(s.generation, 1);
});

test("a bootstrap collected for another coordinator identity is discarded, not reused", () => {
  const stale: PlanState = {
    ...emptyPlan,
    bootstrap: {
      coordinator: b,
      deadlineMs: 50,
      candidate: { allocations: plan(c, c, c, c), generation: 6 },
      answered: new Set([b.toString(), c.toString()]),
    },
  };
  const [s, effects] = reconcile(stale, a, ["a", "b"], 100);
  assert.deepEqual(kinds(effects), ["requestSnapshots", "scheduleReconcile"]);
  assert.ok(s.bootstrap?.coordinator.equals(a));
  assert.equal(s.bootstrap?.deadlineMs, 100 + window);
  assert.equal(s.bootstrap?.candidate, null);
});

test("only the current coordinator that authored the plan completes a handoff", () => {
  const own: PlanState = { allocations: plan(a, a), author: a, generation: 2, bootstrap: null };
  // the happy path: a is coordinator and author
  const done = completeHandoffInPlan(own, 1, b, a, a);
  assert.equal(done.generation, 3);
  assert.deepEqual(bySystem(done.allocations), [
    [0, "a"],
    [1, "b"],
  ]);
  assert.deepEqual(bySystem(completeHandoffInPlan(own, 1, null, a, a).allocations), [[0, "a"]]);
  // a is author but no longer coordinator (b took over)
  assert.throws(() => completeHandoffInPlan(own, 1, b, a, b), /Only the current sharding coordinator/);
  // no coordinator at all
  assert.throws(() => completeHandoffInPlan(own, 1, b, a, null), /Only the current sharding coordinator/);
  // a is coordinator but the stored plan was authored by b (a has not published its own term yet)
  const foreign: PlanState = { ...own, author: b };
  assert.throws(() => completeHandoffInPlan(foreign, 1, b, a, a), /Only the current sharding coordinator/);
  // a is coordinator and no plan is stored yet
  assert.throws(() => completeHandoffInPlan(emptyPlan, 1, b, a, a), /Only the current sharding coordinator/);
});

test("plan updates: equal generation from another author conflicts even with the same allocations", () => {
  const on = { coordinator: b, origin: b, self: c, shardCount: 4 };
  const stored: PlanState = { allocations: plan(a), author: a, generation: 5, bootstrap: null };
  assert.throws(
    () => acceptPlanUpdate(stored, { coordinator: b, generation: 5, allocations: plan(a) }, on),
    /Conflict/,
  );
  // a plan with a shard more at the same generation conflicts too
  const fromB: PlanState = { ...stored, author: b };
  assert.throws(
    () => acceptPlanUpdate(fromB, { coordinator: b, generation: 5, allocations: plan(a, a) }, on),
    /Conflict/,
  );
  assert.equal(acceptPlanUpdate(fromB, { coordinator: b, generation: 5, allocations: plan(a) }, on)[1], "duplicate");
});

test("plan updates: shards must be integers in [0, shardCount), generations positive integers", () => {
  const on = { coordinator: a, origin: a, self: b, shardCount: 4 };
  for (const shard of [-1, 4, 1.5]) {
    assert.throws(
      () => acceptPlanUpdate(emptyPlan, { coordinator: a, generation: 1, allocations: new Map([[shard, a]]) }, on),
      /invalid shard/,
      `shard ${shard}`,
    );
  }
  for (const generation of [0, 2.5]) {
    assert.throws(
      () => acceptPlanUpdate(emptyPlan, { coordinator: a, generation, allocations: plan(a) }, on),
      /generation must be positive/,
    );
  }
  const [s, outcome] = acceptPlanUpdate(
    emptyPlan,
    {
      coordinator: a,
      generation: 1,
      allocations: new Map([
        [0, a],
        [3, b],
      ]),
    },
    on,
  );
  assert.equal(outcome, "stored");
  assert.ok(
    sameAllocations(
      s.allocations,
      new Map([
        [0, a],
        [3, b],
      ]),
    ),
  );
  assert.ok(s.author?.equals(a));
  // a stored update ends a bootstrap in progress
  const [stored] = acceptPlanUpdate(
    bootstrapping(),
    { coordinator: a, generation: 1, allocations: plan(a) },
    {
      ...on,
      origin: null,
      self: a,
    },
  );
  assert.equal(stored.bootstrap, null);
});

test("sameAllocations compares owners shard by shard, both ways", () => {
  assert.ok(sameAllocations(plan(a, b), plan(a, b)));
  assert.ok(!sameAllocations(plan(a, b), plan(a, c)));
  assert.ok(!sameAllocations(plan(a, b), plan(a)));
  assert.ok(!sameAllocations(plan(a), plan(a, b)));
  assert.ok(!sameAllocations(new Map([[0, a]]), new Map([[1, a]])));
});

test("localShards lists the shards self owns in ascending numeric order", () => {
  const s: PlanState = {
    allocations: new Map([
      [10, a],
      [2, a],
      [5, b],
      [1, a],
    ]),
    author: a,
    generation: 1,
    bootstrap: null,
  };
  assert.deepEqual(localShards(s, a), [1, 2, 10]);
  assert.deepEqual(localShards(s, c), []);
});

test("reconcile does nothing while no coordinator is known", () => {
  const own: PlanState = { allocations: plan(a, a, a, a), author: a, generation: 3, bootstrap: null };
  for (const state of [emptyPlan, own]) {
    const [s, effects] = reconcilePlan(state, {
      self: a,
      coordinator: null,
      members: [member("a"), member("b")],
      planner,
      handoffs: new Set([1]),
      nowMs: 0,
    });
    assert.equal(s, state);
    assert.deepEqual(effects, []);
  }
});

test("plan updates: the coordinator's own connection cannot publish a plan in another coordinator's name", () => {
  // The origin is the coordinator a, but the update claims c as its author: storing it would record c as the term.
  assert.throws(
    () =>
      acceptPlanUpdate(
        emptyPlan,
        { coordinator: c, generation: 1, allocations: plan(a) },
        { coordinator: a, origin: a, self: b, shardCount: 4 },
      ),
    /not authorized by the current coordinator/,
  );
  // ... nor locally: a node that is coordinator cannot store a plan claiming another author
  assert.throws(
    () =>
      acceptPlanUpdate(
        emptyPlan,
        { coordinator: c, generation: 1, allocations: plan(a) },
        { coordinator: a, origin: null, self: a, shardCount: 4 },
      ),
    /not authorized by the current coordinator/,
  );
});
