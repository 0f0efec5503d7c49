/** Cluster singleton: one instance cluster-wide on a one-shard sharding facade (docs/protocol.md §12). */
export { isActivationCoordinator } from "./activation-coordinator.ts";
export { ClusterSingleton, ClusterSingletonRef } from "./cluster-singleton.ts";
export { ClusterSingletonConfigurationError } from "./errors.ts";
export {
  type ClusterSingletonOptions,
  type ClusterSingletonSettings,
  firstActivationDelayMs,
  type PersistentSingletonOptions,
  type PersistentSingletonSettings,
  resolvePersistentSingletonSettings,
  resolveSingletonSettings,
  singletonDefaults,
  singletonSettingsKey,
} from "./settings.ts";
export {
  encodeBackingIdentity,
  type SingletonBackingIdentity,
  type SingletonKind,
  SingletonPartitioner,
} from "./singleton-partitioner.ts";
export { type SharedShardingTotals, type SingletonCounter, SingletonCounters, type SingletonStats } from "./stats.ts";
export { ordinarySingletonEntityId, singletonTypeName, singletonTypePrefix } from "./type-name.ts";
