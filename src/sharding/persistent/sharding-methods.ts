/**
 * `sharding.initEventSourced(...)`, `sharding.initDurableState(...)` and `sharding.initProjection(...)`, added to
 * ClusterSharding by importing
 * `movie/sharding/persistent` (as `movie/remote` adds `system.enableRemoting`), so ordinary sharding loads no
 * persistence code and persistent entities are still initialised with a method like every other type.
 */
import { type EntityType, InvalidPersistenceRequestError, type Projection } from "../../persistence/index.ts";
import { ClusterSharding } from "../cluster-sharding.ts";
import type { ShardedEntityType } from "../entity-ref.ts";
import { initPersistent, type PersistentShardingOptions } from "./init-persistent.ts";
import {
  changeProjectionControl,
  type ProjectionSliceFigures,
  readProjectionControl,
  readProjectionSliceReports,
  type ShardedProjectionControl,
  shardedProjectionNames,
} from "./projection-control.ts";
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
    /** The names of the projections initialised on this node with initProjection, sorted. */
    projectionNames(): string[];
    /**
     * The stored control (paused, pending rebuild) and checkpoint of each slice of projection `name`.
     * @throws UnknownShardedProjectionError when this node did not initialise it
     */
    projectionControl(name: string): Promise<ShardedProjectionControl>;
    /**
     * Each slice owner's runner figures of projection `name` (status, events/s, last error), asked through sharding:
     * by slice index, null where there is no owner or it did not answer within `timeoutMs` (default 2,000).
     * @throws UnknownShardedProjectionError when this node did not initialise it
     */
    projectionSliceReports(name: string, timeoutMs?: number): Promise<(ProjectionSliceFigures | null)[]>;
    /**
     * Pauses projection `name` cluster-wide: every slice's control row says paused, so its owner stops after the
     * batch in flight, and so does every later owner (handoff, restart) until resumed. Resolves once stored.
     * @throws UnknownShardedProjectionError when this node did not initialise it
     */
    pauseProjection(name: string): Promise<ShardedProjectionControl>;
    /**
     * Resumes projection `name` cluster-wide (see {@link ClusterSharding.pauseProjection}).
     * @throws UnknownShardedProjectionError when this node did not initialise it
     */
    resumeProjection(name: string): Promise<ShardedProjectionControl>;
    /**
     * Rebuilds projection `name` from `fromOffset` cluster-wide: each slice's owner, now or after a handoff, runs the
     * definition's `reset` and moves the slice's checkpoint to `fromOffset` in one fenced transaction that clears the
     * request, then handles the events after it again: once per rebuild. Works while paused (the slice stays paused).
     * @throws UnknownShardedProjectionError when this node did not initialise it
     * @throws InvalidPersistenceRequestError when `fromOffset` is not a whole number ≥ 0
     */
    rebuildProjection(name: string, fromOffset: number): Promise<ShardedProjectionControl>;
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

ClusterSharding.prototype.projectionNames = function projectionNames(this: ClusterSharding): string[] {
  return shardedProjectionNames(this);
};

ClusterSharding.prototype.projectionControl = function projectionControl(
  this: ClusterSharding,
  name: string,
): Promise<ShardedProjectionControl> {
  return readProjectionControl(this, name);
};

ClusterSharding.prototype.projectionSliceReports = function projectionSliceReports(
  this: ClusterSharding,
  name: string,
  timeoutMs?: number,
): Promise<(ProjectionSliceFigures | null)[]> {
  return readProjectionSliceReports(this, name, timeoutMs);
};

ClusterSharding.prototype.pauseProjection = function pauseProjection(
  this: ClusterSharding,
  name: string,
): Promise<ShardedProjectionControl> {
  return changeProjectionControl(this, name, { paused: true });
};

ClusterSharding.prototype.resumeProjection = function resumeProjection(
  this: ClusterSharding,
  name: string,
): Promise<ShardedProjectionControl> {
  return changeProjectionControl(this, name, { paused: false });
};

ClusterSharding.prototype.rebuildProjection = function rebuildProjection(
  this: ClusterSharding,
  name: string,
  fromOffset: number,
): Promise<ShardedProjectionControl> {
  // null would withdraw a pending rebuild: not what "rebuild" means.
  if (typeof fromOffset !== "number") {
    return Promise.reject(new InvalidPersistenceRequestError("fromOffset", "expected a whole number ≥ 0"));
  }
  return changeProjectionControl(this, name, { rebuildFrom: fromOffset });
};
