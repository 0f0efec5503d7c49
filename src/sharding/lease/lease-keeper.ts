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
} from "./lease-book.ts";
import type { ShardLeaseKey, ShardLeaseToken } from "./lease-token.ts";

/** The lease calls the keeper makes; `Database.get(system)` and every `PersistenceStore` have them. */
export interface LeaseStore {
  acquireShardLease(key: ShardLeaseKey, owner: string, durationMs: number): Promise<ShardLeaseToken | null>;
  renewShardLease(token: ShardLeaseToken, durationMs: number): Promise<ShardLeaseToken | null>;
  releaseShardLease(token: ShardLeaseToken): Promise<boolean>;
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

  /**
   * @throws ClusterShardingConfigurationError when `config` is invalid (see `createLeaseBook`)
   */
  constructor(
    config: LeaseBookConfig,
    private readonly store: LeaseStore,
    private readonly scheduler: Scheduler,
    private readonly hooks: LeaseKeeperHooks,
  ) {
    this.book = createLeaseBook(config);
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

  /** Ownership is not safe: drops every lease without releasing it and stops the entities (REFERENCE §3.11). */
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
    this.queue.push(input);
    if (this.feeding) return;
    this.feeding = true;
    try {
      for (let next = this.queue.shift(); next !== undefined; next = this.queue.shift()) {
        const [book, effects] = step(this.book, next, this.scheduler.now());
        this.book = book;
        for (const effect of effects) this.perform(effect);
      }
    } finally {
      this.feeding = false;
    }
  }

  private perform(effect: LeaseEffect): void {
    switch (effect.kind) {
      case "acquire": {
        const { callId, key } = effect;
        this.call(
          () => this.store.acquireShardLease(key, effect.owner, effect.leaseDurationMs),
          (token) => ({ kind: "acquired", callId, shardId: key.shardId, token }),
          (error) => ({ kind: "acquireFailed", callId, shardId: key.shardId, error }),
        );
        return;
      }
      case "renew": {
        const { callId, token } = effect;
        const shardId = token.key.shardId;
        this.call(
          () => this.store.renewShardLease(token, effect.leaseDurationMs),
          (renewed) => ({ kind: "renewed", callId, shardId, token: renewed }),
          (error) => ({ kind: "renewFailed", callId, shardId, error }),
        );
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
