import { compareStrings } from "../../actor/index.ts";
import { type Member, memberKey, statusPrecedence } from "../member.ts";

/** Membership as gossip carries it: one record per unique address string, Removed records kept as tombstones. */
export type MemberMap = ReadonlyMap<string, Member>;

/** Default capacity: live records plus tombstones (docs/protocol.md §4.5 `max_members`). */
export const maxMembersDefault = 10_000;

/**
 * The tie-break text of a record: author, up-number, app version and roles, NUL-separated. The app version is fixed
 * per uid, so it only matters to keep "records that compare equal carry the same fields" true for any input.
 */
function tieBreak(member: Member): string {
  return [member.changedBy, String(member.upNumber), member.appVersion ?? "", ...member.roles].join("\0");
}

/**
 * Total order on two records of the same node: status precedence, then revision, then the tie-break string. Two
 * records that compare equal carry the same fields, which is what makes {@link mergeMembers} commutative,
 * associative and idempotent.
 */
export function compareRecords(a: Member, b: Member): number {
  const byStatus = statusPrecedence(a.status) - statusPrecedence(b.status);
  if (byStatus !== 0) return Math.sign(byStatus);
  // Revisions are integers (memberFromJSON checks them): the difference is 0 exactly when they are equal.
  const byRevision = a.revision - b.revision;
  if (byRevision !== 0) return Math.sign(byRevision);
  // Most comparisons are of a record with its own copy (gossip repeats what the receiver holds): equal tie-break
  // fields make equal tie-break strings, without building them. Skipping this line changes no answer, only the cost
  // (the one equivalent mutant left in this file, docs/mutation.md).
  if (sameTieBreakFields(a, b)) return 0;
  return compareStrings(tieBreak(a), tieBreak(b));
}

/**
 * True when `a` and `b` carry the same tie-break fields (author, up-number, app version, roles), so that their
 * tie-break strings are equal: the fast path of {@link compareRecords}. Exported for its rule test, which checks that
 * it is taken for equal fields and never for different ones (test/cluster/merge.test.ts).
 */
export function sameTieBreakFields(a: Member, b: Member): boolean {
  return (
    a.changedBy === b.changedBy &&
    a.upNumber === b.upNumber &&
    a.appVersion === b.appVersion &&
    a.roles.length === b.roles.length &&
    a.roles.every((role, i) => role === b.roles[i])
  );
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
