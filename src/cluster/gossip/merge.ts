import { compareStrings } from "../../actor/index.ts";
import { type Member, memberKey, statusPrecedence } from "../member.ts";

/** Membership as gossip carries it: one record per unique address string, Removed records kept as tombstones. */
export type MemberMap = ReadonlyMap<string, Member>;

/** Default capacity: live records plus tombstones (docs/protocol.md §4.5 `max_members`). */
export const maxMembersDefault = 10_000;

/**
 * Total order on two records of the same node: status precedence, then revision, then the tie-break fields in turn
 * (`compareTieBreak` below). Two records that compare equal carry the same fields, which is what makes
 * {@link mergeMembers} commutative, associative and idempotent.
 */
export function compareRecords(a: Member, b: Member): number {
  const byStatus = statusPrecedence(a.status) - statusPrecedence(b.status);
  if (byStatus !== 0) return Math.sign(byStatus);
  // Revisions are integers (memberFromJSON checks them): the difference is 0 exactly when they are equal.
  const byRevision = a.revision - b.revision;
  if (byRevision !== 0) return Math.sign(byRevision);
  return compareTieBreak(a, b);
}

/**
 * Orders two records by their tie-break fields in turn (docs/protocol.md §4.5): author, up-number as decimal text,
 * app version (none before any), then the roles one by one (a list that is a prefix of the other first); strings in
 * code-unit order. It returns 0 only when every field is equal. It replaces a comparison of the fields joined with
 * NUL, which tied distinct records (roles `["a\0b"]` and `["a", "b"]`, no app version and an empty one), so two
 * nodes holding one each kept theirs for good. For fields without NUL (all the wire accepts, memberFromJSON) it is
 * that string's order, field for field, so nodes of earlier builds pick the same winner: that is also why the
 * up-number compares as text (10 before 9). Most comparisons are of a record with its own copy (gossip repeats what
 * the receiver holds), so each field is compared for equality first, and equal fields cost no ordering.
 */
function compareTieBreak(a: Member, b: Member): number {
  if (a.changedBy !== b.changedBy) return compareStrings(a.changedBy, b.changedBy);
  if (a.upNumber !== b.upNumber) return compareStrings(String(a.upNumber), String(b.upNumber));
  if (a.appVersion !== b.appVersion) {
    if (a.appVersion === undefined) return -1;
    if (b.appVersion === undefined) return 1;
    return compareStrings(a.appVersion, b.appVersion);
  }
  const shared = Math.min(a.roles.length, b.roles.length);
  for (let i = 0; i < shared; i++) {
    const left = a.roles[i]!;
    const right = b.roles[i]!;
    if (left !== right) return compareStrings(left, right);
  }
  return Math.sign(a.roles.length - b.roles.length);
}

/** The outcome of a merge. */
export interface MergeResult {
  /** The merged map (the local one, unchanged, when nothing changed or the merge overflowed). */
  readonly members: MemberMap;
  /** Records that replaced or added to local ones. */
  readonly changed: readonly Member[];
  /** True when the merge was rejected whole because it would exceed the capacity. */
  readonly overflow: boolean;
}

/**
 * Merges `incoming` records into `local`: per node, the greater record by {@link compareRecords} wins. A Removed
 * record has the highest precedence, so a tombstone is never replaced by a live record and a removed uid stays
 * removed. A merge that would hold more than `maxMembers` records is rejected whole (fail closed).
 */
export function mergeMembers(
  local: MemberMap,
  incoming: Iterable<Member>,
  maxMembers = maxMembersDefault,
): MergeResult {
  let next: Map<string, Member> | null = null;
  const changed: Member[] = [];
  for (const record of incoming) {
    const key = memberKey(record);
    const current = (next ?? local).get(key);
    if (current !== undefined && compareRecords(record, current) <= 0) continue;
    next ??= new Map(local);
    next.set(key, record);
    changed.push(record);
  }
  if (next === null) return { members: local, changed, overflow: false };
  if (next.size > maxMembers) return { members: local, changed: [], overflow: true };
  return { members: next, changed, overflow: false };
}
