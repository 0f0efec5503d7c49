/**
 * The outbox dispatcher (docs/outbox.md): claims batches of outbox rows (outbox-claim.ts), decodes each message with
 * the persistence codec, hands it to the entity deliverer or the named handler, and records each outcome
 * (outbox-delivery.ts): delivered, retried after a backoff, or parked. Delivery is at least once: a dispatcher that
 * dies mid-batch leaves its rows claimed until the claim ends, and then they are delivered again. A receiver that
 * persists with the message id as its OperationId turns that into an effect that happens once. Claims follow shard
 * ownership: a dispatcher claims the rows of the shards whose leases `leases()` gives it (a node's own, from
 * `ClusterSharding.heldShardLeases()`), and rows without a shard.
 */
import { randomUUID } from "node:crypto";
import type { Class } from "../actor/index.ts";
import { describe, errorText } from "../actor/untrusted.ts";
import type { PersistenceCodec } from "./codec.ts";
import { PersistenceConfigurationError } from "./errors.ts";
import type { ShardLeaseToken } from "./lease.ts";
import { type ClaimedOutboxRow, MAX_OUTBOX_ERROR_LENGTH, type OutboxFailure } from "./outbox-claim.ts";
import { type AttemptResult, deliveryOutcome, type OutboxRetryPolicy, outboxRetryPolicy } from "./outbox-delivery.ts";
import type { OutboxDestination } from "./outbox-message.ts";
import type { PersistenceStore } from "./store.ts";

/** One message handed to a deliverer. */
export interface OutboxDelivery {
  /** The outbox message id: the same on every redelivery (use it as the receiver's OperationId). */
  readonly messageId: string;
  readonly destination: OutboxDestination;
  /** The message, decoded by the persistence codec. */
  readonly message: unknown;
  /** 1 for the first attempt. */
  readonly attempt: number;
  /** The persistence id of the entity that sent it. */
  readonly senderPersistenceId: string;
}

/** Delivers one message; resolves when the destination acknowledged it, rejects (or times out) to retry later. */
export type OutboxDeliverer = (delivery: OutboxDelivery) => Promise<void>;

/** What the sharding deliverer needs of ClusterSharding: `entityRefFor(type, id).ask(message, replyType, timeoutMs)`. */
export interface EntityAsker {
  /** The reference of entity `entityId` of `entityType`. */
  entityRefFor(entityType: string, entityId: string): EntityAskRef;
}

/** What the sharding deliverer needs of a ShardedEntityRef. */
export interface EntityAskRef {
  /** Sends `message` and resolves with the entity's reply of type `replyType`. */
  ask<R>(message: unknown, replyType: Class<R>, timeoutMs?: number): Promise<R>;
}

/**
 * A deliverer to sharded entities: asks the destination entity through sharding and counts any reply of `replyType`
 * (the receiver answers after its write, also for a duplicate) as the acknowledgement.
 */
export function deliverThroughSharding(
  sharding: EntityAsker,
  replyType: Class<unknown>,
  timeoutMs = 10_000,
): OutboxDeliverer {
  return async (delivery) => {
    if (delivery.destination.kind !== "entity") throw new Error("not an entity destination");
    const { entityType, entityId } = delivery.destination;
    await sharding.entityRefFor(entityType, entityId).ask(delivery.message, replyType, timeoutMs);
  };
}

