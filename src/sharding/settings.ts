import { describe } from "../actor/untrusted.ts";
import { LeastLoadedAllocation } from "./allocation/least-loaded.ts";
import type { ShardAllocationStrategy } from "./allocation/strategy.ts";
import { leaseDurationDefaultMs, leaseRenewIntervalDefaultMs, shardCountDefault } from "./constants.ts";
import { ClusterShardingConfigurationError } from "./errors.ts";
import { type EntityPartitioner, requireShardCount, StableHashPartitioner } from "./partitioner.ts";
import type { RebalancePolicy } from "./rebalance/policy.ts";
import { RateLimitedRebalance } from "./rebalance/rate-limited.ts";

/** Options of `ClusterSharding.init`; every field is optional. Durations are milliseconds. */
export interface ShardingSettingsOptions {
  /** Number of shards; default 256. A compatibility boundary: never change it in place for a live type. */
  shardCount?: number;
  /** Entity → shard mapping; default {@link StableHashPartitioner}. */
  partitioner?: EntityPartitioner;
  /** Shard → owner placement; default {@link LeastLoadedAllocation}. */
  allocation?: ShardAllocationStrategy;
  /** Voluntary-move policy; default `RateLimitedRebalance({ threshold: 1, maxConcurrent: 4 })`. */
  rebalance?: RebalancePolicy;
  /** Shard lease duration for persistent entities, ms; default 10,000. Part of the settings key for every type. */
  leaseDuration?: number;
  /** Lease renewal interval, ms; default 3,000, must be below `leaseDuration`. */
  leaseRenewInterval?: number;
  /** Passivate an entity after this long without messages, ms; default null (never). */
  idleTimeout?: number | null;
  /**
   * Mailbox capacity of each entity actor on this node (messages, 1..1,000,000), or null for unbounded (the default).
   * A delivery past it is a dead letter (`ActorSystem.mailboxOverflowCount`) and an ask behind it rejects with
   * MailboxOverflowError. Local, not part of the settings key: nodes may differ (a smaller node may bound tighter),
   * and a later init of the same type on this node keeps the first value.
   */
  entityMailboxCapacity?: number | null;
  /**
   * Most messages waiting, together, in the mailboxes of one shard's entities on this node (1..100,000,000), or null
   * for unbounded (the default). A delivery past it is refused with ShardMailboxOverflowError (a dead letter with
   * reason `mailboxOverflow`, counted in `ShardingStats.shardMailboxOverflows`, logged once per shard), so a hot
   * shard of many entities cannot grow the heap even when each stays under `entityMailboxCapacity`. A message
   * counts from its delivery until its entity starts it; the retry barrier's buffer flushes through the same check.
   * Local, not part of the settings key: it bounds this node's memory, no protocol decision depends on it, so nodes
   * may differ; a later init of the same type on this node keeps the first value.
   */
  shardMailboxCapacity?: number | null;
  /**
   * While routing has no converged coordinator because membership is re-converging (a join, a leave, a coordinator
   * change), or the coordinator has no owner for the shard yet: true holds the message on this node and routes it
   * once there is one, so an ask waits within its own timeout and a tell waits in a bounded per-shard
   * queue ({@link heldTellsPerShard}, {@link heldTellTimeout}); per-entity order from one sender is kept. false (the
   * default for now, docs/zero-downtime.md says why) fails at once with NoShardOwnerError (a tell throws, an ask
   * rejects). An unreachable member is waited out the same way
   * and ends at the deadline with a NoShardOwnerError naming the member. Local, not part of the settings key.
   */
  awaitCoordinator?: boolean;
  /**
   * Most deliveries (tells and asks) held for one shard on this node while routing waits (1..100,000; default 1,000);
   * one more is refused with NoShardOwnerError and counted (`ShardingStats.heldRefused`). Local.
   */
  heldTellsPerShard?: number;
  /**
   * How long a held tell waits for a coordinator, ms (1..3,600,000; default 10,000); past it, it is dropped as
   * rejected with NoShardOwnerError and counted (`ShardingStats.heldExpired`). An ask waits its own timeout. Local.
   */
  heldTellTimeout?: number;
}

