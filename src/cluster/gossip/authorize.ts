import type { UniqueAddress } from "../../actor/index.ts";
import { type Member, memberKey, sameMember } from "../member.ts";
import type { MemberMap } from "./merge.ts";

/** Why one gossiped record was refused. */
export type GossipRejection = "joining-via-gossip" | "unknown-record-not-self-authored" | "change-not-from-leader";

/** The records of one gossip that may be merged, and how many were refused and why. */
export interface AuthorizedGossip {
  readonly accepted: readonly Member[];
  readonly rejected: readonly { readonly member: Member; readonly reason: GossipRejection }[];
}

/**
 * Filters the records of a gossip from an authenticated `sender` (REFERENCE §6 "Gossip authorisation"):
 * - a record identical to the local one is always accepted (it changes nothing);
 * - a Joining record is never accepted via gossip (no phantom joiners: only a join request creates one);
 * - an unknown Up record is accepted only when the sender authored it (a seed that formed a cluster on its own);
 * - any other change, terminal records included, only when the sender is the receiver's leader and authored it.
 */
export function authorizeGossip(
  local: MemberMap,
  incoming: readonly Member[],
  sender: UniqueAddress,
  leader: UniqueAddress | null,
): AuthorizedGossip {
  const accepted: Member[] = [];
  const rejected: { member: Member; reason: GossipRejection }[] = [];
  const fromLeader = leader?.equals(sender) === true;
  for (const record of incoming) {
    const current = local.get(memberKey(record));
    if (current !== undefined && sameMember(current, record)) {
      accepted.push(record);
    } else if (record.status === "Joining") {
      rejected.push({ member: record, reason: "joining-via-gossip" });
    } else if (current === undefined && record.status === "Up" && record.changedBy === sender.uid) {
      accepted.push(record);
    } else if (fromLeader && record.changedBy === sender.uid) {
      accepted.push(record);
    } else {
      rejected.push({
        member: record,
        reason:
          current === undefined && record.status === "Up"
            ? "unknown-record-not-self-authored"
            : "change-not-from-leader",
      });
    }
  }
  return { accepted, rejected };
}
