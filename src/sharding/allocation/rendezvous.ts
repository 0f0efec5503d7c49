import type { UniqueAddress } from "../../actor/index.ts";
import { Fnv1a64 } from "../hash/fnv1a64.ts";
import { eligibleMembers, type ShardAllocationStrategy, type ShardingMember } from "./strategy.ts";

/**
 * Highest-random-weight placement: each shard goes to the member with the maximum (score(shard, member),
 * UniqueAddress), ties to the highest address. A score depends only on the shard and the member, so adding a member
 * moves only the shards that member now wins, and removing one moves only the shards it held (REFERENCE §3.2).
 */
export class RendezvousAllocation implements ShardAllocationStrategy {
  readonly configurationKey = "RendezvousAllocation";
  private readonly hasher = new Fnv1a64();

  allocate(shardId: number, members: readonly ShardingMember[]): UniqueAddress | null {
    return this.pick(shardId, eligibleMembers(members));
  }

  allocateAll(shardCount: number, members: readonly ShardingMember[]): Map<number, UniqueAddress> {
    const eligible = eligibleMembers(members);
    const plan = new Map<number, UniqueAddress>();
    if (eligible.length === 0) return plan;
    for (let shard = 0; shard < shardCount; shard++) plan.set(shard, this.pick(shard, eligible)!);
    return plan;
  }

  /** The 64-bit score of `member` for `shardId` as [hi, lo] unsigned halves (exposed for tests). */
  score(shardId: number, member: UniqueAddress): [number, number] {
    const h = this.hash(shardId, member);
    return [h.hi, h.lo];
  }

  private hash(shardId: number, member: UniqueAddress): Fnv1a64 {
    const a = member.address;
    // The exact bytes of REFERENCE §3.2, so that scores match the original implementation's.
    return this.hasher
      .reset()
      .u32le(shardId)
      .utf8(a.protocol)
      .byte(0)
      .utf8(a.system)
      .byte(0)
      .utf8(a.host ?? "")
      .byte(0)
      .u32le(a.port ?? 0)
      .utf8(member.uid)
      .byte(0);
  }

  // `sorted` ascends by address, so a later member with an equal score wins (ties go to the highest address).
  private pick(shardId: number, sorted: readonly ShardingMember[]): UniqueAddress | null {
    let best: UniqueAddress | null = null;
    let bestHi = 0;
    let bestLo = 0;
    for (const m of sorted) {
      const h = this.hash(shardId, m.uniqueAddress);
      if (best === null || Fnv1a64.compare(h.hi, h.lo, bestHi, bestLo) >= 0) {
        best = m.uniqueAddress;
        bestHi = h.hi;
        bestLo = h.lo;
      }
    }
    return best;
  }
}
