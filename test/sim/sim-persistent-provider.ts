// The node simulator's persistent entity provider (test/sim/node-sim.ts): what PersistentEntityProvider and
// LeaseKeeper do around the real lease book (src/sharding/lease/lease-book.ts), on the simulator's clock and against
// its database (sim-database.ts). Each entity is bound to the lease epoch it was activated under and writes one event
// per message it processes, fenced by that lease, one write at a time (an event-sourced entity stashes while it
// persists). Checked here: a delivery is granted only a lease the database holds for this node at that epoch, now.
import type { ClusterSnapshot } from "../../src/cluster/snapshot.ts";
import type { AttemptOutcome } from "../../src/sharding/internal/retry-barrier.ts";
import {
  createLeaseBook,
  type LeaseBookState,
  type LeaseEffect,
  type LeaseInput,
  liveToken,
  type ShardLeaseToken,
  safeToOwn,
  step,
} from "../../src/sharding/lease/index.ts";
import type { ShardWaiter } from "../../src/sharding/node/node-core.ts";
import type { AppendOutcome, SimDatabase } from "./sim-database.ts";

/** What the provider needs from the simulator, for one node. */
export interface ProviderHost {
  readonly name: string;
  readonly db: SimDatabase;
  now(): number;
  random(n: number): number;
  /** Runs `run` on the node's event loop after `delayMs` (never once it stopped; after it resumes when paused). */
  later(delayMs: number, run: () => void): void;
  /**
   * A database call: `statement` runs at the database when the call reaches it (even if the node has crashed since),
   * `answer` gets its result back on the node, or `null` when the database refused the call.
   */
  call<R>(statement: () => R, answer: (result: { readonly value: R } | null) => void): void;
  /** The node's current membership snapshot (for the safe-to-own rule). */
  view(): ClusterSnapshot;
  /** Feeds the node core the outcome of a prepare (acquired the lease, or not). */
  prepared(shard: number, coordinator: string, waiter: ShardWaiter, error: Error | null): void;
  /** Feeds the node core the end of a handoff drain (entities stopped, lease released or gone). */
  drained(shard: number): void;
  /** A write committed (checked by the simulator against every earlier commit). */
  committed(shard: number, token: ShardLeaseToken, operationId: string): void;
  fail(reason: string): never;
}

/** One entity actor: the lease it was activated under, the stream revision it knows, its unprocessed messages. */
interface SimEntity {
  readonly id: string;
  readonly shard: number;
  readonly token: ShardLeaseToken;
  revision: number;
  readonly queue: number[];
  writing: boolean;
}

/** Counters of one provider, summed into the history's result. */
export interface ProviderCounters {
  writes: number;
  staleWrites: number;
  refusedWrites: number;
  revisionConflicts: number;
  leaseAcquisitions: number;
  leaseLosses: number;
}

interface PrepareWait {
  readonly shard: number;
  readonly coordinator: string;
  readonly waiter: ShardWaiter;
}

export class SimPersistentProvider {
  private book: LeaseBookState;
  private readonly live = new Map<string, SimEntity>();
  private readonly draining = new Set<number>();
  private readonly prepares = new Map<number, PrepareWait>();
  /** Shards whose handoff drain waits for the book's `drained`. */
  private readonly drainWaits = new Set<number>();
  /** shard → the renewal timer that is current (a newer schedule replaces an older one, as the keeper cancels it). */
  private readonly renewals = new Map<number, number>();
  private nextTimer = 1;
  private nextRequest = 1;
  private readonly queue: LeaseInput[] = [];
  private feeding = false;
  readonly counters: ProviderCounters = {
    writes: 0,
    staleWrites: 0,
    refusedWrites: 0,
    revisionConflicts: 0,
    leaseAcquisitions: 0,
    leaseLosses: 0,
  };

  constructor(
    private readonly host: ProviderHost,
    /** entity → shard of the live entities, shared with the simulator's one-host check. */
    private readonly entities: Map<string, number>,
    owner: string,
    leaseDurationMs: number,
    leaseRenewIntervalMs: number,
  ) {
    this.book = createLeaseBook({
      clusterName: "sim",
      entityType: "T",
      owner,
      leaseDurationMs,
      leaseRenewIntervalMs,
    });
  }

  /** The book (for failure reports). */
  get state(): LeaseBookState {
    return this.book;
  }

