import { compareAppVersions } from "../allocation/newest-version.ts";
import type { AllocationSnapshot, RebalancePolicy } from "./policy.ts";

/**
 * Decorates a rebalance policy for rolling updates (docs/zero-downtime.md): while some shard's owner runs an older
 * `appVersion` than the newest Up member, no shard moves voluntarily, so a joining member of the new version takes
 * no shard away from one that is about to be replaced (the shard would move twice); shards move only when their
 * owner leaves (forced moves, see NewestVersionAllocation). Once every owner runs the newest version the delegate
 * decides as before. A member that never hosts shards (a frontend) counts only if it runs a newer version than the
 * owners: upgrade it too, or rebalancing stays off.
 */
export class VersionAwareRebalance implements RebalancePolicy {
  readonly configurationKey: string;

  constructor(readonly delegate: RebalancePolicy) {
    this.configurationKey = `VersionAwareRebalance:${delegate.configurationKey}`;
  }

  selectShards(snapshot: AllocationSnapshot): number[] {
    return versionsCoexist(snapshot) ? [] : this.delegate.selectShards(snapshot);
  }
}

/** True while an owner of some shard runs an older version than the newest Up member. */
export function versionsCoexist(snapshot: AllocationSnapshot): boolean {
  let newest = "";
  const versions = new Map<string, string>();
  for (const m of snapshot.members) {
    if (m.status !== "Up") continue;
    const v = m.appVersion ?? "";
    versions.set(m.uniqueAddress.toString(), v);
    if (compareAppVersions(v, newest) > 0) newest = v;
  }
  for (const owner of snapshot.allocations.values()) {
    const v = versions.get(owner.toString());
    if (v !== undefined && compareAppVersions(v, newest) < 0) return true;
  }
  return false;
}
