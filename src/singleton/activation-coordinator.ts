import { electCoordinator, type OwnershipSnapshot, safeToOwn } from "../sharding/internal/index.ts";

/**
 * Whether this node is the one that sends eager activations for singletons (docs/protocol.md §12): the sharding
 * coordinator, by sharding's own election (membership converged, no member unreachable, the lowest address among the
 * `Up` members), and safe to own. Roles do not take part: the activation is routed through sharding, whose allocation
 * applies them. Exactly one node answers true in a converged, fully reachable cluster, so activations are not sent
 * from several nodes at once.
 */
export function isActivationCoordinator(snapshot: OwnershipSnapshot): boolean {
  if (!safeToOwn(snapshot)) return false;
  return electCoordinator(snapshot)?.equals(snapshot.self) === true;
}
