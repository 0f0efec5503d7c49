import { createHash } from "node:crypto";
import { UniqueAddress } from "../../actor/index.ts";
import { statusPrecedence } from "../member.ts";
import type { MemberMap } from "./merge.ts";

/**
 * SHA-256 (hex) over every record, tombstones included, sorted by unique address: per record its unique address,
 * status number, revision, author and roles, NUL-separated, one line per record (docs/protocol.md §4.6).
 *
 * Joining records are left out: gossip never carries them (a Joining record via gossip is never accepted), so only
 * the leader and the joiner hold one, and counting them would keep the leader from ever converging while it waits
 * to promote the joiner.
 */
export function membershipDigest(members: MemberMap): string {
  const hash = createHash("sha256");
  const records = [...members.values()]
    .filter((m) => m.status !== "Joining")
    .sort((a, b) => UniqueAddress.compare(a.uniqueAddress, b.uniqueAddress));
  for (const m of records) {
    hash.update(
      [
        m.uniqueAddress.toString(),
        String(statusPrecedence(m.status)),
        String(m.revision),
        m.changedBy,
        ...m.roles,
      ].join("\0"),
    );
    hash.update("\n");
  }
  return hash.digest("hex");
}
