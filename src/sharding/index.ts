/** Cluster sharding (`movie/sharding`): stable logical entity addresses over a cluster (seed, REFERENCE §2–3). */
export { LeastLoadedAllocation } from "./allocation/least-loaded.ts";
export { compareAppVersions, NewestVersionAllocation } from "./allocation/newest-version.ts";
export { AllocationPlanner, type ReconcileResult } from "./allocation/planner.ts";
export { RendezvousAllocation } from "./allocation/rendezvous.ts";
export { RoleAwareAllocation } from "./allocation/role-aware.ts";
export {
  type Allocations,
  allocateShardByShard,
  desiredAllocations,
  eligibleMembers,
  type ShardAllocationStrategy,
  type ShardingMember,
  type ShardingMemberStatus,
} from "./allocation/strategy.ts";
export { type MemberWeight, WeightedLeastLoadedAllocation } from "./allocation/weighted-least-loaded.ts";
export { ClusterSharding, type ShardingRuntime } from "./cluster-sharding.ts";
export { inProcessCodec, type PayloadCodec, RegistryCodec, registerShardingWireTypes } from "./codec.ts";
export * as shardingConstants from "./constants.ts";
export {
  acceptingCoordinator,
  type ElectionSnapshot,
  electCoordinator,
  routingCoordinator,
} from "./coordinator/election.ts";
export type { WireMessage } from "./coordinator/messages.ts";
export {
  PassivateShard,
  PlanRequest,
  PlanSnapshot,
  PlanSnapshotRequest,
  PlanUpdate,
  PrepareShard,
  ShardingControlAck,
  ShardingEnvelope,
  wireNames as shardingWireNames,
} from "./coordinator/messages.ts";
export { type EntityRouter, ShardedEntityRef, ShardedEntityType } from "./entity-ref.ts";
export {
  ClusterShardingConfigurationError,
  NoShardOwnerError,
  ShardHandoffInProgressError,
  ShardLeaseUnavailableError,
  ShardMailboxOverflowError,
  UnsupportedSystemMessageError,
} from "./errors.ts";
export type { ShardingClusterSnapshot, ShardingMembership } from "./membership.ts";
export { type EntityPartitioner, StableHashPartitioner } from "./partitioner.ts";
export { EntityProvider, type ShardingProvider } from "./provider.ts";
export { NoRebalance } from "./rebalance/no-rebalance.ts";
export type { AllocationSnapshot, RebalancePolicy } from "./rebalance/policy.ts";
export { RateLimitedRebalance, type RateLimitedRebalanceOptions } from "./rebalance/rate-limited.ts";
export { VersionAwareRebalance } from "./rebalance/version-aware.ts";
export { RetryBarrier } from "./retry-barrier.ts";
export { ShardingSettings, type ShardingSettingsField, type ShardingSettingsOptions } from "./settings.ts";
export type { MalformedReason, ShardingStats } from "./stats.ts";
