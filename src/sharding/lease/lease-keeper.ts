/**
 * The shell around the lease book (lease-book.ts): performs its effects against a lease store (the persistence
 * layer's `Database`, or any object with the same three methods) and a `Scheduler`, and feeds the answers back. One
 * keeper serves one persistent provider (one routing name) on one node.
 */
import type { Cancellable, Logger, Scheduler } from "../../actor/index.ts";
import { ShardHandoffInProgressError, ShardLeaseUnavailableError } from "../errors.ts";
import {
  createLeaseBook,
  failureError,
  type LeaseBookConfig,
  type LeaseBookState,
  type LeaseCounter,
  type LeaseEffect,
  type LeaseInput,
  liveToken,
  type StopReason,
  step,
  stepAll,
} from "./lease-book.ts";
import type { ShardLeaseKey, ShardLeaseToken } from "./lease-token.ts";

/**
 * The lease calls the keeper makes; `Database.get(system)` and every `PersistenceStore` have them. The batch calls
 * are optional: without them every acquisition and renewal is its own call.
 */
export interface LeaseStore {
  acquireShardLease(key: ShardLeaseKey, owner: string, durationMs: number): Promise<ShardLeaseToken | null>;
  renewShardLease(token: ShardLeaseToken, durationMs: number): Promise<ShardLeaseToken | null>;
  releaseShardLease(token: ShardLeaseToken): Promise<boolean>;
  /** Each key's answer of `acquireShardLease`, in order, from one call (one statement on PostgreSQL). */
  acquireShardLeases?(
    keys: readonly ShardLeaseKey[],
    owner: string,
    durationMs: number,
  ): Promise<(ShardLeaseToken | null)[]>;
  /** Each token's answer of `renewShardLease`, in order, from one call (one statement on PostgreSQL). */
  renewShardLeases?(tokens: readonly ShardLeaseToken[], durationMs: number): Promise<(ShardLeaseToken | null)[]>;
}

/** How a keeper times its renewals. */
export interface LeaseKeeperOptions {
  /**
   * Renew in rounds: each renewal the book asks for waits for the next instant of this keeper's renewal grid (a step
   * of half the smaller of the renewal interval and the time a lease outlives it; at the defaults, 10 s leases renewed
   * every 3 s, a 1.5 s step), so the shards due in one step renew together, in one call of `renewShardLeases`, and
   * once renewed together stay together. The grid starts at a random offset per keeper (`random`), so that nodes do
   * not renew in lock-step. A renewal is at most one step late, which the lease's margin covers: renewed every 4.5 s
   * at most, a 10 s lease never lapses while the database answers. Default false: each shard's renewal fires on its
   * own timer, when due.
   */
  renewalRounds?: boolean;
  /** Where the grid offset comes from: a number in [0, 1); default Math.random. Tests pass a seeded generator. */
  random?: () => number;
}

/** A renewal round: the shards (and their epochs) due at one instant of the grid, and the timer that fires it. */
interface RenewalRound {
  readonly due: Map<number, number>;
  readonly timer: Cancellable;
}

/** What the keeper needs from its provider. */
export interface LeaseKeeperHooks {
  /** Stops the entity actors of `shardId` and resolves once they have terminated. */
  stopEntities(shardId: number, reason: StopReason): Promise<void> | void;
  /** Adds to a sharding counter (`leaseAcquisitions`, `leaseRenewals`, `leaseLosses`). */
  count(counter: LeaseCounter, by: number): void;
  /** The safe-to-own rule on the live membership view (see `safeToOwn`). */
  safeToOwn(): boolean;
  readonly log?: Logger;
}

/** Asks for a lease never get a request id of their own when nobody waits for the answer. */
const nobody = 0;

