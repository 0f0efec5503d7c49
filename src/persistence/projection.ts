/**
 * Projections: a name, a source (a filter of the event feed) and a handler, run from the projection's checkpoint
 * onwards. Two delivery modes:
 * - exactly-once: each batch runs in one database transaction (PersistenceStore.runProjectionBatch); the handler gets
 *   that transaction, and its writes commit together with the checkpoint or not at all;
 * - at-least-once: the handler runs outside any transaction and is told each event's offset; the checkpoint is saved
 *   after the handler, every `checkpointEvery` events, so after a crash the events since the last checkpoint are
 *   handled again (the handler de-duplicates by offset).
 * A projection may run under a shard lease (`fence`): its checkpoint writes are fenced like entity writes, and a stale
 * instance gets StaleShardOwnerError, commits nothing and stops.
 */
import type { Scheduler } from "../actor/index.ts";
import { describe, errorText } from "../actor/untrusted.ts";
import {
  InvalidPersistenceRequestError,
  ProjectionCheckpointConflictError,
  ProjectionRebuildSupersededError,
  StaleShardOwnerError,
} from "./errors.ts";
import {
  checkEventQuery,
  checkProjectionName,
  type EventFilter,
  type FeedEvent,
  type ProjectionControl,
  type ProjectionTransaction,
} from "./feed.ts";
import type { ShardLeaseToken } from "./lease.ts";
import { RateWindow } from "./rate-window.ts";
import type { PersistenceStore } from "./store.ts";

interface ProjectionBase {
  /** The checkpoint's key; unique per projection (and per slice). */
  readonly name: string;
  /** Which events of the feed (default all). */
  readonly source?: EventFilter;
  /** Events per batch (one query; for exactly-once one transaction), 1..1000; default 100. */
  readonly batchSize?: number;
  /** Longest wait for new events without a wake-up, in ms (see EventStreamOptions.pollIntervalMs); default 500. */
  readonly pollIntervalMs?: number;
  /** Where a projection without a checkpoint starts (default 0: the whole feed). */
  readonly startOffset?: number;
}

/** What an operator's rebuild asks of a read model (see {@link ExactlyOnceProjection.reset}). */
export interface ProjectionRebuild {
  /** The checkpoint moves here: the events after it are handled again. */
  readonly fromOffset: number;
  /**
   * Whether this instance handles `persistenceId`'s events: a slice of a sharded projection owns part of the read
   * model and must reset only that part (always true for a projection that is not split).
   */
  owns(persistenceId: string): boolean;
}

/** A projection whose handler writes in the checkpoint's transaction (PostgreSQL or SQLite). */
export interface ExactlyOnceProjection extends ProjectionBase {
  readonly mode: "exactly-once";
  /** Handles one event inside the batch's transaction; a throw rolls back the whole batch (it is retried). */
  readonly handler: (event: FeedEvent, tx: ProjectionTransaction) => Promise<void> | void;
  /**
   * Undoes the read model's effect of the events after `rebuild.fromOffset`, in the transaction that moves the
   * checkpoint there, when an operator's rebuild (a durable control, e.g. `sharding.rebuildProjection`) is carried
   * out: the events are then handled again, each exactly once. Without it a rebuild only moves the checkpoint.
   */
  readonly reset?: (tx: ProjectionTransaction, rebuild: ProjectionRebuild) => Promise<void> | void;
}

/** A projection whose handler writes anywhere; it sees each event at least once. */
export interface AtLeastOnceProjection extends ProjectionBase {
  readonly mode: "at-least-once";
  /** Handles one event; `event.offset` lets it recognise an event it handled before a crash. */
  readonly handler: (event: FeedEvent) => Promise<void> | void;
  /** Save the checkpoint after this many handled events (and when the feed is drained); default 100. */
  readonly checkpointEvery?: number;
}

/** A projection definition. */
export type Projection = ExactlyOnceProjection | AtLeastOnceProjection;

/** Where a running projection is. */
export type ProjectionStatus = "starting" | "running" | "paused" | "stopped" | "stale";

