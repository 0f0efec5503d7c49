import type { UniqueAddress } from "../../actor/index.ts";

/**
 * The part of a cluster snapshot the ownership rule reads. Structural, so the cluster layer's `ClusterSnapshot` fits
 * as it is.
 */
export interface OwnershipSnapshot {
  /** This node. */
  readonly self: UniqueAddress;
  /** Every known member with its status. */
  readonly members: readonly { readonly uniqueAddress: UniqueAddress; readonly status: string }[];
  /** Members some node currently observes as unreachable. */
  readonly unreachable: readonly UniqueAddress[];
  /** True when every member has seen the current gossip. */
  readonly converged: boolean;
}

/**
 * Whether this node may use (acquire, renew, write under) persistent shard leases: it is `Up`, membership has
 * converged and no member is unreachable (REFERENCE §3.11). Reachability alone never authorises relocation, so any
 * doubt means "not safe": the leases are dropped locally and left to expire, never released to a partition.
 */
export function safeToOwn(snapshot: OwnershipSnapshot): boolean {
  if (!snapshot.converged || snapshot.unreachable.length > 0) return false;
  const self = snapshot.members.find((m) => m.uniqueAddress.equals(snapshot.self));
  return self !== undefined && self.status === "Up";
}
