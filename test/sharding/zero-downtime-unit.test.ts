// The wait settings (validated, local, not in the settings key) and the pure held-deliveries queue.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ClusterShardingConfigurationError, NoShardOwnerError, ShardingSettings } from "../../src/sharding/index.ts";
import { HeldDeliveries } from "../../src/sharding/wait/held-deliveries.ts";

test("wait settings: defaults, validation naming the field, local (not in the key)", () => {
  const d = ShardingSettings.create();
  assert.equal(d.awaitCoordinator, false);
  assert.equal(d.heldTellsPerShard, 1_000);
  assert.equal(d.heldTellTimeout, 10_000);
  const on = ShardingSettings.create({ awaitCoordinator: true, heldTellsPerShard: 5, heldTellTimeout: 250 });
  assert.equal(on.awaitCoordinator, true);
  assert.equal(on.key, d.key, "local settings are not part of the compatibility key");
  assert.equal(on.incompatibleField(d), null);
  const hostile: unknown[] = [
    0,
    -1,
    1.5,
    Number.NaN,
    Number.POSITIVE_INFINITY,
    "10",
    null,
    {},
    [],
    { toString: () => "boom" },
    { valueOf: () => 10 },
    JSON.parse('{"__proto__": {"x": 1}}'),
    10n,
    "x".repeat(100_000),
  ];
  for (const [field, extra] of [
    ["heldTellsPerShard", [100_001]],
    ["heldTellTimeout", [3_600_001]],
  ] as const) {
    for (const value of [...hostile, ...extra]) {
      if (value === null) continue; // null means "default" for these options, like undefined
      assert.throws(
        () => ShardingSettings.create({ [field]: value } as never),
        (e: unknown) => e instanceof ClusterShardingConfigurationError && e.field === field && e.message.length < 400,
        `${field} = ${typeof value}`,
      );
    }
  }
  for (const value of [1, 0, "true", {}, { valueOf: () => true }, "x".repeat(100_000)]) {
    assert.throws(
      () => ShardingSettings.create({ awaitCoordinator: value } as never),
      (e: unknown) => e instanceof ClusterShardingConfigurationError && e.field === "awaitCoordinator",
    );
  }
});

test("held deliveries: FIFO per shard, bounded per shard, expiry keeps the order of the rest", () => {
  const q = new HeldDeliveries<string>(3);
  const entry = (delivery: string, deadlineMs: number) => ({ delivery, heldAt: "caller" as const, deadlineMs });
  assert.equal(q.hold(1, entry("a", 100)), true);
  assert.equal(q.hold(1, entry("b", 50)), true);
  assert.equal(q.hold(1, entry("c", 200)), true);
  assert.equal(q.hold(1, entry("d", 200)), false, "the fourth for one shard is refused");
  assert.equal(q.hold(2, entry("x", 200)), true, "another shard has its own bound");
  assert.equal(q.size, 4);
  assert.deepEqual(q.heldShards(), [1, 2]);
  const expired = q.expire(60);
  assert.deepEqual(
    expired.map((e) => [e.shard, e.entry.delivery]),
    [[1, "b"]],
  );
  assert.equal(q.head(1)?.delivery, "a");
  q.shift(1);
  assert.equal(q.head(1)?.delivery, "c");
  q.shift(1);
  assert.equal(q.holds(1), false, "an emptied shard holds nothing (new deliveries route directly)");
  assert.equal(q.size, 1);
  assert.deepEqual(
    q.clear().map((e) => e.delivery),
    ["x"],
  );
  assert.equal(q.size, 0);
});

test("NoShardOwnerError.afterWait names the unreachable members, or says it was a transition", () => {
  const one = NoShardOwnerError.afterWait("Order", 3, "after waiting", ["movie.tcp://s@h:1#a"]);
  assert.deepEqual(one.unreachableMembers, ["movie.tcp://s@h:1#a"]);
  assert.match(
    one.message,
    /Order shard 3; after waiting while member movie\.tcp:\/\/s@h:1#a is unreachable: bring it back or down it/,
  );
  const many = NoShardOwnerError.afterWait("Order", 3, "after waiting", ["a", "b", "c", "d", "e"]);
  assert.match(many.message, /members a, b, c and 2 more are unreachable/);
  const none = NoShardOwnerError.afterWait("Order", 3, "after waiting", []);
  assert.match(none.message, /re-converged: retry later/);
  assert.equal(none.name, "NoShardOwnerError");
});
