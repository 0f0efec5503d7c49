import type { Database as SqliteDatabase, Statement, Transaction } from "better-sqlite3";
import { RealScheduler, type Scheduler } from "../../actor/index.ts";
import { loadDriver } from "../driver.ts";
import {
  ConcurrentWriteError,
  CorruptPersistentRecordError,
  OperationConflictError,
  PersistenceConfigurationError,
  PersistenceTimeoutError,
  ProjectionBehindRetentionError,
  ProjectionCheckpointConflictError,
  ProjectionRebuildSupersededError,
  StaleShardOwnerError,
  StoreClosedError,
  UnsafeRetentionError,
} from "../errors.ts";
import {
  checkEventQuery,
  checkFeedRow,
  checkOffset,
  checkProjectionControlChange,
  checkProjectionName,
  checkTags,
  defaultProjectionControl,
  type EventPage,
  type EventQuery,
  feedPage,
  type ProjectionBatchRequest,
  type ProjectionControl,
  type ProjectionControlChange,
  type ProjectionTransaction,
} from "../feed.ts";
import { eventsFingerprint, stateFingerprint } from "../fingerprint.ts";
import {
  type ShardLeaseKey,
  type ShardLeaseToken,
  validateLeaseKey,
  validateLeaseRequest,
  validateLeaseToken,
} from "../lease.ts";
import { type AppliedMigration, checkRebaseline, planMigrations } from "../migrations.ts";
import { OperationId } from "../operation-id.ts";
import {
  type ClaimedOutboxRow,
  checkClaim,
  checkClaimedRow,
  checkClaimRefs,
  checkFailure,
  checkOffsets,
  checkOwner,
  type OutboxClaim,
  type OutboxClaimRef,
  type OutboxClaimRequest,
  type OutboxCounts,
  type OutboxFailure,
  type OutboxSettleResult,
  outboxCountsOf,
  PARKED_UNTIL_MS,
  type ParkedOutboxRow,
} from "../outbox-claim.ts";
import { checkOutbox, encodeDestination, type OutboxRecord } from "../outbox-message.ts";
import {
  type AppendEventsRequest,
  checkAppend,
  checkFence,
  checkPersistenceId,
  checkRecord,
  checkReplyRow,
  checkSequence,
  type DeleteStateRequest,
  type PersistenceStore,
  type ReplyRecord,
  type RetentionResult,
  type SaveStateRequest,
  type SnapshotRecord,
  type StateRecord,
  type StoredEvent,
  TOMBSTONE_MANIFEST,
  type WriteResult,
} from "../store.ts";
import { entityTypeSql, OFFSET_HIGH_WATER_PID, SQLITE_NOW_MS, sqliteMigrations } from "./schema.ts";
import { StatementCache } from "./statement-cache.ts";

/** The entity type of a journal row `j` (the persistence id's prefix before the first ":"). */
const ENTITY_TYPE_SQL = entityTypeSql("j.persistence_id");

/** SQLite's "now" as text with milliseconds (the delivery time of an outbox row; compared as text by the purge). */
const SQLITE_NOW_TEXT = "strftime('%Y-%m-%d %H:%M:%f', 'now')";

/** better-sqlite3, an optional peer dependency: importing this backend without it fails with one MissingDriverError. */
const Database = (await loadDriver("better-sqlite3", "movie/persistence/sqlite", () => import("better-sqlite3")))
  .default;

/** Options of {@link SqliteStore.open}. */
export interface SqliteStoreOptions {
  /** Database file path, or ":memory:". */
  dbPath: string;
  /**
   * How long an operation waits in total, in milliseconds, while another connection or process holds the write lock,
   * before it rejects PersistenceTimeoutError (nothing was written; retry with the same OperationId); default 5000.
   * The wait is asynchronous: the event loop keeps running (see busySyncWaitMs). Opening the store (its migration
   * check) waits synchronously, up to this long, once.
   */
  busyTimeoutMs?: number;
  /**
   * The longest the event loop is blocked in one attempt (SQLite's own busy handler), in milliseconds, 0..50;
   * default 5. When the lock is still held after it, the operation is retried on the scheduler with a backoff from
   * 1 ms doubling to 50 ms, until busyTimeoutMs.
   */
  busySyncWaitMs?: number;
  /**
   * PRAGMA synchronous: "normal" (default) syncs the WAL at checkpoints only, so the last transactions committed
   * before a power loss or OS crash may be lost (never a corrupt database; a process crash loses nothing); "full"
   * syncs the WAL at every commit, so a committed write survives power loss, at the cost of one fsync per commit.
   */
  synchronous?: "normal" | "full";
  /** Timers of the busy retries; default the real clock. */
  scheduler?: Scheduler;
}

/** Counters of a {@link SqliteStore}. */
export interface SqliteStoreStats {
  /** Operations that found the write lock held past busySyncWaitMs and were retried asynchronously. */
  busyRetries: number;
  /** Operations that gave up after busyTimeoutMs (PersistenceTimeoutError). */
  busyTimeouts: number;
}

/** True for SQLite's "the database is locked by another connection" (SQLITE_BUSY and its extended codes). */
function isBusy(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && code.startsWith("SQLITE_BUSY");
}

/** Backoff of the asynchronous busy retries, in milliseconds. */
const busyRetryFirstMs = 1;
const busyRetryMaxMs = 50;

interface LeaseRow {
  owner: string;
  epoch: number;
  lease_until_epoch_ms: number;
}

/**
 * The SQLite backend (better-sqlite3): the full contract, including the lease table and fence SQL on the database
 * clock (`julianday('now')`). Each operation is one synchronous immediate transaction, so it is atomic. While
 * another connection holds the write lock, an attempt blocks at most busySyncWaitMs (a few milliseconds) and is then
 * retried on the scheduler, so the event loop keeps running. Not a supported clustered mode (docs/protocol.md §13.4):
 * sharding accepts only "postgres".
 */
export class SqliteStore implements PersistenceStore {
  readonly backendName = "sqlite" as const;
  private closed = false;
  private readonly s: ReturnType<typeof prepare>;
  private readonly appendTx: Transaction<(a: ReturnType<typeof checkAppend>, fingerprint: string) => WriteResult>;
  private readonly stateTx: Transaction<
    (
      pid: string,
      expected: number,
      op: string,
      manifest: string,
      payload: string | null,
      deleted: boolean,
      fence: ShardLeaseToken | null,
      outbox: readonly OutboxRecord[],
    ) => WriteResult
  >;

  /** Busy-retry counters. */
  readonly stats: SqliteStoreStats = { busyRetries: 0, busyTimeouts: 0 };
  private readonly feedListeners = new Set<() => void>();
  private readonly feedQueries = new Map<string, Statement>();
  /**
   * The connection of exactly-once projection batches (opened on first use): a batch's transaction stays open while
   * its asynchronous handler runs, so it cannot share the store's connection, whose other operations would land
   * inside it. Batches run one at a time on it.
   */
  private projectionDb: SqliteDatabase | null = null;
  /** The projection connection's prepared statements (its own checks and the handlers' SQL). */
  private projectionStatements: StatementCache | null = null;
  private projectionQueue: Promise<unknown> = Promise.resolve();

