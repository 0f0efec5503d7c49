import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { UniqueAddress } from "../../src/actor/index.ts";
import {
  allocateShardByShard,
  ClusterShardingConfigurationError,
  desiredAllocations,
  LeastLoadedAllocation,
  NoRebalance,
  RateLimitedRebalance,
  RendezvousAllocation,
  RoleAwareAllocation,
  type ShardAllocationStrategy,
  WeightedLeastLoadedAllocation,
} from "../../src/sharding/index.ts";
import { AllocationPlanner } from "../../src/sharding/internal/index.ts";
import { addr, bySystem, countsBySystem, member } from "./fixtures/members.ts";

const memberArb = fc
  .record({
    system: fc.constantFrom("a", "b", "c", "d", "e", "f", "g"),
    port: fc.integer({ min: 1, max: 3 }),
    status: fc.constantFrom("Up", "Up", "Up", "Joining", "Leaving", "Down"),
    roles: fc.subarray(["backend", "frontend", "gpu"]),
  })
  .map((r) => member(r.system, { port: r.port, status: r.status, roles: r.roles }));
const membersArb = fc.uniqueArray(memberArb, { selector: (m) => m.uniqueAddress.toString(), maxLength: 7 });

function strategies(): ShardAllocationStrategy[] {
  return [
    new LeastLoadedAllocation(),
    new RendezvousAllocation(),
    new WeightedLeastLoadedAllocation((m) => (m.uniqueAddress.address.system < "d" ? 1 : 3), "by-name"),
    new RoleAwareAllocation(new LeastLoadedAllocation(), ["backend"]),
    new RoleAwareAllocation(new RendezvousAllocation(), ["gpu", "backend", "gpu"]),
  ];
}

test("LeastLoaded builds round-robin in address order from empty", () => {
  const plan = desiredAllocations(new LeastLoadedAllocation(), 5, [
    member("b"),
    member("a"),
    member("c", { status: "Joining" }),
  ]);
  assert.deepEqual(bySystem(plan), [
    [0, "a"],
    [1, "b"],
    [2, "a"],
    [3, "b"],
    [4, "a"],
  ]);
});

test("every strategy returns null / an empty plan with no eligible member", () => {
  for (const s of strategies()) {
    assert.equal(s.allocate(0, [member("a", { status: "Leaving" })], new Map()), null);
    assert.equal(desiredAllocations(s, 8, []).size, 0);
  }
});

test("allocateAll equals allocate shard by shard, for every strategy and member list", () => {
  fc.assert(
    fc.property(membersArb, fc.integer({ min: 1, max: 64 }), (members, n) => {
      for (const s of strategies()) {
        assert.deepEqual(
          bySystemPort(desiredAllocations(s, n, members)),
          bySystemPort(allocateShardByShard(s, n, members)),
        );
      }
    }),
    { numRuns: 150 },
  );
});

test("plans are deterministic across input orderings", () => {
  fc.assert(
    fc.property(membersArb, fc.integer({ min: 1, max: 64 }), fc.integer(), (members, n, seed) => {
      const reversed = [...members].reverse();
      const rotated = members.map((_, i) => members[(i + Math.abs(seed)) % members.length]!);
      for (const s of strategies()) {
        const base = bySystemPort(desiredAllocations(s, n, members));
        assert.deepEqual(bySystemPort(desiredAllocations(s, n, reversed)), base);
        assert.deepEqual(bySystemPort(desiredAllocations(s, n, rotated)), base);
      }
    }),
    { numRuns: 150 },
  );
});

test("LeastLoaded loads differ by at most one; Weighted tracks weights", () => {
  fc.assert(
    fc.property(membersArb, fc.integer({ min: 1, max: 200 }), (members, n) => {
      const plan = desiredAllocations(new LeastLoadedAllocation(), n, members);
      const loads = Object.values(countsByAddress(plan));
      if (loads.length > 0) assert.ok(Math.max(...loads) - Math.min(...loads) <= 1);
    }),
  );
  const w = new WeightedLeastLoadedAllocation((m) => (m.uniqueAddress.address.system === "a" ? 1 : 3), "a-small");
  assert.deepEqual(countsBySystem(desiredAllocations(w, 40, [member("a"), member("b")])), { a: 10, b: 30 });
});

