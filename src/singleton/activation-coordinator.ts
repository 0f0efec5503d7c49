import { UniqueAddress } from "../actor/index.ts";
import { type OwnershipSnapshot, safeToOwn } from "../sharding/lease/safe-to-own.ts";

/**
 * Whether this node is the one that sends eager activations for singletons (REFERENCE §3.15): it is `Up`, membership
 * has converged, no member is unreachable, and it has the lowest address among the `Up` members. Roles do not take
 * part: the activation is routed through sharding, whose allocation applies them. Exactly one node answers true in a
 * converged, fully reachable cluster, so activations are not sent from several nodes at once.
 */
export function isActivationCoordinator(snapshot: OwnershipSnapshot): boolean {
  if (!snapshot.converged || !safeToOwn(snapshot)) return false;
  let lowest: UniqueAddress | null = null;
  for (const member of snapshot.members) {
    if (member.status !== "Up") continue;
    if (lowest === null || UniqueAddress.compare(member.uniqueAddress, lowest) < 0) lowest = member.uniqueAddress;
  }
  return lowest?.equals(snapshot.self) === true;
}
