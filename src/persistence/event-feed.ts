import type { Scheduler } from "../actor/index.ts";
import { describe } from "../actor/untrusted.ts";
import { InvalidPersistenceRequestError } from "./errors.ts";
import { checkEventQuery, type EventFilter, type EventPage, type EventQuery, type FeedEvent } from "./feed.ts";
import type { PersistenceStore } from "./store.ts";

/** Options of {@link EventFeed.stream}. */
export interface EventStreamOptions extends EventFilter {
  /** Start after this offset (a checkpoint; default 0, from the start). */
  readonly afterOffset?: number;
  /** Events read per query, 1..1000 (default 100). */
  readonly pageSize?: number;
  /**
   * Longest wait, in milliseconds, before looking for new events without a wake-up (PostgreSQL LISTEN/NOTIFY and
   * this process's own appends wake the stream at once; other processes' SQLite appends are seen by this poll).
   * Default 500; 1..60,000.
   */
  readonly pollIntervalMs?: number;
  /** Ends the stream (the iterator returns) when aborted. */
  readonly signal?: AbortSignal;
}

/**
 * The event feed of a store: `Database.get(system).events`. `query` reads one page; `stream` is a live async
 * iterator that pages through the stored events and then follows new commits, each event exactly once and in offset
 * order. Resuming from a checkpoint is `stream({ afterOffset: checkpoint })`.
 */
export class EventFeed {
  constructor(
    private readonly store: PersistenceStore,
    private readonly scheduler: Scheduler,
  ) {}

  /**
   * One page of events after `afterOffset`, in commit order.
   * @throws InvalidPersistenceRequestError for a malformed query
   */
  query(query: EventQuery = {}): Promise<EventPage> {
    return this.store.queryEvents(query);
  }

  /** The largest committed offset (0 when no event exists). */
  latestOffset(): Promise<number> {
    return this.store.latestOffset();
  }

  /**
   * A live stream of events after `afterOffset`: stored ones first, then new commits as they happen. It ends when
   * `signal` aborts or the consumer stops iterating (`break`). Store errors end it with that error.
   * @throws InvalidPersistenceRequestError for malformed options (at the first `next()`)
   */
  async *stream(options: EventStreamOptions = {}): AsyncGenerator<FeedEvent, void, undefined> {
    const { afterOffset, pageSize, pollIntervalMs, signal, ...filter } = options;
    const pollMs = pollIntervalMs ?? 500;
    if (!Number.isSafeInteger(pollMs) || pollMs < 1 || pollMs > 60_000) {
      throw new InvalidPersistenceRequestError("pollIntervalMs", `${describe(pollMs)}; expected 1..60000`);
    }
    const base = checkEventQuery({ ...filter, afterOffset: afterOffset ?? 0, limit: pageSize ?? 100 });
    // A filtered stream moves past the events its filter skips, as a projection's checkpoint does: otherwise each
    // wake-up would read them again from its last match (on SQLite the entity-type filter is a scan, not an index).
    const filtered = base.entityTypes !== null || base.persistenceId !== null || base.tag !== null;
    let after = base.afterOffset;
    let woken = false;
    let wake: (() => void) | null = null;
    const unsubscribe = this.store.onEventsCommitted(() => {
      woken = true;
      wake?.();
    });
    const onAbort = () => wake?.();
    const aborted = () => signal?.aborted === true;
    signal?.addEventListener("abort", onAbort);
    try {
      while (!aborted()) {
        // A wake-up during the query below means "look again" rather than "wait".
        woken = false;
        // Read before the page: every event at or below it has committed (offsets are handed out in commit order).
        const latest = filtered ? await this.store.latestOffset() : 0;
        const page = await this.store.queryEvents({ ...filter, afterOffset: after, limit: base.limit });
        for (const event of page.events) {
          if (aborted()) return;
          after = event.offset;
          yield event;
        }
        if (!page.hasMore) after = Math.max(after, latest);
        if (page.hasMore || woken) continue;
        await new Promise<void>((resolve) => {
          const timer = this.scheduler.scheduleOnce(pollMs, () => resolve());
          wake = () => {
            timer.cancel();
            resolve();
          };
          if (woken || aborted()) wake();
        });
        wake = null;
      }
    } finally {
      signal?.removeEventListener("abort", onAbort);
      unsubscribe();
    }
  }
}
