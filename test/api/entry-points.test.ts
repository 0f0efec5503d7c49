// Small API items a newcomer meets first: names exported where a user of that layer looks for them, and argument
// errors that say what was expected.
import assert from "node:assert/strict";
import { test } from "node:test";
import * as cluster from "../../src/cluster/index.ts";
import * as actor from "../../src/index.ts";
import { ClusterShardingConfigurationError, WeightedLeastLoadedAllocation } from "../../src/sharding/index.ts";

test("UniqueAddress and Address come from movie/cluster too, the very same classes as movie's", () => {
  assert.equal(cluster.UniqueAddress, actor.UniqueAddress);
  assert.equal(cluster.Address, actor.Address);
});

test("WeightedLeastLoadedAllocation with swapped arguments says they are swapped and how to write it", () => {
  const weight = () => 1;
  assert.throws(
    () => new WeightedLeastLoadedAllocation("by-role" as never, weight as never),
    (e: unknown) =>
      e instanceof ClusterShardingConfigurationError &&
      e.field === "allocation.weight" &&
      e.message.includes("arguments of WeightedLeastLoadedAllocation are swapped") &&
      e.message.includes('new WeightedLeastLoadedAllocation(weightFunction, "by-role")'),
  );
  assert.throws(
    () => new WeightedLeastLoadedAllocation(42 as never),
    /expects a weight function \(member\) => positive integer as its first argument \(got 42\)/,
  );
  assert.throws(
    () => new WeightedLeastLoadedAllocation(weight, ""),
    /expects a non-empty strategy id .* as its second argument/,
  );
  assert.equal(
    new WeightedLeastLoadedAllocation(weight, "by-role").configurationKey,
    "WeightedLeastLoadedAllocation:by-role",
  );
});
