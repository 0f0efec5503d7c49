import { compareAppVersions } from "../../cluster/index.ts";
import type { ShardingMember } from "./strategy.ts";

/**
 * A rolling update seen by placement: the members hosting a type (Up, Leaving or Exiting) run more than one app
 * version. Shards then
 * move only onto the newest version and never voluntarily, so each shard moves once, from an old member when it
 * leaves to a new one (docs/sharding.md, "Rolling updates"). Without this, a new member would first draw shards by rebalance
 * and hand them on again, or receive an old member's shards only to lose them when its own turn to restart came.
 */
export interface RollingUpdate {
  /** The newest version among the present members (never undefined: some member declares one when two differ). */
  readonly newestVersion: string | undefined;
  /** The members placement may move shards onto: Up members of the newest version, and every member not Up. */
  readonly newest: readonly ShardingMember[];
}

/**
 * Statuses whose version counts: a Leaving or Exiting member still holds shards being handed off, so the roll is
 * not over until the last old member is gone. Counting only Up members would end it when the last old member starts
 * leaving, and its shards would go to the from-scratch target and be rebalanced, moving some a second time.
 */
const present = new Set(["Up", "Leaving", "Exiting"]);

/**
 * The rolling update `members` are in, or null when every present member that `canHost` runs the same version (or
 * none is present). Only members that could host the type count: a frontend that registered the type but that a
 * role filter keeps from owning shards is deployed on its own schedule, and its older version must not hold the
 * hosts in rolling-update placement (no rebalance) forever.
 */
export function rollingUpdateOf(
  members: readonly ShardingMember[],
  canHost: (member: ShardingMember) => boolean = () => true,
): RollingUpdate | null {
  let newestVersion: string | undefined;
  let first = true;
  let mixed = false;
  for (const m of members) {
    if (!present.has(m.status) || !canHost(m)) continue;
    if (first) {
      newestVersion = m.appVersion;
      first = false;
      continue;
    }
    const order = compareAppVersions(m.appVersion, newestVersion);
    if (order !== 0) mixed = true;
    if (order > 0) newestVersion = m.appVersion;
  }
  if (!mixed) return null;
  // Members not Up stay in the list: strategies filter them out themselves, and a custom one may want to see them.
  const newest = members.filter((m) => m.status !== "Up" || m.appVersion === newestVersion);
  return { newestVersion, newest };
}
