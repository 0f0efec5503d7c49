import type { ClusterSharding } from "../cluster-sharding.ts";
import { type ShardingInternalView, shardingInternalsKey } from "../internal-view.ts";

export type { ShardingInternalView } from "../internal-view.ts";

/**
 * The internal view of `sharding` (its actor system, membership and registered providers) through the extension's
 * internal accessor; see `ShardingInternalView`. For sharding's persistent module and the singleton only.
 */
export function shardingInternals(sharding: ClusterSharding): ShardingInternalView {
  return sharding[shardingInternalsKey]();
}
