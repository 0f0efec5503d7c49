import type { Address, UniqueAddress } from "../../actor/index.ts";
import { type Member, memberKey, sameMember } from "../member.ts";
import { compareRecords, type MemberMap, mergeMembers } from "./merge.ts";

/**
 * Why gossip (a whole message or one of its records) was refused, the keys of `ClusterStats.gossipRejected`:
 * - `nonMember`: the sender is neither a member here (Joining, Up, Leaving or Exiting) nor a configured seed;
 * - `phantom`: an unknown record that is not the sender's own self-authored Up record, from a sender that is not
 *   this node's leader (members appear only through a join the leader admitted);
 * - `notLeader`: a change to a known record from a sender that is not this node's leader, or not authored by it;
 * - `joining`: a Joining record, which only a join request may create;
 * - `overCapacity`: the merge would hold more than `maxMembers` records (rejected whole, fail closed).
 */
export type GossipRejection = "nonMember" | "phantom" | "notLeader" | "joining" | "overCapacity";

/** Every {@link GossipRejection}, in a fixed order. */
export const gossipRejections: readonly GossipRejection[] = [
  "nonMember",
  "phantom",
  "notLeader",
  "joining",
  "overCapacity",
];

/** The records of one gossip that may be merged, and which were refused and why. */
export interface AuthorizedGossip {
  readonly accepted: readonly Member[];
  readonly rejected: readonly { readonly member: Member; readonly reason: GossipRejection }[];
}

/** Statuses whose holder may gossip to this node (a Down or Removed incarnation no longer speaks for anything). */
const speakingStatuses = new Set(["Joining", "Up", "Leaving", "Exiting"]);

/**
 * True when this node takes gossip from the authenticated `sender` at all: its exact incarnation is a member here
 * with a live status, or its address is one of the configured `seeds` (a seed that formed a cluster on its own and
 * that this node contacts with its joins) not held by another live incarnation. Anyone else is a non-member whose
 * claims are never merged, answered or dialled.
 */
export function admitsGossipFrom(local: MemberMap, sender: UniqueAddress, seeds: readonly Address[]): boolean {
  const record = local.get(sender.toString());
  if (record !== undefined) return speakingStatuses.has(record.status);
  if (!seeds.some((seed) => seed.equals(sender.address))) return false;
  // A new incarnation of a seed whose earlier one is still a member here waits, as its join does, until that one
  // has left or been downed: two live records for one host:port are never created.
  for (const m of local.values()) {
    if (m.status !== "Removed" && m.uniqueAddress.address.equals(sender.address)) return false;
  }
  return true;
}

/**
 * Filters the records of a gossip from an authenticated, admitted `sender` (docs/protocol.md §4.5 "Gossip authorisation");
 * `leader` is the receiver's leader before the merge:
 * - a record identical to the local one, or older than it by {@link compareRecords}, is always accepted (the merge
 *   keeps the local record, so it changes nothing);
 * - a Joining record is never accepted via gossip (only a join request creates one);
 * - a record that differs from the local one only in its author (the same transition made by two leaders in turn) is
 *   accepted from anyone: the merge's tie-break picks the same author everywhere;
 * - an unknown Up record is accepted when it is the sender's own record, authored by the sender (a seed that formed
 *   independently): its unique address must equal the sender's, so nobody can describe a third node;
 * - a Removed record (a tombstone) of a third node is accepted from the leader whoever authored it, and from its
 *   author when that node is unknown here, or Down or Exiting: it only keeps that incarnation out;
 * - a member's own Up record at a higher revision, no older, same roles and version (its re-admission as an orphan)
 *   is accepted from that member;
 * - from the leader, a record that says what the local one says at a higher revision, whoever authored it;
 * - any other change, unknown and terminal records included, only when the sender is the receiver's leader and the
 *   record was authored by it (that is how members the leader admitted, promoted or downed spread).
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
    const authoredBySender = record.changedBy === sender.uid;
    if (current !== undefined && sameMember(current, record)) {
      accepted.push(record);
    } else if (current !== undefined && compareRecords(record, current) < 0) {
      // Older than the local record, so the merge keeps the local one and it changes nothing: a gossip that crossed a
      // newer change (the Up record of a node that has since started leaving). Refusing it raised a false alarm.
      accepted.push(record);
    } else if (record.status === "Joining") {
      rejected.push({ member: record, reason: "joining" });
    } else if (current !== undefined && sameChangeByAnotherAuthor(current, record)) {
      // The same transition made by two leaders in turn (one of them while the other was unreachable, or paused): the
      // records differ only in their author, and the merge's tie-break picks the same one everywhere. Refusing it kept
      // the leader's digest apart from everyone else's forever, so the cluster never converged again.
      accepted.push(record);
    } else if (fromLeader && authoredBySender) {
      accepted.push(record);
    } else if (fromLeader && current !== undefined && saysTheSame(current, record)) {
      // From the leader, a record that says what the local one says at a later revision by another author: a leader
      // since departed re-applied a transition this node had from someone else (a leave the leaver applied itself
      // while cut off, then the departed leader applied). The leader holds it, cannot make it its own (it changes
      // nothing), and refused, the two digests differed for good (node simulator, churn seed 671).
      accepted.push(record);
    } else if (
      current === undefined &&
      record.status === "Up" &&
      authoredBySender &&
      record.uniqueAddress.equals(sender)
    ) {
      accepted.push(record);
    } else if (current !== undefined && isOwnReadmission(current, record, sender)) {
      accepted.push(record);
    } else if (
      record.status === "Removed" &&
      !record.uniqueAddress.equals(sender) &&
      (fromLeader || (authoredBySender && (current?.status === "Down" || current?.status === "Exiting")))
    ) {
      // The tombstone of a third node, from this node's leader whoever removed it, or from the member that removed it
      // when this node never knew that node or already holds it as on its way out (Down or Exiting). It was removed
      // while this node heard from another leader (or none), and it is gone for good whoever says so. Refused, the
      // digests differed for good: a leader that refused it never converged again, nor could it remove the node
      // itself, and a member whose leader held only the tombstone could not be told (node simulator, churn seeds 862
      // and 461). Accepting it admits nobody: a tombstone only keeps that incarnation out.
      accepted.push(record);
    } else {
      rejected.push({ member: record, reason: current === undefined ? "phantom" : "notLeader" });
    }
  }
  return { accepted, rejected };
}

/**
 * True when `record`, sent by the member it describes, is that member's re-admission as an orphan (docs/protocol.md
 * §4.4): Up again at a higher revision, no older (its up-number not below the local one), with the same roles and
 * version. A member that joined again as an orphan is promoted afresh by the leader that admitted it, which may be
 * nobody's leader but its own side's; the members that knew its earlier promotion refused the new one as not their
 * leader's work, the orphan (the lowest address, their leader) spread it in vain, and nobody converged again (node
 * simulator, churn seed 1204). A member may so make itself younger, never older (the oldest hosts singletons), and
 * never change its roles or version.
 */
