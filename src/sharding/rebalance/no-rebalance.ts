import type { RebalancePolicy } from "./policy.ts";

/** Never moves a shard voluntarily; shards still leave owners that become ineligible (the planner forces those). */
export class NoRebalance implements RebalancePolicy {
  readonly configurationKey = "NoRebalance";
  selectShards(): number[] {
    return [];
  }
}