/** Options of {@link OutboxDispatcher}. */
export interface OutboxDispatcherOptions {
  readonly store: PersistenceStore;
  /** The codec the senders encoded their messages with (`Database.get(system).codec`). */
  readonly codec: PersistenceCodec;
  /** Delivers messages to entities (see deliverThroughSharding); without it such messages fail and are retried. */
  readonly deliverToEntity?: OutboxDeliverer;
  /** Deliverers of messages sent with thenSendToHandler, by name. */
  readonly handlers?: Readonly<Record<string, OutboxDeliverer>>;
  /** This dispatcher's claim owner name; default a random one. */
  readonly owner?: string;
  /**
   * The shard leases this node holds now, asked before every claim: the rows their entities wrote are claimed under
   * them (on a node, `() => sharding.heldShardLeases()`). Rows of any other shard are left to the node that holds it.
   * Default none: only rows without a shard are claimed.
   */
  readonly leases?: () => readonly ShardLeaseToken[];
  /**
   * Whether to claim rows without a shard (written unfenced, or before migration 15; any dispatcher may take them);
   * default true.
   */
  readonly unsharded?: boolean;
  /** Rows per claim (1..1000); default 64. */
  readonly batchSize?: number;
  /** How long a claim hides its rows from other dispatchers; default 30,000 ms. */
  readonly leaseMs?: number;
  /** How long one delivery may take before it counts as failed; default 10,000 ms, less than leaseMs. */
  readonly deliveryTimeoutMs?: number;
  /** Retry settings (attempts before parking, backoff). */
  readonly retry?: Partial<OutboxRetryPolicy>;
  /** Running mode: the pause after a batch that was not full; default 200 ms. */
  readonly pollIntervalMs?: number;
  /**
   * Running mode: delete rows delivered more than `retentionMs` ago, every `everyMs`; default one day, every minute.
   * False keeps delivered rows forever (purge with `store.purgeOutbox`).
   */
  readonly purge?: { readonly retentionMs: number; readonly everyMs: number } | false;
  /** Called with errors of the running loop (a failed claim); default ignore. */
  readonly onError?: (error: unknown) => void;
}

/** What one {@link OutboxDispatcher.runOnce} did. */
export interface OutboxBatchResult {
  readonly claimed: number;
  /** Acknowledged by their destination. */
  readonly delivered: number;
  /** Failed, to be retried after a backoff. */
  readonly retried: number;
  /** Failed for the last time (or unreadable): parked. */
  readonly parked: number;
  /**
   * Of the outcomes above, those not recorded because the shard lease their row was claimed under is no longer
   * current (the shard moved, or its lease lapsed): the shard's owner claims them again.
   */
  readonly stale: number;
}

/** Counters of a dispatcher since it was made. */
export interface OutboxDispatcherStats {
  claimed: number;
  delivered: number;
  retried: number;
  parked: number;
  purged: number;
  /**
   * Attempts that sent no new copy because this dispatcher's previous copy of the same message was still unanswered
   * (its delivery timed out, its deliverer had not settled): the attempt waited for that copy instead.
   */
  joined: number;
  /**
   * Leases that a claim presented and the lease table did not confirm (another owner or epoch holds the shard, or the
   * lease expired): nothing was claimed under them.
   */
  staleLeases: number;
  /**
   * Outcomes (delivered, retried, parked) not recorded because the lease the row was claimed under is no longer
   * current: the shard's new owner claims the row again.
   */
  staleSettles: number;
  /** The last delivery error (text) or null. */
  lastError: string | null;
}

const whole = (setting: string, value: unknown, min: number, max: number): number => {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < min || value > max) {
    throw new PersistenceConfigurationError(
      `outbox.${setting}`,
      `${describe(value)}; expected a whole number ${min}..${max}`,
    );
  }
  return value;
};

/**
 * Delivers outbox rows: `runOnce()` claims and delivers one batch; `start()` runs batches until `stop()`. Any number
 * of dispatchers may run against one database (claims never overlap).
 */
export class OutboxDispatcher {
  /** The claim owner name. */
  readonly owner: string;
  readonly stats: OutboxDispatcherStats = {
    claimed: 0,
    delivered: 0,
    retried: 0,
    parked: 0,
    purged: 0,
    joined: 0,
    staleLeases: 0,
    staleSettles: 0,
    lastError: null,
  };
  private readonly batchSize: number;
  private readonly leaseMs: number;
  private readonly deliveryTimeoutMs: number;
  private readonly pollIntervalMs: number;
  private readonly policy: OutboxRetryPolicy;
  private running = false;
  private loop: Promise<void> | null = null;
  private wake: (() => void) | null = null;
  /**
   * A commit was announced while a batch ran (no pause to end): the next pause ends at once. Without it the messages
   * of every commit made during a batch waited a whole pollIntervalMs (200 ms by default), the end-to-end latency of
   * a sender that waits for its receipt (bench:projections, closed loop).
   */
  private wokenDuringBatch = false;
  private lastPurgeMs = 0;
  /**
   * The deliverer calls not settled yet, by message id. A delivery that timed out may still be queued at the receiver
   * (behind a handoff buffer, a stalled database); the next attempt waits for that copy rather than sending another,
   * so a slow receiver holds at most one copy per message from this dispatcher, however many timeouts pass. A copy
   * acknowledged after its attempt timed out stays (resolved) until the next attempt records the delivery without
   * sending again; a rejected one leaves at once. A copy older than leaseMs is not waited for (a deliverer that never
   * settles, a copy lost with its node: the next attempt sends another). At most maxUnsettledCopies are kept (past
   * that the oldest is forgotten, so neither those nor late acknowledgements of rows another dispatcher delivered
   * grow the map).
   */
  private readonly unsettled = new Map<string, { readonly delivering: Promise<void>; readonly sentAtMs: number }>();

