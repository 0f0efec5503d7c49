import { UniqueAddress } from "../actor/index.ts";
import type { MemberMap } from "./gossip/merge.ts";
import type { Member } from "./member.ts";

/**
 * The membership leader: the lowest unique address among members in Up or Leaving that this node does not see as
 * unreachable (docs/protocol.md §4.6). Purely local, so two sides of a partition can each see their own leader; null when
 * no member qualifies.
 */
export function leaderOf(members: MemberMap, unreachable: ReadonlySet<string>): UniqueAddress | null {
  let best: Member | null = null;
  for (const [key, m] of members) {
    if ((m.status !== "Up" && m.status !== "Leaving") || unreachable.has(key)) continue;
    if (best === null || UniqueAddress.compare(m.uniqueAddress, best.uniqueAddress) < 0) best = m;
  }
  return best === null ? null : best.uniqueAddress;
}

/**
 * Digest-acknowledged convergence (docs/protocol.md §4.6): true iff every Up member other than `self` that is not locally
 * unreachable has acknowledged a digest equal to `digest`. Unreachable members do not block it; members in other
 * statuses never do.
 */
export function isConverged(
  members: MemberMap,
  self: UniqueAddress,
  unreachable: ReadonlySet<string>,
  acks: ReadonlyMap<string, string>,
  digest: string,
): boolean {
  const selfKey = self.toString();
  for (const [key, m] of members) {
    if (m.status !== "Up" || key === selfKey || unreachable.has(key)) continue;
    if (acks.get(key) !== digest) return false;
  }
  return true;
}
