import type { UniqueAddress } from "../../actor/index.ts";
import { Fnv1a64 } from "../hash/fnv1a64.ts";
import { eligibleMembers, type ShardAllocationStrategy, type ShardingMember } from "./strategy.ts";

/**
 * Highest-random-weight placement: each shard goes to the member with the maximum (score(shard, member),
 * UniqueAddress), ties to the highest address. A score depends only on the shard and the member, so adding a member
 * moves only the shards that member now wins, and removing one moves only the shards it held (docs/protocol.md §5.3).
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
    // The member part of every score is the same bytes for every shard: encode it once per member.
    const suffixes = eligible.map((m) => memberBytes(m.uniqueAddress));
    const h = this.hasher;
    for (let shard = 0; shard < shardCount; shard++) {
      let best = 0;
      let bestHi = 0;
      let bestLo = 0;
      for (let i = 0; i < eligible.length; i++) {
        h.reset().u32le(shard).bytes(suffixes[i]!);
        // Every unsigned score is >= (0, 0), so the first member is always taken.
        if (Fnv1a64.compare(h.hi, h.lo, bestHi, bestLo) >= 0) {
          best = i;
          bestHi = h.hi;
          bestLo = h.lo;
        }
      }
      plan.set(shard, eligible[best]!.uniqueAddress);
    }
    return plan;
  }

  /** The 64-bit score of `member` for `shardId` as [hi, lo] unsigned halves (exposed for tests). */
  score(shardId: number, member: UniqueAddress): [number, number] {
    const h = this.hash(shardId, member);
    return [h.hi, h.lo];
  }

  private hash(shardId: number, member: UniqueAddress): Fnv1a64 {
    const a = member.address;
    // The exact bytes of docs/protocol.md §5.3, so that scores match the original implementation's.
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
      if (Fnv1a64.compare(h.hi, h.lo, bestHi, bestLo) >= 0) {
        best = m.uniqueAddress;
        bestHi = h.hi;
        bestLo = h.lo;
      }
    }
    return best;
  }
}

const encoder = new TextEncoder();

/** protocol 0x00 system 0x00 host 0x00 port(u32 LE) uid 0x00: the member part of a rendezvous score. */
function memberBytes(member: UniqueAddress): Uint8Array {
  const a = member.address;
  const port = a.port ?? 0;
  const parts = [
    encoder.encode(a.protocol),
    Uint8Array.of(0),
    encoder.encode(a.system),
    Uint8Array.of(0),
    encoder.encode(a.host ?? ""),
    Uint8Array.of(0),
    Uint8Array.of(port & 0xff, (port >>> 8) & 0xff, (port >>> 16) & 0xff, port >>> 24),
    encoder.encode(member.uid),
    Uint8Array.of(0),
  ];
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