  /** @throws PersistenceConfigurationError for a setting out of range */
  constructor(private readonly options: OutboxDispatcherOptions) {
    this.owner = options.owner ?? `outbox-${randomUUID()}`;
    if (typeof this.owner !== "string" || this.owner.length === 0 || this.owner.length > 256) {
      throw new PersistenceConfigurationError("outbox.owner", "expected a non-empty string of at most 256 characters");
    }
    this.batchSize = whole("batchSize", options.batchSize ?? 64, 1, 1000);
    this.leaseMs = whole("leaseMs", options.leaseMs ?? 30_000, 10, 3_600_000);
    this.deliveryTimeoutMs = whole(
      "deliveryTimeoutMs",
      options.deliveryTimeoutMs ?? Math.min(10_000, Math.floor(this.leaseMs / 2)),
      1,
      this.leaseMs - 1,
    );
    this.pollIntervalMs = whole("pollIntervalMs", options.pollIntervalMs ?? 200, 1, 3_600_000);
    this.policy = outboxRetryPolicy(options.retry);
    if (options.purge !== undefined && options.purge !== false) {
      whole("purge.retentionMs", options.purge.retentionMs, 0, Number.MAX_SAFE_INTEGER);
      whole("purge.everyMs", options.purge.everyMs, 1, Number.MAX_SAFE_INTEGER);
    }
  }

  /** Claims one batch, delivers its messages concurrently, and records every outcome (where its claim still stands). */
  async runOnce(): Promise<OutboxBatchResult> {
    const claim = await this.options.store.claimOutbox({
      owner: this.owner,
      limit: this.batchSize,
      leaseMs: this.leaseMs,
      leases: this.options.leases?.() ?? [],
      unsharded: this.options.unsharded ?? true,
    });
    const rows = claim.rows;
    this.stats.staleLeases += claim.staleLeases.length;
    this.stats.claimed += rows.length;
    const results = await Promise.all(rows.map((row) => this.attempt(row)));
    const delivered: ClaimedOutboxRow[] = [];
    const failures: OutboxFailure[] = [];
    let retried = 0;
    let parked = 0;
    rows.forEach((row, i) => {
      const outcome = deliveryOutcome(row.attempts, results[i]!, this.policy);
      // Recorded now (delivered or parked): nothing of this message is waited for any more. A retried one keeps its
      // unsettled copy for the next attempt.
      if (outcome.kind !== "retry") this.unsettled.delete(row.messageId);
      if (outcome.kind === "delivered") delivered.push(row);
      else {
        this.stats.lastError = outcome.error;
        const park = outcome.kind === "park";
        if (park) parked++;
        else retried++;
        failures.push({
          offset: row.offset,
          claimEpoch: row.claimEpoch,
          error: outcome.error,
          retryAfterMs: park ? 0 : outcome.afterMs,
          park,
        });
      }
    });
    let stale = 0;
    if (delivered.length > 0) stale += (await this.options.store.completeOutbox(delivered)).stale;
    if (failures.length > 0) stale += (await this.options.store.failOutbox(this.owner, failures)).stale;
    this.stats.delivered += delivered.length;
    this.stats.retried += retried;
    this.stats.parked += parked;
    this.stats.staleSettles += stale;
    return { claimed: rows.length, delivered: delivered.length, retried, parked, stale };
  }

