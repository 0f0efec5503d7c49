import assert from "node:assert/strict";
import { test } from "node:test";
import {
  ClusterShardingConfigurationError,
  type EntityPartitioner,
  LeastLoadedAllocation,
  NoRebalance,
  RateLimitedRebalance,
  RendezvousAllocation,
  RoleAwareAllocation,
  ShardingSettings,
  shardingConstants,
  WeightedLeastLoadedAllocation,
} from "../../src/sharding/index.ts";

test("defaults: 256 shards, StableHash, LeastLoaded, RateLimited(1,4), 10 s / 3 s leases, no idle timeout", () => {
  const s = ShardingSettings.create();
  assert.equal(s.shardCount, 256);
  assert.equal(s.partitioner.configurationKey, "StableHashPartitioner");
  assert.equal(s.allocation.configurationKey, "LeastLoadedAllocation");
  assert.equal(s.rebalance.configurationKey, "RateLimitedRebalance:1:4");
  assert.equal(s.leaseDuration, 10_000);
  assert.equal(s.leaseRenewInterval, 3_000);
  assert.equal(s.idleTimeout, null);
  assert.equal(s.key, "256|StableHashPartitioner|LeastLoadedAllocation|RateLimitedRebalance:1:4|10000|3000|none");
});

test("the settings key is deterministic and includes every compatibility field", () => {
  const make = () =>
    ShardingSettings.create({
      shardCount: 64,
      allocation: new RoleAwareAllocation(new RendezvousAllocation(), ["backend"]),
      rebalance: new RateLimitedRebalance({ threshold: 2, maxConcurrent: 3 }),
      idleTimeout: 120_000,
    });
  assert.equal(make().key, make().key);
  assert.equal(
    make().key,
    "64|StableHashPartitioner|RoleAwareAllocation:RendezvousAllocation:backend|RateLimitedRebalance:2:3|10000|3000|120000",
  );
  assert.ok(make().isCompatible(make()));
});

test("invalid settings are rejected with the original's texts and the field", () => {
  const cases: [Parameters<typeof ShardingSettings.create>[0], string, RegExp][] = [
    [{ shardCount: 0 }, "shardCount", /^shard count must be positive/],
    [{ shardCount: -3 }, "shardCount", /^shard count must be positive/],
    [{ leaseDuration: 0 }, "leaseDuration", /^shard lease duration must be positive/],
    [
      { leaseRenewInterval: 0 },
      "leaseRenewInterval",
      /^shard lease renewal interval must be positive and shorter than its duration/,
    ],
    [{ leaseDuration: 1000, leaseRenewInterval: 1000 }, "leaseRenewInterval", /shorter than its duration/],
    [{ idleTimeout: 0 }, "idleTimeout", /^entity idle timeout must be positive/],
    [{ idleTimeout: -5 }, "idleTimeout", /^entity idle timeout must be positive/],
    [{ partitioner: { configurationKey: "" } as unknown as EntityPartitioner }, "partitioner", /configurationKey/],
  ];
  for (const [options, field, text] of cases) {
    assert.throws(
      () => ShardingSettings.create(options),
      (e: unknown) => {
        assert.ok(e instanceof ClusterShardingConfigurationError, String(e));
        assert.equal(e.field, field);
        assert.match(e.message, text);
        return true;
      },
    );
  }
});

