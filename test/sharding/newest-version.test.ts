// Rolling-update placement: NewestVersionAllocation + VersionAwareRebalance move each shard once per rolling
// update (onto the replacement of its owner), where the default strategy moves shards several times.
import assert from "node:assert/strict";
import { test } from "node:test";
import { UniqueAddress } from "../../src/actor/index.ts";
import {
  AllocationPlanner,
  compareAppVersions,
  LeastLoadedAllocation,
  NewestVersionAllocation,
  RateLimitedRebalance,
  RoleAwareAllocation,
  type ShardAllocationStrategy,
  type ShardingMember,
  VersionAwareRebalance,
} from "../../src/sharding/index.ts";

test("compareAppVersions: numeric segments, prefixes older, none oldest, total and antisymmetric", () => {
  const ordered = ["", "1", "1.0.1", "1.2", "1.10", "2.0.0-rc1", "2.0.0-rc2", "2.0.0", "10"];
  // "2.0.0-rc1" vs "2.0.0": the prefix "2.0.0" is older by the prefix rule (documented; use build numbers to order).
  const sorted = [...ordered].sort(compareAppVersions);
  assert.deepEqual(sorted, ["", "1", "1.0.1", "1.2", "1.10", "2.0.0", "2.0.0-rc1", "2.0.0-rc2", "10"]);
  for (const a of ordered)
    for (const b of ordered) assert.equal(Math.sign(compareAppVersions(a, b)) + Math.sign(compareAppVersions(b, a)), 0);
  assert.notEqual(compareAppVersions("01", "1"), 0, "distinct texts never compare equal (total order)");
});

const member = (port: number, appVersion: string, roles = ["backend"]): ShardingMember => ({
  uniqueAddress: UniqueAddress.parse(`movie.tcp://s@127.0.0.1:${port}#u${port}`),
  status: "Up",
  roles,
  appVersion,
});

/** Replaces every backend, one at a time (join the new, then the old leaves), reconciling to a fixed point after each step. */
function roll(allocation: ShardAllocationStrategy, rebalance = new RateLimitedRebalance()) {
  const shardCount = 64;
  const planner = new AllocationPlanner(shardCount, allocation, rebalance);
  const frontend = member(50000, "1", ["frontend"]);
  let members = [frontend, member(40001, "1"), member(40002, "1"), member(40003, "1")];
  let plan = planner.initial(members);
  const moves = new Array<number>(shardCount).fill(0);
  const settle = () => {
    for (let i = 0; i < 1_000; i++) {
      const r = planner.reconcile(plan, members);
      for (const s of r.moved) moves[s]!++;
      plan = r.allocations;
      if (r.moved.length === 0) return;
    }
    throw new Error("no fixed point");
  };
  settle();
  for (const [step, old] of [40003, 40002, 40001].entries()) {
    members = [...members, member(40010 + step, "2")];
    settle();
    members = members.map((m) => (m.uniqueAddress.address.port === old ? { ...m, status: "Leaving" } : m));
    settle();
    members = members.filter((m) => m.uniqueAddress.address.port !== old);
    settle();
  }
  const loads = new Map<number, number>();
  for (const o of plan.values()) loads.set(o.address.port!, (loads.get(o.address.port!) ?? 0) + 1);
  return { moves, loads, plan };
}

test("with versions, each shard moves exactly once in a rolling update and the result is balanced", () => {
  const { moves, loads } = roll(
    new NewestVersionAllocation(new RoleAwareAllocation(new LeastLoadedAllocation(), ["backend"])),
    new VersionAwareRebalance(new RateLimitedRebalance()) as never,
  );
  assert.deepEqual([...new Set(moves)], [1], "every shard moved exactly once");
  assert.deepEqual([...loads.keys()].sort(), [40010, 40011, 40012], "only new-version backends host, no frontend");
  const counts = [...loads.values()];
  assert.ok(Math.max(...counts) - Math.min(...counts) <= 1, `balanced: ${counts}`);
});

test("without versions the same roll moves shards more than once (what the decorators fix)", () => {
  const { moves } = roll(new RoleAwareAllocation(new LeastLoadedAllocation(), ["backend"]));
  assert.ok(Math.max(...moves) > 1, `some shard moved ${Math.max(...moves)} times`);
});

test("newest version among hosts only: an older or newer frontend does not count, and no version is oldest", () => {
  const strategy = new NewestVersionAllocation(new RoleAwareAllocation(new LeastLoadedAllocation(), ["backend"]));
  const members = [member(1, "9", ["frontend"]), member(2, "1"), member(3, "2"), member(4, "")];
  assert.deepEqual(
    strategy.newest(members).map((m) => m.uniqueAddress.address.port),
    [3],
  );
  assert.equal(strategy.configurationKey, "NewestVersionAllocation:RoleAwareAllocation:LeastLoadedAllocation:backend");
  assert.equal(strategy.allocate(5, members, new Map())?.address.port, 3);
});
