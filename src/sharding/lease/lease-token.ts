/**
 * The PostgreSQL shard lease as the persistent provider sees it (docs/protocol.md §13.3): the persistence layer's own key and
 * token types (type-only, so ordinary sharding loads no database code), plus comparisons the lease core needs.
 */
import type { ShardLeaseKey, ShardLeaseToken } from "../../persistence/index.ts";

export type { ShardLeaseKey, ShardLeaseToken };

/** True when both keys name the same (cluster, routing name, shard). */
export function sameKey(a: ShardLeaseKey, b: ShardLeaseKey): boolean {
  return a.clusterName === b.clusterName && a.entityType === b.entityType && a.shardId === b.shardId;
}

/** True when both tokens name the same key, owner and epoch (the expiry may differ after a renewal). */
export function sameLease(a: ShardLeaseToken, b: ShardLeaseToken): boolean {
  return sameKey(a.key, b.key) && a.owner === b.owner && a.epoch === b.epoch;
}
