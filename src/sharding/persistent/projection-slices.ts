/**
 * Slices of a sharded projection: a projection split into N slices handles each persistence id's events in exactly
 * one slice, chosen by a stable hash of the persistence id, so that every node agrees and one entity's events keep
 * their order within one slice. Slice i is entity "i" of the projection's routing name, and lives in shard i.
 */
import { ClusterShardingConfigurationError } from "../errors.ts";
import { Fnv1a64 } from "../hash/fnv1a64.ts";
import type { EntityPartitioner } from "../partitioner.ts";
import { requireShardCount } from "../partitioner.ts";

/** Most slices of one projection: each is a shard with its own lease and checkpoint. */
export const MAX_PROJECTION_SLICES = 1024;

const hasher = new Fnv1a64();

/**
 * The slice of `persistenceId` among `slices`: 64-bit FNV-1a of its UTF-8 bytes modulo the count. Never a runtime
 * string hash: every node (and every restart) must put an entity's events in the same slice, or two slices would
 * handle them, each from its own checkpoint.
 */
export function projectionSliceOf(persistenceId: string, slices: number): number {
  return hasher.reset().utf8(persistenceId).mod(slices);
}

/**
 * The checkpoint name of slice `index` of `slices`: the projection's own name when it is not split (so a projection
 * that moves from `Projections.start` to the cluster keeps its checkpoint), else `<name>/slice-<i>-of-<n>`. The
 * count is part of the name: with another count every slice holds other entities and starts its own checkpoint.
 */
export function projectionSliceName(name: string, index: number, slices: number): string {
  return slices === 1 ? name : `${name}/slice-${index}-of-${slices}`;
}

/**
 * Validates a slice count.
 * @throws ClusterShardingConfigurationError naming `slices`
 */
export function checkSliceCount(slices: unknown): number {
  if (typeof slices !== "number" || !Number.isSafeInteger(slices) || slices < 1 || slices > MAX_PROJECTION_SLICES) {
    throw new ClusterShardingConfigurationError(
      `a projection's slices must be a whole number 1..${MAX_PROJECTION_SLICES} (got ${String(slices)})`,
      "slices",
    );
  }
  return slices;
}

/**
 * Puts slice entity "i" in shard i, so each slice has a lease of its own and the allocation strategy spreads slices
 * like shards. Any other entity id (none is sent by this module, but a hostile or mistaken sender may) falls back to
 * the stable hash, so the answer is always a shard in range.
 */
export class ProjectionSlicePartitioner implements EntityPartitioner {
  readonly configurationKey = "ProjectionSlicePartitioner";
  private readonly fallback = new Fnv1a64();

  shardFor(entityType: string, entityId: string, shardCount: number): number {
    requireShardCount(shardCount);
    if (/^(0|[1-9][0-9]{0,9})$/.test(entityId)) {
      const slice = Number(entityId);
      if (slice < shardCount) return slice;
    }
    return this.fallback.reset().utf8(entityType).byte(0).utf8(entityId).mod(shardCount);
  }
}