test("Weighted rejects a non-positive weight and an empty strategy id; its id is in the key", () => {
  const w = new WeightedLeastLoadedAllocation(() => 0);
  assert.throws(() => w.allocate(0, [member("a")], new Map()), /member allocation weight must be positive/);
  assert.throws(() => new WeightedLeastLoadedAllocation(() => 1, ""), ClusterShardingConfigurationError);
  assert.equal(new WeightedLeastLoadedAllocation(() => 1).configurationKey, "WeightedLeastLoadedAllocation:default");
  assert.equal(new WeightedLeastLoadedAllocation(() => 1, "cpu").configurationKey, "WeightedLeastLoadedAllocation:cpu");
});

test("Rendezvous scores hash the exact bytes of docs/protocol.md §5.3", () => {
  const m = UniqueAddress.parse("movie.tcp://shop@127.0.0.1:2551#abc");
  const bytes = [
    ...[7, 0, 0, 0],
    ...new TextEncoder().encode("movie.tcp"),
    0,
    ...new TextEncoder().encode("shop"),
    0,
    ...new TextEncoder().encode("127.0.0.1"),
    0,
    ...[2551 & 0xff, 2551 >> 8, 0, 0],
    ...new TextEncoder().encode("abc"),
    0,
  ];
  let h = 14695981039346656037n;
  for (const b of bytes) h = ((h ^ BigInt(b)) * 1099511628211n) & 0xffff_ffff_ffff_ffffn;
  const [hi, lo] = new RendezvousAllocation().score(7, m);
  assert.equal((BigInt(hi) << 32n) | BigInt(lo), h);
});

test("Rendezvous: adding a member moves only the shards it wins; removing one moves only its shards", () => {
  fc.assert(
    fc.property(membersArb, memberArb, fc.integer({ min: 1, max: 128 }), (members, extra, n) => {
      if (members.some((m) => m.uniqueAddress.equals(extra.uniqueAddress))) return;
      const r = new RendezvousAllocation();
      const before = desiredAllocations(r, n, members);
      const after = desiredAllocations(r, n, [...members, extra]);
      for (const [shard, owner] of after) {
        const old = before.get(shard);
        if (old === undefined || !old.equals(owner)) assert.ok(owner.equals(extra.uniqueAddress), `shard ${shard}`);
      }
      for (const [shard, owner] of before) {
        const now = after.get(shard)!;
        if (!now.equals(owner)) assert.ok(now.equals(extra.uniqueAddress));
      }
    }),
    { numRuns: 200 },
  );
});

test("RoleAware keeps shards on members with every required role; its key sorts and dedupes roles", () => {
  fc.assert(
    fc.property(membersArb, fc.integer({ min: 1, max: 64 }), (members, n) => {
      const s = new RoleAwareAllocation(new RendezvousAllocation(), ["backend", "gpu"]);
      for (const owner of desiredAllocations(s, n, members).values()) {
        const m = members.find((x) => x.uniqueAddress.equals(owner))!;
        assert.ok((m.roles as string[]).includes("backend") && (m.roles as string[]).includes("gpu"));
        assert.equal(m.status, "Up");
      }
    }),
  );
  const s = new RoleAwareAllocation(new LeastLoadedAllocation(), ["z", "a", "z"]);
  assert.equal(s.configurationKey, "RoleAwareAllocation:LeastLoadedAllocation:a:z");
  assert.equal(s.allocate(0, [member("a", { roles: ["a"] })], new Map()), null);
  assert.throws(
    () => new RoleAwareAllocation(new LeastLoadedAllocation(), []),
    /required allocation roles must not be empty/,
  );
  assert.throws(
    () => new RoleAwareAllocation(new LeastLoadedAllocation(), ["x", ""]),
    ClusterShardingConfigurationError,
  );
});

test("RateLimited without a target: 6 shards on a, members {a, b}, threshold 1, max 2 → [0, 1]", () => {
  const a = addr("a");
  const allocations = new Map([0, 1, 2, 3, 4, 5].map((s) => [s, a]));
  const policy = new RateLimitedRebalance({ threshold: 1, maxConcurrent: 2 });
  assert.deepEqual(
    policy.selectShards({ members: [member("a"), member("b")], allocations, targetAllocations: null }),
    [0, 1],
  );
  assert.deepEqual(policy.selectShards({ members: [member("a")], allocations, targetAllocations: null }), []);
  assert.equal(policy.configurationKey, "RateLimitedRebalance:1:2");
  assert.equal(new RateLimitedRebalance().configurationKey, "RateLimitedRebalance:1:4");
  assert.throws(() => new RateLimitedRebalance({ threshold: -1 }), /rebalance threshold must be non-negative/);
  assert.throws(() => new RateLimitedRebalance({ maxConcurrent: 0 }), /maximum concurrent rebalances must be positive/);
  assert.deepEqual(new NoRebalance().selectShards(), []);
});

