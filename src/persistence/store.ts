/**
 * The store contract (docs/protocol.md §13.1): one interface, three backends (`memory/`, `sqlite/`, `postgres/`). Every
 * mutation takes an optional fence (a {@link ShardLeaseToken}); a fenced mutation first checks, inside its own
 * transaction, that the lease row has this owner, this epoch and an unexpired lease on the database clock, and
 * otherwise raises StaleShardOwnerError and commits nothing. The fence check comes before duplicate detection.
 */

import { describe } from "../actor/untrusted.ts";
import { CorruptPersistentRecordError, InvalidPersistenceRequestError } from "./errors.ts";
import {
  checkTags,
  type EventPage,
  type EventQuery,
  type ProjectionBatchRequest,
  type ProjectionControl,
  type ProjectionControlChange,
  type ProjectionTransaction,
} from "./feed.ts";
import { type ShardLeaseKey, type ShardLeaseToken, validateLeaseToken } from "./lease.ts";
import { OperationId } from "./operation-id.ts";
import type {
  OutboxClaim,
  OutboxClaimRef,
  OutboxClaimRequest,
  OutboxCounts,
  OutboxFailure,
  OutboxSettleResult,
  ParkedOutboxRow,
} from "./outbox-claim.ts";
import { checkOutbox, type OutboxRecord } from "./outbox-message.ts";

/** The backends this layer ships; sharding requires "postgres" for clustered persistent entities (docs/protocol.md §11). */
export type BackendName = "memory" | "sqlite" | "postgres";

/** One event to append: its codec manifest, its JSON payload text, and optional tags for feed queries. */
export interface EventRecord {
  readonly manifest: string;
  readonly payload: string;
  /** Tags of the event in the feed (see EventQuery.tag); at most 32 non-empty strings of up to 256 characters. */
  readonly tags?: readonly string[];
}

/** An event read back: its sequence number (1-based, per persistence id), manifest and payload. */
export interface StoredEvent extends EventRecord {
  readonly sequenceNr: number;
}

/** The outcome of an append or a state write: the resulting revision, and whether it was a recognised retry. */
export interface WriteResult {
  readonly revision: number;
  readonly duplicate: boolean;
  /**
   * On a duplicate of an append that recorded a reply (AppendEventsRequest.reply), that reply as first committed;
   * otherwise absent or null.
   */
  readonly reply?: ReplyRecord | null;
}

/** An encoded reply recorded with the events of an append (reply-with-effects), keyed by the operation. */
export interface ReplyRecord {
  readonly manifest: string;
  readonly payload: string;
}

/** A snapshot: the state as of `sequenceNr` (the last event it includes). */
export interface SnapshotRecord {
  readonly sequenceNr: number;
  readonly manifest: string;
  readonly payload: string;
}

/** A durable state row. After a delete it is a tombstone: manifest "deleted", null payload, `deleted` true. */
export interface StateRecord {
  readonly revision: number;
  readonly manifest: string;
  readonly payload: string | null;
  readonly deleted: boolean;
}

/** What a retention delete removed: the number of journal rows and the sequence it deleted through. */
export interface RetentionResult {
  readonly deletedEvents: number;
  readonly throughSeq: number;
}

/** An event append: `events` become sequence numbers expectedRevision+1 … in one transaction. */
export interface AppendEventsRequest {
  readonly persistenceId: string;
  /** The stream revision the writer last saw (0 for a new stream). */
  readonly expectedRevision: number;
  readonly operationId: OperationId | string;
  readonly events: readonly EventRecord[];
  readonly fence?: ShardLeaseToken | null;
  /**
   * Messages to send once the append commits, written in its transaction under its fence (docs/outbox.md); only a
   * write that is not a duplicate writes them (the original write did).
   */
  readonly outbox?: readonly OutboxRecord[];
  /**
   * A reply to record in the same transaction as the events (migration 11, operation-replies): a retry of the same
   * operation gets it back in WriteResult.reply instead of a fresh one. Ignored by the operation's fingerprint.
   */
  readonly reply?: ReplyRecord | null;
}

/** A durable state save; the revision becomes expectedRevision + 1. */
export interface SaveStateRequest {
  readonly persistenceId: string;
  readonly expectedRevision: number;
  readonly operationId: OperationId | string;
  readonly manifest: string;
  readonly payload: string;
  readonly fence?: ShardLeaseToken | null;
  /** Messages to send once the save commits, written in its transaction (see AppendEventsRequest.outbox). */
  readonly outbox?: readonly OutboxRecord[];
}

