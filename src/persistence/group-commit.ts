import { PersistenceConfigurationError } from "./errors.ts";

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
}

/** The defaults of {@link GroupCommitSettings}. */
export const defaultGroupCommit: GroupCommitSettings = { maxBatchSize: 64, maxConcurrentBatches: 1 };

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
}

/**
 * Validates group-commit settings over the defaults.
 * @throws PersistenceConfigurationError naming the setting
 */
export function groupCommitSettings(partial: Partial<GroupCommitSettings> = {}): GroupCommitSettings {
  const settings = { ...defaultGroupCommit, ...partial };
  for (const [field, value] of Object.entries(settings)) {
    if (!Number.isSafeInteger(value) || value < 1 || value > 10_000) {
      throw new PersistenceConfigurationError(
        `groupCommit.${field}`,
        `${String(value)}; expected a whole number 1..10000`,
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
}

/**
 * Coalesces items submitted while statements are in flight into one statement (PostgreSQL group commit: one
 * transaction, one WAL flush and one round trip for many appends). Two items with the same key never share a
 * statement: the later one waits for the next, so a batch never holds two writes that would race each other, and
 * items of one key leave in the order they came. The flush function answers each item of a batch on its own (its
 * result, or its own error), so one item's failure does not fail the others; a rejected flush fails every item of
 * that statement (a lost connection: the outcome of each is unknown, and each caller retries its own).
 */
export class GroupCommit<T, R> {
  private queue: Pending<T, R>[] = [];
  private inFlight = 0;
  readonly stats: GroupCommitStats = { statements: 0, batches: 0, batchedItems: 0, largestBatch: 0 };

  constructor(
    private readonly settings: GroupCommitSettings,
    private readonly keyOf: (item: T) => string,
    /** Sends one statement; resolves with one settled outcome per item, in order. */
    private readonly flush: (items: readonly T[]) => Promise<readonly PromiseSettledResult<R>[]>,
  ) {}

  /** Items waiting for a statement. */
  get waiting(): number {
    return this.queue.length;
  }

  /** Queues `item` and sends it as soon as the bounds allow; settles with its own outcome. */
  submit(item: T): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.queue.push({ item, key: this.keyOf(item), resolve, reject });
      if (this.inFlight < this.settings.maxConcurrentBatches) this.send();
    });
  }

  private send(): void {
    const batch = this.take();
    if (batch.length === 0) return;
    this.inFlight++;
    this.stats.statements++;
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
    answered
      .then(
        (outcomes) => {
          batch.forEach((p, i) => {
            const outcome = outcomes[i];
            if (outcome === undefined) p.reject(new Error(`group commit: no outcome for item ${i} of ${batch.length}`));
            else if (outcome.status === "fulfilled") p.resolve(outcome.value);
            else p.reject(outcome.reason);
          });
        },
        (error: unknown) => {
          for (const p of batch) p.reject(error);
        },
      )
      .finally(() => {
        this.inFlight--;
        // Everything that queued meanwhile leaves now, in as many statements as the bounds allow.
        while (this.queue.length > 0 && this.inFlight < this.settings.maxConcurrentBatches) this.send();
      });
  }

  /** Takes up to maxBatchSize items, at most one per key, oldest first; the rest keep their order. */
  private take(): Pending<T, R>[] {
    const max = this.settings.maxBatchSize;
    if (this.queue.length <= 1) {
      const all = this.queue;
      this.queue = [];
      return all;
    }
    const batch: Pending<T, R>[] = [];
    const rest: Pending<T, R>[] = [];
    const keys = new Set<string>();
    for (const p of this.queue) {
      if (batch.length < max && !keys.has(p.key)) {
        keys.add(p.key);
        batch.push(p);
      } else {
        rest.push(p);
      }
    }
    this.queue = rest;
    return batch;
  }
}
