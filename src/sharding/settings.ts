import { checkSettingKeys, type SettingsShapeOf } from "../actor/settings-keys.ts";
import { describe } from "../actor/untrusted.ts";
import { LeastLoadedAllocation } from "./allocation/least-loaded.ts";
import type { ShardAllocationStrategy } from "./allocation/strategy.ts";
import { leaseDurationDefaultMs, leaseRenewIntervalDefaultMs, shardCountDefault } from "./constants.ts";
import { ClusterShardingConfigurationError } from "./errors.ts";
import { rememberSettingsKey } from "./internal/settings-digest.ts";
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
   * While there is no converged coordinator to route through (membership re-converging after a join or leave, a new
   * coordinator collecting snapshots, a member unreachable), a tell or ask on this node waits for one instead of
   * failing at once with NoShardOwnerError (docs/protocol.md §8.6, docs/zero-downtime.md); default true. false keeps
   * the immediate failure. Local, not part of the settings key: it only decides how long this node's own callers
   * wait, no other node reads it, so nodes may differ.
   */
  awaitCoordinator?: boolean;
  /**
   * Most deliveries (tells and asks) held per shard on this node while waiting for a coordinator (1..100,000);
   * default 1,024. A call past it fails at once with NoShardOwnerError (counted in `ShardingStats.heldRefused`).
   * Local, not part of the settings key (it bounds this node's memory).
   */
  heldDeliveriesPerShard?: number;
  /**
   * How long a delivery may wait for a coordinator, ms (1..600,000); default 10,000. An ask waits at most its own
   * timeout too. Past it the delivery is rejected with NoShardOwnerError (naming an unreachable member when one is
   * the reason), counted in `ShardingStats.heldExpired`. Local, not part of the settings key.
   */
  heldDeliveryTimeout?: number;
  /**
   * How a caller reaches a shard's owner (docs/protocol.md §8.8): `"coordinator"` (the default) sends every message
   * through the coordinator; `"direct"` sends a shard's messages straight to its owner once the owner granted the
   * route, and through the coordinator otherwise (first contact, handoffs, refusals). Part of the settings key: a
   * cluster cannot mix the two for one type.
   */
  routing?: ShardRouting;
}

/** The two routing modes of {@link ShardingSettingsOptions.routing}. */
export type ShardRouting = "coordinator" | "direct";

/** Every key of {@link ShardingSettingsOptions}. */
export const shardingSettingsShape = {
  shardCount: true,
  partitioner: true,
  allocation: true,
  rebalance: true,
  leaseDuration: true,
  leaseRenewInterval: true,
  idleTimeout: true,
  entityMailboxCapacity: true,
  shardMailboxCapacity: true,
  awaitCoordinator: true,
  heldDeliveriesPerShard: true,
  heldDeliveryTimeout: true,
  routing: true,
} as const satisfies SettingsShapeOf<ShardingSettingsOptions>;

/** Largest `shardMailboxCapacity`. */
const shardMailboxCapacityMax = 100_000_000;
/** Default and largest `heldDeliveriesPerShard`: the default matches a handoff's buffer per moving shard. */
const heldDeliveriesPerShardDefault = 1_024;
const heldDeliveriesPerShardMax = 100_000;
/** Default and largest `heldDeliveryTimeout`, ms: a re-convergence takes a few gossip rounds, a real failure is ended by an operator. */
const heldDeliveryTimeoutDefaultMs = 10_000;
const heldDeliveryTimeoutMaxMs = 600_000;

/** The fields {@link ShardingSettings.incompatibleField} can name. */
export type ShardingSettingsField =
  | "shardCount"
  | "partitioner"
  | "allocation"
  | "rebalance"
  | "leaseDuration"
  | "leaseRenewInterval"
  | "idleTimeout"
  | "routing";

/** Validated, immutable sharding settings of one entity type (docs/protocol.md §5.1). */
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
  /** Whether callers wait for a coordinator instead of failing at once; local (not in {@link key}). */
  readonly awaitCoordinator: boolean;
  /** Deliveries held per shard while waiting for a coordinator; local (not in {@link key}). */
  readonly heldDeliveriesPerShard: number;
  /** Milliseconds a delivery may wait for a coordinator; local (not in {@link key}). */
  readonly heldDeliveryTimeout: number;
  /** Coordinator or direct routing (docs/protocol.md §8.8); in {@link key} when direct. */
  readonly routing: ShardRouting;
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
    const awaitCoordinator = options.awaitCoordinator ?? true;
    if (typeof awaitCoordinator !== "boolean") {
      throw new ClusterShardingConfigurationError(
        `awaitCoordinator must be true or false (got ${typeof awaitCoordinator})`,
        "awaitCoordinator",
      );
    }
    this.awaitCoordinator = awaitCoordinator;
    this.heldDeliveriesPerShard = requireWhole(
      options.heldDeliveriesPerShard ?? heldDeliveriesPerShardDefault,
      heldDeliveriesPerShardMax,
      "heldDeliveriesPerShard",
      "held deliveries per shard must be a whole number of messages",
    );
    this.heldDeliveryTimeout = requireWhole(
      options.heldDeliveryTimeout ?? heldDeliveryTimeoutDefaultMs,
      heldDeliveryTimeoutMaxMs,
      "heldDeliveryTimeout",
      "held delivery timeout must be a whole number of ms",
    );
    const routing = options.routing ?? "coordinator";
    if (routing !== "coordinator" && routing !== "direct") {
      throw new ClusterShardingConfigurationError(
        `routing must be "coordinator" or "direct" (got ${describe(routing)})`,
        "routing",
      );
    }
    this.routing = routing;
    const parts: (string | number)[] = [
      this.shardCount,
      this.partitioner.configurationKey,
      this.allocation.configurationKey,
      this.rebalance.configurationKey,
      this.leaseDuration,
      this.leaseRenewInterval,
      this.idleTimeout ?? "none",
    ];
    // Coordinator routing adds nothing, so its key is the one nodes of earlier versions compute; direct routing
    // appends its name, so a node of either mode refuses the other's messages for the type.
    if (routing === "direct") parts.push("direct");
    this.key = parts.join("|");
    // Remembered so a direct envelope's digest of this key resolves to it on receipt (internal/settings-digest.ts).
    rememberSettingsKey(this.key);
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
    checkSettingKeys("ClusterSharding.init", options, shardingSettingsShape);
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
    if (this.routing !== other.routing) return "routing";
    return null;
  }

  /** True when every field of the compatibility key matches `other`. */
  isCompatible(other: ShardingSettings): boolean {
    return this.incompatibleField(other) === null;
  }
}

/**
 * `value` when it is a whole number in 1..`max`.
 * @throws ClusterShardingConfigurationError naming `field`
 */
function requireWhole(value: unknown, max: number, field: string, what: string): number {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1 || value > max) {
    throw new ClusterShardingConfigurationError(
      `${what} 1..${max} (got ${typeof value === "number" ? value : typeof value})`,
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
