/**
 * The shape of a PostgreSQL shard lease as the persistent provider sees it (REFERENCE §4.5). Defined structurally so
 * that the persistence layer's own token type (same field names) fits without an import.
 */

/** Which lease row: one per (cluster, routing name, shard). */
export interface ShardLeaseKey {
  /** The cluster name from the cluster settings. */
  readonly clusterName: string;
  /** The sharding provider name (the routing name, by default the entity type's name). */
  readonly entityType: string;
  /** The shard id, 0 or more. */
  readonly shardId: number;
}

/** A lease held by `owner` at `epoch`, valid until `leaseUntilEpochMs` on the database clock. */
export interface ShardLeaseToken extends ShardLeaseKey {
  /** The owning node's `UniqueAddress` string (a restarted process is a new owner). */
  readonly owner: string;
  /** Ownership generation: 1 on the first acquire, +1 on every transfer; never decreases. */
  readonly epoch: number;
  /** Expiry in Unix epoch milliseconds on the database's clock (never compared with a node clock). */
  readonly leaseUntilEpochMs: number;
}

/** True when `token` is for exactly `key`. */
export function tokenMatchesKey(token: ShardLeaseKey, key: ShardLeaseKey): boolean {
  return token.clusterName === key.clusterName && token.entityType === key.entityType && token.shardId === key.shardId;
}

/** True when both tokens name the same key, owner and epoch (the expiry may differ after a renewal). */
export function sameLease(a: ShardLeaseToken, b: ShardLeaseToken): boolean {
  return tokenMatchesKey(a, b) && a.owner === b.owner && a.epoch === b.epoch;
}

/** `cluster/type/shard@epoch by owner`, for logs and error texts. */
export function describeToken(token: ShardLeaseToken): string {
  return `${token.clusterName}/${token.entityType}/${token.shardId}@${token.epoch} by ${token.owner}`;
}