function isOwnReadmission(current: Member, record: Member, sender: UniqueAddress): boolean {
  return (
    record.uniqueAddress.equals(sender) &&
    current.status === "Up" &&
    record.status === "Up" &&
    record.revision > current.revision &&
    record.upNumber >= current.upNumber &&
    record.appVersion === current.appVersion &&
    record.roles.length === current.roles.length &&
    record.roles.every((role, i) => role === current.roles[i])
  );
}

/**
 * True when `later` says what `current` says (status, up-number, version, roles), whatever its revision and author.
 * Only a record at a higher revision reaches it in {@link authorizeGossip}: an older one with the same status is older
 * by {@link compareRecords}, and one at the same revision is {@link sameChangeByAnotherAuthor}, both accepted before.
 */
function saysTheSame(current: Member, later: Member): boolean {
  return sameChangeByAnotherAuthor(current, { ...later, revision: current.revision });
}

/** True when `a` and `b` say the same thing about the same node (status, revision, up-number, version, roles). */
function sameChangeByAnotherAuthor(a: Member, b: Member): boolean {
  return (
    a.uniqueAddress.equals(b.uniqueAddress) &&
    a.status === b.status &&
    a.revision === b.revision &&
    a.upNumber === b.upNumber &&
    a.appVersion === b.appVersion &&
    a.roles.length === b.roles.length &&
    a.roles.every((role, i) => role === b.roles[i])
  );
}

/** The decision on one whole gossip message. */
export type GossipDecision =
  /** Refused whole (`nonMember` or `overCapacity`): nothing merged; a non-member is not even answered. */
  | { readonly kind: "refused"; readonly reason: "nonMember" | "overCapacity" }
  /** Accepted: `members` is the merged map (`local` itself when nothing changed); `rejected`, the refused records. */
  | {
      readonly kind: "accepted";
      readonly members: MemberMap;
      readonly changed: readonly Member[];
      readonly rejected: AuthorizedGossip["rejected"];
    };

/**
 * Everything a receiver decides about one gossip from the authenticated `sender`, as a pure function: sender
 * admission ({@link admitsGossipFrom}), per-record authorisation ({@link authorizeGossip}) and the capacity of the
 * merge (`maxMembers`, live records plus tombstones; an overflowing merge is rejected whole).
 */
export function decideGossip(
  local: MemberMap,
  incoming: readonly Member[],
  sender: UniqueAddress,
  leader: UniqueAddress | null,
  seeds: readonly Address[],
  maxMembers: number,
): GossipDecision {
  if (!admitsGossipFrom(local, sender, seeds)) return { kind: "refused", reason: "nonMember" };
  const authorized = authorizeGossip(local, incoming, sender, leader);
  const merged = mergeMembers(local, authorized.accepted, maxMembers);
  if (merged.overflow) return { kind: "refused", reason: "overCapacity" };
  return { kind: "accepted", members: merged.members, changed: merged.changed, rejected: authorized.rejected };
}