test("the wait for a coordinator: defaults, bounds, and local settings outside the key", () => {
  const d = ShardingSettings.create();
  assert.equal(d.awaitCoordinator, true);
  assert.equal(d.heldDeliveriesPerShard, 1_024);
  assert.equal(d.heldDeliveryTimeout, 10_000);
  const local = ShardingSettings.create({ awaitCoordinator: false, heldDeliveriesPerShard: 1, heldDeliveryTimeout: 1 });
  assert.equal(local.key, d.key, "local: nodes may differ");
  assert.ok(local.isCompatible(d));
  const cases: [Parameters<typeof ShardingSettings.create>[0], string][] = [
    [{ awaitCoordinator: "yes" as unknown as boolean }, "awaitCoordinator"],
    [{ heldDeliveriesPerShard: 0 }, "heldDeliveriesPerShard"],
    [{ heldDeliveriesPerShard: 100_001 }, "heldDeliveriesPerShard"],
    [{ heldDeliveriesPerShard: 1.5 }, "heldDeliveriesPerShard"],
    [{ heldDeliveryTimeout: 0 }, "heldDeliveryTimeout"],
    [{ heldDeliveryTimeout: 600_001 }, "heldDeliveryTimeout"],
    [{ heldDeliveryTimeout: Number.NaN }, "heldDeliveryTimeout"],
    [{ heldDeliveryTimeout: "10" as unknown as number }, "heldDeliveryTimeout"],
  ];
  for (const [options, field] of cases) {
    assert.throws(
      () => ShardingSettings.create(options),
      (e: unknown) => e instanceof ClusterShardingConfigurationError && e.field === field,
      JSON.stringify(options),
    );
  }
});

test("the compatibility check names the first mismatching field", () => {
  const base = ShardingSettings.create({ idleTimeout: 1000 });
  const differing: [Parameters<typeof ShardingSettings.create>[0], string][] = [
    [{ shardCount: 128, idleTimeout: 1000 }, "shardCount"],
    [{ partitioner: { configurationKey: "Custom", shardFor: () => 0 }, idleTimeout: 1000 }, "partitioner"],
    [{ allocation: new RendezvousAllocation(), idleTimeout: 1000 }, "allocation"],
    [{ allocation: new WeightedLeastLoadedAllocation(() => 1, "x"), idleTimeout: 1000 }, "allocation"],
    [{ rebalance: new NoRebalance(), idleTimeout: 1000 }, "rebalance"],
    [{ rebalance: new RateLimitedRebalance({ maxConcurrent: 5 }), idleTimeout: 1000 }, "rebalance"],
    [{ leaseDuration: 20_000, idleTimeout: 1000 }, "leaseDuration"],
    [{ leaseRenewInterval: 2_000, idleTimeout: 1000 }, "leaseRenewInterval"],
    [{ idleTimeout: 2000 }, "idleTimeout"],
    [{}, "idleTimeout"],
    [{ idleTimeout: 1000, routing: "direct" }, "routing"],
  ];
  for (const [options, field] of differing) {
    const other = ShardingSettings.create(options);
    assert.equal(base.incompatibleField(other), field);
    assert.notEqual(base.key, other.key);
  }
  assert.equal(
    base.incompatibleField(ShardingSettings.create({ idleTimeout: 1000, allocation: new LeastLoadedAllocation() })),
    null,
  );
});

test("timing constants match docs/protocol.md §15", () => {
  assert.equal(shardingConstants.leaseRetryIntervalMs, 25);
  assert.equal(shardingConstants.reconcileIntervalMs, 100);
  assert.equal(shardingConstants.planSyncIntervalMs, 250);
  assert.equal(shardingConstants.handoffTimeoutMs, 2_000);
  assert.equal(shardingConstants.handoffBufferCountMax, 1_024);
  assert.equal(shardingConstants.deliveryRetryDrainBatch, 64);
  assert.equal(shardingConstants.bootstrapSnapshotWindowMs, 500);
  assert.equal(shardingConstants.askTimeoutDefaultMs, 30_000);
  assert.equal(shardingConstants.activateTimeoutDefaultMs, 2_000);
});

test("routing: coordinator by default with the key nodes of earlier versions compute; direct is in the key", () => {
  const d = ShardingSettings.create();
  assert.equal(d.routing, "coordinator");
  assert.equal(ShardingSettings.create({ routing: "coordinator" }).key, d.key);
  const direct = ShardingSettings.create({ routing: "direct" });
  assert.equal(direct.routing, "direct");
  assert.equal(direct.key, `${d.key}|direct`);
  assert.equal(d.incompatibleField(direct), "routing");
  for (const bad of ["Direct", "", 1, {}]) {
    assert.throws(
      () => ShardingSettings.create({ routing: bad as "direct" }),
      (e: unknown) => e instanceof ClusterShardingConfigurationError && e.field === "routing",
      String(bad),
    );
  }
});
