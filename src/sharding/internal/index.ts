/**
 * Sharding's internals, in one place for the modules built on it (`movie/sharding/persistent`, the cluster singleton),
 * the simulator, benchmarks and tests. Not a package entry point and not public API: it may change with them. What a
 * user of `movie/sharding` needs is exported from `src/sharding/index.ts`.
 */
export type { ShardingRuntime } from "../cluster-sharding.ts";
export { type OwnershipSnapshot, safeToOwn } from "../lease/safe-to-own.ts";
export { AllocationPlanner, type ReconcileResult } from "./allocation-planner.ts";
export { inProcessCodec, type PayloadCodec, RegistryCodec, registerShardingWireTypes } from "./codec.ts";
export { acceptingCoordinator, type ElectionSnapshot, electCoordinator, routingCoordinator } from "./election.ts";
export { type ShardingHost, shardingHostOf } from "./host.ts";
export {
  CancelPreparations,
  CoordinatorFlush,
  CoordinatorFlushed,
  DirectBatch,
  DirectEnvelope,
  PassivateShard,
  PlanRequest,
  PlanSnapshot,
  PlanSnapshotRequest,
  PlanUpdate,
  PrepareShard,
  ShardingControlAck,
  ShardingEnvelope,
  type WireMessage,
  wireNames as shardingWireNames,
} from "./messages.ts";
export { EntityProvider, type ShardingProvider } from "./provider.ts";
export { RetryBarrier } from "./retry-barrier.ts";