  /** `authorizeShard` + `deliver`: the message reaches its entity under the shard's lease, or waits for one. */
  deliver(shard: number, entityId: string, call: number): AttemptOutcome {
    if (!this.book.owned.has(shard)) this.feed({ kind: "own", shardId: shard });
    if (this.draining.has(shard)) return "handoff";
    this.syncSafety();
    const now = this.host.now();
    const token = liveToken(this.book, shard, now);
    if (token === null) {
      const lease = this.book.shards.get(shard);
      if (lease?.phase === "draining") return "handoff";
      if (lease === undefined || lease.phase === "held") this.feed({ kind: "needLease", requestId: 0, shardId: shard });
      return "lease";
    }
    if (!this.host.db.fenceHolds(token, now)) {
      this.host.fail(
        `${this.host.name}: the lease book granted shard ${shard} at epoch ${token.epoch}, which the database does not hold for it (row: ${this.host.db.describeLease(shard)})`,
      );
    }
    let entity = this.live.get(entityId);
    if (entity !== undefined && entity.token.epoch !== token.epoch) {
      this.stop(entity);
      entity = undefined;
    }
    if (entity === undefined) {
      // Recovery reads the stream's revision; the write fence, not this read, keeps an older epoch out.
      entity = {
        id: entityId,
        shard,
        token,
        revision: this.host.db.revisionOf(entityId),
        queue: [],
        writing: false,
      };
      this.live.set(entityId, entity);
      this.entities.set(entityId, shard);
    }
    entity.queue.push(call);
    this.process(entity);
    return "delivered";
  }

  /** A handoff drain: entities finish their mailboxes and writes (DRAIN_AND_STOP), then the lease is released. */
  drainShard(shard: number): void {
    this.draining.add(shard);
    const settle = (): void => {
      for (const e of this.live.values()) {
        if (e.shard === shard && (e.writing || e.queue.length > 0)) {
          this.host.later(5, settle);
          return;
        }
      }
      for (const e of [...this.live.values()]) if (e.shard === shard) this.stop(e);
      this.drainWaits.add(shard);
      this.feed({ kind: "drain", shardId: shard });
    };
    this.host.later(10 + this.host.random(80), settle);
  }

  prepareShard(shard: number, coordinator: string, waiter: ShardWaiter): void {
    this.draining.delete(shard);
    if (!this.book.owned.has(shard)) this.feed({ kind: "own", shardId: shard });
    const requestId = this.nextRequest++;
    this.prepares.set(requestId, { shard, coordinator, waiter });
    this.syncSafety();
    this.feed({ kind: "needLease", requestId, shardId: shard });
  }

  retainShards(keep: ReadonlySet<number>): void {
    // The node core keeps a shard whose prepare has not answered yet in `keep` (TypeState.preparing).
    this.feed({ kind: "retain", shardIds: keep });
    for (const e of [...this.live.values()]) if (!keep.has(e.shard)) this.stop(e);
    for (const shard of [...this.draining]) if (keep.has(shard)) this.draining.delete(shard);
  }

  suspendOwnership(release: boolean): void {
    if (release) this.feed({ kind: "retain", shardIds: [] });
    else this.feed({ kind: "safeToOwn", safe: false });
    for (const e of [...this.live.values()]) this.stop(e);
  }

  /** The node stopped (crash, stop): nothing more is answered; its leases expire in the database. */
  halt(): void {
    this.live.clear();
  }

  /** Stops an entity actor (STOP): a write already sent goes on at the database, its answer is not read. */
  private stop(entity: SimEntity): void {
    this.live.delete(entity.id);
    this.entities.delete(entity.id);
  }

  /** The entity writes one event per message, in order, one at a time, fenced by its lease. */
  private process(entity: SimEntity): void {
    if (entity.writing) return;
    const call = entity.queue.shift();
    if (call === undefined) return;
    entity.writing = true;
    const operationId = `op-${call}`;
    const { db } = this.host;
    this.host.call(
      (): AppendOutcome => {
        const outcome = db.append(entity.id, entity.revision, operationId, `m-${call}`, entity.token, this.host.now());
        if (outcome.kind === "written") this.host.committed(entity.shard, entity.token, operationId);
        return outcome;
      },
      (answer) => this.written(entity, call, answer?.value ?? null),
    );
  }