  private constructor(
    private readonly db: SqliteDatabase,
    private readonly scheduler: Scheduler,
    private readonly busyTimeoutMs: number,
    private readonly dbPath: string,
    private readonly busySyncWaitMs: number,
    /**
     * Versions whose checksum this open rewrote from an earlier build's version-and-name checksum to the statement
     * checksum (once per database; empty afterwards).
     */
    readonly rebaselinedMigrations: readonly number[],
  ) {
    this.s = prepare(db);
    this.appendTx = db.transaction((a: ReturnType<typeof checkAppend>, fingerprint: string): WriteResult => {
      this.checkFenceNow(a.fence);
      const inserted = this.s.insertJournalOp.run(
        a.persistenceId,
        a.operationId,
        fingerprint,
        a.expectedRevision + a.events.length,
      );
      if (inserted.changes === 0) {
        const previous = this.s.selectJournalOp.get(a.persistenceId, a.operationId) as {
          fingerprint: string;
          revision: number;
        };
        if (previous.fingerprint !== fingerprint) throw new OperationConflictError(a.persistenceId, a.operationId);
        // A recorded reply only when there is one: a duplicate's result is otherwise what it always was.
        const reply = this.storedReply(a.persistenceId, a.operationId, previous.revision);
        return reply === null
          ? { revision: previous.revision, duplicate: true }
          : { revision: previous.revision, duplicate: true, reply };
      }
      this.s.ensureStream.run(a.persistenceId);
      const revision = a.expectedRevision + a.events.length;
      if (
        a.events.length === 0 ||
        this.s.advanceStream.run(revision, a.persistenceId, a.expectedRevision).changes !== 1
      ) {
        const actual = (this.s.selectRevision.get(a.persistenceId) as { revision: number }).revision;
        if (actual !== a.expectedRevision) throw new ConcurrentWriteError(a.persistenceId, a.expectedRevision, actual);
        if (a.events.length !== 0) throw new ConcurrentWriteError(a.persistenceId, a.expectedRevision, actual);
        this.insertOutbox(a.persistenceId, a.operationId, a.outbox, a.fence);
        return { revision, duplicate: false };
      }
      a.events.forEach((event, i) => {
        // The row's rowid is its feed offset (migration 12): max + 1, and SQLite has one writer at a time.
        const row = this.s.insertEvent.run(a.persistenceId, a.expectedRevision + 1 + i, event.manifest, event.payload);
        if (a.tagged) {
          for (const tag of checkTags("event.tags", event.tags)) this.s.insertTag.run(tag, row.lastInsertRowid);
        }
      });
      this.insertOutbox(a.persistenceId, a.operationId, a.outbox, a.fence);
      if (a.reply !== null) {
        this.s.insertReply.run(a.persistenceId, a.operationId, a.reply.manifest, a.reply.payload);
      }
      return { revision, duplicate: false };
    });
    this.stateTx = db.transaction(
      (
        pid: string,
        expected: number,
        op: string,
        manifest: string,
        payload: string | null,
        deleted: boolean,
        fence: ShardLeaseToken | null,
        outbox: readonly OutboxRecord[],
      ): WriteResult => {
        this.checkFenceNow(fence);
        const fingerprint = stateFingerprint(manifest, payload, deleted);
        const revision = expected + 1;
        if (this.s.insertStateOp.run(pid, op, fingerprint, revision).changes === 0) {
          const previous = this.s.selectStateOp.get(pid, op) as { fingerprint: string; revision: number };
          if (previous.fingerprint !== fingerprint) throw new OperationConflictError(pid, op);
          return { revision: previous.revision, duplicate: true };
        }
        const changed =
          expected === 0
            ? this.s.insertState.run(pid, revision, manifest, payload, deleted ? 1 : 0).changes
            : this.s.updateState.run(revision, manifest, payload, deleted ? 1 : 0, pid, expected).changes;
        if (changed !== 1) {
          const row = this.s.selectState.get(pid) as { revision: number } | undefined;
          throw new ConcurrentWriteError(pid, expected, row?.revision ?? 0);
        }
        this.insertOutbox(pid, op, outbox, fence);
        return { revision, duplicate: false };
      },
    );
  }

  /**
   * Opens (creating if needed) the database file and runs the pending migrations.
   * @throws PersistenceConfigurationError when the path cannot be opened; UnsupportedSchemaVersionError,
   *   MigrationChecksumMismatchError, InvalidMigrationHistoryError for a foreign schema
   */
  static open(options: SqliteStoreOptions): SqliteStore {
    if (typeof options.dbPath !== "string" || options.dbPath.length === 0) {
      throw new PersistenceConfigurationError("dbPath", "must be a file path or :memory:");
    }
    const busyTimeoutMs = options.busyTimeoutMs ?? 5000;
    if (typeof busyTimeoutMs !== "number" || !Number.isSafeInteger(busyTimeoutMs) || busyTimeoutMs < 0) {
      throw new PersistenceConfigurationError("busyTimeoutMs", "expected a whole number of milliseconds, 0 or more");
    }
    const busySyncWaitMs = options.busySyncWaitMs ?? 5;
    if (
      typeof busySyncWaitMs !== "number" ||
      !Number.isSafeInteger(busySyncWaitMs) ||
      busySyncWaitMs < 0 ||
      busySyncWaitMs > 50
    ) {
      throw new PersistenceConfigurationError("busySyncWaitMs", "expected a whole number of milliseconds 0..50");
    }
    const synchronous = options.synchronous ?? "normal";
    if (synchronous !== "normal" && synchronous !== "full") {
      throw new PersistenceConfigurationError("synchronous", 'expected "normal" or "full"');
    }
    let db: SqliteDatabase;
    let rebaselined: number[];
    try {
      db = new Database(options.dbPath);
      db.pragma("journal_mode = WAL");
    } catch (error) {
      throw new PersistenceConfigurationError(
        "dbPath",
        `cannot open SQLite database ${options.dbPath} (${(error as Error).message}); check the directory exists and is writable`,
      );
    }
    try {
      db.pragma(`synchronous = ${synchronous === "full" ? "FULL" : "NORMAL"}`);
      // Opening is synchronous: its one migration transaction may wait for the lock the whole busyTimeoutMs.
      db.pragma(`busy_timeout = ${busyTimeoutMs}`);
      rebaselined = migrate(db);
      // From now on SQLite's own (blocking) busy handler waits at most busySyncWaitMs; the rest is asynchronous.
      db.pragma(`busy_timeout = ${busySyncWaitMs}`);
    } catch (error) {
      db.close();
      throw error;
    }
    return new SqliteStore(
      db,
      options.scheduler ?? new RealScheduler(),
      busyTimeoutMs,
      options.dbPath,
      busySyncWaitMs,
      rebaselined,
    );
  }

