/**
 * `sharding.initEventSourced(...)`, `sharding.initDurableState(...)` and `sharding.initProjection(...)`, added to
 * ClusterSharding by importing
 * `movie/sharding/persistent` (as `movie/remote` adds `system.enableRemoting`), so ordinary sharding loads no
 * persistence code and persistent entities are still initialised with a method like every other type.
 */
import type { EntityType, Projection } from "../../persistence/index.ts";
import { ClusterSharding } from "../cluster-sharding.ts";
import type { ShardedEntityType } from "../entity-ref.ts";
import { initPersistent, type PersistentShardingOptions } from "./init-persistent.ts";
import { initProjection, type ShardedProjection, type ShardedProjectionOptions } from "./sharded-projection.ts";

declare module "../cluster-sharding.ts" {
  interface ClusterSharding {
    /**
     * Shards the event-sourced entity type `entityType` (from `EventSourcing.get(system).registerEntity`) across the
     * cluster, fenced by PostgreSQL shard leases. Idempotent when every setting matches. Added by importing
     * `movie/sharding/persistent`.
     * @throws ClusterShardingConfigurationError when the backend is not PostgreSQL, the routing name is empty, the
     *   settings are invalid, or an earlier init of the same routing name differs (naming the field)
     * @throws UnknownSettingError for an option no setting has
     */
    initEventSourced<T>(entityType: EntityType<T>, options?: PersistentShardingOptions): ShardedEntityType<T>;
    /**
     * Shards the durable-state entity type `entityType` (from `DurableState.get(system).registerEntity`); otherwise as
     * {@link ClusterSharding.initEventSourced}. Added by importing `movie/sharding/persistent`.
     * @throws ClusterShardingConfigurationError, UnknownSettingError as {@link ClusterSharding.initEventSourced}
     */
    initDurableState<T>(entityType: EntityType<T>, options?: PersistentShardingOptions): ShardedEntityType<T>;
    /**
     * Runs the projection `definition` in the cluster, split into `options.slices` slices by persistence-id hash,
     * each owned by one node at a time through sharding and its shard lease, which fences the slice's checkpoint
     * writes (and an exactly-once handler's writes). Call it on every node that may own a slice. Added by importing
     * `movie/sharding/persistent`.
     * @throws ClusterShardingConfigurationError as {@link ClusterSharding.initEventSourced}, or for bad slices or
     *   keepAliveInterval, or shardCount / partitioner given
     * @throws UnknownSettingError for an option no setting has
     * @throws InvalidPersistenceRequestError for a malformed definition
     */
    initProjection(definition: Projection, options?: ShardedProjectionOptions): ShardedProjection;
  }
}

ClusterSharding.prototype.initEventSourced = function initEventSourced<T>(
  this: ClusterSharding,
  entityType: EntityType<T>,
  options: PersistentShardingOptions = {},
): ShardedEntityType<T> {
  return initPersistent(this, entityType, options, "event-sourced");
};

ClusterSharding.prototype.initDurableState = function initDurableState<T>(
  this: ClusterSharding,
  entityType: EntityType<T>,
  options: PersistentShardingOptions = {},
): ShardedEntityType<T> {
  return initPersistent(this, entityType, options, "durable-state");
};

ClusterSharding.prototype.initProjection = function initShardedProjection(
  this: ClusterSharding,
  definition: Projection,
  options: ShardedProjectionOptions = {},
): ShardedProjection {
  return initProjection(this, definition, options);
};
