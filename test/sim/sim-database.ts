// The node simulator's database (test/sim/node-sim.ts): one shard lease table and one event store, with "now" taken
// from the virtual clock, enforcing the rules of the PostgreSQL statements (docs/protocol.md §13.3, §13.4;
// src/persistence/postgres/schema.ts and postgres-store.ts), so that the real lease book on each simulated node is
// fenced as it is in production. Every call runs at one instant: a statement here is atomic, which is what the
// PostgreSQL row lock gives a fenced write against a transfer (`FOR SHARE` against the lease row's `UPDATE`).
import type { ShardLeaseKey, ShardLeaseToken } from "../../src/sharding/lease/index.ts";

/** One `shard_lease` row (the key is the shard: the simulator has one cluster and one routing name). */
interface LeaseRow {
  readonly owner: string;
  readonly epoch: number;
  readonly untilMs: number;
}

/** One committed journal row, with the fence it was written under. */
export interface CommittedEvent {
  readonly persistenceId: string;
  readonly sequenceNr: number;
  readonly shard: number;
  readonly owner: string;
  readonly epoch: number;
  readonly operationId: string;
  readonly atMs: number;
}

/** The answer of an append, as the store reports it (`StaleShardOwnerError`, `OperationConflictError`, …). */
export type AppendOutcome =
  | { readonly kind: "written"; readonly revision: number }
  | { readonly kind: "duplicate"; readonly revision: number }
  | { readonly kind: "stale" }
  | { readonly kind: "conflict" }
  | { readonly kind: "revision"; readonly actual: number };

interface Stream {
  revision: number;
  /** operation id → its fingerprint and the revision it produced (`event_journal` / `journal_operation`). */
  readonly operations: Map<string, { readonly fingerprint: string; readonly revision: number }>;
}

export class SimDatabase {
  private readonly leases = new Map<number, LeaseRow>();
  private readonly streams = new Map<string, Stream>();
  /** Every committed append, in commit order (for the history's checks). */
  readonly committed: CommittedEvent[] = [];

  /**
   * `INSERT … ON CONFLICT DO UPDATE … WHERE expired OR same owner`: a new row at epoch 1; the same owner with an
   * unexpired lease keeps its epoch; an expired (or released) lease passes to whoever asks at epoch + 1; an unexpired
   * lease of another owner is not taken (null).
   */
  acquire(key: ShardLeaseKey, owner: string, durationMs: number, nowMs: number): ShardLeaseToken | null {
    const row = this.leases.get(key.shardId);
    let next: LeaseRow;
    if (row === undefined) next = { owner, epoch: 1, untilMs: nowMs + durationMs };
    else if (row.untilMs <= nowMs) {
      next = { owner, epoch: row.epoch + 1, untilMs: nowMs + durationMs };
    } else if (row.owner === owner) next = { owner, epoch: row.epoch, untilMs: nowMs + durationMs };
    else return null;
    this.leases.set(key.shardId, next);
    return { key, owner, epoch: next.epoch, leaseUntilEpochMs: next.untilMs };
  }

  /** `UPDATE … WHERE owner AND epoch AND unexpired`: extends the lease, or null when it is no longer this token's. */
  renew(token: ShardLeaseToken, durationMs: number, nowMs: number): ShardLeaseToken | null {
    const row = this.leases.get(token.key.shardId);
    if (row === undefined || !this.holds(row, token, nowMs)) return null;
    const untilMs = nowMs + durationMs;
    this.leases.set(token.key.shardId, { ...row, untilMs });
    return { ...token, leaseUntilEpochMs: untilMs };
  }

  /** `UPDATE … SET lease_until = 0 WHERE owner AND epoch` (expired or not): true when the row was this token's. */
  release(token: ShardLeaseToken): boolean {
    const row = this.leases.get(token.key.shardId);
    if (row === undefined || row.owner !== token.owner || row.epoch !== token.epoch) return false;
    this.leases.set(token.key.shardId, { ...row, untilMs: 0 });
    return true;
  }

  /** Whether `token` is the fence of its shard now: this owner, this epoch, unexpired (`leaseHeldBy`). */
  fenceHolds(token: ShardLeaseToken, nowMs: number): boolean {
    const row = this.leases.get(token.key.shardId);
    return row !== undefined && this.holds(row, token, nowMs);
  }

  /** The row of `shard`, for failure reports. */
  describeLease(shard: number): string {
    const row = this.leases.get(shard);
    return row === undefined ? "no row" : `${row.owner} epoch ${row.epoch} until ${row.untilMs}ms`;
  }

  /**
   * A one-event append (`movie_append_events`): the fence first (a stale owner never learns whether its write was a
   * duplicate), then the operation id (the same id with the same content is a duplicate, with other content a
   * conflict), then the revision (`ConcurrentWriteError` carrying the actual one).
   */
  append(
    persistenceId: string,
    expectedRevision: number,
    operationId: string,
    fingerprint: string,
    fence: ShardLeaseToken,
    nowMs: number,
  ): AppendOutcome {
    if (!this.fenceHolds(fence, nowMs)) return { kind: "stale" };
    let stream = this.streams.get(persistenceId);
    if (stream === undefined) {
      stream = { revision: 0, operations: new Map() };
      this.streams.set(persistenceId, stream);
    }
    const known = stream.operations.get(operationId);
    if (known !== undefined) {
      return known.fingerprint === fingerprint ? { kind: "duplicate", revision: known.revision } : { kind: "conflict" };
    }
    if (stream.revision !== expectedRevision) return { kind: "revision", actual: stream.revision };
    stream.revision++;
    stream.operations.set(operationId, { fingerprint, revision: stream.revision });
    this.committed.push({
      persistenceId,
      sequenceNr: stream.revision,
      shard: fence.key.shardId,
      owner: fence.owner,
      epoch: fence.epoch,
      operationId,
      atMs: nowMs,
    });
    return { kind: "written", revision: stream.revision };
  }

  /** The stream's revision (`loadRevision`), as an entity reads it when it starts (recovery). */
  revisionOf(persistenceId: string): number {
    return this.streams.get(persistenceId)?.revision ?? 0;
  }

  private holds(row: LeaseRow, token: ShardLeaseToken, nowMs: number): boolean {
    return row.owner === token.owner && row.epoch === token.epoch && row.untilMs > nowMs;
  }
}
