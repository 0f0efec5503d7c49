import { ClusterShardingConfigurationError } from "./errors.ts";
import { Fnv1a64 } from "./hash/fnv1a64.ts";

/**
 * Maps an entity to its shard. Implementations must be pure and identical on every node: the configuration key takes
 * part in the settings compatibility check, so two nodes with different partitioners reject each other's envelopes.
 */
export interface EntityPartitioner {
  /** Stable identity of this partitioner's configuration (default for built-ins: the class name). */
  readonly configurationKey: string;
  /**
   * The shard of `entityId` of `entityType`, in [0, shardCount).
   * @throws ClusterShardingConfigurationError when `shardCount` is not a positive integer
   */
  shardFor(entityType: string, entityId: string, shardCount: number): number;
}

/**
 * The default partitioner: 64-bit FNV-1a over UTF-8(entityType), one 0x00 byte, UTF-8(entityId), modulo the shard
 * count (docs/protocol.md §5.2). It never uses a runtime string hash: those are randomized per process (or change between
 * engine versions), and every node, and every restart of it, must agree on the shard of an entity, or messages for
 * one entity would reach two owners.
 */
export class StableHashPartitioner implements EntityPartitioner {
  readonly configurationKey = "StableHashPartitioner";
  private readonly hasher = new Fnv1a64();
  // The hash of the last entity type and its separator byte: a stream of messages repeats the type, so only the id
  // is mixed per call.
  private lastType = "";
  private typeHi: number;
  private typeLo: number;

  constructor() {
    this.hasher.byte(0);
    this.typeHi = this.hasher.hi;
    this.typeLo = this.hasher.lo;
  }

  shardFor(entityType: string, entityId: string, shardCount: number): number {
    requireShardCount(shardCount);
    const h = this.hasher;
    if (entityType !== this.lastType) {
      h.reset().utf8(entityType).byte(0);
      this.lastType = entityType;
      this.typeHi = h.hi;
      this.typeLo = h.lo;
    } else {
      h.hi = this.typeHi;
      h.lo = this.typeLo;
    }
    return h.utf8(entityId).mod(shardCount);
  }
}

/**
 * Checks a shard count: a positive integer below 2^31.
 * @throws ClusterShardingConfigurationError "shard count must be positive"
 */
export function requireShardCount(shardCount: number): number {
  if (!Number.isInteger(shardCount) || shardCount <= 0 || shardCount > 0x7fff_ffff) {
    throw new ClusterShardingConfigurationError(
      `shard count must be positive (got ${String(shardCount)}); pass an integer from 1 to 2147483647`,
      "shardCount",
    );
  }
  return shardCount;
}