/** Operational figures of a projection (also in Projections.stats). */
export interface ProjectionStats {
  readonly name: string;
  readonly mode: Projection["mode"];
  readonly status: ProjectionStatus;
  /** The last committed checkpoint. */
  readonly checkpoint: number;
  /** The feed's latest offset when last looked at. */
  readonly latestOffset: number;
  /** latestOffset − checkpoint (0 when caught up). */
  readonly lag: number;
  /**
   * Events handled per second over the last 10 s (RateWindow): 0 until this instance has run for a second, so a
   * first batch right after the start is not reported as a burst.
   */
  readonly eventsPerSecond: number;
  /** Events handled (committed) since this instance started. */
  readonly processed: number;
  /** Batches that failed and were retried. */
  readonly failures: number;
  /** The last failure as "Name: message", or null. */
  readonly lastError: string | null;
  /** When the last failure happened (wall clock, ms since the epoch), or null. */
  readonly lastErrorAtEpochMs: number | null;
  /** Failures since the last batch that committed: above 0 while the projection is failing and retrying. */
  readonly consecutiveFailures: number;
  /**
   * Whether the projection follows the operator's control stored in the database (a slice of a sharded projection)
   * rather than only this instance's pause()/resume().
   */
  readonly durableControl: boolean;
  /** A rebuild the operator asked for and this instance has not carried out yet (durable control), or null. */
  readonly pendingRebuildFrom: number | null;
}

/** Options of {@link ProjectionRunner.start}. */
export interface ProjectionRunOptions {
  /** The shard lease this instance runs under (its checkpoint writes are fenced). */
  readonly fence?: ShardLeaseToken | null;
  /** Backoff after a failed batch, from this many ms doubling to 30 s; default 100. */
  readonly retryBackoffMs?: number;
  /**
   * Which of the source's events this instance handles (default all). The checkpoint still moves past the others:
   * a slice of a projection (sharded-projection.ts) reads the whole source and handles the events of its slice.
   */
  readonly only?: ((event: FeedEvent) => boolean) | null;
  /**
   * Follow the operator's control of this projection stored in the database (PersistenceStore.loadProjectionControl,
   * keyed by the projection's name): paused there means paused here, and a rebuild asked for there is carried out
   * once, fenced, before the next batch. Read before the first batch, at least every pollIntervalMs, and at once on
   * {@link ProjectionRunner.controlChanged}. Default false: pause()/resume() of this instance only.
   */
  readonly durableControl?: boolean;
  /** Which persistence ids' part of the read model this instance owns, for the definition's reset; default all. */
  readonly owns?: ((persistenceId: string) => boolean) | null;
}

interface RebuildRequest {
  readonly offset: number;
  readonly reset?: (tx: ProjectionTransaction) => Promise<void>;
  readonly done: () => void;
  readonly failed: (error: unknown) => void;
}

/**
 * One running instance of a projection. Start it with {@link ProjectionRunner.start}; it runs until `stop()`, or
 * until a newer lease owner fences it out (status "stale").
 */
export class ProjectionRunner {
  private statusNow: ProjectionStatus = "starting";
  private checkpoint = 0;
  private latest = 0;
  private processed = 0;
  private failures = 0;
  private lastError: string | null = null;
  private lastErrorAtEpochMs: number | null = null;
  private consecutiveFailures = 0;
  private readonly rateWindow: RateWindow;
  private wake: (() => void) | null = null;
  private woken = false;
  private unsubscribe: () => void = () => {};
  private loop: Promise<void> = Promise.resolve();
  private pending: RebuildRequest | null = null;
  /** pause() of this instance. */
  private pausedHere = false;
  /** The durable control as last read (durableControl only). */
  private control: ProjectionControl = { paused: false, rebuildFrom: null };
  private controlReadAtMs = Number.NEGATIVE_INFINITY;
  private controlStale = true;
  private readonly batchSize: number;
  private readonly pollMs: number;
  private readonly filter: EventFilter;

  private constructor(
    readonly definition: Projection,
    private readonly store: PersistenceStore,
    private readonly scheduler: Scheduler,
    private readonly fence: ShardLeaseToken | null,
    private readonly retryBackoffMs: number,
    private readonly only: ((event: FeedEvent) => boolean) | null,
    private readonly durableControl: boolean,
    private readonly owns: ((persistenceId: string) => boolean) | null,
  ) {
    this.batchSize = definition.batchSize ?? 100;
    this.pollMs = definition.pollIntervalMs ?? 500;
    this.filter = definition.source ?? {};
    this.rateWindow = new RateWindow(scheduler.now());
  }

  /**
   * Checks a definition as start() does, without starting it (a sharded projection checks on the caller's stack
   * rather than in the entity that starts it later, on whichever node owns it).
   * @throws InvalidPersistenceRequestError naming the field
   */
  static check(definition: Projection): void {
    checkDefinition(definition);
  }

