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
  /** True when every member has seen the current gossip (not required for ownership; see {@link safeToOwn}). */
  readonly converged: boolean;
}

/** Self statuses under which leases may be used: `Leaving` and `Exiting` only to finish handing shards off. */
const owningStatuses: ReadonlySet<string> = new Set(["Up", "Leaving", "Exiting"]);

/**
 * Whether this node may use (acquire, renew, write under) persistent shard leases: no member is unreachable and this
 * node is a member that is `Up`, or `Leaving`/`Exiting` while its shards are handed off (so that the handoff can
 * release their leases instead of dropping them). Reachability alone never authorises relocation, so an unreachable
 * member always means "not safe": the leases are dropped locally and left to expire, never released to a
 * partition. A membership view that has not converged yet, with everyone reachable, does not stop an owner: the
 * epoch fence in the database still decides every write, and the coordinator (which needs convergence) decides
 * where shards go (docs/protocol.md §11.1 asks for self Up and an empty unreachable set).
 */
export function safeToOwn(snapshot: OwnershipSnapshot): boolean {
  if (snapshot.unreachable.length > 0) return false;
  const self = snapshot.members.find((m) => m.uniqueAddress.equals(snapshot.self));
  return self !== undefined && owningStatuses.has(self.status);
}
