import { UniqueAddress } from "../actor/index.ts";
import { describe } from "../actor/untrusted.ts";
import { isAppVersion } from "./app-version.ts";

/**
 * Where a member is in its life. Transitions only move forward: `Joining → Up → Leaving → Exiting → Removed`, or
 * from any live status `→ Down → Removed` (docs/protocol.md §4.1).
 */
export type MemberStatus = "Joining" | "Up" | "Leaving" | "Exiting" | "Down" | "Removed";

/** Every status, in precedence order (the index is the precedence number that also feeds the digest). */
export const memberStatuses: readonly MemberStatus[] = ["Joining", "Up", "Leaving", "Exiting", "Down", "Removed"];

/** Precedence of a status: Joining 0 < Up 1 < Leaving 2 < Exiting 3 < Down 4 < Removed 5. */
export function statusPrecedence(status: MemberStatus): number {
  return memberStatuses.indexOf(status);
}

/** True for a string naming a status. */
export function isMemberStatus(value: unknown): value is MemberStatus {
  return typeof value === "string" && (memberStatuses as readonly string[]).includes(value);
}

/**
 * One node's membership record. `revision` grows with every change its author makes and `changedBy` is the uid of
 * the node that made the last change; both only serve the deterministic merge (docs/protocol.md §4.1).
 */
export interface Member {
  /** The node this record describes. */
  readonly uniqueAddress: UniqueAddress;
  /** Its status. */
  readonly status: MemberStatus;
  /** Its roles, sorted and unique, each non-empty and without NUL (memberFromJSON refuses others). */
  readonly roles: readonly string[];
  /** Age order among Up members: the leader hands out 1, 2, 3, … when it promotes; 0 before the member is Up. */
  readonly upNumber: number;
  /** Version of this record, above 0. */
  readonly revision: number;
  /** Node uid of the author of this version. */
  readonly changedBy: string;
  /**
   * The application version the node runs, fixed for its uid (absent when it declares none). Sharding moves shards
   * only onto members of the newest version while two versions coexist (docs/sharding.md, "Rolling updates").
   */
  readonly appVersion?: string;
}

/** The plain-JSON form of a {@link Member} on the wire. */
export interface MemberJSON {
  readonly address: string;
  readonly status: MemberStatus;
  readonly roles: readonly string[];
  readonly upNumber: number;
  readonly revision: number;
  readonly changedBy: string;
  /** Absent when the node declares no version. */
  readonly appVersion?: string;
}

/** The key a member is stored under: its unique address string. */
export function memberKey(member: Member): string {
  return member.uniqueAddress.toString();
}

/** Sorted, de-duplicated roles. */
export function normalizeRoles(roles: readonly string[]): string[] {
  return [...new Set(roles)].sort();
}

/** A copy of `member` moved to `status` by `author` (revision + 1). */
export function withStatus(member: Member, status: MemberStatus, author: string, upNumber = member.upNumber): Member {
  return { ...member, status, upNumber, revision: member.revision + 1, changedBy: author };
}

/** True when both records carry exactly the same fields. */
export function sameMember(a: Member, b: Member): boolean {
  return (
    a.uniqueAddress.equals(b.uniqueAddress) &&
    a.status === b.status &&
    a.revision === b.revision &&
    a.changedBy === b.changedBy &&
    a.upNumber === b.upNumber &&
    a.appVersion === b.appVersion &&
    a.roles.length === b.roles.length &&
    a.roles.every((role, i) => role === b.roles[i])
  );
}

/** The wire form of a member. */
export function memberToJSON(member: Member): MemberJSON {
  const json: MemberJSON = {
    address: member.uniqueAddress.toString(),
    status: member.status,
    roles: [...member.roles],
    upNumber: member.upNumber,
    revision: member.revision,
    changedBy: member.changedBy,
  };
  return member.appVersion === undefined ? json : { ...json, appVersion: member.appVersion };
}

/**
 * Unique addresses already parsed from member records, by their text. Every gossip a node receives carries the record
 * of every member, so without it each receive parsed every member's address again (a regular expression and two
 * objects per record). UniqueAddress is immutable, so one instance serves every record; the map is emptied when it
 * reaches its bound, so records naming ever new addresses cost no more than before.
 */
const parsedAddresses = new Map<string, UniqueAddress>();
const parsedAddressesMax = 4_096;
/** The roles of a record that has none (most do), shared: a record's roles are never changed in place. */
const noRoles: readonly string[] = Object.freeze([]);

/**
 * True for a non-empty string without NUL: what a role or an author may be. NUL separates the fields of the digest
 * (docs/protocol.md §4.6), and it separated those of the merge's tie-break, where a role holding one tied with two
 * roles: two nodes holding one record each never converged. Configuration refuses it too (settings.ts).
 */
export function isRoleOrAuthor(value: unknown): value is string {
  return typeof value === "string" && value.length > 0 && !value.includes("\0");
}

/**
 * Rebuilds a member from its wire form, or returns a reason it is malformed.
 * Never throws: wire input is rejected and counted by the caller, not asserted.
 */
export function memberFromJSON(json: unknown): Member | string {
  if (typeof json !== "object" || json === null) return "member is not an object";
  const j = json as Record<string, unknown>;
  if (typeof j.address !== "string") return "member.address is not a string";
  let uniqueAddress = parsedAddresses.get(j.address);
  if (uniqueAddress === undefined) {
    try {
      uniqueAddress = UniqueAddress.parse(j.address);
    } catch {
      return `member.address ${describe(j.address)} is not a unique address`;
    }
    if (parsedAddresses.size >= parsedAddressesMax) parsedAddresses.clear();
    parsedAddresses.set(j.address, uniqueAddress);
  }
  if (!uniqueAddress.address.isRemote) return "member.address is not a remote address";
  if (!isMemberStatus(j.status)) return `member.status ${describe(j.status)} is unknown`;
  if (!Array.isArray(j.roles) || !j.roles.every(isRoleOrAuthor)) {
    return "member.roles is not an array of non-empty strings without NUL";
  }
  const roles = j.roles as string[];
  const normalized = roles.length === 0 ? noRoles : normalizeRoles(roles);
  if (normalized.length !== roles.length || normalized.some((r, i) => r !== roles[i])) {
    return "member.roles is not sorted and unique";
  }
  if (!Number.isSafeInteger(j.upNumber) || (j.upNumber as number) < 0) return "member.upNumber is not an integer >= 0";
  if (!Number.isSafeInteger(j.revision) || (j.revision as number) <= 0) return "member.revision is not an integer > 0";
  if (!isRoleOrAuthor(j.changedBy)) return "member.changedBy is not a non-empty string without NUL";
  // Optional: a record without it is a node that declares no version (or one built before the field existed).
  const appVersion = Object.hasOwn(j, "appVersion") ? j.appVersion : undefined;
  if (appVersion !== undefined && !isAppVersion(appVersion)) {
    return `member.appVersion ${describe(appVersion)} is not 1-64 letters, digits, '.', '+', '_' or '-'`;
  }
  const member: Member = {
    uniqueAddress,
    status: j.status,
    roles: normalized,
    upNumber: j.upNumber as number,
    revision: j.revision as number,
    changedBy: j.changedBy,
  };
  return appVersion === undefined ? member : { ...member, appVersion };
}

/** Members sorted by unique address, the order every node computes identically. */
export function sortMembers(members: Iterable<Member>): Member[] {
  return [...members].sort((a, b) => UniqueAddress.compare(a.uniqueAddress, b.uniqueAddress));
}