  private written(entity: SimEntity, call: number, outcome: AppendOutcome | null): void {
    if (this.live.get(entity.id) !== entity) return;
    entity.writing = false;
    if (outcome === null) {
      // The database refused the call: the command fails to its caller; the entity goes on.
      this.counters.refusedWrites++;
    } else {
      switch (outcome.kind) {
        case "written":
          this.counters.writes++;
          entity.revision = outcome.revision;
          break;
        case "duplicate":
        case "conflict":
          this.host.fail(`${this.host.name}: message ${call}'s write was a ${outcome.kind}: it was written before`);
          break;
        case "stale":
          // StaleShardOwnerError: the entity stops, and the provider renews at once to learn whether the lease is gone.
          this.counters.staleWrites++;
          this.stop(entity);
          this.feed({ kind: "verify", shardId: entity.shard });
          return;
        case "revision":
          // ConcurrentWriteError: a write of an earlier actor of this entity under the same lease committed after this
          // actor recovered. The actor stops; the next message recovers the stream again.
          this.counters.revisionConflicts++;
          this.stop(entity);
          return;
      }
    }
    this.process(entity);
  }

  /** The live rule wins over the book's last view (as LeaseKeeper.syncSafety). */
  private syncSafety(): void {
    const safe = safeToOwn(this.host.view());
    if (safe !== this.book.safe) this.feed({ kind: "safeToOwn", safe });
  }

  private feed(input: LeaseInput): void {
    this.queue.push(input);
    if (this.feeding) return;
    this.feeding = true;
    for (let next = this.queue.shift(); next !== undefined; next = this.queue.shift()) {
      const [book, effects] = step(this.book, next, this.host.now());
      this.book = book;
      for (const effect of effects) this.perform(effect);
    }
    this.feeding = false;
  }

  private perform(effect: LeaseEffect): void {
    const { db } = this.host;
    switch (effect.kind) {
      case "acquire": {
        const { callId, key, owner, leaseDurationMs } = effect;
        this.host.call(
          () => db.acquire(key, owner, leaseDurationMs, this.host.now()),
          (answer) =>
            this.feed(
              answer === null
                ? { kind: "acquireFailed", callId, shardId: key.shardId, error: "refused" }
                : { kind: "acquired", callId, shardId: key.shardId, token: answer.value },
            ),
        );
        return;
      }
      case "renew": {
        const { callId, token, leaseDurationMs } = effect;
        const shardId = token.key.shardId;
        this.host.call(
          () => db.renew(token, leaseDurationMs, this.host.now()),
          (answer) =>
            this.feed(
              answer === null
                ? { kind: "renewFailed", callId, shardId, error: "refused" }
                : { kind: "renewed", callId, shardId, token: answer.value },
            ),
        );
        return;
      }
      case "release": {
        const { callId, token } = effect;
        const shardId = token.key.shardId;
        this.host.call(
          () => db.release(token),
          (answer) =>
            this.feed(
              answer === null
                ? { kind: "releaseFailed", callId, shardId, error: "refused" }
                : { kind: "released", callId, shardId, released: answer.value },
            ),
        );
        return;
      }
      case "scheduleRenewal": {
        const { shardId, epoch } = effect;
        const timer = this.nextTimer++;
        this.renewals.set(shardId, timer);
        this.host.later(effect.afterMs, () => {
          if (this.renewals.get(shardId) !== timer) return;
          this.renewals.delete(shardId);
          this.feed({ kind: "renewTick", shardId, epoch, safeToOwn: safeToOwn(this.host.view()) });
        });
        return;
      }
      case "stopEntities": {
        const { shardId, reason } = effect;
        for (const e of [...this.live.values()]) if (e.shard === shardId) this.stop(e);
        if (reason === "handoff" || reason === "not-retained" || reason === "stopping") {
          this.host.later(0, () => this.feed({ kind: "entitiesStopped", shardId }));
        }
        return;
      }
      case "grant":
      case "fail": {
        const wait = this.prepares.get(effect.requestId);
        if (wait === undefined) return;
        this.prepares.delete(effect.requestId);
        const error =
          effect.kind === "grant" ? null : new Error(`lease of shard ${wait.shard}: ${effect.failure.error}`);
        this.host.later(0, () => this.host.prepared(wait.shard, wait.coordinator, wait.waiter, error));
        return;
      }
      case "drained":
        if (this.drainWaits.delete(effect.shardId)) {
          const shard = effect.shardId;
          this.host.later(0, () => this.host.drained(shard));
        }
        return;
      case "count":
        if (effect.counter === "leaseAcquisitions") this.counters.leaseAcquisitions += effect.by;
        else if (effect.counter === "leaseLosses") this.counters.leaseLosses += effect.by;
        return;
    }
  }
}