/** Keeps the shard leases of one persistent provider on one node. */
export class LeaseKeeper {
  private book: LeaseBookState;
  private readonly queue: LeaseInput[] = [];
  private feeding = false;
  private nextRequestId = 1;
  private readonly waiters = new Map<number, { resolve: (t: ShardLeaseToken) => void; reject: (e: Error) => void }>();
  private readonly drains = new Map<number, (() => void)[]>();
  private readonly renewals = new Map<number, Cancellable>();
  /** Rounds by grid instant (renewalRounds), and the instant each shard waits for. */
  private readonly rounds = new Map<number, RenewalRound>();
  private readonly roundOfShard = new Map<number, number>();
  /** The grid step and offset of renewal rounds, ms; step 0 when rounds are off. */
  private readonly roundStepMs: number;
  private readonly roundOffsetMs: number;
  /** Steps in progress (a feed): the calls they ask for leave together at the end. */
  private holding = 0;
  /** Calls the book asked for, waiting to leave together (only when the store has the batch call). */
  private readonly pendingRenewals: Extract<LeaseEffect, { kind: "renew" }>[] = [];
  private readonly pendingAcquires: Extract<LeaseEffect, { kind: "acquire" }>[] = [];
  /** One batch acquisition at a time: the ones asked for meanwhile leave together when it answers. */
  private acquiring = false;

  /**
   * @throws ClusterShardingConfigurationError when `config` is invalid (see `createLeaseBook`)
   */
  constructor(
    config: LeaseBookConfig,
    private readonly store: LeaseStore,
    private readonly scheduler: Scheduler,
    private readonly hooks: LeaseKeeperHooks,
    options: LeaseKeeperOptions = {},
  ) {
    this.book = createLeaseBook(config);
    if (options.renewalRounds === true) {
      const margin = Math.min(config.leaseRenewIntervalMs, config.leaseDurationMs - config.leaseRenewIntervalMs);
      this.roundStepMs = Math.max(1, Math.floor(margin / 2));
      const random = (options.random ?? Math.random)();
      this.roundOffsetMs = Math.floor(
        (Number.isFinite(random) ? Math.min(Math.max(random, 0), 0.999) : 0) * this.roundStepMs,
      );
    } else {
      this.roundStepMs = 0;
      this.roundOffsetMs = 0;
    }
  }

  /** The current book (read-only; for inspection and tests). */
  get state(): LeaseBookState {
    return this.book;
  }

  /**
   * The lease a delivery to `shardId` may use now. Without one it starts acquiring (once) and throws, so the
   * delivery goes to the retry barrier and finds the lease on a later attempt.
   * @throws ShardLeaseUnavailableError when no valid lease is held (yet); ShardHandoffInProgressError while draining
   */
  requireToken(shardId: number): ShardLeaseToken {
    this.syncSafety();
    const token = liveToken(this.book, shardId, this.scheduler.now());
    if (token !== null) return token;
    const lease = this.book.shards.get(shardId);
    if (lease?.phase === "draining") throw new ShardHandoffInProgressError(this.book.config.entityType, shardId);
    if (lease === undefined || lease.phase === "held") this.feed({ kind: "needLease", requestId: nobody, shardId });
    throw new ShardLeaseUnavailableError(this.book.config.entityType, shardId);
  }

  /**
   * The tokens of every lease held and valid now (as {@link requireToken} would give them; a shard without one is
   * left out, and nothing is acquired).
   */
  heldTokens(): ShardLeaseToken[] {
    this.syncSafety();
    const now = this.scheduler.now();
    const tokens: ShardLeaseToken[] = [];
    for (const shardId of this.book.shards.keys()) {
      const token = liveToken(this.book, shardId, now);
      if (token !== null) tokens.push(token);
    }
    return tokens;
  }

  /**
   * Acquires (or reuses) the lease of `shardId`, for a handoff's prepare step.
   * @throws ShardLeaseUnavailableError when the lease is held elsewhere, the call fails or ownership is unsafe
   * @throws ShardHandoffInProgressError while the shard drains here
   */
  acquire(shardId: number): Promise<ShardLeaseToken> {
    this.syncSafety();
    const requestId = this.nextRequestId++;
    const answer = new Promise<ShardLeaseToken>((resolve, reject) => this.waiters.set(requestId, { resolve, reject }));
    this.feed({ kind: "needLease", requestId, shardId });
    return answer;
  }

  /** Marks `shardId` as owned here (allocated by the plan, or prepared as a handoff target). */
  own(shardId: number): void {
    if (!this.book.owned.has(shardId)) this.feed({ kind: "own", shardId });
  }

  /** Renews `shardId`'s lease now (when held and no renewal is in flight), to learn early that it is gone. */
  verify(shardId: number): void {
    this.feed({ kind: "verify", shardId });
  }