test("planner worked example: 8 shards, LeastLoaded, RateLimited(1,2), all on a, then b joins", () => {
  const planner = new AllocationPlanner(
    8,
    new LeastLoadedAllocation(),
    new RateLimitedRebalance({ threshold: 1, maxConcurrent: 2 }),
  );
  let plan = planner.initial([member("a")]);
  assert.deepEqual(countsBySystem(plan), { a: 8 });
  const members = [member("a"), member("b")];
  const step1 = planner.reconcile(plan, members);
  assert.deepEqual(step1.moved, [1, 3]);
  assert.equal(step1.pending, true);
  plan = step1.allocations;
  const step2 = planner.reconcile(plan, members);
  assert.deepEqual(step2.moved, [5, 7]);
  plan = step2.allocations;
  const step3 = planner.reconcile(plan, members);
  assert.deepEqual(step3.moved, []);
  assert.equal(step3.pending, false);
  assert.deepEqual(countsBySystem(plan), { a: 4, b: 4 });
});

test("planner forces shards off ineligible owners even with NoRebalance, and never moves more voluntarily", () => {
  const planner = new AllocationPlanner(6, new LeastLoadedAllocation(), new NoRebalance());
  const plan = planner.initial([member("a"), member("b")]);
  const joined = planner.reconcile(plan, [member("a"), member("b"), member("c")]);
  assert.deepEqual(joined.moved, []);
  assert.equal(joined.pending, false);
  const leaving = planner.reconcile(plan, [member("a"), member("b", { status: "Leaving" }), member("c")]);
  assert.deepEqual(leaving.moved, [1, 3, 5]);
  for (const s of leaving.moved) assert.notEqual(leaving.allocations.get(s)!.address.system, "b");
  const gone = planner.reconcile(plan, [member("a", { status: "Down" })]);
  assert.equal(gone.allocations.size, 0);
});

test("planner: RateLimited moves at most maxConcurrent voluntary shards per step and converges to the target", () => {
  fc.assert(
    fc.property(
      membersArb,
      membersArb,
      fc.integer({ min: 1, max: 64 }),
      fc.integer({ min: 1, max: 5 }),
      (m1, m2, n, max) => {
        for (const alloc of [new LeastLoadedAllocation(), new RendezvousAllocation()]) {
          const planner = new AllocationPlanner(
            n,
            alloc,
            new RateLimitedRebalance({ threshold: 1, maxConcurrent: max }),
          );
          let plan = planner.initial(m1);
          const eligible = new Set(m2.filter((m) => m.status === "Up").map((m) => m.uniqueAddress.toString()));
          for (let step = 0; step < 200; step++) {
            const forced = [...plan].filter(([, o]) => !eligible.has(o.toString())).length + (n - plan.size);
            const r = planner.reconcile(plan, m2);
            assert.ok(r.moved.length <= forced + max, `step ${step}: moved ${r.moved.length}, forced ${forced}`);
            for (const o of r.allocations.values()) assert.ok(eligible.has(o.toString()));
            plan = r.allocations;
            if (!r.pending) break;
          }
          assert.equal(planner.reconcile(plan, m2).pending, false);
          // Converged: the plan is the target, or (a balanced target only) it is left within the threshold.
          const target = planner.initial(m2);
          assert.deepEqual([...plan.keys()].sort(), [...target.keys()].sort(), "every placeable shard is placed");
          const loads = (p: ReadonlyMap<number, UniqueAddress>) => {
            const counts = new Map([...new Set(target.values())].map((o) => [o.toString(), 0]));
            for (const o of p.values()) counts.set(o.toString(), (counts.get(o.toString()) ?? 0) + 1);
            return Math.max(0, ...counts.values()) - Math.min(Infinity, ...counts.values());
          };
          if (bySystemPort(plan).join() !== bySystemPort(target).join()) {
            assert.ok(loads(target) <= 1 && loads(plan) <= 1, `converged off target: ${bySystemPort(plan)}`);
          }
        }
      },
    ),
    { numRuns: 100 },
  );
});

function bySystemPort(plan: ReadonlyMap<number, UniqueAddress>): [number, string][] {
  return [...plan].sort((a, b) => a[0] - b[0]).map(([s, o]) => [s, o.toString()]);
}
function countsByAddress(plan: ReadonlyMap<number, UniqueAddress>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const o of plan.values()) out[o.toString()] = (out[o.toString()] ?? 0) + 1;
  return out;
}
