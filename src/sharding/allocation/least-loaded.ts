import type { UniqueAddress } from "../../actor/index.ts";
import {
  type Allocations,
  eligibleMembers,
  loadsOf,
  type ShardAllocationStrategy,
  type ShardingMember,
} from "./strategy.ts";

/**
 * Fills the least-loaded eligible member: the minimum of (shards already assigned, UniqueAddress), so ties go to the
 * lowest address and a plan built from empty is round-robin in address order (docs/protocol.md §5.3).
 */
export class LeastLoadedAllocation implements ShardAllocationStrategy {
  readonly configurationKey = "LeastLoadedAllocation";

  allocate(_shardId: number, members: readonly ShardingMember[], current: Allocations): UniqueAddress | null {
    const eligible = eligibleMembers(members);
    if (eligible.length === 0) return null;
    const loads = loadsOf(current);
    let best = eligible[0]!;
    let bestLoad = loads.get(best.uniqueAddress.toString()) ?? 0;
    for (const m of eligible) {
      const load = loads.get(m.uniqueAddress.toString()) ?? 0;
      // eligible is sorted ascending, so a strict < keeps the lowest address on ties.
      if (load < bestLoad) {
        best = m;
        bestLoad = load;
      }
    }
    return best.uniqueAddress;
  }

  allocateAll(shardCount: number, members: readonly ShardingMember[]): Map<number, UniqueAddress> {
    const eligible = eligibleMembers(members);
    const plan = new Map<number, UniqueAddress>();
    if (eligible.length === 0) return plan;
    for (let shard = 0; shard < shardCount; shard++) plan.set(shard, eligible[shard % eligible.length]!.uniqueAddress);
    return plan;
  }
}