  async appendEvents(request: AppendEventsRequest): Promise<WriteResult> {
    this.open();
    const append = checkAppend(request);
    const fingerprint = eventsFingerprint(append.events);
    const result = await this.run("appendEvents", () => this.appendTx.immediate(append, fingerprint));
    if (!result.duplicate && append.events.length > 0) this.notifyFeed();
    return result;
  }

  /**
   * The reply recorded with an operation's append, or null.
   * @throws CorruptPersistentRecordError for a row of the wrong shape
   */
  private storedReply(persistenceId: string, operationId: string, revision: number): ReplyRecord | null {
    const row = this.s.selectReply.get(persistenceId, operationId) as Record<string, unknown> | undefined;
    return row === undefined ? null : checkReplyRow(persistenceId, revision, row);
  }

  async loadEvents(persistenceId: string, afterSeq = 0): Promise<StoredEvent[]> {
    this.open();
    checkPersistenceId(persistenceId);
    checkSequence("afterSeq", afterSeq);
    const rows = await this.run(
      "loadEvents",
      () => this.s.selectEvents.all(persistenceId, afterSeq) as Record<string, unknown>[],
    );
    return rows.map((row) => storedEvent(persistenceId, row));
  }

  async loadRevision(persistenceId: string): Promise<number> {
    this.open();
    checkPersistenceId(persistenceId);
    return this.run(
      "loadRevision",
      () => (this.s.selectRevision.get(persistenceId) as { revision: number } | undefined)?.revision ?? 0,
    );
  }

  async saveSnapshot(
    persistenceId: string,
    snapshot: SnapshotRecord,
    fence?: ShardLeaseToken | null,
  ): Promise<boolean> {
    this.open();
    checkPersistenceId(persistenceId);
    checkSequence("snapshot.sequenceNr", snapshot.sequenceNr);
    checkRecord("snapshot", snapshot);
    const f = checkFence(fence);
    return this.tx("saveSnapshot", () => {
      this.checkFenceNow(f);
      return (
        this.s.upsertSnapshot.run(persistenceId, snapshot.sequenceNr, snapshot.manifest, snapshot.payload).changes === 1
      );
    });
  }

  async loadSnapshot(persistenceId: string): Promise<SnapshotRecord | null> {
    this.open();
    checkPersistenceId(persistenceId);
    const row = await this.run(
      "loadSnapshot",
      () => this.s.selectSnapshot.get(persistenceId) as Record<string, unknown> | undefined,
    );
    if (row === undefined) return null;
    const sequenceNr = row.sequence_nr;
    if (typeof sequenceNr !== "number" || typeof row.manifest !== "string" || typeof row.payload !== "string") {
      throw new CorruptPersistentRecordError(persistenceId, Number(sequenceNr), "snapshot row has wrong column types");
    }
    return { sequenceNr, manifest: row.manifest, payload: row.payload };
  }

  async deleteSnapshot(persistenceId: string, fence?: ShardLeaseToken | null): Promise<boolean> {
    this.open();
    checkPersistenceId(persistenceId);
    const f = checkFence(fence);
    return this.tx("deleteSnapshot", () => {
      this.checkFenceNow(f);
      return this.s.deleteSnapshot.run(persistenceId).changes === 1;
    });
  }

  async deleteEventsTo(
    persistenceId: string,
    toSequenceNr: number,
    fence?: ShardLeaseToken | null,
  ): Promise<RetentionResult> {
    this.open();
    checkPersistenceId(persistenceId);
    checkSequence("toSequenceNr", toSequenceNr);
    const f = checkFence(fence);
    return this.tx("deleteEventsTo", () => {
      this.checkFenceNow(f);
      const snapshot = this.s.selectSnapshot.get(persistenceId) as { sequence_nr: number } | undefined;
      if (snapshot === undefined || snapshot.sequence_nr < toSequenceNr) {
        throw new UnsafeRetentionError(persistenceId, toSequenceNr, snapshot?.sequence_nr ?? null);
      }
      const lagging = this.s.laggingProjection.get(persistenceId, toSequenceNr) as
        | { projection_name: string; event_offset: number }
        | undefined;
      if (lagging !== undefined) {
        throw new ProjectionBehindRetentionError(
          persistenceId,
          toSequenceNr,
          lagging.projection_name,
          lagging.event_offset,
        );
      }
      const highWater = (this.s.latestOffset.get() as { o: number }).o;
      this.s.deleteTags.run(persistenceId, toSequenceNr);
      const deleted = this.s.deleteEvents.run(persistenceId, toSequenceNr).changes;
      // The next append's offset is max(offset) + 1: when this delete took the largest one, a high-water row keeps it
      // from being handed out again (a projection already past it would skip the new event).
      this.s.deleteHighWater.run(highWater);
      this.s.insertHighWater.run(highWater, highWater);
      return { deletedEvents: deleted, throughSeq: toSequenceNr };
    });
  }

  async saveState(request: SaveStateRequest): Promise<WriteResult> {
    this.open();
    checkRecord("state", request);
    return this.writeState(request, request.manifest, request.payload, false);
  }

  async deleteState(request: DeleteStateRequest): Promise<WriteResult> {
    this.open();
    return this.writeState(request, TOMBSTONE_MANIFEST, null, true);
  }

  async loadState(persistenceId: string): Promise<StateRecord | null> {
    this.open();
    checkPersistenceId(persistenceId);
    const row = await this.run(
      "loadState",
      () => this.s.selectState.get(persistenceId) as Record<string, unknown> | undefined,
    );
    if (row === undefined) return null;
    if (typeof row.revision !== "number" || typeof row.manifest !== "string") {
      throw new CorruptPersistentRecordError(
        persistenceId,
        Number(row.revision),
        "durable state row has wrong column types",
      );
    }
    const payload = row.payload === null ? null : String(row.payload);
    return { revision: row.revision, manifest: row.manifest, payload, deleted: row.deleted === 1 };
  }

  async acquireShardLease(key: ShardLeaseKey, owner: string, durationMs: number): Promise<ShardLeaseToken | null> {
    this.open();
    validateLeaseKey(key);
    validateLeaseRequest(owner, durationMs);
    const row = await this.run(
      "acquireShardLease",
      () =>
        this.s.acquireLease.get({
          cluster: key.clusterName,
          type: key.entityType,
          shard: key.shardId,
          owner,
          duration: durationMs,
        }) as LeaseRow | undefined,
    );
    return row === undefined ? null : leaseToken(key, row);
  }

  async renewShardLease(token: ShardLeaseToken, durationMs: number): Promise<ShardLeaseToken | null> {
    this.open();
    validateLeaseToken(token);
    validateLeaseRequest(token.owner, durationMs);
    const k = token.key;
    const row = await this.run(
      "renewShardLease",
      () =>
        this.s.renewLease.get(durationMs, k.clusterName, k.entityType, k.shardId, token.owner, token.epoch) as
          | LeaseRow
          | undefined,
    );
    return row === undefined ? null : leaseToken(k, row);
  }