  /** Keeps exactly `shardIds`; the others' entities stop and their leases are released. */
  retain(shardIds: Iterable<number>): void {
    this.feed({ kind: "retain", shardIds: [...shardIds] });
  }

  /** Hands `shardId` off: stops its entities, releases its lease, resolves when done. */
  drain(shardId: number): Promise<void> {
    const done = this.whenDrained(shardId);
    this.feed({ kind: "drain", shardId });
    return done;
  }

  /** Ownership is not safe: drops every lease without releasing it and stops the entities (docs/protocol.md §11.1). */
  suspend(): void {
    this.feed({ kind: "safeToOwn", safe: false });
  }

  /** Stops for good: every shard drains and releases; resolves when every release has answered. */
  async stopAll(): Promise<void> {
    const shards = [...this.book.shards.keys()];
    const done = Promise.all(shards.map((s) => this.whenDrained(s)));
    this.feed({ kind: "stopAll" });
    await done;
    for (const timer of this.renewals.values()) timer.cancel();
    this.renewals.clear();
    for (const round of this.rounds.values()) round.timer.cancel();
    this.rounds.clear();
    this.roundOfShard.clear();
  }

  /** The live rule wins over the book's last view: tell the book when they differ. */
  private syncSafety(): void {
    const safe = this.hooks.safeToOwn();
    if (safe !== this.book.safe) this.feed({ kind: "safeToOwn", safe });
  }

  private whenDrained(shardId: number): Promise<void> {
    return new Promise((resolve) => {
      const list = this.drains.get(shardId) ?? [];
      list.push(resolve);
      this.drains.set(shardId, list);
    });
  }

  /** Steps the book; inputs produced while effects run (synchronous hooks) are queued, so steps never nest. */
  private feed(input: LeaseInput): void {
    this.feedAll([input]);
  }

  /**
   * Steps the book through `inputs` at once (a renewal round, a batch call's answers: one working copy of the book
   * for all of them, see `stepAll`), then through whatever the effects queued meanwhile.
   */
  private feedAll(inputs: readonly LeaseInput[]): void {
    if (inputs.length === 0) return;
    if (this.feeding) {
      this.queue.push(...inputs);
      return;
    }
    this.feeding = true;
    this.holding++;
    try {
      let next: readonly LeaseInput[] = inputs;
      while (next.length > 0) {
        const [book, effects] =
          next.length === 1
            ? step(this.book, next[0]!, this.scheduler.now())
            : stepAll(this.book, next, this.scheduler.now());
        this.book = book;
        for (const effect of effects) this.perform(effect);
        next = this.queue.splice(0);
      }
    } finally {
      this.feeding = false;
      this.holding--;
    }
    this.sendPending();
  }

  /**
   * Sends the renewals and acquisitions that steps asked for meanwhile: each kind in one batch call (a renewal round,
   * the answers of one batch acquisition, a node's start). A lone one goes as the single call. Each item of a batch
   * gets its own answer; a failed batch call fails each of its items, as each single call would have failed.
   */
  private sendPending(): void {
    if (this.holding > 0) return;
    if (this.pendingRenewals.length > 0) {
      const renewals = this.pendingRenewals.splice(0);
      if (renewals.length === 1) this.renewAlone(renewals[0]!);
      else this.renewTogether(renewals);
    }
    if (this.pendingAcquires.length > 0 && !this.acquiring) {
      const acquires = this.pendingAcquires.splice(0);
      if (acquires.length === 1) this.acquireAlone(acquires[0]!);
      else this.acquireTogether(acquires);
    }
  }

  private renewAlone(effect: Extract<LeaseEffect, { kind: "renew" }>): void {
    const { callId, token } = effect;
    const shardId = token.key.shardId;
    this.call(
      () => this.store.renewShardLease(token, effect.leaseDurationMs),
      (renewed) => ({ kind: "renewed", callId, shardId, token: renewed }),
      (error) => ({ kind: "renewFailed", callId, shardId, error }),
    );
  }