/** A durable state delete: writes a tombstone at expectedRevision + 1. */
export interface DeleteStateRequest {
  readonly persistenceId: string;
  readonly expectedRevision: number;
  readonly operationId: OperationId | string;
  readonly fence?: ShardLeaseToken | null;
  /** Messages to send once the delete commits (see AppendEventsRequest.outbox). */
  readonly outbox?: readonly OutboxRecord[];
}

/** The manifest of a durable-state tombstone (docs/protocol.md §13.1). */
export const TOMBSTONE_MANIFEST = "deleted";

/** The persistence backend contract; all three backends pass `test/persistence/store-contract.ts`. */
export interface PersistenceStore {
  /** Which backend this is. */
  readonly backendName: BackendName;
  /**
   * Appends events at `expectedRevision` (an empty list only checks the revision).
   * @throws StaleShardOwnerError, OperationConflictError, ConcurrentWriteError, InvalidPersistenceRequestError
   */
  appendEvents(request: AppendEventsRequest): Promise<WriteResult>;
  /** Events with sequence number above `afterSeq` (default 0), in order. */
  loadEvents(persistenceId: string, afterSeq?: number): Promise<StoredEvent[]>;
  /** The stream revision (the sequence number of its last event ever written; kept across retention), 0 if none. */
  loadRevision(persistenceId: string): Promise<number>;
  /**
   * Saves a snapshot if its sequence is at or past the stored one; true when written.
   * @throws StaleShardOwnerError
   */
  saveSnapshot(persistenceId: string, snapshot: SnapshotRecord, fence?: ShardLeaseToken | null): Promise<boolean>;
  /** The snapshot of `persistenceId`, or null. */
  loadSnapshot(persistenceId: string): Promise<SnapshotRecord | null>;
  /**
   * Deletes the snapshot; true when one existed.
   * @throws StaleShardOwnerError
   */
  deleteSnapshot(persistenceId: string, fence?: ShardLeaseToken | null): Promise<boolean>;
  /**
   * Deletes journal rows up to `toSequenceNr`; the revision and operation ids stay.
   * @throws StaleShardOwnerError, UnsafeRetentionError (no snapshot at or past `toSequenceNr`)
   */
  deleteEventsTo(persistenceId: string, toSequenceNr: number, fence?: ShardLeaseToken | null): Promise<RetentionResult>;
  /**
   * Saves a durable state.
   * @throws StaleShardOwnerError, OperationConflictError, ConcurrentWriteError
   */
  saveState(request: SaveStateRequest): Promise<WriteResult>;
  /**
   * Writes a tombstone.
   * @throws StaleShardOwnerError, OperationConflictError, ConcurrentWriteError
   */
  deleteState(request: DeleteStateRequest): Promise<WriteResult>;
  /** The durable state row (possibly a tombstone), or null when never written. */
  loadState(persistenceId: string): Promise<StateRecord | null>;
  /**
   * Creates (epoch 1), renews in place (same unexpired owner) or transfers (expired: epoch + 1) a lease for
   * `durationMs` on the database clock; null when another owner holds it.
   * @throws InvalidPersistenceRequestError
   */
  acquireShardLease(key: ShardLeaseKey, owner: string, durationMs: number): Promise<ShardLeaseToken | null>;
  /** Extends a lease still held with this owner, epoch and unexpired; null otherwise. */
  renewShardLease(token: ShardLeaseToken, durationMs: number): Promise<ShardLeaseToken | null>;
  /**
   * {@link acquireShardLease} for many keys in one transaction where the backend can (one statement on PostgreSQL):
   * each key gets exactly the answer a lone acquire would get, in the order given.
   * @throws InvalidPersistenceRequestError
   */
  acquireShardLeases(
    keys: readonly ShardLeaseKey[],
    owner: string,
    durationMs: number,
  ): Promise<(ShardLeaseToken | null)[]>;
  /**
   * {@link renewShardLease} for many tokens in one transaction where the backend can (one statement on PostgreSQL):
   * each row is checked (owner, epoch, unexpired) and extended exactly as a lone renewal; null for each that did not
   * renew, in the order given.
   * @throws InvalidPersistenceRequestError
   */
  renewShardLeases(tokens: readonly ShardLeaseToken[], durationMs: number): Promise<(ShardLeaseToken | null)[]>;
  /** Expires the lease at once if owner and epoch match; true when a row changed. */
  releaseShardLease(token: ShardLeaseToken): Promise<boolean>;
  /**
   * A page of the global event feed: events with offset above `afterOffset` in commit order, filtered (see feed.ts).
   * @throws InvalidPersistenceRequestError, CorruptPersistentRecordError
   */
  queryEvents(query?: EventQuery): Promise<EventPage>;
  /** The largest feed offset committed so far; 0 when the feed is empty. */
  latestOffset(): Promise<number>;
  /**
   * Calls `listener` when events may have been committed: a wake-up hint, possibly spurious or coalesced, and blind
   * to other processes' commits on a backend without notifications (SQLite), so a reader polls as well. PostgreSQL
   * LISTENs on one dedicated connection while anyone subscribes. Returns the unsubscribe function.
   */
  onEventsCommitted(listener: () => void): () => void;
  /** The checkpoint offset of projection `name`, or null when it has none. */
  loadProjectionOffset(name: string): Promise<number | null>;
  /**
   * Sets the checkpoint of projection `name` (at-least-once projections, rebuilds).
   * @throws StaleShardOwnerError when `fence` is no longer current (nothing written)
   */
  saveProjectionOffset(name: string, offset: number, fence?: ShardLeaseToken | null): Promise<void>;
  /** The operator's control of projection `name` (defaultProjectionControl when it has no row). */
  loadProjectionControl(name: string): Promise<ProjectionControl>;
  /**
   * Sets the fields `change` gives of projection `name`'s control (an operator's request; unfenced: the owner that
   * carries it out writes fenced) and returns the control as stored.
   * @throws InvalidPersistenceRequestError
   */
  setProjectionControl(name: string, change: ProjectionControlChange): Promise<ProjectionControl>;
  /** Removes the checkpoint of projection `name` (a retired projection no longer holds retention back). */
  deleteProjectionOffset(name: string): Promise<boolean>;
  /**
   * Runs `work` in one database transaction that first checks the fence and that the checkpoint is at
   * `expectedOffset`, and then moves it to `newOffset`: the handler's writes and the checkpoint commit together or not
   * at all (exactly-once projections). The memory backend has no SQL: its transaction's `query` rejects.
   * With `completesRebuildFrom` the same transaction clears that rebuild request from the projection's control.
   * @throws StaleShardOwnerError, ProjectionCheckpointConflictError, ProjectionRebuildSupersededError, or what `work`
   *   throws (nothing committed)
   */
  runProjectionBatch<R>(request: ProjectionBatchRequest, work: (tx: ProjectionTransaction) => Promise<R>): Promise<R>;
  /**
   * Claims up to `limit` deliverable outbox rows (undelivered, not parked, not claimed or backing off) for `leaseMs`
   * on the database clock, oldest first; each claim counts an attempt. Concurrent claims never share a row. A row
   * written under a shard is claimed only under that shard's current lease among `request.leases` (and then also
   * when a claim under an older epoch still holds it); a row without a shard only with `request.unsharded`.
   * @throws InvalidPersistenceRequestError
   */
  claimOutbox(request: OutboxClaimRequest): Promise<OutboxClaim>;
  /**
   * Marks claimed rows delivered (whoever holds their claim now: they were delivered). A row written under a shard
   * changes only while the epoch it was claimed under (`claimEpoch`) is still its claim's and the lease's current
   * one; otherwise it counts as stale and stays as it is.
   */
  completeOutbox(rows: readonly OutboxClaimRef[]): Promise<OutboxSettleResult>;
  /**
   * Records failed attempts of rows `owner` still claims: each comes back after its `retryAfterMs`, or is parked.
   * A row whose claim passed to another owner is left to that owner; a row written under a shard whose `claimEpoch`
   * is no longer current is left unchanged and counted stale (as for completeOutbox).
   */
  failOutbox(owner: string, failures: readonly OutboxFailure[]): Promise<OutboxSettleResult>;
  /** Deletes rows delivered at least `olderThanMs` ago on the database clock; returns how many. */
  purgeOutbox(olderThanMs: number): Promise<number>;
  /** Counts of pending (undelivered, not parked), parked and delivered rows. */
  outboxCounts(): Promise<OutboxCounts>;
  /** Up to `limit` parked rows, oldest first, with their last error. */
  parkedOutbox(limit: number): Promise<ParkedOutboxRow[]>;
  /**
   * Makes parked rows claimable again at once with their attempts reset (an operator fixed the cause); returns how
   * many parked rows changed.
   */
  retryParkedOutbox(offsets: readonly number[]): Promise<number>;
  /** Releases connections and files; later calls fail with StoreClosedError. */
  close(): Promise<void>;
}

