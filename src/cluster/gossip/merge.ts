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
  if (a.revision !== b.revision) return a.revision < b.revision ? -1 : 1;
  // Most comparisons are of a record with its own copy (gossip repeats what the receiver holds): equal tie-break
  // fields make equal tie-break strings, without building them.
  if (a === b || sameTieBreakFields(a, b)) return 0;
  return compareStrings(tieBreak(a), tieBreak(b));
}

function sameTieBreakFields(a: Member, b: Member): boolean {
  if (a.changedBy !== b.changedBy || a.upNumber !== b.upNumber || a.appVersion !== b.appVersion) return false;
  if (a.roles.length !== b.roles.length) return false;
  for (let i = 0; i < a.roles.length; i++) if (a.roles[i] !== b.roles[i]) return false;
  return true;
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
