import type { UniqueAddress } from "../../actor/index.ts";
import { eligibleMembers } from "../allocation/strategy.ts";
import { ClusterShardingConfigurationError } from "../errors.ts";
import type { AllocationSnapshot, RebalancePolicy } from "./policy.ts";

/** Options of {@link RateLimitedRebalance}. */
export interface RateLimitedRebalanceOptions {
  /** Largest shard-count difference between two owners that counts as balanced; default 1, at least 0. */
  threshold?: number;
  /** Most shards moved voluntarily per reconciliation step; default 4, at least 1. */
  maxConcurrent?: number;
}

/**
 * Moves at most `maxConcurrent` misplaced shards per reconciliation step until the load threshold is met
 * (docs/protocol.md §5.4). With a balanced target (range ≤ 1) it stops once current loads are within `threshold`; with an
 * unbalanced target (weights, rendezvous) it keeps moving misplaced shards until the plan equals the target.
 */
export class RateLimitedRebalance implements RebalancePolicy {
  readonly configurationKey: string;
  readonly threshold: number;
  readonly maxConcurrent: number;

  /**
   * @throws ClusterShardingConfigurationError "rebalance threshold must be non-negative" or "maximum concurrent
   * rebalances must be positive"
   */
  constructor(options: RateLimitedRebalanceOptions = {}) {
    const threshold = options.threshold ?? 1;
    const maxConcurrent = options.maxConcurrent ?? 4;
    if (!Number.isInteger(threshold) || threshold < 0) {
      throw new ClusterShardingConfigurationError(
        `rebalance threshold must be non-negative (got ${String(threshold)}); pass an integer of 0 or more`,
        "rebalance.threshold",
      );
    }
    if (!Number.isInteger(maxConcurrent) || maxConcurrent <= 0) {
      throw new ClusterShardingConfigurationError(
        `maximum concurrent rebalances must be positive (got ${String(maxConcurrent)}); pass an integer of 1 or more`,
        "rebalance.maxConcurrent",
      );
    }
    this.threshold = threshold;
    this.maxConcurrent = maxConcurrent;
    this.configurationKey = `RateLimitedRebalance:${threshold}:${maxConcurrent}`;
  }

  selectShards(snapshot: AllocationSnapshot): number[] {
    const owners = eligibleMembers(snapshot.members).map((m) => m.uniqueAddress);
    if (owners.length < 2) return [];
    return snapshot.targetAllocations === null
      ? this.withoutTarget(snapshot, owners)
      : this.withTarget(snapshot, snapshot.targetAllocations, owners);
  }

  private withTarget(
    snapshot: AllocationSnapshot,
    target: ReadonlyMap<number, UniqueAddress>,
    owners: readonly UniqueAddress[],
  ): number[] {
    const misplaced: number[] = [];
    for (const [shard, owner] of target) {
      if (!snapshot.allocations.get(shard)?.equals(owner)) misplaced.push(shard);
    }
    if (misplaced.length === 0) return [];
    misplaced.sort((a, b) => a - b);
    // Loads are compared over the owners the target uses or that hold shards now: a role filter may leave some Up
    // members out, but a member holding shards the target does not use (fewer shards than members) still counts.
    const used = new Set([...target.values(), ...snapshot.allocations.values()].map((t) => t.toString()));
    const hosts = owners.filter((o) => used.has(o.toString()));
    const targetRange = range(loadsOver(target, hosts));
    if (targetRange <= 1 && range(loadsOver(snapshot.allocations, hosts)) <= this.threshold) return [];
    return misplaced.slice(0, this.maxConcurrent);
  }

  private withoutTarget(snapshot: AllocationSnapshot, owners: readonly UniqueAddress[]): number[] {
    const keys = owners.map((o) => o.toString());
    const loads = loadsOver(snapshot.allocations, owners);
    const byOwner = new Map<string, number[]>(keys.map((k) => [k, []]));
    for (const [shard, owner] of snapshot.allocations) byOwner.get(owner.toString())?.push(shard);
    for (const shards of byOwner.values()) shards.sort((a, b) => a - b);
    const selected: number[] = [];
    while (selected.length < this.maxConcurrent) {
      let most = 0;
      let least = 0;
      // Owners ascend by address, so on equal loads the later one is the highest address (most loaded) and the
      // earlier one the lowest (least loaded).
      for (let i = 1; i < keys.length; i++) {
        if (loads[i]! >= loads[most]!) most = i;
        if (loads[i]! < loads[least]!) least = i;
      }
      if (loads[most]! - loads[least]! <= this.threshold) break;
      const shard = byOwner.get(keys[most]!)!.shift();
      if (shard === undefined) break;
      selected.push(shard);
      loads[most]!--;
      loads[least]!++;
    }
    return selected.sort((a, b) => a - b);
  }
}

function loadsOver(allocations: ReadonlyMap<number, UniqueAddress>, owners: readonly UniqueAddress[]): number[] {
  const index = new Map(owners.map((o, i) => [o.toString(), i]));
  const loads = owners.map(() => 0);
  for (const owner of allocations.values()) {
    const i = index.get(owner.toString());
    if (i !== undefined) loads[i]!++;
  }
  return loads;
}

function range(loads: readonly number[]): number {
  return loads.length === 0 ? 0 : Math.max(...loads) - Math.min(...loads);
}