/** A validated append: fields checked, the operation id as text. Backends share this. */
export interface CheckedAppend {
  readonly persistenceId: string;
  readonly expectedRevision: number;
  readonly operationId: string;
  readonly events: readonly EventRecord[];
  readonly fence: ShardLeaseToken | null;
  /** Whether any event carries a tag (a tagged append takes the backend's tagged path). */
  readonly tagged: boolean;
  /** The outbox messages to write with it (checked). */
  readonly outbox: readonly OutboxRecord[];
  /** The reply to record with the events, or null. */
  readonly reply: ReplyRecord | null;
}

/**
 * Validates a persistence id.
 * @throws InvalidPersistenceRequestError
 */
export function checkPersistenceId(persistenceId: string): string {
  if (typeof persistenceId !== "string" || persistenceId.length === 0) {
    throw new InvalidPersistenceRequestError("persistenceId", "must be a non-empty string");
  }
  return persistenceId;
}

/**
 * Validates a revision or sequence number (a whole number of 0 or more).
 * @throws InvalidPersistenceRequestError
 */
export function checkSequence(field: string, value: number): number {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new InvalidPersistenceRequestError(field, `${describe(value)}; expected a whole number of 0 or more`);
  }
  return value;
}

/**
 * Validates an optional fence.
 * @throws InvalidPersistenceRequestError
 */
