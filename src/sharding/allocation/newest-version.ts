import type { UniqueAddress } from "../../actor/index.ts";
import {
  type Allocations,
  allocateShardByShard,
  eligibleMembers,
  type ShardAllocationStrategy,
  type ShardingMember,
} from "./strategy.ts";

/**
 * Orders application versions: segments split at '.', '-', '+' and '_' compare numerically when both are digits,
 * else as text; a version that is a prefix of another is older ("2" < "2.1"); no version ("") is the oldest.
 * Deterministic and total, so every node picks the same newest version.
 */
export function compareAppVersions(a: string, b: string): number {
  if (a === b) return 0;
  if (a === "") return -1;
  if (b === "") return 1;
  const x = a.split(/[.+_-]/);
  const y = b.split(/[.+_-]/);
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const p = x[i]!;
    const q = y[i]!;
    if (p === q) continue;
    if (/^\d+$/.test(p) && /^\d+$/.test(q)) {
      // Numerically: without leading zeros, the longer is larger; equal lengths compare as text.
      const pn = p.replace(/^0+(?=\d)/, "");
      const qn = q.replace(/^0+(?=\d)/, "");
      if (pn.length !== qn.length) return pn.length - qn.length;
      if (pn !== qn) return pn < qn ? -1 : 1;
      continue;
    }
    return p < q ? -1 : 1;
  }
  if (x.length !== y.length) return x.length - y.length;
  return a < b ? -1 : 1;
}

/**
 * Decorates another strategy for rolling updates (docs/zero-downtime.md): only the Up members of the newest
 * `appVersion` among those the delegate would place shards on are passed to it, so while two versions coexist no
 * shard is placed on an older member; and a shard whose owner leaves goes to the least-loaded such member given
 * the current plan (`forcedMovesByLoad`). With {@link VersionAwareRebalance} (no voluntary moves while versions
 * coexist) each shard then moves once per rolling update: when the member holding it leaves, onto its replacement.
 */
export class NewestVersionAllocation implements ShardAllocationStrategy {
  readonly configurationKey: string;
  readonly forcedMovesByLoad = true;

  constructor(readonly delegate: ShardAllocationStrategy) {
    this.configurationKey = `NewestVersionAllocation:${delegate.configurationKey}`;
  }

  allocate(shardId: number, members: readonly ShardingMember[], current: Allocations): UniqueAddress | null {
    return this.delegate.allocate(shardId, this.newest(members), current);
  }

  allocateAll(shardCount: number, members: readonly ShardingMember[]): Map<number, UniqueAddress> {
    const newest = this.newest(members);
    if (this.delegate.allocateAll !== undefined) return this.delegate.allocateAll(shardCount, newest);
    return allocateShardByShard(this.delegate, shardCount, newest);
  }

  /** The Up members of the newest version among those the delegate accepts alone (a role filter, say). */
  newest(members: readonly ShardingMember[]): ShardingMember[] {
    const empty = new Map<number, UniqueAddress>();
    const hosts = eligibleMembers(members).filter((m) => this.delegate.allocate(0, [m], empty) !== null);
    let best = "";
    for (const m of hosts) if (compareAppVersions(m.appVersion ?? "", best) > 0) best = m.appVersion ?? "";
    return hosts.filter((m) => (m.appVersion ?? "") === best);
  }
}