  /**
   * Validates the definition and starts the projection from its checkpoint.
   * @throws InvalidPersistenceRequestError for a malformed definition
   */
  static start(
    definition: Projection,
    store: PersistenceStore,
    scheduler: Scheduler,
    options: ProjectionRunOptions = {},
  ): ProjectionRunner {
    checkDefinition(definition);
    const runner = new ProjectionRunner(
      definition,
      store,
      scheduler,
      options.fence ?? null,
      options.retryBackoffMs ?? 100,
      options.only ?? null,
      options.durableControl === true,
      options.owns ?? null,
    );
    runner.unsubscribe = store.onEventsCommitted(() => runner.poke());
    runner.loop = runner.run();
    return runner;
  }

  /** The projection's name. */
  get name(): string {
    return this.definition.name;
  }

  /** Where it is. */
  get status(): ProjectionStatus {
    return this.statusNow;
  }

  /** Lag, rate, last error and the rest. */
  get stats(): ProjectionStats {
    return {
      name: this.definition.name,
      mode: this.definition.mode,
      status: this.statusNow,
      checkpoint: this.checkpoint,
      latestOffset: Math.max(this.latest, this.checkpoint),
      lag: Math.max(0, this.latest - this.checkpoint),
      eventsPerSecond: this.rateWindow.rate(this.scheduler.now()),
      processed: this.processed,
      failures: this.failures,
      lastError: this.lastError,
      lastErrorAtEpochMs: this.lastErrorAtEpochMs,
      consecutiveFailures: this.consecutiveFailures,
      durableControl: this.durableControl,
      pendingRebuildFrom: this.durableControl ? this.control.rebuildFrom : null,
    };
  }

  /** Stops handling events after the batch in flight (the checkpoint stays); `resume()` continues. */
  pause(): void {
    this.pausedHere = true;
    if (this.statusNow === "running" || this.statusNow === "starting") this.statusNow = "paused";
  }

  /** Continues a projection paused here (one the durable control pauses stays paused until resumed there). */
  resume(): void {
    this.pausedHere = false;
    if (this.statusNow !== "paused" || this.control.paused) return;
    this.statusNow = "running";
    this.poke();
  }

  /**
   * Reads the durable control again before the next batch (a batch in flight finishes first): an operator changed
   * it. Cheap to call spuriously; without it the control is still read every pollIntervalMs.
   */
  controlChanged(): void {
    this.controlStale = true;
    this.poke();
  }

  /**
   * Moves the checkpoint to `offset` (usually back, to rebuild the read model) and continues from there. For an
   * exactly-once projection, `reset` runs in the same transaction as the checkpoint move (clear the read model there).
   * Resolves once the checkpoint has moved.
   */
  rebuildFrom(offset: number, reset?: (tx: ProjectionTransaction) => Promise<void>): Promise<void> {
    if (!Number.isSafeInteger(offset) || offset < 0) {
      return Promise.reject(
        new InvalidPersistenceRequestError("offset", `${describe(offset)}; expected a whole number ≥ 0`),
      );
    }
    return new Promise<void>((resolve, reject) => {
      this.pending?.failed(new Error("superseded by a later rebuildFrom"));
      this.pending =
        reset === undefined
          ? { offset, done: resolve, failed: reject }
          : { offset, reset, done: resolve, failed: reject };
      this.poke();
    });
  }

  /** Stops the projection; resolves when the batch in flight (if any) has finished. */
  async stop(): Promise<void> {
    if (this.statusNow !== "stale") this.statusNow = "stopped";
    this.unsubscribe();
    this.poke();
    await this.loop;
  }

  /** Resolves when the projection has stopped or was fenced out (status "stopped" or "stale"). */
  get done(): Promise<void> {
    return this.loop;
  }

  /** Resolves once the checkpoint is at or past `offset` (or the projection stopped). */
  async caughtUpTo(offset: number): Promise<void> {
    while (this.checkpoint < offset && !this.finished()) {
      await new Promise<void>((resolve) => this.scheduler.scheduleOnce(5, resolve));
    }
  }

  private finished(): boolean {
    return this.statusNow === "stopped" || this.statusNow === "stale";
  }

  private poke(): void {
    this.woken = true;
    this.wake?.();
  }