export function checkFence(fence: ShardLeaseToken | null | undefined): ShardLeaseToken | null {
  return fence === undefined || fence === null ? null : validateLeaseToken(fence);
}

/**
 * Validates an append request.
 * @throws InvalidPersistenceRequestError
 */
export function checkAppend(request: AppendEventsRequest): CheckedAppend {
  checkPersistenceId(request.persistenceId);
  checkSequence("expectedRevision", request.expectedRevision);
  if (!Array.isArray(request.events)) throw new InvalidPersistenceRequestError("events", "expected an array");
  let tagged = false;
  for (const event of request.events) {
    checkRecord("event", event);
    if (event.tags !== undefined && checkTags("event.tags", event.tags).length > 0) tagged = true;
  }
  return {
    persistenceId: request.persistenceId,
    expectedRevision: request.expectedRevision,
    operationId: OperationId.from(request.operationId).value,
    events: request.events,
    fence: checkFence(request.fence),
    tagged,
    outbox: checkOutbox(request.outbox),
    reply: checkReply(request.reply),
  };
}

/**
 * Validates the reply of an append (absent or null: none).
 * @throws InvalidPersistenceRequestError
 */
function checkReply(reply: unknown): ReplyRecord | null {
  if (reply === undefined || reply === null) return null;
  checkRecord("reply", reply as ReplyRecord);
  const { manifest, payload } = reply as ReplyRecord;
  return { manifest, payload };
}

/**
 * Validates a manifest/payload pair.
 * @throws InvalidPersistenceRequestError
 */
export function checkRecord(field: string, record: { manifest: string; payload: string }): void {
  if (record === null || typeof record !== "object") {
    throw new InvalidPersistenceRequestError(field, "expected { manifest, payload }");
  }
  if (typeof record.manifest !== "string" || record.manifest.length === 0) {
    throw new InvalidPersistenceRequestError(`${field}.manifest`, "must be a non-empty string");
  }
  if (typeof record.payload !== "string") {
    throw new InvalidPersistenceRequestError(`${field}.payload`, "must be a string (JSON text)");
  }
}

/**
 * Validates a recorded reply read back from a store (`revision`: the operation's, for the error).
 * @throws CorruptPersistentRecordError
 */
export function checkReplyRow(persistenceId: string, revision: number, row: Record<string, unknown>): ReplyRecord {
  if (typeof row.manifest !== "string" || row.manifest.length === 0 || typeof row.payload !== "string") {
    throw new CorruptPersistentRecordError(persistenceId, revision, "the recorded reply has no manifest or payload");
  }
  return { manifest: row.manifest, payload: row.payload };
}

/**
 * Validates an event (or snapshot) row read back from a store.
 * @throws CorruptPersistentRecordError naming the persistence id and sequence number
 */
export function checkStoredEvent(
  persistenceId: string,
  sequenceNr: number,
  manifest: unknown,
  payload: unknown,
): StoredEvent {
  if (!Number.isSafeInteger(sequenceNr) || sequenceNr < 0) {
    throw new CorruptPersistentRecordError(persistenceId, sequenceNr, "sequence number is not a whole number");
  }
  if (typeof manifest !== "string" || manifest.length === 0) {
    throw new CorruptPersistentRecordError(persistenceId, sequenceNr, "manifest is missing");
  }
  if (typeof payload !== "string") {
    throw new CorruptPersistentRecordError(persistenceId, sequenceNr, "payload is not text");
  }
  return { sequenceNr, manifest, payload };
}
