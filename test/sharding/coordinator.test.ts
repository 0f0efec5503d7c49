import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import type { UniqueAddress } from "../../src/actor/index.ts";
import {
  acceptPlanUpdate,
  acceptSnapshot,
  completeHandoffInPlan,
  emptyPlan,
  type PlanState,
  reconcilePlan,
} from "../../src/sharding/coordinator/plan.ts";
import {
  ClusterShardingConfigurationError,
  LeastLoadedAllocation,
  RateLimitedRebalance,
} from "../../src/sharding/index.ts";
import {
  AllocationPlanner,
  acceptingCoordinator,
  electCoordinator,
  routingCoordinator,
} from "../../src/sharding/internal/index.ts";
import { addr, countsBySystem, member } from "./fixtures/members.ts";

const a = addr("a");
const b = addr("b");
const c = addr("c");
const planner = new AllocationPlanner(
  8,
  new LeastLoadedAllocation(),
  new RateLimitedRebalance({ threshold: 1, maxConcurrent: 2 }),
);

test("election: lowest Up address once converged with nobody unreachable; else none", () => {
  const members = [member("b"), member("a", { status: "Leaving" }), member("c")];
  assert.ok(electCoordinator({ self: c, members, unreachable: [], converged: true })!.equals(b));
  assert.equal(electCoordinator({ self: c, members, unreachable: [], converged: false }), null);
  assert.equal(electCoordinator({ self: c, members, unreachable: [b], converged: true }), null);
  assert.equal(
    electCoordinator({ self: c, members: [member("a", { status: "Joining" })], unreachable: [], converged: true }),
    null,
  );
  // routing also needs self Up
  assert.equal(routingCoordinator({ self: a, members, unreachable: [], converged: true }), null);
  assert.ok(routingCoordinator({ self: c, members, unreachable: [], converged: true })!.equals(b));
  // uid breaks ties on the same address
  const older = addr("a", 2551, "1");
  const newer = addr("a", 2551, "2");
  const snap = {
    self: older,
    members: [member("a", { uid: "2" }), member("a", { uid: "1" })],
    unreachable: [],
    converged: true,
  };
  assert.ok(electCoordinator(snap)!.equals(older));
  assert.ok(!electCoordinator(snap)!.equals(newer));
});

test("owners accept the lowest Up member while merely unconverged, never while a member is unreachable", () => {
  const members = [member("b"), member("c")];
  assert.ok(acceptingCoordinator({ self: c, members, unreachable: [], converged: false })!.equals(b));
  assert.equal(acceptingCoordinator({ self: c, members, unreachable: [b], converged: true }), null);
  assert.equal(acceptingCoordinator({ self: c, members, unreachable: [c], converged: false }), null);
});

test("election is independent of member order", () => {
  fc.assert(
    fc.property(fc.shuffledSubarray(["a", "b", "c", "d", "e"], { minLength: 1 }), (names) => {
      const members = names.map((n) => member(n));
      const sorted = [...names].sort();
      assert.equal(electCoordinator({ self: a, members, unreachable: [], converged: true })!.address.system, sorted[0]);
    }),
  );
});

function ctxOf(self: UniqueAddress, members = [member("a"), member("b")], nowMs = 0, handoffs = new Set<number>()) {
  return { self, coordinator: a, members, planner, handoffs, nowMs };
}
const ctx = ctxOf;