  async acquireShardLeases(
    keys: readonly ShardLeaseKey[],
    owner: string,
    durationMs: number,
  ): Promise<(ShardLeaseToken | null)[]> {
    this.open();
    for (const key of keys) validateLeaseKey(key);
    validateLeaseRequest(owner, durationMs);
    // One immediate transaction (one lock, one sync) with each key's own acquire statement in it.
    const rows = await this.run("acquireShardLeases", () =>
      this.db
        .transaction(() =>
          keys.map(
            (key) =>
              this.s.acquireLease.get({
                cluster: key.clusterName,
                type: key.entityType,
                shard: key.shardId,
                owner,
                duration: durationMs,
              }) as LeaseRow | undefined,
          ),
        )
        .immediate(),
    );
    return rows.map((row, i) => (row === undefined ? null : leaseToken(keys[i]!, row)));
  }

  async renewShardLeases(tokens: readonly ShardLeaseToken[], durationMs: number): Promise<(ShardLeaseToken | null)[]> {
    this.open();
    for (const t of tokens) {
      validateLeaseToken(t);
      validateLeaseRequest(t.owner, durationMs);
    }
    const rows = await this.run("renewShardLeases", () =>
      this.db
        .transaction(() =>
          tokens.map(
            (t) =>
              this.s.renewLease.get(durationMs, t.key.clusterName, t.key.entityType, t.key.shardId, t.owner, t.epoch) as
                | LeaseRow
                | undefined,
          ),
        )
        .immediate(),
    );
    return rows.map((row, i) => (row === undefined ? null : leaseToken(tokens[i]!.key, row)));
  }

  async releaseShardLease(token: ShardLeaseToken): Promise<boolean> {
    this.open();
    validateLeaseToken(token);
    const k = token.key;
    return this.run(
      "releaseShardLease",
      () => this.s.releaseLease.run(k.clusterName, k.entityType, k.shardId, token.owner, token.epoch).changes === 1,
    );
  }

  async queryEvents(query?: EventQuery): Promise<EventPage> {
    this.open();
    const q = checkEventQuery(query);
    const values: unknown[] = [q.afterOffset];
    if (q.entityTypes !== null) values.push(JSON.stringify(q.entityTypes));
    if (q.persistenceId !== null) values.push(q.persistenceId);
    if (q.tag !== null) values.push(q.tag, q.afterOffset);
    values.push(q.limit);
    const statement = this.feedQuery(q.entityTypes !== null, q.persistenceId !== null, q.tag !== null);
    const rows = await this.run("queryEvents", () => statement.all(...values) as Record<string, unknown>[]);
    return feedPage(
      q,
      rows.map((r) =>
        checkFeedRow(
          r.event_offset,
          r.persistence_id,
          r.entity_type,
          r.sequence_nr,
          r.manifest,
          r.payload,
          typeof r.tags === "string" ? parseTags(r.tags) : r.tags,
        ),
      ),
    );
  }

  async latestOffset(): Promise<number> {
    this.open();
    return this.run("latestOffset", () => (this.s.latestOffset.get() as { o: number }).o);
  }

  onEventsCommitted(listener: () => void): () => void {
    this.feedListeners.add(listener);
    return () => this.feedListeners.delete(listener);
  }

  private notifyFeed(): void {
    for (const listener of this.feedListeners) {
      try {
        listener();
      } catch {
        // A wake-up hint: a listener's failure is its own.
      }
    }
  }

  /** The prepared page statement for a filter combination (see postgres/feed-schema.ts queryEventsSql). */
  private feedQuery(types: boolean, pid: boolean, tag: boolean): Statement {
    const key = `${Number(types)}${Number(pid)}${Number(tag)}`;
    let statement = this.feedQueries.get(key);
    if (statement === undefined) {
      // The journal in offset (rowid) order, skipping the high-water row. The entity type has no index (an index
      // entry per event cost appends a tenth of their rate): a filtered page scans forward from afterOffset.
      const where = ["j.event_offset > ?", `j.persistence_id <> '${OFFSET_HIGH_WATER_PID}'`];
      if (types) where.push(`${ENTITY_TYPE_SQL} IN (SELECT value FROM json_each(?))`);
      if (pid) where.push("j.persistence_id = ?");
      if (tag)
        where.push("j.event_offset IN (SELECT g.event_offset FROM event_tag g WHERE g.tag = ? AND g.event_offset > ?)");
      statement = this.db.prepare(`SELECT j.event_offset, j.persistence_id, ${ENTITY_TYPE_SQL} AS entity_type,
          j.sequence_nr, j.manifest, j.payload, (SELECT json_group_array(t.tag) FROM (SELECT tag FROM event_tag
            WHERE event_offset = j.event_offset ORDER BY tag) AS t) AS tags
        FROM event_journal j
        WHERE ${where.join(" AND ")}
        ORDER BY j.event_offset LIMIT ?`);
      this.feedQueries.set(key, statement);
    }
    return statement;
  }

  async loadProjectionOffset(name: string): Promise<number | null> {
    this.open();
    checkProjectionName(name);
    const row = await this.run(
      "loadProjectionOffset",
      () => this.s.selectCheckpoint.get(name) as { event_offset: number } | undefined,
    );
    return row?.event_offset ?? null;
  }

  async saveProjectionOffset(name: string, offset: number, fence?: ShardLeaseToken | null): Promise<void> {
    this.open();
    checkProjectionName(name);
    checkOffset("offset", offset);
    const f = checkFence(fence);
    await this.tx("saveProjectionOffset", () => {
      this.checkFenceNow(f);
      this.s.upsertCheckpoint.run(name, offset);
    });
  }

  async deleteProjectionOffset(name: string): Promise<boolean> {
    this.open();
    checkProjectionName(name);
    return this.run("deleteProjectionOffset", () => this.s.deleteCheckpoint.run(name).changes === 1);
  }

  async loadProjectionControl(name: string): Promise<ProjectionControl> {
    this.open();
    checkProjectionName(name);
    const row = await this.run(
      "loadProjectionControl",
      () => this.s.selectControl.get(name) as { paused: number; rebuild_from: number | null } | undefined,
    );
    return row === undefined ? defaultProjectionControl : { paused: row.paused === 1, rebuildFrom: row.rebuild_from };
  }

  async setProjectionControl(name: string, change: ProjectionControlChange): Promise<ProjectionControl> {
    this.open();
    checkProjectionName(name);
    const checked = checkProjectionControlChange(change);
    const paused = checked.paused === undefined ? null : checked.paused ? 1 : 0;
    const row = await this.run(
      "setProjectionControl",
      () =>
        this.s.upsertControl.get(
          name,
          paused,
          checked.rebuildFrom ?? null,
          paused,
          checked.rebuildFrom === undefined ? 0 : 1,
          checked.rebuildFrom ?? null,
        ) as { paused: number; rebuild_from: number | null },
    );
    return { paused: row.paused === 1, rebuildFrom: row.rebuild_from };
  }

