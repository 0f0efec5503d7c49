// The soak's sharding settings, identical on every node and known to the harness and the checker.

/** Shards of each soak entity type. */
export const soakShardCount = 32;
/** Lease of a persistent shard (ms): short, so that failover after a kill fits a short soak. */
export const soakLeaseDurationMs = 3_000;
/** How often a held lease is renewed (ms). */
export const soakLeaseRenewIntervalMs = 1_000;
