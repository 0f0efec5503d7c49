import type { Allocations, ShardingMember } from "../allocation/strategy.ts";

/** What a rebalance policy sees: members, the current plan, and (from the planner) the desired target plan. */
export interface AllocationSnapshot {
  readonly members: readonly ShardingMember[];
  readonly allocations: Allocations;
  /** The desired plan, or null when a policy is used directly without one. */
  readonly targetAllocations: Allocations | null;
}

/**
 * Chooses which shards may move voluntarily in one reconciliation step. Shards on ineligible owners always move;
 * a policy only limits the voluntary moves. Must be deterministic and pure.
 */
export interface RebalancePolicy {
  /** Stable identity of this policy's configuration; part of the settings compatibility key. */
  readonly configurationKey: string;
  /** Shard ids (ascending) to move now. */
  selectShards(snapshot: AllocationSnapshot): number[];
}