  private renewTogether(renewals: readonly Extract<LeaseEffect, { kind: "renew" }>[]): void {
    // The book asks every renewal for its configured duration; group by it all the same.
    const byDuration = new Map<number, Extract<LeaseEffect, { kind: "renew" }>[]>();
    for (const r of renewals) byDuration.set(r.leaseDurationMs, [...(byDuration.get(r.leaseDurationMs) ?? []), r]);
    for (const [durationMs, group] of byDuration) {
      this.batch(
        () =>
          this.store.renewShardLeases!(
            group.map((r) => r.token),
            durationMs,
          ),
        group.length,
        (tokens) =>
          this.feedAll(
            group.map((r, i) => ({
              kind: "renewed",
              callId: r.callId,
              shardId: r.token.key.shardId,
              token: tokens[i] ?? null,
            })),
          ),
        (error) =>
          this.feedAll(
            group.map((r) => ({ kind: "renewFailed", callId: r.callId, shardId: r.token.key.shardId, error })),
          ),
      );
    }
  }

  private acquireAlone(effect: Extract<LeaseEffect, { kind: "acquire" }>): void {
    const { callId, key } = effect;
    this.acquiring = this.store.acquireShardLeases !== undefined;
    this.call(
      () => this.store.acquireShardLease(key, effect.owner, effect.leaseDurationMs),
      (token) => this.acquireAnswered({ kind: "acquired", callId, shardId: key.shardId, token }),
      (error) => this.acquireAnswered({ kind: "acquireFailed", callId, shardId: key.shardId, error }),
    );
  }

  /** An acquisition answered: the next ones may leave (as one batch) once its answer is in the book. */
  private acquireAnswered(input: LeaseInput): LeaseInput {
    this.acquiring = false;
    return input;
  }

  private acquireTogether(acquires: readonly Extract<LeaseEffect, { kind: "acquire" }>[]): void {
    const first = acquires[0]!;
    this.acquiring = true;
    this.batch(
      () =>
        this.store.acquireShardLeases!(
          acquires.map((a) => a.key),
          first.owner,
          first.leaseDurationMs,
        ),
      acquires.length,
      (tokens) => {
        this.acquiring = false;
        this.feedAll(
          acquires.map((a, i) => ({
            kind: "acquired",
            callId: a.callId,
            shardId: a.key.shardId,
            token: tokens[i] ?? null,
          })),
        );
      },
      (error) => {
        this.acquiring = false;
        this.feedAll(acquires.map((a) => ({ kind: "acquireFailed", callId: a.callId, shardId: a.key.shardId, error })));
      },
    );
  }

  /** Runs one batch call; an answer of the wrong length fails every item (nothing in it can be trusted). */
  private batch(
    run: () => Promise<(ShardLeaseToken | null)[]>,
    size: number,
    ok: (tokens: readonly (ShardLeaseToken | null)[]) => void,
    failed: (error: string) => void,
  ): void {
    let pending: Promise<(ShardLeaseToken | null)[]>;
    try {
      pending = run();
    } catch (error) {
      pending = Promise.reject(error);
    }
    pending.then(
      (tokens) => {
        if (Array.isArray(tokens) && tokens.length === size) ok(tokens);
        else
          failed(`Error: a batch lease call answered ${Array.isArray(tokens) ? tokens.length : "no"} rows for ${size}`);
      },
      (error: unknown) => {
        this.hooks.log?.warn({ error, leases: size }, "shard lease batch call failed");
        failed(error instanceof Error ? `${error.name}: ${error.message}` : String(error));
      },
    );
  }

  /** Renewals wait for the next instant of the grid at or after their due time; one timer per instant. */
  private scheduleRound(shardId: number, epoch: number, afterMs: number): void {
    this.leaveRound(shardId);
    const now = this.scheduler.now();
    const dueMs = now + afterMs;
    const step = this.roundStepMs;
    let atMs = this.roundOffsetMs + Math.ceil((dueMs - this.roundOffsetMs) / step) * step;
    const lease = this.book.shards.get(shardId);
    // A slow answer (an acquisition under load) leaves less validity than the grid's delay would use up: then the
    // renewal goes when due, as without rounds, rather than into a round the lease might not live to see.
    if (lease?.phase === "held" && atMs > dueMs && atMs >= lease.validUntilMs - step) atMs = dueMs;
    let round = this.rounds.get(atMs);
    if (round === undefined) {
      const due = new Map<number, number>();
      round = { due, timer: this.scheduler.scheduleOnce(atMs - now, () => this.fireRound(atMs)) };
      this.rounds.set(atMs, round);
    }
    round.due.set(shardId, epoch);
    this.roundOfShard.set(shardId, atMs);
  }

