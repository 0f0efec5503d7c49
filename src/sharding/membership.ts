import type { UniqueAddress } from "../actor/index.ts";
import type { ShardingMember } from "./allocation/strategy.ts";
import type { ElectionSnapshot } from "./internal/election.ts";

/** A membership view as sharding needs it; `ClusterSnapshot` of cluster membership satisfies it. */
export interface ShardingClusterSnapshot extends ElectionSnapshot {
  readonly members: readonly ShardingMember[];
}

/**
 * What sharding uses of cluster membership (docs/protocol.md §4): the local view, change notifications and departure
 * guards. The `Cluster` extension satisfies it; tests may pass a fake.
 */
export interface ShardingMembership {
  /** This node's identity. */
  readonly selfAddress: UniqueAddress;
  /**
   * The current local view. A changed view must be a new object, never the previous one mutated: sharding derives
   * the coordinator once per view object.
   */
  snapshot(): ShardingClusterSnapshot;
  /** Calls `listener` on every membership change (a current-state event first); returns the unsubscribe function. */
  subscribe(listener: (event: unknown) => void): () => void;
  /** Leaving → Exiting waits until every guard returns true for the member. */
  registerDepartureGuard(name: string, guard: (member: ShardingMember) => boolean): void;
  /** Removes the departure guard registered under `name`. */
  unregisterDepartureGuard(name: string): void;
}
