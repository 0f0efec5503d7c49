import { deliveryRetryDrainBatch, handoffBufferCountMax, leaseRetryIntervalMs } from "../constants.ts";
import { ClusterShardingConfigurationError, NoShardOwnerError, ShardLeaseUnavailableError } from "../errors.ts";

/**
 * The per-shard delivery retry barrier (docs/protocol.md §10). When delivery on the authorized owner fails with a
 * transient admission error (lease unavailable, shard draining), the delivery joins one bounded FIFO per shard, and
 * every later delivery for that shard queues behind it instead of starting its own timer, so per-entity order holds.
 * One tick per shard (every 25 ms) retries the head; the queue is rejected whole when its window
 * (leaseDuration + leaseRenewInterval) ends. Handoff passivation waits until the shard's queue is empty.
 *
 * This class holds no timers and does no I/O: the shell calls {@link RetryBarrier.drain} when the tick it was told
 * to schedule fires, passing the time and a synchronous delivery attempt.
 */

/** Why a delivery attempt failed transiently: "lease" counts a lease retry, "handoff" does not. */
export type TransientFailure = "lease" | "handoff";

/** The result of one delivery attempt made by the barrier. */
export type AttemptOutcome = "delivered" | TransientFailure | { readonly error: Error };

/** One queued delivery and its attempt count. */
interface Entry<D> {
  readonly item: D;
  attempt: number;
}

interface ShardQueue<D> {
  readonly entries: Entry<D>[];
  deadlineMs: number;
}

/** What a barrier call asks the shell to do. */
export interface BarrierResult<D> {
  /** Deliveries to fail (asks get the error; tells are dropped and counted). */
  readonly rejected: { readonly item: D; readonly error: Error }[];
  /** Lease retries to count. */
  readonly leaseRetries: number;
  /** When to call `drain` for this shard again: after `leaseRetryIntervalMs`, at once (yield), or never (empty). */
  readonly next: "tick" | "yield" | "none";
}

/** Options of a {@link RetryBarrier}. */
export interface RetryBarrierOptions {
  readonly entityType: string;
  /** leaseDuration + leaseRenewInterval, ms. */
  readonly windowMs: number;
  /** Queue cap per shard; default 1,024. */
  readonly capacity?: number;
}

/** Retry queues of one entity type, keyed by shard. */
export class RetryBarrier<D> {
  private readonly queues = new Map<number, ShardQueue<D>>();
  private readonly capacity: number;

  constructor(private readonly options: RetryBarrierOptions) {
    this.capacity = options.capacity ?? handoffBufferCountMax;
  }

  /** True while `shardId` has a queue (new deliveries must {@link join} it). */
  has(shardId: number): boolean {
    return this.queues.has(shardId);
  }

  /** Queued deliveries of `shardId`. */
  size(shardId: number): number {
    return this.queues.get(shardId)?.entries.length ?? 0;
  }

  /** Shards with a queue. */
  get shards(): number[] {
    return [...this.queues.keys()];
  }

  /**
   * Queues a delivery whose attempt `attempt` (0 for the first) just failed transiently. Opens the shard's queue (and
   * its deadline) if there is none; `next: "tick"` then means: schedule the shard's tick.
   */
  failed(shardId: number, item: D, attempt: number, failure: TransientFailure, nowMs: number): BarrierResult<D> {
    const nextAttempt = attempt + 1;
    const leaseRetries = failure === "lease" ? 1 : 0;
    if (!this.withinWindow(nextAttempt)) {
      return { rejected: [{ item, error: this.exhausted(shardId) }], leaseRetries: 0, next: "none" };
    }
    let queue = this.queues.get(shardId);
    const opened = queue === undefined;
    if (queue === undefined) {
      queue = { entries: [], deadlineMs: nowMs + this.options.windowMs };
      this.queues.set(shardId, queue);
    }
    if (queue.entries.length >= this.capacity) {
      return { rejected: [{ item, error: this.full(shardId) }], leaseRetries: 0, next: "none" };
    }
    queue.entries.push({ item, attempt: nextAttempt });
    return { rejected: [], leaseRetries, next: opened ? "tick" : "none" };
  }

  /**
   * Appends a delivery that arrived while `shardId` has a queue, so it stays behind the earlier ones.
   * @returns false (and the error) when the shard has no queue or the queue is full
   */
  join(shardId: number, item: D): { readonly queued: true } | { readonly queued: false; readonly error: Error | null } {
    const queue = this.queues.get(shardId);
    if (queue === undefined) return { queued: false, error: null };
    if (queue.entries.length >= this.capacity) return { queued: false, error: this.full(shardId) };
    queue.entries.push({ item, attempt: 0 });
    return { queued: true };
  }

