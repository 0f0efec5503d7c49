import { UniqueAddress } from "../actor/index.ts";
import type { MemberMap } from "./gossip/merge.ts";
import { type Member, memberKey, withStatus } from "./member.ts";

/** What the leader changed in one pass, in unique-address order. */
export interface LeaderActionsResult {
  readonly members: MemberMap;
  readonly changed: readonly Member[];
}

/**
 * One pass of leader actions by `self` (docs/protocol.md §4.7), to run only when `self` is the leader (or there is no leader,
 * for departures) and membership has converged. Each member moves at most one step per pass, so every Up member
 * sees Exiting before the record becomes a Removed tombstone:
 * - Joining → Up, handing out up-numbers above every number in use, in unique-address order (only as leader);
 * - Leaving → Exiting, only when `departureReady(member)` is true for every guard (a throwing guard is "not ready");
 * - Exiting → Removed and Down → Removed.
 * Every changed record is re-authored by `self` with a higher revision.
 */
export function leaderActions(
  members: MemberMap,
  self: UniqueAddress,
  isLeader: boolean,
  departureReady: (member: Member) => boolean,
): LeaderActionsResult {
  let nextUpNumber = 1;
  for (const m of members.values()) nextUpNumber = Math.max(nextUpNumber, m.upNumber + 1);
  const author = self.uid;
  const changed: Member[] = [];
  const sorted = [...members.values()].sort((a, b) => UniqueAddress.compare(a.uniqueAddress, b.uniqueAddress));
  for (const m of sorted) {
    if (m.status === "Joining" && isLeader) changed.push(withStatus(m, "Up", author, nextUpNumber++));
    else if (m.status === "Leaving" && guardSafe(departureReady, m)) changed.push(withStatus(m, "Exiting", author));
    else if (m.status === "Exiting" || m.status === "Down") changed.push(withStatus(m, "Removed", author));
  }
  if (changed.length === 0) return { members, changed };
  const next = new Map(members);
  for (const m of changed) next.set(memberKey(m), m);
  return { members: next, changed };
}

function guardSafe(ready: (member: Member) => boolean, member: Member): boolean {
  try {
    return ready(member) === true;
  } catch {
    return false;
  }
}
