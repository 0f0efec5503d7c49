/**
 * The 15 sharding counters of docs/protocol.md §16.2 (plus a breakdown of malformed envelopes and the shard mailbox bound's
 * refusals), process-wide for one actor system and summed over entity types.
 * Exposed as a frozen snapshot; the extension increments a private mutable copy.
 */
export interface ShardingStats {
  /** `tell`/`ask` calls on a sharded ref (caller node); activate and passivate do not count. */
  readonly routes: number;
  /** User messages handed to a local entity (owner node). */
  readonly localDeliveries: number;
  /** Routes and activations sent to a coordinator on another node (caller node). */
  readonly remoteRoutes: number;
  /** Envelopes the coordinator forwarded to a remote owner. */
  readonly forwards: number;
  /** Entity actors created (owner node). */
  readonly activations: number;
  /** `sendSystem(STOP)` calls on sharded refs (caller node). */
  readonly passivationRequests: number;
  /** Explicit passivations that stopped a live entity (owner node). */
  readonly explicitPassivations: number;
  /** Entities stopped by the idle sweep. */
  readonly idlePassivations: number;
  /** Completed handoffs (coordinator). */
  readonly handoffShards: number;
  /** Completed moves, forced or voluntary (coordinator); equal to handoffShards, as in the original. */
  readonly rebalanceMoves: number;
  /** Persistent shard leases newly acquired. */
  readonly leaseAcquisitions: number;
  /** Persistent shard lease renewals. */
  readonly leaseRenewals: number;
  /** Persistent shard leases lost (renewal failure, or suspension without release). */
  readonly leaseLosses: number;
  /** Deliveries or handoffs retried because a lease was unavailable. */
  readonly leaseRetries: number;
  /**
   * Every rejection: no owner, unauthorized or invalid envelopes, full buffers, stale plans, aborted handoffs (per
   * buffered delivery), and relayed asks that failed or got no reply within their timeout (counted on the owner,
   * which answers the asker directly).
   */
  readonly rejectedEnvelopes: number;
  /**
   * The part of `rejectedEnvelopes` that could not even be decoded, by reason: a sharding frame remoting could not
   * rebuild (`undecodable`: a field failed validation; `schemaInvalid`), or a valid envelope whose user payload has
   * an unregistered type or an invalid body (`payload`).
   */
  readonly malformedEnvelopes: Readonly<Record<MalformedReason, number>>;
  /**
   * Beyond docs/protocol.md §16.2: the part of `rejectedEnvelopes` refused on the owner because the shard's entities already
   * held `shardMailboxCapacity` messages not yet started (each is also a dead letter with reason mailboxOverflow).
   */
  readonly shardMailboxOverflows: number;
  /**
   * Beyond docs/protocol.md §16.2 (see §8.6): deliveries this node held while it had no coordinator to route through
   * (a caller's tell or ask, or a hop-0 envelope that reached a coordinator in transition).
   */
  readonly heldDeliveries: number;
  /** Deliveries not held because their shard's held queue was full (`heldDeliveriesPerShard`); also in `rejectedEnvelopes`. */
  readonly heldRefused: number;
  /** Held deliveries rejected at their deadline (`heldDeliveryTimeout`, or an ask's own timeout); also in `rejectedEnvelopes`. */
  readonly heldExpired: number;
  /**
   * Beyond docs/protocol.md §16.2: envelopes from another node whose `traceparent` was not a valid W3C trace context
   * (§7.2). Each was delivered all the same, without a parent span.
   */
  readonly malformedTraceContexts: number;
  /** Beyond §16.2 (see §8.8): deliveries this node's callers sent straight to the owner under a grant (caller node). */
  readonly directRoutes: number;
  /** Direct deliveries this node refused as owner (DirectDeliveryRefusedError); also in `rejectedEnvelopes`. */
  readonly directRefusals: number;
  /** Direct-route probes this node dropped as coordinator (the shard was not routable at once: handoff, held, no owner). */
  readonly directProbesDropped: number;
  /** Grants this node's callers gave up on a refusal from the owner (their shard went back to the coordinator route). */
  readonly directFallbacks: number;
  /**
   * Probes this node's callers sent again at once because a burst passed the held bound while one was out (the
   * waiting deliveries went through the coordinator, the new probe behind them; docs/protocol.md §8.8 "Caller").
   */
  readonly directBurstProbes: number;
  /**
   * Frames of two or more direct deliveries this node's callers sent one owner back to back with one sender (a
   * `DirectBatch`, docs/protocol.md §8.8 "Batches"); each delivery in one is also in `directRoutes`.
   */
  readonly directBatches: number;
}

/** Why an inbound sharding envelope could not be decoded (see {@link ShardingStats.malformedEnvelopes}). */
export type MalformedReason = "undecodable" | "schemaInvalid" | "payload";

/** Mutable counters behind {@link ShardingStats}. */
export type MutableShardingStats = {
  -readonly [K in Exclude<keyof ShardingStats, "malformedEnvelopes">]: number;
} & { readonly malformedEnvelopes: Record<MalformedReason, number> };

/** A frozen copy of `counters`. */
export function snapshotStats(counters: MutableShardingStats): ShardingStats {
  return Object.freeze({ ...counters, malformedEnvelopes: Object.freeze({ ...counters.malformedEnvelopes }) });
}

/** All counters at zero. */
export function zeroStats(): MutableShardingStats {
  return {
    routes: 0,
    localDeliveries: 0,
    remoteRoutes: 0,
    forwards: 0,
    activations: 0,
    passivationRequests: 0,
    explicitPassivations: 0,
    idlePassivations: 0,
    handoffShards: 0,
    rebalanceMoves: 0,
    leaseAcquisitions: 0,
    leaseRenewals: 0,
    leaseLosses: 0,
    leaseRetries: 0,
    rejectedEnvelopes: 0,
    malformedEnvelopes: { undecodable: 0, schemaInvalid: 0, payload: 0 },
    shardMailboxOverflows: 0,
    heldDeliveries: 0,
    heldRefused: 0,
    heldExpired: 0,
    malformedTraceContexts: 0,
    directRoutes: 0,
    directRefusals: 0,
    directProbesDropped: 0,
    directFallbacks: 0,
    directBurstProbes: 0,
    directBatches: 0,
  };
}