  private async run(): Promise<void> {
    let backoff = this.retryBackoffMs;
    while (!this.finished()) {
      try {
        if (this.statusNow === "starting") {
          this.checkpoint =
            (await this.store.loadProjectionOffset(this.definition.name)) ?? this.definition.startOffset ?? 0;
          // stop() or pause() while the checkpoint loaded wins (overwriting it kept a stopped projection running).
          if (this.statusNow === "starting") this.statusNow = "running";
        }
        if (this.durableControl && this.controlDue()) await this.readControl();
        if (this.finished()) break;
        if (this.control.rebuildFrom !== null) {
          await this.applyControlRebuild(this.control.rebuildFrom);
          continue;
        }
        if (this.pending !== null) {
          await this.applyRebuild();
          continue;
        }
        if (this.statusNow === "paused") {
          await this.idle(this.pollMs);
          if (this.pending === null && this.statusNow === "paused") this.latest = await this.store.latestOffset();
          continue;
        }
        this.woken = false;
        const handled = await this.batch();
        backoff = this.retryBackoffMs;
        if (handled < this.batchSize && !this.woken) {
          this.latest = await this.store.latestOffset();
          // A commit whose wake-up came while latestOffset() ran is not in the batch just read: look again rather
          // than wait for the poll (with a long poll interval this lost a commit for the whole interval).
          if (!this.woken) await this.idle(this.pollMs);
        }
      } catch (error) {
        if (this.finished()) return;
        this.failures++;
        this.consecutiveFailures++;
        this.lastError = errorText(error);
        this.lastErrorAtEpochMs = this.scheduler.wallNow();
        if (error instanceof StaleShardOwnerError) {
          // A newer owner runs this projection: this instance must never write again.
          this.statusNow = "stale";
          break;
        }
        if (error instanceof ProjectionCheckpointConflictError) {
          // Someone moved the checkpoint (a rebuild elsewhere, a second instance): continue from where it is.
          this.checkpoint = error.actualOffset;
          this.controlStale = true;
          continue;
        }
        if (error instanceof ProjectionRebuildSupersededError) {
          // The operator changed the rebuild while this one ran: nothing committed; do what the control says now.
          this.controlStale = true;
          continue;
        }
        await this.idle(backoff);
        backoff = Math.min(backoff * 2, 30_000);
      }
    }
    this.unsubscribe();
  }

  /**
   * One page from the checkpoint; returns how many events it handled. The feed's latest offset is read first: offsets
   * become visible in commit order, so when the page is not full no matching event at or below that offset remains,
   * and the checkpoint may move up to it even when the source's filter skipped the newest events (otherwise a filtered
   * projection would show lag and hold retention back forever).
   */
  /** Whether pause() (or the durable control) paused this runner; read afresh after every await. */
  private pausedNow(): boolean {
    return this.statusNow === "paused";
  }

  private async batch(): Promise<number> {
    const latest = await this.store.latestOffset();
    this.latest = Math.max(this.latest, latest);
    const page = await this.store.queryEvents({ ...this.filter, afterOffset: this.checkpoint, limit: this.batchSize });
    // Paused (or stopped) while the page was read: nothing of it is handled, so no event committed after pause() was
    // seen reaches the handler (under load a page read across the pause held the two events appended after it).
    if (this.pausedNow() || this.finished()) return 0;
    const through = page.hasMore ? page.nextOffset : Math.max(page.nextOffset, latest);
    if (through <= this.checkpoint) return 0;
    const only = this.only;
    const events = only === null ? page.events : page.events.filter(only);
    const definition = this.definition;
    if (definition.mode === "exactly-once") {
      await this.store.runProjectionBatch(
        { name: definition.name, expectedOffset: this.checkpoint, newOffset: through, fence: this.fence },
        async (tx) => {
          for (const event of events) await definition.handler(event, tx);
        },
      );
      this.advance(through, events.length);
      // The page's size, not the handled count, tells the loop whether more may follow at once.
      return page.events.length;
    }
    const every = definition.checkpointEvery ?? 100;
    let sinceCheckpoint = 0;
    let handledThrough: number | null = null;
    for (const event of events) {
      if (this.finished()) return page.events.length;
      if (this.pausedNow()) {
        // Paused between two events: what was handled is checkpointed, the rest waits for resume().
        if (handledThrough !== null && sinceCheckpoint > 0) {
          await this.store.saveProjectionOffset(definition.name, handledThrough, this.fence);
          this.advance(handledThrough, sinceCheckpoint);
        }
        return 0;
      }
      await definition.handler(event);
      handledThrough = event.offset;
      if (++sinceCheckpoint >= every && event !== events[events.length - 1]) {
        await this.store.saveProjectionOffset(definition.name, event.offset, this.fence);
        this.advance(event.offset, sinceCheckpoint);
        sinceCheckpoint = 0;
      }
    }
    await this.store.saveProjectionOffset(definition.name, through, this.fence);
    this.advance(through, sinceCheckpoint);
    return page.events.length;
  }

