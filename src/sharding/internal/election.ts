import { UniqueAddress } from "../../actor/index.ts";

/**
 * The part of a cluster snapshot the election reads (structural: a cluster `ClusterSnapshot` satisfies it, and so does
 * the ownership rule's snapshot, so the singleton elects with this same code).
 */
export interface ElectionSnapshot {
  readonly self: UniqueAddress;
  readonly members: readonly { readonly uniqueAddress: UniqueAddress; readonly status: string }[];
  readonly unreachable: readonly UniqueAddress[];
  readonly converged: boolean;
}

/**
 * The sharding coordinator seen from `snapshot`: null unless membership has converged and no member is unreachable,
 * else the lowest UniqueAddress among `Up` members (Leaving does not count, docs/protocol.md §6.1). Every node computes this
 * from its own view; there is no election protocol, and plans carry the author so receivers can check it.
 */
export function electCoordinator(snapshot: ElectionSnapshot): UniqueAddress | null {
  if (!snapshot.converged || snapshot.unreachable.length > 0) return null;
  let best: UniqueAddress | null = null;
  for (const m of snapshot.members) {
    if (m.status !== "Up") continue;
    if (best === null || UniqueAddress.compare(m.uniqueAddress, best) < 0) best = m.uniqueAddress;
  }
  return best;
}

/**
 * The coordinator this node may route through: {@link electCoordinator} when the node itself is also `Up`, else
 * null, in which case routing fails closed with `NoShardOwnerError("cluster", -1)`.
 */
export function routingCoordinator(snapshot: ElectionSnapshot): UniqueAddress | null {
  const self = snapshot.members.find((m) => m.uniqueAddress.equals(snapshot.self));
  if (self === undefined || self.status !== "Up") return null;
  return electCoordinator(snapshot);
}

/**
 * The coordinator whose forwarded traffic, control messages and plans this node accepts: {@link electCoordinator},
 * or, while gossip is merely re-converging after a membership change (no member unreachable), the lowest Up member
 * anyway. Routing decisions still need full convergence; this only keeps an owner from dropping traffic that the
 * coordinator it already follows sent a moment before its own view re-converged. An unreachable member still
 * removes the coordinator (fail closed).
 */
export function acceptingCoordinator(snapshot: ElectionSnapshot): UniqueAddress | null {
  const elected = electCoordinator(snapshot);
  if (elected !== null || snapshot.unreachable.length > 0) return elected;
  return electCoordinator({ ...snapshot, converged: true });
}
