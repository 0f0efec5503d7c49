import { batchSizeBuckets, Histogram } from "../actor/index.ts";
import { PersistenceConfigurationError, PersistenceOverloadedError } from "./errors.ts";

/** Bounds of a {@link GroupCommit}. */
export interface GroupCommitSettings {
  /** Most items one statement carries; default 64. */
  maxBatchSize: number;
  /**
   * Statements in flight at once. An item that arrives while fewer are in flight is sent at once (alone, unless
   * others are already waiting), so a lone writer pays no added latency; once this many are in flight, arrivals wait
   * and leave together when one completes. Default 1, classic group commit: on the project's 2-core machine one
   * statement at a time gave the largest batches and the best throughput at 4 and 64 writers (two or three in flight
   * split the same writers into smaller batches, each its own transaction and WAL flush). The price: a statement that
   * waits on a lock (a lease renewal in progress, another node's uncommitted row) holds up every append queued
   * behind it, for as long as it waits.
   */
  maxConcurrentBatches: number;
  /**
   * Most items waiting for a statement; one more is refused at once with PersistenceOverloadedError (nothing was
   * sent, so the caller may retry with the same OperationId). Default 10,000, about 160 full statements: at the
   * project's measured 1 to 2 ms per 64-row statement that backlog drains in a fraction of the 5 s operation timeout,
   * so a healthy database never reaches it, while a stalled one stops the queue (and the payloads it holds) from
   * growing with every caller. 1..1,000,000.
   */
  maxWaiting: number;
}

/** The defaults of {@link GroupCommitSettings}. */
export const defaultGroupCommit: GroupCommitSettings = {
  maxBatchSize: 64,
  maxConcurrentBatches: 1,
  maxWaiting: 10_000,
};

/** Counters of a {@link GroupCommit}. */
export interface GroupCommitStats {
  /** Statements sent, of one item or more. */
  statements: number;
  /** Statements that carried two or more items. */
  batches: number;
  /** Items sent in those statements. */
  batchedItems: number;
  /** The most items one statement carried. */
  largestBatch: number;
  /** Items refused because {@link GroupCommitSettings.maxWaiting} items were already waiting. */
  overloaded: number;
}

/**
 * Validates group-commit settings over the defaults.
 * @throws PersistenceConfigurationError naming the setting
 */
export function groupCommitSettings(partial: Partial<GroupCommitSettings> = {}): GroupCommitSettings {
  const settings = { ...defaultGroupCommit, ...partial };
  for (const [field, value] of Object.entries(settings)) {
    const max = field === "maxWaiting" ? 1_000_000 : 10_000;
    if (!Number.isSafeInteger(value) || value < 1 || value > max) {
      throw new PersistenceConfigurationError(
        `groupCommit.${field}`,
        `${typeof value === "number" ? value : typeof value}; expected a whole number 1..${max}`,
      );
    }
  }
  return settings;
}

interface Pending<T, R> {
  readonly item: T;
  readonly key: string;
  readonly resolve: (result: R) => void;
  readonly reject: (error: unknown) => void;
  /** The next waiting item of the same key: it may leave only in a later statement than this one. */
  next: Pending<T, R> | null;
}

/**
 * Coalesces items submitted while statements are in flight into one statement (PostgreSQL group commit: one
 * transaction, one WAL flush and one round trip for many appends). Two items with the same key never share a
 * statement: the later one waits for the next, so a batch never holds two writes that would race each other, and
 * items of one key leave in the order they came. The flush function answers each item of a batch on its own (its
 * result, or its own error), so one item's failure does not fail the others; a rejected flush fails every item of
 * that statement (a lost connection: the outcome of each is unknown, and each caller retries its own).
 *
 * The waiting items form one FIFO of keys that can leave (the oldest waiting item of each key) and, behind each of
 * those, a chain of the key's later items; taking a statement costs its own size, not the length of the queue.
 * A key whose item left re-enters the FIFO at its end with its next item, so keys take turns.
 */
export class GroupCommit<T, R> {
  /** The oldest waiting item of each key with any waiting, oldest key first: a ring from `head`, `ready` long. */
  private ring: (Pending<T, R> | undefined)[] = new Array(16);
  private head = 0;
  private ready = 0;
  /** The newest waiting item of each key with any waiting (the end of its chain). */
  private readonly lastOfKey = new Map<string, Pending<T, R>>();
  private count = 0;
  private inFlight = 0;
  readonly stats: GroupCommitStats = { statements: 0, batches: 0, batchedItems: 0, largestBatch: 0, overloaded: 0 };
  /** Items per statement sent, single items included (`movie_persistence_group_commit_batch_size`). */
  readonly batchSize = new Histogram(batchSizeBuckets);