/** Largest `heldTellsPerShard`. */
const heldTellsPerShardMax = 100_000;
/** Largest `heldTellTimeout`, ms. */
const heldTellTimeoutMax = 3_600_000;

/** Largest `shardMailboxCapacity`. */
const shardMailboxCapacityMax = 100_000_000;

/** The fields {@link ShardingSettings.incompatibleField} can name. */
export type ShardingSettingsField =
  | "shardCount"
  | "partitioner"
  | "allocation"
  | "rebalance"
  | "leaseDuration"
  | "leaseRenewInterval"
  | "idleTimeout";

/** Validated, immutable sharding settings of one entity type (REFERENCE §2.2). */
export class ShardingSettings {
  readonly shardCount: number;
  readonly partitioner: EntityPartitioner;
  readonly allocation: ShardAllocationStrategy;
  readonly rebalance: RebalancePolicy;
  /** Milliseconds. */
  readonly leaseDuration: number;
  /** Milliseconds. */
  readonly leaseRenewInterval: number;
  /** Milliseconds, or null when idle passivation is off. */
  readonly idleTimeout: number | null;
  /** Messages per entity mailbox, or null when unbounded; local (not in {@link key}). */
  readonly entityMailboxCapacity: number | null;
  /** Messages waiting in one shard's entity mailboxes together, or null when unbounded; local (not in {@link key}). */
  readonly shardMailboxCapacity: number | null;
  /** Hold routes while there is no converged coordinator (true) or fail them at once (false); local. */
  readonly awaitCoordinator: boolean;
  /** Deliveries held per shard at most while routing waits; local. */
  readonly heldTellsPerShard: number;
  /** Milliseconds a held tell waits at most; local. */
  readonly heldTellTimeout: number;
  /**
   * Deterministic text identical on every node with the same settings; every envelope carries it and a receiver with
   * another key rejects the envelope.
   */
  readonly key: string;

  private constructor(options: ShardingSettingsOptions) {
    this.shardCount = requireShardCount(options.shardCount ?? shardCountDefault);
    this.partitioner = requireKeyed(options.partitioner ?? new StableHashPartitioner(), "partitioner");
    this.allocation = requireKeyed(options.allocation ?? new LeastLoadedAllocation(), "allocation");
    this.rebalance = requireKeyed(options.rebalance ?? new RateLimitedRebalance(), "rebalance");
    this.leaseDuration = options.leaseDuration ?? leaseDurationDefaultMs;
    if (!isPositive(this.leaseDuration)) {
      throw new ClusterShardingConfigurationError(
        `shard lease duration must be positive (got ${describe(this.leaseDuration)} ms)`,
        "leaseDuration",
      );
    }
    this.leaseRenewInterval = options.leaseRenewInterval ?? leaseRenewIntervalDefaultMs;
    if (!isPositive(this.leaseRenewInterval) || this.leaseRenewInterval >= this.leaseDuration) {
      throw new ClusterShardingConfigurationError(
        `shard lease renewal interval must be positive and shorter than its duration (got ${describe(this.leaseRenewInterval)} ms for a ${this.leaseDuration} ms lease)`,
        "leaseRenewInterval",
      );
    }
    const idle = options.idleTimeout ?? null;
    if (idle !== null && !isPositive(idle)) {
      throw new ClusterShardingConfigurationError(
        `entity idle timeout must be positive (got ${describe(idle)} ms); pass null to disable idle passivation`,
        "idleTimeout",
      );
    }
    this.idleTimeout = idle;
    const capacity = options.entityMailboxCapacity ?? null;
    if (
      capacity !== null &&
      (typeof capacity !== "number" || !Number.isSafeInteger(capacity) || capacity < 1 || capacity > 1_000_000)
    ) {
      throw new ClusterShardingConfigurationError(
        `entity mailbox capacity must be a whole number of messages 1..1000000 (got ${typeof capacity === "number" ? capacity : typeof capacity}); pass null for unbounded`,
        "entityMailboxCapacity",
      );
    }
    this.entityMailboxCapacity = capacity;
    const shardCapacity = options.shardMailboxCapacity ?? null;
    if (
      shardCapacity !== null &&
      (typeof shardCapacity !== "number" ||
        !Number.isSafeInteger(shardCapacity) ||
        shardCapacity < 1 ||
        shardCapacity > shardMailboxCapacityMax)
    ) {
      throw new ClusterShardingConfigurationError(
        `shard mailbox capacity must be a whole number of messages 1..${shardMailboxCapacityMax} (got ${typeof shardCapacity === "number" ? shardCapacity : typeof shardCapacity}); pass null for unbounded`,
        "shardMailboxCapacity",
      );
    }
    this.shardMailboxCapacity = shardCapacity;
    const wait = options.awaitCoordinator ?? false;
    if (typeof wait !== "boolean") {
      throw new ClusterShardingConfigurationError(
        `awaitCoordinator must be true or false (got ${describe(wait)})`,
        "awaitCoordinator",
      );
    }
    this.awaitCoordinator = wait;
    this.heldTellsPerShard = requireWhole(
      options.heldTellsPerShard ?? heldTellsPerShardDefault,
      1,
      heldTellsPerShardMax,
      "heldTellsPerShard",
      "held deliveries per shard",
    );
    this.heldTellTimeout = requireWhole(
      options.heldTellTimeout ?? heldTellTimeoutDefaultMs,
      1,
      heldTellTimeoutMax,
      "heldTellTimeout",
      "held tell timeout (ms)",
    );
    this.key = [
      this.shardCount,
      this.partitioner.configurationKey,
      this.allocation.configurationKey,
      this.rebalance.configurationKey,
      this.leaseDuration,
      this.leaseRenewInterval,
      this.idleTimeout ?? "none",
    ].join("|");
  }