  runProjectionBatch<R>(request: ProjectionBatchRequest, work: (tx: ProjectionTransaction) => Promise<R>): Promise<R> {
    this.open();
    const name = checkProjectionName(request.name);
    const expected = checkOffset("expectedOffset", request.expectedOffset);
    const next = checkOffset("newOffset", request.newOffset);
    const fence = checkFence(request.fence);
    const rebuild = request.completesRebuildFrom ?? null;
    if (rebuild !== null) checkOffset("completesRebuildFrom", rebuild);
    const run = this.projectionQueue.then(() => this.projectionBatch(name, expected, next, fence, rebuild, work));
    this.projectionQueue = run.catch(() => {});
    return run;
  }

  private async projectionBatch<R>(
    name: string,
    expected: number,
    next: number,
    fence: ShardLeaseToken | null,
    rebuild: number | null,
    work: (tx: ProjectionTransaction) => Promise<R>,
  ): Promise<R> {
    this.open();
    if (this.projectionDb === null) {
      if (this.dbPath === ":memory:") {
        throw new PersistenceConfigurationError(
          "dbPath",
          "exactly-once projections on SQLite need a database file (a second connection runs their transactions), not :memory:",
        );
      }
      const db = new Database(this.dbPath);
      db.pragma(`busy_timeout = ${this.busySyncWaitMs}`);
      this.projectionDb = db;
      this.projectionStatements = new StatementCache(db);
    }
    const db = this.projectionDb;
    const statements = this.projectionStatements!;
    // The write lock first (waiting asynchronously while another connection holds it), so the checks below and the
    // handler's writes see one state.
    await this.run("runProjectionBatch", () => db.exec("BEGIN IMMEDIATE"));
    try {
      if (fence !== null) {
        const k = fence.key;
        const held = statements
          .get(
            `SELECT 1 FROM shard_lease WHERE cluster_name = ? AND entity_type = ? AND shard_id = ? AND owner = ?
              AND epoch = ? AND lease_until_epoch_ms > ${SQLITE_NOW_MS}`,
          )
          .get(k.clusterName, k.entityType, k.shardId, fence.owner, fence.epoch);
        if (held === undefined) throw new StaleShardOwnerError(fence);
      }
      const current = statements
        .get("SELECT event_offset FROM projection_checkpoint WHERE projection_name = ?")
        .get(name) as { event_offset: number } | undefined;
      const actual = current?.event_offset ?? 0;
      if (actual !== expected) throw new ProjectionCheckpointConflictError(name, expected, actual);
      const tx: ProjectionTransaction = {
        backend: "sqlite",
        query: async (sql, params) => {
          const statement = statements.get(sql);
          const values = params === undefined ? [] : [...params];
          if (statement.reader) return statement.all(...values) as Record<string, unknown>[];
          statement.run(...values);
          return [];
        },
      };
      const result = await work(tx);
      if (rebuild !== null) {
        const cleared = statements
          .get(
            `UPDATE projection_control SET rebuild_from = NULL, updated_at = CURRENT_TIMESTAMP
              WHERE projection_name = ? AND rebuild_from = ?`,
          )
          .run(name, rebuild);
        if (cleared.changes !== 1) throw new ProjectionRebuildSupersededError(name, rebuild);
      }
      statements
        .get(
          `INSERT INTO projection_checkpoint (projection_name, event_offset) VALUES (?, ?)
          ON CONFLICT (projection_name) DO UPDATE SET event_offset = excluded.event_offset, updated_at = CURRENT_TIMESTAMP`,
        )
        .run(name, next);
      db.exec("COMMIT");
      return result;
    } catch (error) {
      if (db.inTransaction) db.exec("ROLLBACK");
      throw error;
    }
  }

  /** The connection's PRAGMA synchronous: "normal" or "full". */
  get synchronous(): "normal" | "full" {
    return this.db.pragma("synchronous", { simple: true }) === 2 ? "full" : "normal";
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.projectionDb?.close();
    this.db.close();
  }

  private writeState(
    request: SaveStateRequest | DeleteStateRequest,
    manifest: string,
    payload: string | null,
    deleted: boolean,
  ): WriteResult | Promise<WriteResult> {
    checkPersistenceId(request.persistenceId);
    checkSequence("expectedRevision", request.expectedRevision);
    const op = OperationId.from(request.operationId).value;
    const fence = checkFence(request.fence);
    const outbox = checkOutbox(request.outbox);
    return this.run(deleted ? "deleteState" : "saveState", () =>
      this.stateTx.immediate(
        request.persistenceId,
        request.expectedRevision,
        op,
        manifest,
        payload,
        deleted,
        fence,
        outbox,
      ),
    );
  }

  /**
   * Inside a write's transaction: its outbox rows (a message id already present is not written again), each recording
   * the write's shard (its fence's key; null unfenced).
   */
  private insertOutbox(pid: string, op: string, outbox: readonly OutboxRecord[], fence: ShardLeaseToken | null): void {
    const k = fence?.key;
    for (const m of outbox) {
      this.s.insertOutbox.run(
        m.messageId,
        pid,
        op,
        encodeDestination(m.destination),
        m.manifest,
        m.payload,
        k?.clusterName ?? null,
        k?.entityType ?? null,
        k?.shardId ?? null,
      );
    }
  }

  async claimOutbox(request: OutboxClaimRequest): Promise<OutboxClaim> {
    this.open();
    const claim = checkClaim(request);
    // One transaction, and SQLite has one writer at a time: no two claims can take the same row.
    return this.tx("claimOutbox", () => {
      const staleLeases: ShardLeaseToken[] = [];
      const candidates: { offset: number; epoch: number | null }[] = [];
      for (const lease of claim.leases) {
        const k = lease.key;
        if (this.s.checkFence.get(k.clusterName, k.entityType, k.shardId, lease.owner, lease.epoch) === undefined) {
          staleLeases.push(lease);
          continue;
        }
        const offsets = this.s.shardClaimCandidates.all({
          type: k.entityType,
          shard: k.shardId,
          cluster: k.clusterName,
          epoch: lease.epoch,
          limit: claim.limit,
        }) as { outbox_offset: number }[];
        for (const r of offsets) candidates.push({ offset: r.outbox_offset, epoch: lease.epoch });
      }
      if (claim.unsharded) {
        const offsets = this.s.unshardedClaimCandidates.all(claim.limit) as { outbox_offset: number }[];
        for (const r of offsets) candidates.push({ offset: r.outbox_offset, epoch: null });
      }
      candidates.sort((a, b) => a.offset - b.offset);
      const rows: ClaimedOutboxRow[] = [];
      for (const c of candidates.slice(0, claim.limit)) {
        const row = this.s.claimOutboxRow.get({
          owner: claim.owner,
          leaseMs: claim.leaseMs,
          epoch: c.epoch,
          offset: c.offset,
        }) as Record<string, unknown> | undefined;
        const checked = row === undefined ? null : checkClaimedRow(row);
        if (checked !== null) rows.push(checked);
      }
      return { rows, staleLeases };
    });
  }