  private leaveRound(shardId: number): void {
    const atMs = this.roundOfShard.get(shardId);
    if (atMs === undefined) return;
    this.roundOfShard.delete(shardId);
    const round = this.rounds.get(atMs);
    if (round === undefined) return;
    round.due.delete(shardId);
    if (round.due.size === 0) {
      round.timer.cancel();
      this.rounds.delete(atMs);
    }
  }

  private fireRound(atMs: number): void {
    const round = this.rounds.get(atMs);
    if (round === undefined) return;
    this.rounds.delete(atMs);
    for (const shardId of round.due.keys()) this.roundOfShard.delete(shardId);
    const safeToOwn = this.hooks.safeToOwn();
    this.feedAll([...round.due].map(([shardId, epoch]) => ({ kind: "renewTick", shardId, epoch, safeToOwn })));
  }

  private perform(effect: LeaseEffect): void {
    switch (effect.kind) {
      case "acquire": {
        if (this.store.acquireShardLeases === undefined) this.acquireAlone(effect);
        else this.pendingAcquires.push(effect);
        return;
      }
      case "renew": {
        if (this.store.renewShardLeases === undefined) this.renewAlone(effect);
        else this.pendingRenewals.push(effect);
        return;
      }
      case "release": {
        const { callId, token } = effect;
        const shardId = token.key.shardId;
        this.call(
          () => this.store.releaseShardLease(token),
          (released) => ({ kind: "released", callId, shardId, released }),
          (error) => ({ kind: "releaseFailed", callId, shardId, error }),
        );
        return;
      }
      case "scheduleRenewal": {
        const { shardId, epoch } = effect;
        if (this.roundStepMs > 0) {
          this.scheduleRound(shardId, epoch, effect.afterMs);
          return;
        }
        this.renewals.get(shardId)?.cancel();
        this.renewals.set(
          shardId,
          this.scheduler.scheduleOnce(effect.afterMs, () => {
            this.renewals.delete(shardId);
            this.feed({ kind: "renewTick", shardId, epoch, safeToOwn: this.hooks.safeToOwn() });
          }),
        );
        return;
      }
      case "stopEntities": {
        const { shardId, reason } = effect;
        const answers = reason === "handoff" || reason === "not-retained" || reason === "stopping";
        let stopping: Promise<void>;
        try {
          stopping = Promise.resolve(this.hooks.stopEntities(shardId, reason));
        } catch (error) {
          stopping = Promise.reject(error);
        }
        stopping
          .catch((error: unknown) => this.hooks.log?.warn({ error, shardId }, "stopping persistent entities failed"))
          .then(() => {
            if (answers) this.feed({ kind: "entitiesStopped", shardId });
          });
        return;
      }
      case "grant":
        this.settle(effect.requestId, (w) => w.resolve(effect.token));
        return;
      case "fail":
        this.settle(effect.requestId, (w) => w.reject(failureError(this.book.config, effect.shardId, effect.failure)));
        return;
      case "drained": {
        const list = this.drains.get(effect.shardId) ?? [];
        this.drains.delete(effect.shardId);
        for (const resolve of list) resolve();
        return;
      }
      case "count":
        this.hooks.count(effect.counter, effect.by);
        return;
    }
  }

  private settle(
    requestId: number,
    action: (w: { resolve: (t: ShardLeaseToken) => void; reject: (e: Error) => void }) => void,
  ): void {
    const waiter = this.waiters.get(requestId);
    if (waiter === undefined) return;
    this.waiters.delete(requestId);
    action(waiter);
  }

  private call<R>(run: () => Promise<R>, ok: (result: R) => LeaseInput, failed: (error: string) => LeaseInput): void {
    let pending: Promise<R>;
    try {
      pending = run();
    } catch (error) {
      pending = Promise.reject(error);
    }
    pending.then(
      (result) => this.feed(ok(result)),
      (error: unknown) => {
        this.hooks.log?.warn({ error }, "shard lease call failed");
        this.feed(failed(error instanceof Error ? `${error.name}: ${error.message}` : String(error)));
      },
    );
  }
}