  constructor(
    private readonly settings: GroupCommitSettings,
    private readonly keyOf: (item: T) => string,
    /** Sends one statement; resolves with one settled outcome per item, in order. */
    private readonly flush: (items: readonly T[]) => Promise<readonly PromiseSettledResult<R>[]>,
  ) {}

  /** Items waiting for a statement. */
  get waiting(): number {
    return this.count;
  }

  /**
   * Queues `item` and sends it as soon as the bounds allow; settles with its own outcome.
   * Rejects PersistenceOverloadedError, without queueing, when maxWaiting items already wait.
   */
  submit(item: T): Promise<R> {
    if (this.count >= this.settings.maxWaiting) {
      this.stats.overloaded++;
      return Promise.reject(new PersistenceOverloadedError("group commit", this.settings.maxWaiting));
    }
    return new Promise<R>((resolve, reject) => {
      const key = this.keyOf(item);
      const pending: Pending<T, R> = { item, key, resolve, reject, next: null };
      const last = this.lastOfKey.get(key);
      if (last === undefined) this.pushReady(pending);
      else last.next = pending;
      this.lastOfKey.set(key, pending);
      this.count++;
      if (this.inFlight < this.settings.maxConcurrentBatches) this.send();
    });
  }

  private send(): void {
    const batch = this.take();
    if (batch.length === 0) return;
    this.inFlight++;
    this.stats.statements++;
    this.batchSize.observe(batch.length);
    if (batch.length > 1) {
      this.stats.batches++;
      this.stats.batchedItems += batch.length;
      if (batch.length > this.stats.largestBatch) this.stats.largestBatch = batch.length;
    }
    let answered: Promise<readonly PromiseSettledResult<R>[]>;
    try {
      answered = this.flush(batch.map((p) => p.item));
    } catch (error) {
      answered = Promise.reject(error);
    }
    answered.then(
      (outcomes) =>
        this.complete(batch.length, () =>
          batch.forEach((p, i) => {
            const outcome = outcomes[i];
            if (outcome === undefined) p.reject(new Error(`group commit: no outcome for item ${i} of ${batch.length}`));
            else if (outcome.status === "fulfilled") p.resolve(outcome.value);
            else p.reject(outcome.reason);
          }),
        ),
      (error: unknown) =>
        this.complete(batch.length, () => {
          for (const p of batch) p.reject(error);
        }),
    );
  }

  /** Answers a statement's items and frees its slot. */
  private complete(size: number, answer: () => void): void {
    if (size > 1 || this.count > 0) {
      // Other writers are about (this statement carried several, or more are waiting): the slot stays taken for one
      // more turn of the event loop, so the writers just answered queue their next appends meanwhile and leave with
      // those already waiting, in one statement instead of a lone one and then the rest (at 4 writers that took
      // twice as many statements).
      answer();
      setImmediate(() => this.release());
    } else {
      // A lone writer is never held: the slot is free before it hears back, so its next append leaves at once.
      this.inFlight--;
      answer();
    }
  }

  private release(): void {
    this.inFlight--;
    // Everything that queued meanwhile leaves now, in as many statements as the bounds allow.
    while (this.count > 0 && this.inFlight < this.settings.maxConcurrentBatches) this.send();
  }

  /** Takes up to maxBatchSize items, at most one per key, from the keys that waited longest. */
  private take(): Pending<T, R>[] {
    const n = Math.min(this.ready, this.settings.maxBatchSize);
    const batch = new Array<Pending<T, R>>(n);
    for (let i = 0; i < n; i++) {
      const at = this.head;
      batch[i] = this.ring[at]!;
      this.ring[at] = undefined;
      this.head = (at + 1) & (this.ring.length - 1);
    }
    this.ready -= n;
    this.count -= n;
    if (this.count === 0) {
      // Everything waiting left (the common case under load): one clear instead of a delete per key.
      this.lastOfKey.clear();
      return batch;
    }
    // Each key's next item joins the end only now, so it cannot share this statement with the one ahead of it.
    for (const p of batch) {
      const next = p.next;
      if (next === null) this.lastOfKey.delete(p.key);
      else {
        p.next = null;
        this.pushReady(next);
      }
    }
    return batch;
  }

  private pushReady(pending: Pending<T, R>): void {
    if (this.ready === this.ring.length) this.grow();
    this.ring[(this.head + this.ready) & (this.ring.length - 1)] = pending;
    this.ready++;
  }

  /** Doubles the ring (its length stays a power of two, so wrapping is a mask). */
  private grow(): void {
    const old = this.ring;
    const next = new Array<Pending<T, R> | undefined>(old.length * 2);
    for (let i = 0; i < this.ready; i++) next[i] = old[(this.head + i) & (old.length - 1)];
    this.ring = next;
    this.head = 0;
  }
}
