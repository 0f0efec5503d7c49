/**
 * Persistent sharded entities (event-sourced and durable-state) fenced by PostgreSQL shard leases. A module of its
 * own so that ordinary sharding never loads persistence code. Importing it adds `sharding.initEventSourced`,
 * `sharding.initDurableState` and `sharding.initProjection` (projections owned through sharding) to ClusterSharding.
 */
import "./sharding-methods.ts";

export { initDurableState, initEventSourced, type PersistentShardingOptions } from "./init-persistent.ts";
export {
  PersistentEntityProvider,
  type PersistentKind,
  type PersistentProviderOptions,
} from "./persistent-provider.ts";
export {
  changeProjectionControl,
  type ProjectionSliceControl,
  type ProjectionSliceFigures,
  readProjectionControl,
  readProjectionSliceReports,
  type ShardedProjectionControl,
  shardedProjectionNames,
} from "./projection-control.ts";
export { MAX_PROJECTION_SLICES, projectionSliceName, projectionSliceOf } from "./projection-slices.ts";
export {
  initProjection,
  KeepProjectionRunning,
  ProjectionControlChanged,
  ProjectionSliceReport,
  ReportProjectionSlice,
  type ShardedProjection,
  type ShardedProjectionOptions,
} from "./sharded-projection.ts";
