/** Cluster sharding (`movie/sharding`): stable logical entity addresses over a cluster (seed, docs/protocol.md §5–§10). */
export { LeastLoadedAllocation } from "./allocation/least-loaded.ts";
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
export { ClusterSharding } from "./cluster-sharding.ts";
/** The protocol's fixed timings and bounds (handoff timeout, retry intervals, buffer sizes), as named constants. */
export * as shardingConstants from "./constants.ts";
export type { ShardMoveDecision, ShardMoveRefusal } from "./coordinator/shard-move.ts";
export { type EntityRouter, ShardedEntityRef, ShardedEntityType } from "./entity-ref.ts";
export {
  ClusterShardingConfigurationError,
  DirectDeliveryRefusedError,
  NoShardOwnerError,
  ShardHandoffInProgressError,
  ShardLeaseUnavailableError,
  ShardMailboxOverflowError,
  UnsupportedSystemMessageError,
} from "./errors.ts";
export type { ShardingTypeInspection, ShardLeaseView } from "./inspection.ts";
/** What `ClusterSharding.activate` resolves with (`accepted`: this call created the entity). */
export type { ShardingControlAck } from "./internal/messages.ts";
export type { ShardingClusterSnapshot, ShardingMembership } from "./membership.ts";
export { type EntityPartitioner, StableHashPartitioner } from "./partitioner.ts";
export { NoRebalance } from "./rebalance/no-rebalance.ts";
export type { AllocationSnapshot, RebalancePolicy } from "./rebalance/policy.ts";
export { RateLimitedRebalance, type RateLimitedRebalanceOptions } from "./rebalance/rate-limited.ts";
export { ShardingSettings, type ShardingSettingsField, type ShardingSettingsOptions } from "./settings.ts";
export type { MalformedReason, ShardingStats } from "./stats.ts";
export type { ShardedCall, ShardingSpan, ShardingTracer } from "./tracing/sharding-tracer.ts";
export { formatTraceparent, parseTraceparent, type TraceContext } from "./tracing/traceparent.ts";