  async completeOutbox(rows: readonly OutboxClaimRef[]): Promise<OutboxSettleResult> {
    this.open();
    const list = checkClaimRefs(rows);
    if (list.length === 0) return { settled: 0, stale: 0 };
    return this.tx("completeOutbox", () => {
      let settled = 0;
      let stale = 0;
      for (const ref of list) {
        const current = this.claimCurrent(ref.offset, ref.claimEpoch);
        if (current === null) continue;
        if (!current) stale++;
        else settled += this.s.completeOutbox.run(ref.offset).changes;
      }
      return { settled, stale };
    });
  }

  async failOutbox(owner: string, failures: readonly OutboxFailure[]): Promise<OutboxSettleResult> {
    this.open();
    checkOwner(owner);
    const checked = failures.map(checkFailure);
    if (checked.length === 0) return { settled: 0, stale: 0 };
    return this.tx("failOutbox", () => {
      let settled = 0;
      let stale = 0;
      for (const f of checked) {
        const current = this.claimCurrent(f.offset, f.claimEpoch ?? null);
        if (current === null) continue;
        if (!current) stale++;
        else settled += this.s.failOutbox.run(f.error, f.park ? 1 : 0, f.retryAfterMs, f.offset, owner).changes;
      }
      return { settled, stale };
    });
  }

  /**
   * Inside a settle's transaction: whether the claim of undelivered row `offset` under `epoch` still stands (a row
   * without a shard always; a sharded one while it is claimed under that epoch and its lease is at that epoch,
   * unexpired); null when the row is delivered or gone.
   */
  private claimCurrent(offset: number, epoch: number | null): boolean | null {
    const row = this.s.outboxClaimOf.get(offset) as
      | {
          sender_cluster: string | null;
          sender_type: string | null;
          sender_shard: number | null;
          claim_epoch: number | null;
        }
      | undefined;
    if (row === undefined) return null;
    if (row.sender_shard === null) return true;
    if (epoch === null || row.claim_epoch !== epoch) return false;
    return this.s.leaseAtEpoch.get(row.sender_cluster, row.sender_type, row.sender_shard, epoch) !== undefined;
  }

  async purgeOutbox(olderThanMs: number): Promise<number> {
    this.open();
    checkSequence("olderThanMs", olderThanMs);
    return this.run("purgeOutbox", () => this.s.purgeOutbox.run(olderThanMs).changes);
  }

  async outboxCounts(): Promise<OutboxCounts> {
    this.open();
    const row = (await this.run("outboxCounts", () => this.s.outboxCounts.get())) as Record<string, unknown>;
    return outboxCountsOf(row);
  }

  async retryParkedOutbox(offsets: readonly number[]): Promise<number> {
    this.open();
    const list = checkOffsets(offsets);
    if (list.length === 0) return 0;
    return this.tx("retryParkedOutbox", () => {
      let changed = 0;
      for (const offset of list) changed += this.s.retryParkedOutbox.run(offset).changes;
      return changed;
    });
  }

  async parkedOutbox(limit: number): Promise<ParkedOutboxRow[]> {
    this.open();
    checkSequence("limit", limit);
    const rows = (await this.run("parkedOutbox", () => this.s.parkedOutbox.all(limit))) as Record<string, unknown>[];
    return rows.map((r) => ({
      offset: Number(r.outbox_offset),
      messageId: typeof r.message_id === "string" ? r.message_id : "",
      persistenceId: typeof r.persistence_id === "string" ? r.persistence_id : "",
      attempts: Number(r.attempts),
      lastError: typeof r.last_error === "string" ? r.last_error : "",
    }));
  }

  private tx<R>(operation: string, fn: () => R): R | Promise<R> {
    const transaction = this.db.transaction(fn);
    return this.run(operation, () => transaction.immediate());
  }

  /**
   * Runs `work` (one synchronous statement or transaction) now; when another connection holds the write lock past
   * busySyncWaitMs, retries it on the scheduler instead of blocking the event loop, until busyTimeoutMs.
   * @throws PersistenceTimeoutError after busyTimeoutMs; StoreClosedError when the store closed meanwhile
   */
  private run<R>(operation: string, work: () => R): R | Promise<R> {
    try {
      return work();
    } catch (error) {
      if (!isBusy(error)) throw error;
      return this.retryWhenBusy(operation, work);
    }
  }

  private retryWhenBusy<R>(operation: string, work: () => R): Promise<R> {
    this.stats.busyRetries++;
    const startedMs = this.scheduler.now();
    return new Promise<R>((resolve, reject) => {
      let delayMs = busyRetryFirstMs;
      const attempt = (): void => {
        if (this.closed) {
          reject(new StoreClosedError("sqlite"));
          return;
        }
        try {
          resolve(work());
          return;
        } catch (error) {
          if (!isBusy(error)) {
            reject(error);
            return;
          }
        }
        const waitedMs = this.scheduler.now() - startedMs;
        if (waitedMs >= this.busyTimeoutMs) {
          this.stats.busyTimeouts++;
          reject(new PersistenceTimeoutError(operation, this.busyTimeoutMs));
          return;
        }
        delayMs = Math.min(delayMs * 2, busyRetryMaxMs);
        this.scheduler.scheduleOnce(Math.min(delayMs, this.busyTimeoutMs - waitedMs), attempt);
      };
      this.scheduler.scheduleOnce(busyRetryFirstMs, attempt);
    });
  }

  private checkFenceNow(fence: ShardLeaseToken | null): void {
    if (fence === null) return;
    const k = fence.key;
    if (this.s.checkFence.get(k.clusterName, k.entityType, k.shardId, fence.owner, fence.epoch) === undefined) {
      throw new StaleShardOwnerError(fence);
    }
  }

  private open(): void {
    if (this.closed) throw new StoreClosedError("sqlite");
  }
}