  /** Runs batches until {@link stop}: at once again after a full batch, else after pollIntervalMs or a commit. */
  start(): void {
    if (this.running) return;
    this.running = true;
    const unsubscribe = this.options.store.onEventsCommitted(() => {
      if (this.wake !== null) this.wake();
      else this.wokenDuringBatch = true;
    });
    this.loop = (async () => {
      try {
        while (this.running) {
          let full = false;
          this.wokenDuringBatch = false;
          try {
            full = (await this.runOnce()).claimed >= this.batchSize;
            await this.maybePurge();
          } catch (error) {
            this.options.onError?.(error);
          }
          if (!full && this.running) await this.pause();
        }
      } finally {
        unsubscribe();
      }
    })();
  }

  /** Stops the running mode after the batch in flight (its outcomes are recorded). */
  async stop(): Promise<void> {
    this.running = false;
    this.wake?.();
    await this.loop;
    this.loop = null;
  }

  private pause(): Promise<void> {
    if (this.wokenDuringBatch) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.wake = null;
        resolve();
      };
      const timer = setTimeout(done, this.pollIntervalMs);
      this.wake = done;
    });
  }

  private async maybePurge(): Promise<void> {
    const purge = this.options.purge ?? { retentionMs: 86_400_000, everyMs: 60_000 };
    if (purge === false) return;
    const now = Date.now();
    if (now - this.lastPurgeMs < purge.everyMs) return;
    this.lastPurgeMs = now;
    this.stats.purged += await this.options.store.purgeOutbox(purge.retentionMs);
  }

  /** One delivery attempt; never rejects. */
  private async attempt(row: ClaimedOutboxRow): Promise<AttemptResult> {
    if ("unreadable" in row.destination) return { ok: false, error: row.destination.unreadable, unreadable: true };
    let message: unknown;
    try {
      message = this.options.codec.decode(row.manifest, row.payload, row.persistenceId, 0);
    } catch (error) {
      // Retrying cannot make a payload readable: park it for an operator (a codec registration may be missing).
      return { ok: false, error: `cannot decode the message: ${errorText(error)}`, unreadable: true };
    }
    const destination = row.destination;
    // The handler name comes from a stored row: only the record's own entries count (not "constructor" and the like).
    const handlers = this.options.handlers;
    const deliverer =
      destination.kind === "entity"
        ? this.options.deliverToEntity
        : handlers !== undefined && Object.hasOwn(handlers, destination.handler)
          ? handlers[destination.handler]
          : undefined;
    if (typeof deliverer !== "function") {
      const what = destination.kind === "entity" ? "deliverToEntity" : `handlers["${destination.handler}"]`;
      return { ok: false, error: `this dispatcher has no ${what}` };
    }
    const delivery: OutboxDelivery = {
      messageId: row.messageId,
      destination,
      message,
      attempt: row.attempts,
      senderPersistenceId: row.persistenceId,
    };
    let timer: NodeJS.Timeout | undefined;
    try {
      const copy = this.unsettled.get(row.messageId);
      let delivering: Promise<void>;
      if (copy !== undefined && Date.now() - copy.sentAtMs < this.leaseMs) {
        this.stats.joined++;
        delivering = copy.delivering;
      } else {
        delivering = this.send(row.messageId, () => deliverer(delivery));
      }
      await Promise.race([
        delivering,
        new Promise<never>((_, reject) => {
          timer = setTimeout(
            () => reject(new Error(`no acknowledgement within ${this.deliveryTimeoutMs} ms`)),
            this.deliveryTimeoutMs,
          );
        }),
      ]);
      return { ok: true };
    } catch (error) {
      return { ok: false, error: errorText(error).slice(0, MAX_OUTBOX_ERROR_LENGTH) };
    } finally {
      clearTimeout(timer);
    }
  }

  /** Calls the deliverer and keeps its promise among the unsettled copies until it settles. */
  private send(messageId: string, deliver: () => Promise<void>): Promise<void> {
    const delivering = Promise.resolve().then(deliver);
    this.unsettled.delete(messageId);
    if (this.unsettled.size >= maxUnsettledCopies) {
      const oldest = this.unsettled.keys().next();
      if (oldest.done !== true) this.unsettled.delete(oldest.value);
    }
    const copy = { delivering, sentAtMs: Date.now() };
    this.unsettled.set(messageId, copy);
    delivering.catch(() => {
      if (this.unsettled.get(messageId) === copy) this.unsettled.delete(messageId);
    });
    return delivering;
  }
}

/** The most unsettled deliverer calls a dispatcher remembers (see OutboxDispatcher.unsettled). */
const maxUnsettledCopies = 10_000;