  /**
   * Works through the head of `shardId`'s queue: rejects everything once the deadline passed or when this node is no
   * longer the authorized owner, else delivers in order until a transient failure (retry the head next tick), up to
   * 64 deliveries per call (then yields).
   */
  drain(shardId: number, nowMs: number, authorized: boolean, attempt: (item: D) => AttemptOutcome): BarrierResult<D> {
    const queue = this.queues.get(shardId);
    if (queue === undefined) return { rejected: [], leaseRetries: 0, next: "none" };
    if (nowMs >= queue.deadlineMs || !authorized) {
      this.queues.delete(shardId);
      const error = authorized
        ? new ShardLeaseUnavailableError(this.options.entityType, shardId)
        : new NoShardOwnerError(this.options.entityType, shardId);
      return { rejected: queue.entries.map((e) => ({ item: e.item, error })), leaseRetries: 0, next: "none" };
    }
    const rejected: { item: D; error: Error }[] = [];
    let leaseRetries = 0;
    let delivered = 0;
    while (queue.entries.length > 0) {
      if (delivered >= deliveryRetryDrainBatch) return { rejected, leaseRetries, next: "yield" };
      const head = queue.entries[0]!;
      const outcome = attempt(head.item);
      if (outcome === "delivered") {
        queue.entries.shift();
        delivered++;
        continue;
      }
      if ((outcome === "lease" || outcome === "handoff") && this.withinWindow(head.attempt + 1)) {
        head.attempt++;
        if (outcome === "lease") leaseRetries++;
        return { rejected, leaseRetries, next: "tick" };
      }
      queue.entries.shift();
      rejected.push({ item: head.item, error: typeof outcome === "object" ? outcome.error : this.exhausted(shardId) });
    }
    this.queues.delete(shardId);
    return { rejected, leaseRetries, next: "none" };
  }

  /**
   * The step form of {@link drain}, for a core that cannot call the provider itself: the first half. Rejects the whole
   * queue once its deadline passed or when this node is no longer the authorized owner (`done`), else offers the head
   * deliveries (at most 64) to attempt in order, stopping at the first transient failure; the outcomes go to
   * {@link settle}.
   */
  begin(
    shardId: number,
    nowMs: number,
    authorized: boolean,
  ): { readonly attempt: readonly D[] } | { readonly done: BarrierResult<D> } {
    const queue = this.queues.get(shardId);
    if (queue === undefined) return { done: { rejected: [], leaseRetries: 0, next: "none" } };
    if (nowMs >= queue.deadlineMs || !authorized) {
      this.queues.delete(shardId);
      const error = authorized
        ? new ShardLeaseUnavailableError(this.options.entityType, shardId)
        : new NoShardOwnerError(this.options.entityType, shardId);
      return { done: { rejected: queue.entries.map((e) => ({ item: e.item, error })), leaseRetries: 0, next: "none" } };
    }
    const offered: D[] = [];
    for (let i = 0; i < queue.entries.length && i < deliveryRetryDrainBatch; i++) offered.push(queue.entries[i]!.item);
    return { attempt: offered };
  }

  /**
   * The second half of the step form of {@link drain}: applies the outcomes of the deliveries {@link begin} offered,
   * in order (`outcomes` may be shorter: the attempts stopped at a transient failure). Same rules as `drain`: a
   * transient failure inside the window stays at the head for the next tick; one past it, or an error, is rejected.
   */
  settle(shardId: number, outcomes: readonly AttemptOutcome[]): BarrierResult<D> {
    const queue = this.queues.get(shardId);
    if (queue === undefined) return { rejected: [], leaseRetries: 0, next: "none" };
    const rejected: { item: D; error: Error }[] = [];
    let leaseRetries = 0;
    for (const outcome of outcomes) {
      const head = queue.entries[0];
      if (head === undefined) break;
      if (outcome === "delivered") {
        queue.entries.shift();
        continue;
      }
      if ((outcome === "lease" || outcome === "handoff") && this.withinWindow(head.attempt + 1)) {
        head.attempt++;
        if (outcome === "lease") leaseRetries++;
        return { rejected, leaseRetries, next: "tick" };
      }
      queue.entries.shift();
      rejected.push({ item: head.item, error: typeof outcome === "object" ? outcome.error : this.exhausted(shardId) });
    }
    if (queue.entries.length > 0) return { rejected, leaseRetries, next: "yield" };
    this.queues.delete(shardId);
    return { rejected, leaseRetries, next: "none" };
  }

  /** Removes every queue, returning what was queued (to reject when the extension stops). */
  clear(): D[] {
    const items = [...this.queues.values()].flatMap((q) => q.entries.map((e) => e.item));
    this.queues.clear();
    return items;
  }

  // docs/protocol.md §10: an envelope may be retried while attempt * 25 ms stays inside the window.
  private withinWindow(attempt: number): boolean {
    return attempt * leaseRetryIntervalMs < this.options.windowMs;
  }

  private exhausted(shardId: number): Error {
    return new ShardLeaseUnavailableError(this.options.entityType, shardId);
  }

  private full(shardId: number): Error {
    return new ClusterShardingConfigurationError(
      `Shard delivery retry buffer is full for ${this.options.entityType}/${shardId}; slow down until the shard is available`,
    );
  }
}