test("a new coordinator with peers collects snapshots until the deadline, then publishes max+1", () => {
  // Two peers are asked; `silent` (a member asked for its plan) never answers, so the window runs to its deadline.
  const silent = member("s").uniqueAddress;
  const ctx = (self: UniqueAddress, members?: ReturnType<typeof member>[], nowMs?: number) => ({
    ...ctxOf(self, members, nowMs),
    snapshotPeers: [b, silent],
  });
  let [s, effects] = reconcilePlan(emptyPlan, ctx(a));
  assert.deepEqual(
    effects.map((e) => e.kind),
    ["requestSnapshots", "scheduleReconcile"],
  );
  assert.equal(s.author, null);
  assert.equal(s.bootstrap?.deadlineMs, 500);
  // a peer reports generation 7 authored by an older coordinator z
  const old = new Map([...Array(8).keys()].map((i) => [i, b]));
  [s] = acceptSnapshot(s, { allocations: old, generation: 7 }, { origin: b, originIsPlanMember: true, nowMs: 100 });
  // a lower one does not replace it
  [s] = acceptSnapshot(
    s,
    { allocations: new Map(), generation: 3 },
    { origin: b, originIsPlanMember: true, nowMs: 150 },
  );
  assert.equal(s.bootstrap?.candidate?.generation, 7);
  // still inside the window: keep collecting
  [s, effects] = reconcilePlan(s, ctx(a, undefined, 400));
  assert.deepEqual(
    effects.map((e) => e.kind),
    ["requestSnapshots", "scheduleReconcile"],
  );
  [s, effects] = reconcilePlan(s, ctx(a, undefined, 500));
  assert.equal(s.generation, 8);
  assert.ok(s.author!.equals(a));
  assert.equal(s.bootstrap, null);
  // the recovered plan is reconciled: handoffs towards the target are started (rate limited to 2)
  const kinds = effects.map((e) => e.kind);
  assert.equal(kinds[0], "broadcast");
  assert.deepEqual(
    effects.filter((e) => e.kind === "startHandoff").map((e) => (e.kind === "startHandoff" ? e.shardId : -1)),
    [0, 2],
  );
  assert.equal(kinds.at(-1), "scheduleReconcile");
  assert.deepEqual(countsBySystem(s.allocations), { b: 8 }, "ownership changes only when a handoff completes");
});

test("a lone coordinator publishes the initial plan at once at generation 1", () => {
  const [s, effects] = reconcilePlan(emptyPlan, ctx(a, [member("a")]));
  assert.deepEqual(
    effects.map((e) => e.kind),
    ["broadcast"],
  );
  assert.equal(s.generation, 1);
  assert.deepEqual(countsBySystem(s.allocations), { a: 8 });
});

test("reconcile does nothing on a non-coordinator, and does not restart running handoffs", () => {
  assert.deepEqual(reconcilePlan(emptyPlan, { ...ctx(b), coordinator: a })[1], []);
  let [s] = reconcilePlan(emptyPlan, ctx(a, [member("a")]));
  const [, effects] = reconcilePlan(s, ctx(a, [member("a"), member("b")], 0, new Set([1])));
  assert.deepEqual(
    effects
      .filter((e) => e.kind === "startHandoff")
      .map((e) => (e.kind === "startHandoff" ? [e.shardId, e.previous?.address.system, e.next?.address.system] : [])),
    [[3, "a", "b"]],
  );
  s = completeHandoffInPlan(s, 1, b, a, a);
  assert.equal(s.generation, 2);
  assert.ok(s.allocations.get(1)!.equals(b));
  assert.throws(
    () => completeHandoffInPlan(s, 1, b, b, a),
    /Only the current sharding coordinator may complete a handoff/,
  );
});

