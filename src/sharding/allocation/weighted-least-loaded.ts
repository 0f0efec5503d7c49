import type { UniqueAddress } from "../../actor/index.ts";
import { describe } from "../../actor/untrusted.ts";
import { ClusterShardingConfigurationError } from "../errors.ts";
import {
  type Allocations,
  eligibleMembers,
  loadsOf,
  type ShardAllocationStrategy,
  type ShardingMember,
} from "./strategy.ts";

/** The capacity weight of a member: a positive integer, computed identically on every node (usually from roles). */
export type MemberWeight = (member: ShardingMember) => number;

/**
 * Balances shard counts relative to a positive weight per member: the minimum of (load / weight, UniqueAddress).
 * Weights 1 and 3 over 40 shards give 10 and 30. The weight function cannot be compared across nodes, so its
 * `strategyId` stands in for it in the compatibility key: give the same id only to the same function.
 */
export class WeightedLeastLoadedAllocation implements ShardAllocationStrategy {
  readonly configurationKey: string;

  /**
   * @param weight the member's capacity weight, a positive integer
   * @param strategyId identifies `weight` in the settings key; default "default"
   * @throws ClusterShardingConfigurationError when `weight` is not a function (saying so when the arguments are swapped)
   *   or `strategyId` is empty
   */
  constructor(
    private readonly weight: MemberWeight,
    readonly strategyId = "default",
  ) {
    // Checked first and told apart: `new WeightedLeastLoadedAllocation("id", fn)` (arguments swapped) is the usual slip.
    if (typeof weight === "string" && typeof strategyId === "function") {
      throw new ClusterShardingConfigurationError(
        `the arguments of WeightedLeastLoadedAllocation are swapped: the weight function comes first, then the strategy id; write new WeightedLeastLoadedAllocation(weightFunction, ${JSON.stringify(weight)})`,
        "allocation.weight",
      );
    }
    if (typeof weight !== "function") {
      throw new ClusterShardingConfigurationError(
        `WeightedLeastLoadedAllocation expects a weight function (member) => positive integer as its first argument (got ${describe(weight)})`,
        "allocation.weight",
      );
    }
    if (typeof strategyId !== "string" || strategyId.length === 0) {
      throw new ClusterShardingConfigurationError(
        `WeightedLeastLoadedAllocation expects a non-empty strategy id (a stable name for the weight function) as its second argument (got ${describe(strategyId)})`,
        "allocation.strategyId",
      );
    }
    this.configurationKey = `WeightedLeastLoadedAllocation:${strategyId}`;
  }

  allocate(_shardId: number, members: readonly ShardingMember[], current: Allocations): UniqueAddress | null {
    const eligible = eligibleMembers(members);
    if (eligible.length === 0) return null;
    const weights = eligible.map((m) => this.weightOf(m));
    const loads = loadsOf(current);
    return eligible[
      this.pickIndex(
        eligible.map((m) => loads.get(m.uniqueAddress.toString()) ?? 0),
        weights,
      )
    ]!.uniqueAddress;
  }

  allocateAll(shardCount: number, members: readonly ShardingMember[]): Map<number, UniqueAddress> {
    const eligible = eligibleMembers(members);
    const plan = new Map<number, UniqueAddress>();
    if (eligible.length === 0) return plan;
    const weights = eligible.map((m) => this.weightOf(m));
    const loads = eligible.map(() => 0);
    for (let shard = 0; shard < shardCount; shard++) {
      const i = this.pickIndex(loads, weights);
      loads[i]!++;
      plan.set(shard, eligible[i]!.uniqueAddress);
    }
    return plan;
  }

  // Compares load_a / weight_a with load_b / weight_b by cross-multiplying: exact for integers, no float ties.
  private pickIndex(loads: readonly number[], weights: readonly number[]): number {
    let best = 0;
    for (let i = 1; i < loads.length; i++) {
      if (loads[i]! * weights[best]! < loads[best]! * weights[i]!) best = i;
    }
    return best;
  }

  private weightOf(member: ShardingMember): number {
    const w = this.weight(member);
    if (typeof w !== "number" || !Number.isInteger(w) || w <= 0) {
      throw new ClusterShardingConfigurationError(
        `member allocation weight must be positive (got ${String(w)} for ${member.uniqueAddress}); return a positive integer`,
        "allocation.weight",
      );
    }
    return w;
  }
}
