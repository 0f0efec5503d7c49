import type { UniqueAddress } from "../actor/index.ts";
import type { Member, MemberStatus } from "./member.ts";

/** What one node currently sees of the cluster. Every node computes its own; they agree once converged. */
export interface ClusterSnapshot {
  /** This node. */
  readonly self: UniqueAddress;
  /** This node's own status (Removed once it has left or was removed). */
  readonly selfStatus: MemberStatus;
  /** Every member that is not Removed, sorted by unique address. */
  readonly members: readonly Member[];
  /** Members this node currently sees as unreachable, sorted; an observation only, never a status. */
  readonly unreachable: readonly UniqueAddress[];
  /** The leader by this node's view, or null (see `leaderOf`). */
  readonly leader: UniqueAddress | null;
  /** True when every reachable Up member has acknowledged this node's current state (see `isConverged`). */
  readonly converged: boolean;
}