  private async applyRebuild(): Promise<void> {
    const request = this.pending!;
    this.pending = null;
    try {
      if (this.definition.mode === "exactly-once") {
        const reset = request.reset;
        await this.store.runProjectionBatch(
          {
            name: this.definition.name,
            expectedOffset: this.checkpoint,
            newOffset: request.offset,
            fence: this.fence,
          },
          async (tx) => {
            if (reset !== undefined) await reset(tx);
          },
        );
      } else {
        await this.store.saveProjectionOffset(this.definition.name, request.offset, this.fence);
      }
      this.checkpoint = request.offset;
      request.done();
    } catch (error) {
      request.failed(error);
      throw error;
    }
  }

  private controlDue(): boolean {
    return this.controlStale || this.scheduler.now() - this.controlReadAtMs >= this.pollMs;
  }

  /** Reads the durable control and follows its pause; a rebuild it asks for runs before the next batch. */
  private async readControl(): Promise<void> {
    this.controlStale = false;
    const control = await this.store.loadProjectionControl(this.definition.name);
    this.controlReadAtMs = this.scheduler.now();
    this.control = control;
    if (this.statusNow === "running" && control.paused) this.statusNow = "paused";
    else if (this.statusNow === "paused" && !control.paused && !this.pausedHere) this.statusNow = "running";
  }

  /**
   * Carries out the operator's rebuild: in one fenced transaction the definition's reset runs, the checkpoint moves
   * to `offset` and the request is cleared from the control row, so it happens once whichever owner gets to it.
   */
  private async applyControlRebuild(offset: number): Promise<void> {
    const definition = this.definition;
    const owns = this.owns;
    const rebuild: ProjectionRebuild = {
      fromOffset: offset,
      owns: (persistenceId) => owns === null || owns(persistenceId),
    };
    await this.store.runProjectionBatch(
      {
        name: definition.name,
        expectedOffset: this.checkpoint,
        newOffset: offset,
        fence: this.fence,
        completesRebuildFrom: offset,
      },
      async (tx) => {
        if (definition.mode === "exactly-once" && definition.reset !== undefined) await definition.reset(tx, rebuild);
      },
    );
    this.checkpoint = offset;
    this.control = { ...this.control, rebuildFrom: null };
  }

  private advance(offset: number, events: number): void {
    this.checkpoint = offset;
    this.latest = Math.max(this.latest, offset);
    this.processed += events;
    this.consecutiveFailures = 0;
    this.rateWindow.record(this.scheduler.now(), this.processed);
  }

  /** Waits `ms` or until poked (a commit, resume, rebuild or stop); the caller decides whether an earlier poke counts. */
  private idle(ms: number): Promise<void> {
    if (this.finished()) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const timer = this.scheduler.scheduleOnce(ms, () => {
        this.wake = null;
        resolve();
      });
      this.wake = () => {
        this.wake = null;
        timer.cancel();
        resolve();
      };
    });
  }
}

function checkDefinition(definition: Projection): void {
  if (definition === null || typeof definition !== "object") {
    throw new InvalidPersistenceRequestError("projection", `${describe(definition)}; expected a definition object`);
  }
  checkProjectionName(definition.name);
  const mode: unknown = definition.mode;
  if (mode !== "exactly-once" && mode !== "at-least-once") {
    throw new InvalidPersistenceRequestError("mode", `${describe(mode)}; expected "exactly-once" or "at-least-once"`);
  }
  if (typeof definition.handler !== "function") {
    throw new InvalidPersistenceRequestError("handler", "expected a function");
  }
  checkEventQuery({ ...(definition.source ?? {}), limit: definition.batchSize ?? 100 });
  const poll = definition.pollIntervalMs ?? 500;
  if (!Number.isSafeInteger(poll) || poll < 1 || poll > 60_000) {
    throw new InvalidPersistenceRequestError("pollIntervalMs", `${describe(poll)}; expected 1..60000`);
  }
  const start = definition.startOffset ?? 0;
  if (!Number.isSafeInteger(start) || start < 0) {
    throw new InvalidPersistenceRequestError("startOffset", `${describe(start)}; expected a whole number ≥ 0`);
  }
  if (definition.mode === "at-least-once") {
    const every = definition.checkpointEvery ?? 100;
    if (!Number.isSafeInteger(every) || every < 1) {
      throw new InvalidPersistenceRequestError("checkpointEvery", `${describe(every)}; expected a whole number ≥ 1`);
    }
  }
}