function prepare(db: SqliteDatabase) {
  const p = (sql: string): Statement => db.prepare(sql);
  return {
    checkFence: p(
      `SELECT 1 FROM shard_lease WHERE cluster_name = ? AND entity_type = ? AND shard_id = ? AND owner = ? AND epoch = ?
        AND lease_until_epoch_ms > ${SQLITE_NOW_MS}`,
    ),
    insertJournalOp: p(
      "INSERT INTO journal_operation (persistence_id, operation_id, fingerprint, revision) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
    ),
    insertReply: p(
      "INSERT INTO operation_reply (persistence_id, operation_id, manifest, payload) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
    ),
    selectReply: p("SELECT manifest, payload FROM operation_reply WHERE persistence_id = ? AND operation_id = ?"),
    selectJournalOp: p(
      "SELECT fingerprint, revision FROM journal_operation WHERE persistence_id = ? AND operation_id = ?",
    ),
    ensureStream: p("INSERT INTO event_stream (persistence_id, revision) VALUES (?, 0) ON CONFLICT DO NOTHING"),
    advanceStream: p("UPDATE event_stream SET revision = ? WHERE persistence_id = ? AND revision = ?"),
    selectRevision: p("SELECT revision FROM event_stream WHERE persistence_id = ?"),
    insertEvent: p("INSERT INTO event_journal (persistence_id, sequence_nr, manifest, payload) VALUES (?, ?, ?, ?)"),
    selectEvents: p(
      "SELECT sequence_nr, manifest, payload FROM event_journal WHERE persistence_id = ? AND sequence_nr > ? ORDER BY sequence_nr",
    ),
    deleteEvents: p("DELETE FROM event_journal WHERE persistence_id = ? AND sequence_nr <= ?"),
    insertTag: p("INSERT OR IGNORE INTO event_tag (tag, event_offset) VALUES (?, ?)"),
    deleteTags: p(
      `DELETE FROM event_tag WHERE event_offset IN (SELECT event_offset FROM event_journal
        WHERE persistence_id = ? AND sequence_nr <= ?)`,
    ),
    // The high-water row (at most one) is replaced by one at the given offset when no row is at or above it.
    deleteHighWater: p(
      `DELETE FROM event_journal WHERE persistence_id = '${OFFSET_HIGH_WATER_PID}' AND event_offset < ?`,
    ),
    insertHighWater: p(
      `INSERT INTO event_journal (event_offset, persistence_id, sequence_nr, manifest, payload)
        SELECT ?, '${OFFSET_HIGH_WATER_PID}', 0, 'movie.offset-high-water', ''
        WHERE ? > (SELECT coalesce(max(event_offset), 0) FROM event_journal)`,
    ),
    // The high-water row counts: the latest offset never goes back.
    latestOffset: p("SELECT coalesce(max(event_offset), 0) AS o FROM event_journal"),
    selectCheckpoint: p("SELECT event_offset FROM projection_checkpoint WHERE projection_name = ?"),
    upsertCheckpoint: p(
      `INSERT INTO projection_checkpoint (projection_name, event_offset) VALUES (?, ?)
        ON CONFLICT (projection_name) DO UPDATE SET event_offset = excluded.event_offset, updated_at = CURRENT_TIMESTAMP`,
    ),
    deleteCheckpoint: p("DELETE FROM projection_checkpoint WHERE projection_name = ?"),
    selectControl: p("SELECT paused, rebuild_from FROM projection_control WHERE projection_name = ?"),
    // (name, paused, rebuildFrom, paused, given, rebuildFrom): a null paused keeps it; given = 0 keeps rebuild_from.
    upsertControl: p(
      `INSERT INTO projection_control (projection_name, paused, rebuild_from) VALUES (?, coalesce(?, 0), ?)
        ON CONFLICT (projection_name) DO UPDATE SET paused = coalesce(?, paused),
          rebuild_from = CASE WHEN ? = 1 THEN ? ELSE rebuild_from END, updated_at = CURRENT_TIMESTAMP
        RETURNING paused, rebuild_from`,
    ),
    // A projection whose checkpoint is below the largest offset a retention delete would remove (docs/protocol.md §13.1).
    laggingProjection: p(
      `SELECT c.projection_name, c.event_offset FROM projection_checkpoint c
        WHERE c.event_offset < (SELECT max(j.event_offset) FROM event_journal j WHERE j.persistence_id = ? AND j.sequence_nr <= ?)
        ORDER BY c.event_offset, c.projection_name LIMIT 1`,
    ),
    upsertSnapshot: p(
      `INSERT INTO snapshot_store (persistence_id, sequence_nr, manifest, payload) VALUES (?, ?, ?, ?)
        ON CONFLICT (persistence_id) DO UPDATE SET sequence_nr = excluded.sequence_nr, manifest = excluded.manifest,
        payload = excluded.payload, updated_at = CURRENT_TIMESTAMP WHERE excluded.sequence_nr >= snapshot_store.sequence_nr`,
    ),
    selectSnapshot: p("SELECT sequence_nr, manifest, payload FROM snapshot_store WHERE persistence_id = ?"),
    deleteSnapshot: p("DELETE FROM snapshot_store WHERE persistence_id = ?"),
    insertStateOp: p(
      "INSERT INTO state_operation (persistence_id, operation_id, fingerprint, revision) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
    ),
    selectStateOp: p("SELECT fingerprint, revision FROM state_operation WHERE persistence_id = ? AND operation_id = ?"),
    insertState: p(
      "INSERT INTO durable_state (persistence_id, revision, manifest, payload, deleted) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
    ),
    updateState: p(
      `UPDATE durable_state SET revision = ?, manifest = ?, payload = ?, deleted = ?, updated_at = CURRENT_TIMESTAMP
        WHERE persistence_id = ? AND revision = ?`,
    ),
    selectState: p("SELECT revision, manifest, payload, deleted FROM durable_state WHERE persistence_id = ?"),
    // docs/protocol.md §13.3 in one statement: create at epoch 1; renew in place for the same unexpired owner; transfer an
    // expired lease with epoch + 1; otherwise no row comes back (held by another owner).
    acquireLease: p(
      `INSERT INTO shard_lease (cluster_name, entity_type, shard_id, owner, epoch, lease_until_epoch_ms)
        VALUES (@cluster, @type, @shard, @owner, 1, ${SQLITE_NOW_MS} + @duration)
        ON CONFLICT (cluster_name, entity_type, shard_id) DO UPDATE SET
          epoch = CASE WHEN shard_lease.owner = excluded.owner AND shard_lease.lease_until_epoch_ms > ${SQLITE_NOW_MS}
            THEN shard_lease.epoch ELSE shard_lease.epoch + 1 END,
          owner = excluded.owner, lease_until_epoch_ms = excluded.lease_until_epoch_ms, updated_at = CURRENT_TIMESTAMP
        WHERE shard_lease.lease_until_epoch_ms <= ${SQLITE_NOW_MS} OR shard_lease.owner = excluded.owner
        RETURNING owner, epoch, lease_until_epoch_ms`,
    ),
    renewLease: p(
      `UPDATE shard_lease SET lease_until_epoch_ms = ${SQLITE_NOW_MS} + ?, updated_at = CURRENT_TIMESTAMP
        WHERE cluster_name = ? AND entity_type = ? AND shard_id = ? AND owner = ? AND epoch = ?
          AND lease_until_epoch_ms > ${SQLITE_NOW_MS}
        RETURNING owner, epoch, lease_until_epoch_ms`,
    ),
    insertOutbox: p(
      `INSERT INTO persistence_outbox (message_id, persistence_id, operation_id, destination, manifest, payload,
          sender_cluster, sender_type, sender_shard)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (message_id) DO NOTHING`,
    ),
    // A held shard's oldest claimable rows (see outbox-claim.ts): deliverable now, or claimed under an older epoch.
    shardClaimCandidates: p(
      `SELECT outbox_offset FROM persistence_outbox
        WHERE sender_type = @type AND sender_shard = @shard AND delivered = 0 AND sender_cluster = @cluster
          AND (lease_until_epoch_ms <= ${SQLITE_NOW_MS} OR (lease_owner IS NOT NULL AND claim_epoch < @epoch))
        ORDER BY outbox_offset LIMIT @limit`,
    ),
    unshardedClaimCandidates: p(
      `SELECT outbox_offset FROM persistence_outbox
        WHERE sender_shard IS NULL AND delivered = 0 AND lease_until_epoch_ms <= ${SQLITE_NOW_MS}
        ORDER BY outbox_offset LIMIT ?`,
    ),
    claimOutboxRow: p(
      `UPDATE persistence_outbox SET lease_owner = @owner, lease_until_epoch_ms = ${SQLITE_NOW_MS} + @leaseMs,
          attempts = attempts + 1, claim_epoch = @epoch
        WHERE outbox_offset = @offset
        RETURNING outbox_offset, message_id, persistence_id, destination, manifest, payload, attempts, sender_cluster,
          sender_type, sender_shard, claim_epoch`,
    ),
    outboxClaimOf: p(
      `SELECT sender_cluster, sender_type, sender_shard, claim_epoch FROM persistence_outbox
        WHERE outbox_offset = ? AND delivered = 0`,
    ),
    leaseAtEpoch: p(
      `SELECT 1 FROM shard_lease WHERE cluster_name = ? AND entity_type = ? AND shard_id = ? AND epoch = ?
        AND lease_until_epoch_ms > ${SQLITE_NOW_MS}`,
    ),
    completeOutbox: p(
      `UPDATE persistence_outbox SET delivered = 1, delivered_at = ${SQLITE_NOW_TEXT}, lease_owner = NULL
        WHERE outbox_offset = ? AND delivered = 0`,
    ),
    failOutbox: p(
      `UPDATE persistence_outbox SET last_error = ?, lease_owner = NULL,
          lease_until_epoch_ms = CASE WHEN ? = 1 THEN ${PARKED_UNTIL_MS} ELSE ${SQLITE_NOW_MS} + ? END
        WHERE outbox_offset = ? AND lease_owner = ? AND delivered = 0`,
    ),
    purgeOutbox: p(
      `DELETE FROM persistence_outbox
        WHERE delivered = 1 AND delivered_at <= strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || (? / 1000.0) || ' seconds')`,
    ),
    outboxCounts: p(
      `SELECT sum(delivered = 0 AND lease_until_epoch_ms <> ${PARKED_UNTIL_MS}) AS pending,
          sum(delivered = 0 AND lease_until_epoch_ms <> ${PARKED_UNTIL_MS} AND lease_owner IS NOT NULL
            AND lease_until_epoch_ms > n.now_ms) AS claimed,
          sum(delivered = 0 AND lease_until_epoch_ms <> ${PARKED_UNTIL_MS} AND attempts > 0
            AND NOT (lease_owner IS NOT NULL AND lease_until_epoch_ms > n.now_ms)) AS retrying,
          sum(delivered = 0 AND lease_until_epoch_ms = ${PARKED_UNTIL_MS}) AS parked,
          sum(delivered = 1) AS delivered,
          CAST((julianday('now') - julianday(min(CASE WHEN delivered = 0 AND lease_until_epoch_ms <> ${PARKED_UNTIL_MS}
            THEN created_at END))) * 86400000 AS INTEGER) AS oldest_pending_age_ms
        FROM persistence_outbox CROSS JOIN (SELECT ${SQLITE_NOW_MS} AS now_ms) n`,
    ),
    retryParkedOutbox: p(
      `UPDATE persistence_outbox SET lease_until_epoch_ms = 0, attempts = 0
        WHERE outbox_offset = ? AND delivered = 0 AND lease_until_epoch_ms = ${PARKED_UNTIL_MS}`,
    ),
    parkedOutbox: p(
      `SELECT outbox_offset, message_id, persistence_id, attempts, last_error FROM persistence_outbox
        WHERE delivered = 0 AND lease_until_epoch_ms = ${PARKED_UNTIL_MS} ORDER BY outbox_offset LIMIT ?`,
    ),
    releaseLease: p(
      `UPDATE shard_lease SET lease_until_epoch_ms = 0, updated_at = CURRENT_TIMESTAMP
        WHERE cluster_name = ? AND entity_type = ? AND shard_id = ? AND owner = ? AND epoch = ?`,
    ),
  };
}

