/**
 * Persistent sharded entities (event-sourced and durable-state) fenced by PostgreSQL shard leases. A module of its
 * own so that ordinary sharding never loads persistence code. Importing it adds `sharding.initEventSourced` and
 * `sharding.initDurableState` and `sharding.initProjection` to ClusterSharding.
 */
import "./sharding-methods.ts";

export { initDurableState, initEventSourced, type PersistentShardingOptions } from "./init-persistent.ts";
export {
  PersistentEntityProvider,
  type PersistentKind,
  type PersistentProviderOptions,
} from "./persistent-provider.ts";
export {
  initProjection,
  KeepProjectionRunning,
  type ShardedProjection,
  type ShardedProjectionOptions,
} from "./sharded-projection.ts";
