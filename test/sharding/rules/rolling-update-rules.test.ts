// Rules of placement during a rolling update (src/sharding/allocation/rolling-update.ts and the planner's
// reconcileDuringRollingUpdate): while Up members of two app versions host a type, shards move only onto the newest
// version and never voluntarily, so each shard moves once per roll. Driven through the planner, no sockets.
import assert from "node:assert/strict";
import { test } from "node:test";
import type { UniqueAddress } from "../../../src/actor/index.ts";
import { compareAppVersions } from "../../../src/cluster/index.ts";
import {
  LeastLoadedAllocation,
  RateLimitedRebalance,
  RoleAwareAllocation,
  type ShardingMember,
} from "../../../src/sharding/index.ts";
import { AllocationPlanner } from "../../../src/sharding/internal/index.ts";
import { countsBySystem, member } from "../fixtures/members.ts";

const shardCount = 100;

function node(system: string, appVersion: string | undefined, status = "Up", roles: string[] = []): ShardingMember {
  const base = member(system, { status, roles });
  return appVersion === undefined ? base : { ...base, appVersion };
}

/** Reconciles until nothing moves, counting each shard's moves; fails if it does not settle. */
function settle(
  planner: AllocationPlanner,
  plan: Map<number, UniqueAddress>,
  members: readonly ShardingMember[],
  moves: number[],
): Map<number, UniqueAddress> {
  let current = plan;
  for (let step = 0; step < 500; step++) {
    const result = planner.reconcile(current, members);
    for (const shard of result.moved) moves[shard]!++;
    current = result.allocations;
    if (result.moved.length === 0) return current;
  }
  throw new Error(`the plan did not settle in 500 steps: ${JSON.stringify(countsBySystem(current))}`);
}

/**
 * A rolling update of three backends, `order` saying when each new member joins relative to the old ones leaving:
 * "one-by-one" (D joins, A leaves, E joins, B leaves, F joins, C leaves) or "surge" (D, E, F join, then A, B, C
 * leave). Returns the moves per shard, counted from the first membership change to the settled end state.
 */
function roll(
  order: "one-by-one" | "surge",
  oldVersion: string | undefined,
  newVersion: string | undefined,
): { moves: number[]; final: Record<string, number> } {
  const planner = new AllocationPlanner(shardCount, new LeastLoadedAllocation(), new RateLimitedRebalance());
  let members = ["a", "b", "c"].map((s) => node(s, oldVersion));
  const moves = new Array<number>(shardCount).fill(0);
  let plan = settle(planner, planner.initial(members), members, moves);
  assert.deepEqual(moves, new Array(shardCount).fill(0), "the starting plan is already the target");
  const join = (s: string) => {
    members = [...members, node(s, newVersion)];
    plan = settle(planner, plan, members, moves);
  };
  const leave = (s: string) => {
    // Leaving first (its shards are handed off), then gone from the list once Removed.
    members = members.map((m) => (m.uniqueAddress.address.system === s ? { ...m, status: "Leaving" } : m));
    plan = settle(planner, plan, members, moves);
    members = members.filter((m) => m.uniqueAddress.address.system !== s);
    plan = settle(planner, plan, members, moves);
  };
  if (order === "one-by-one") {
    for (const [n, o] of [
      ["d", "a"],
      ["e", "b"],
      ["f", "c"],
    ] as const) {
      join(n);
      leave(o);
    }
  } else {
    for (const n of ["d", "e", "f"]) join(n);
    for (const o of ["a", "b", "c"]) leave(o);
  }
  return { moves, final: countsBySystem(plan) };
}

test("a one-by-one rolling update to a newer app version moves each shard exactly once and ends balanced", () => {
  const { moves, final } = roll("one-by-one", "1.9.2", "1.10.0");
  assert.deepEqual(
    moves.filter((n) => n !== 1),
    [],
    `moves per shard: ${JSON.stringify(moves)}`,
  );
  assert.deepEqual(final, { d: 34, e: 33, f: 33 });
});

test("a surge rolling update (all new members first) moves each shard exactly once and ends balanced", () => {
  const { moves, final } = roll("surge", "1.0.0", "2.0.0");
  assert.deepEqual(
    moves.filter((n) => n !== 1),
    [],
    `moves per shard: ${JSON.stringify(moves)}`,
  );
  const loads = Object.values(final);
  assert.ok(Math.max(...loads) - Math.min(...loads) <= 1, `final loads ${JSON.stringify(final)}`);
});

