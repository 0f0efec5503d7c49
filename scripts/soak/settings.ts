// The soak's sharding settings and key spaces, identical on every node and known to the harness and the checker.
import { StableHashPartitioner } from "../../src/sharding/index.ts";
import type { KeySpace } from "./workload.ts";

/** Shards of each soak entity type. */
export const soakShardCount = 32;
/** Lease of a persistent shard (ms): short, so that failover after a kill fits a short soak. */
export const soakLeaseDurationMs = 3_000;
/** How often a held lease is renewed (ms). */
export const soakLeaseRenewIntervalMs = 1_000;

/** Entity type names (also the lease keys' entity types). */
export const soakListType = "SoakList";
export const soakCounterType = "SoakCounter";

/**
 * `prefix0`, `prefix1`, ... in order, keeping the first key that lands on each shard of `entityType` until every
 * shard has one: as many keys as shards, so the load spreads over every shard while each key still contends.
 */
export function oneKeyPerShard(prefix: string, entityType: string): string[] {
  const partitioner = new StableHashPartitioner();
  const byShard = new Map<number, string>();
  for (let i = 0; byShard.size < soakShardCount; i++) {
    const key = `${prefix}${i}`;
    const shard = partitioner.shardFor(entityType, key, soakShardCount);
    if (!byShard.has(shard)) byShard.set(shard, key);
  }
  return [...byShard.values()].sort((a, b) => Number(a.slice(prefix.length)) - Number(b.slice(prefix.length)));
}

/** The soak's keys: one list and one counter per shard, and 8 ordinary mailboxes. */
export function soakKeySpace(): KeySpace {
  return {
    lists: oneKeyPerShard("l", soakListType),
    counters: oneKeyPerShard("c", soakCounterType),
    mailboxes: Array.from({ length: 8 }, (_, i) => `m${i}`),
  };
}