/** Runs the pending migrations; returns the versions re-baselined from an earlier build's checksums. */
function migrate(db: SqliteDatabase): number[] {
  // SQLite serialises writers itself: the immediate transaction around the history read is the schema lock.
  db.exec(`CREATE TABLE IF NOT EXISTS movie_schema_migration (version INTEGER PRIMARY KEY, name TEXT NOT NULL,
    checksum TEXT NOT NULL, applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)`);
  return db
    .transaction((): number[] => {
      const applied = db
        .prepare("SELECT version, name, checksum FROM movie_schema_migration")
        .all() as AppliedMigration[];
      const plan = planMigrations(sqliteMigrations, applied);
      if (plan.rebaseline.length > 0) {
        // Rows of an earlier build (version and name only): the objects its history creates are the evidence that this
        // history ran; then each row gets the statement checksum, once, in this same transaction.
        const objects = db
          .prepare("SELECT type || ':' || lower(name) AS o FROM sqlite_master WHERE type IN ('table', 'index')")
          .all() as { o: string }[];
        checkRebaseline(sqliteMigrations, plan, new Set(objects.map((r) => r.o)));
        const update = db.prepare("UPDATE movie_schema_migration SET checksum = ? WHERE version = ? AND name = ?");
        for (const m of plan.rebaseline) update.run(m.checksum, m.version, m.name);
      }
      for (const migration of plan.pending) {
        for (const sql of migration.statements) db.exec(sql);
        db.prepare("INSERT INTO movie_schema_migration (version, name, checksum) VALUES (?, ?, ?)").run(
          migration.version,
          migration.name,
          migration.checksum,
        );
      }
      return plan.rebaseline.map((m) => m.version);
    })
    .immediate();
}

function storedEvent(persistenceId: string, row: Record<string, unknown>): StoredEvent {
  const sequenceNr = row.sequence_nr;
  if (typeof sequenceNr !== "number" || !Number.isSafeInteger(sequenceNr)) {
    throw new CorruptPersistentRecordError(persistenceId, Number(sequenceNr), "sequence number is not an integer");
  }
  if (typeof row.manifest !== "string" || row.manifest.length === 0) {
    throw new CorruptPersistentRecordError(persistenceId, sequenceNr, "manifest is missing");
  }
  if (typeof row.payload !== "string") {
    throw new CorruptPersistentRecordError(persistenceId, sequenceNr, "payload is not text");
  }
  return { sequenceNr, manifest: row.manifest, payload: row.payload };
}

/** The JSON tag list of a feed row; a malformed one is left for checkFeedRow to refuse. */
function parseTags(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

function leaseToken(key: ShardLeaseKey, row: LeaseRow): ShardLeaseToken {
  return {
    key: { clusterName: key.clusterName, entityType: key.entityType, shardId: key.shardId },
    owner: row.owner,
    epoch: row.epoch,
    leaseUntilEpochMs: row.lease_until_epoch_ms,
  };
}