test("without app versions the same one-by-one roll moves some shards twice (what the version rule prevents)", () => {
  const { moves } = roll("one-by-one", undefined, undefined);
  const twice = moves.filter((n) => n >= 2).length;
  assert.ok(twice > 0, `expected shards moved more than once, saw ${JSON.stringify(moves)}`);
});

test("a member of a newer version joining draws no shard by rebalance while the old members are Up", () => {
  const planner = new AllocationPlanner(shardCount, new LeastLoadedAllocation(), new RateLimitedRebalance());
  const old = ["a", "b"].map((s) => node(s, "3"));
  const plan = planner.initial(old);
  const result = planner.reconcile(plan, [...old, node("c", "4")]);
  assert.deepEqual(result.moved, []);
  assert.equal(result.pending, false);
  // The same join at the same version is a scale-out: rebalance moves shards to it.
  const scaleOut = planner.reconcile(plan, [...old, node("c", "3")]);
  assert.ok(scaleOut.moved.length > 0, "a same-version join is rebalanced onto");
});

test("an old member's shards go to the newest version, never to another old member", () => {
  const planner = new AllocationPlanner(shardCount, new LeastLoadedAllocation(), new RateLimitedRebalance());
  const members = [node("a", "1"), node("b", "1"), node("c", "2")];
  const plan = planner.initial([node("a", "1"), node("b", "1")]);
  const leaving = members.map((m) => (m.uniqueAddress.address.system === "a" ? { ...m, status: "Leaving" } : m));
  const result = planner.reconcile(plan, leaving);
  const aShards = [...plan].filter(([, o]) => o.address.system === "a").map(([s]) => s);
  assert.deepEqual(result.moved, aShards);
  for (const s of aShards) assert.equal(result.allocations.get(s)?.address.system, "c");
});

test("a member declaring no version is older than any version: it is not moved onto during the roll", () => {
  const planner = new AllocationPlanner(shardCount, new LeastLoadedAllocation(), new RateLimitedRebalance());
  const plan = planner.initial([node("a", undefined), node("b", "0.0.1")]);
  assert.deepEqual(countsBySystem(plan), { b: shardCount }, "the first plan uses the newest version only");
});

test("when no member of the newest version is eligible (a role they lack), the older members keep the type planned", () => {
  const planner = new AllocationPlanner(
    shardCount,
    new RoleAwareAllocation(new LeastLoadedAllocation(), ["backend"]),
    new RateLimitedRebalance(),
  );
  const members = [node("a", "1", "Up", ["backend"]), node("b", "1", "Up", ["backend"]), node("c", "2", "Up", [])];
  const plan = planner.initial(members);
  assert.deepEqual(countsBySystem(plan), { a: 50, b: 50 });
  const leaving = members.map((m) => (m.uniqueAddress.address.system === "a" ? { ...m, status: "Leaving" } : m));
  const result = planner.reconcile(plan, leaving);
  assert.deepEqual(countsBySystem(result.allocations), { b: shardCount });
});

test("app versions order by numeric parts, then text; none is older than any", () => {
  const ascending = [undefined, "0.9", "1.2", "1.2.1", "1.9.2", "1.10.0", "2.0.0-rc.1", "2.0.0-rc.2", "10.0.0"];
  for (let i = 0; i < ascending.length; i++) {
    for (let j = 0; j < ascending.length; j++) {
      const expected = Math.sign(i - j);
      assert.equal(
        compareAppVersions(ascending[i], ascending[j]),
        expected,
        `${ascending[i]} vs ${ascending[j]} should be ${expected}`,
      );
    }
  }
  // Digit runs beyond 2^53 still compare exactly, and leading zeros give a total order rather than a tie.
  assert.equal(compareAppVersions("1.90071992547409930", "1.90071992547409931"), -1);
  assert.notEqual(compareAppVersions("1.01", "1.1"), 0);
  assert.equal(compareAppVersions("1.01", "1.1"), -compareAppVersions("1.1", "1.01"));
});

test("a frontend of another version that the strategy would never place on does not hold the hosts in a rolling update", () => {
  const planner = new AllocationPlanner(
    shardCount,
    new RoleAwareAllocation(new LeastLoadedAllocation(), ["backend"]),
    new RateLimitedRebalance(),
  );
  const frontend = node("front", "1.0.0", "Up", []);
  const a = node("a", "2.0.0", "Up", ["backend"]);
  const b = node("b", "2.0.0", "Up", ["backend"]);
  const plan = planner.initial([frontend, a]);
  assert.deepEqual(countsBySystem(plan), { a: shardCount });
  const result = planner.reconcile(plan, [frontend, a, b]);
  assert.ok(result.moved.length > 0, "b, a host of the same version as a, is rebalanced onto");
  assert.ok(result.pending);
});