  /**
   * Validates `options` over the defaults.
   * @throws ClusterShardingConfigurationError naming the invalid field (shard count < 1, non-positive durations,
   * renewal not below the lease duration, a strategy without a configuration key, an entity mailbox capacity outside
   * 1..1,000,000)
   */
  static create(options: ShardingSettingsOptions = {}): ShardingSettings {
    if (options === null || typeof options !== "object") {
      throw new ClusterShardingConfigurationError("sharding settings must be an object", null);
    }
    return new ShardingSettings(options);
  }

  /** The first field that differs from `other` (in settings-key order), or null when both are compatible. */
  incompatibleField(other: ShardingSettings): ShardingSettingsField | null {
    if (this.shardCount !== other.shardCount) return "shardCount";
    if (this.partitioner.configurationKey !== other.partitioner.configurationKey) return "partitioner";
    if (this.allocation.configurationKey !== other.allocation.configurationKey) return "allocation";
    if (this.rebalance.configurationKey !== other.rebalance.configurationKey) return "rebalance";
    if (this.leaseDuration !== other.leaseDuration) return "leaseDuration";
    if (this.leaseRenewInterval !== other.leaseRenewInterval) return "leaseRenewInterval";
    if (this.idleTimeout !== other.idleTimeout) return "idleTimeout";
    return null;
  }

  /** True when every field of the compatibility key matches `other`. */
  isCompatible(other: ShardingSettings): boolean {
    return this.incompatibleField(other) === null;
  }
}

/** Default of `heldTellsPerShard`. */
const heldTellsPerShardDefault = 1_000;
/** Default of `heldTellTimeout`, ms. */
const heldTellTimeoutDefaultMs = 10_000;

function requireWhole(value: unknown, min: number, max: number, field: string, what: string): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < min || value > max) {
    throw new ClusterShardingConfigurationError(
      `${what} must be a whole number ${min}..${max} (got ${describe(value)})`,
      field,
    );
  }
  return value;
}

function isPositive(ms: number): boolean {
  return typeof ms === "number" && Number.isFinite(ms) && ms > 0;
}

function requireKeyed<T extends { readonly configurationKey: string }>(value: T, field: ShardingSettingsField): T {
  if (value === null || typeof value !== "object" || typeof value.configurationKey !== "string") {
    throw new ClusterShardingConfigurationError(
      `sharding ${field} must be an object with a string configurationKey`,
      field,
    );
  }
  if (value.configurationKey.length === 0 || value.configurationKey.includes("|")) {
    throw new ClusterShardingConfigurationError(
      `sharding ${field} configurationKey must be non-empty and must not contain "|" (got "${value.configurationKey}")`,
      field,
    );
  }
  return value;
}