test("snapshots are accepted only during bootstrap, from authenticated Up members, with positive generations", () => {
  const [s] = reconcilePlan(emptyPlan, ctx(a));
  const snap = { allocations: new Map([[0, b]]), generation: 2 };
  assert.equal(acceptSnapshot(s, snap, { origin: null, originIsPlanMember: true, nowMs: 1 })[1], false);
  assert.equal(acceptSnapshot(s, snap, { origin: c, originIsPlanMember: false, nowMs: 1 })[1], false);
  assert.equal(acceptSnapshot(s, snap, { origin: b, originIsPlanMember: true, nowMs: 500 })[1], false);
  assert.equal(acceptSnapshot(emptyPlan, snap, { origin: b, originIsPlanMember: true, nowMs: 1 })[1], false);
  assert.throws(
    () => acceptSnapshot(s, { ...snap, generation: 0 }, { origin: b, originIsPlanMember: true, nowMs: 1 }),
    /Sharding plan snapshot generation must be positive/,
  );
  const [s2, ok] = acceptSnapshot(s, snap, { origin: b, originIsPlanMember: true, nowMs: 1 });
  assert.equal(ok, true);
  assert.equal(acceptSnapshot(s2, snap, { origin: c, originIsPlanMember: true, nowMs: 2 })[1], true);
  assert.throws(
    () =>
      acceptSnapshot(
        s2,
        { allocations: new Map([[0, c]]), generation: 2 },
        { origin: c, originIsPlanMember: true, nowMs: 2 },
      ),
    /Conflicting sharding plan snapshots at generation 2/,
  );
});

test("plan updates: authorized coordinator only; stale, duplicate and conflicting generations", () => {
  const update = (generation: number, owner = a, coordinator = a) => ({
    coordinator,
    generation,
    allocations: new Map([[0, owner]]),
  });
  const on = (origin: UniqueAddress | null, coordinator: UniqueAddress | null = a) => ({
    coordinator,
    origin,
    self: b,
    shardCount: 8,
  });
  let s: PlanState = emptyPlan;
  assert.throws(
    () => acceptPlanUpdate(s, update(1), on(c)),
    /Sharding control was not authorized by the current coordinator/,
  );
  assert.throws(() => acceptPlanUpdate(s, update(1), on(null)), /not authorized/); // local origin, but b is not coordinator
  assert.throws(() => acceptPlanUpdate(s, update(1, a, c), on(c, a)), /not authorized/); // claims c, coordinator is a
  assert.throws(() => acceptPlanUpdate(s, update(1), on(a, null)), /not authorized/);
  assert.throws(() => acceptPlanUpdate(s, update(0), on(a)), /generation must be positive/);
  assert.throws(
    () => acceptPlanUpdate(s, { coordinator: a, generation: 1, allocations: new Map([[8, a]]) }, on(a)),
    (e: unknown) => e instanceof ClusterShardingConfigurationError && /invalid shard 8/.test(e.message),
  );
  let outcome: string;
  [s, outcome] = acceptPlanUpdate(s, update(5), on(a));
  assert.equal(outcome, "stored");
  assert.equal(s.generation, 5);
  [s, outcome] = acceptPlanUpdate(s, update(3, b), on(a));
  assert.equal(outcome, "stale");
  assert.ok(s.allocations.get(0)!.equals(a), "a delayed update never overwrites a newer plan");
  [s, outcome] = acceptPlanUpdate(s, update(5), on(a));
  assert.equal(outcome, "duplicate");
  assert.throws(() => acceptPlanUpdate(s, update(5, b), on(a)), /Conflicting sharding plan at generation 5/);
  [s, outcome] = acceptPlanUpdate(s, update(6, b), on(a));
  assert.equal(outcome, "stored");
  // the coordinator accepts its own (local) update
  assert.equal(
    acceptPlanUpdate(emptyPlan, update(1), { coordinator: a, origin: null, self: a, shardCount: 8 })[1],
    "stored",
  );
});

test("generation never decreases under any order of delivered updates", () => {
  fc.assert(
    fc.property(fc.array(fc.integer({ min: 1, max: 20 }), { maxLength: 40 }), (gens) => {
      let s: PlanState = emptyPlan;
      let max = 0;
      for (const g of gens) {
        try {
          [s] = acceptPlanUpdate(
            s,
            { coordinator: a, generation: g, allocations: new Map([[0, g % 2 ? a : b]]) },
            { coordinator: a, origin: a, self: b, shardCount: 8 },
          );
        } catch {
          // conflicting equal generations are rejected; the plan stays
        }
        assert.ok(s.generation >= max);
        max = s.generation;
      }
      assert.equal(s.generation, Math.max(0, ...gens));
    }),
  );
});
