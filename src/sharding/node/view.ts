import type { UniqueAddress } from "../../actor/index.ts";
import { acceptingCoordinator, electCoordinator, routingCoordinator } from "../internal/election.ts";
import type { ShardingClusterSnapshot } from "../membership.ts";

/**
 * One membership view as the node core reads it: the snapshot and the three coordinators derived from it once
 * (every routed and forwarded message needs them, and an election scans all members, 17 µs per message at 100
 * members on a slow host, while the view only changes with membership).
 */
export interface MembershipView {
  readonly snapshot: ShardingClusterSnapshot;
  /** {@link electCoordinator}: the coordinator of a converged view with nobody unreachable, else null. */
  readonly elected: UniqueAddress | null;
  /** {@link routingCoordinator}: where this node routes (null unless this node is Up too: fail closed). */
  readonly routing: UniqueAddress | null;
  /** {@link acceptingCoordinator}: whose forwarded traffic, control messages and plans this node accepts. */
  readonly accepting: UniqueAddress | null;
  /** The Up members, by UniqueAddress text. */
  readonly up: ReadonlySet<string>;
}

/** The view of `snapshot`: each election runs once here. */
export function viewOf(snapshot: ShardingClusterSnapshot): MembershipView {
  const up = new Set<string>();
  for (const m of snapshot.members) if (m.status === "Up") up.add(m.uniqueAddress.toString());
  return {
    snapshot,
    elected: electCoordinator(snapshot),
    routing: routingCoordinator(snapshot),
    accepting: acceptingCoordinator(snapshot),
    up,
  };
}

/** The view before any membership snapshot: no member, no coordinator (everything fails closed). */
export function emptyView(self: UniqueAddress): MembershipView {
  // `converged` is read only by the three elections (election.ts), and with no member each is null either way: elect
  // finds no Up member, routing does not find this node, accepting falls back to elect. (Nobody unreachable is read
  // by the error a caller gets: node-lifecycle-rules pins it.)
  // Stryker disable next-line BooleanLiteral: with no member every election is null, converged or not
  return viewOf({ self, members: [], unreachable: [], converged: false });
}
