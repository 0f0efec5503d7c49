import type { Pool, QueryResult } from "pg";
import { type ReadonlyHistogram, RealScheduler, type Scheduler } from "../../actor/index.ts";
import { describe } from "../../actor/untrusted.ts";
import { loadDriver } from "../driver.ts";
import {
  ConcurrentWriteError,
  CorruptPersistentRecordError,
  OperationConflictError,
  PersistenceConfigurationError,
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
import { GroupCommit, type GroupCommitSettings, type GroupCommitStats, groupCommitSettings } from "../group-commit.ts";
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
  type ParkedOutboxRow,
} from "../outbox-claim.ts";
import { checkOutbox, encodeDestination, type OutboxRecord } from "../outbox-message.ts";
import { defaultResilience, type ResilienceSettings, type ResilienceStats, Resilient } from "../resilience.ts";
import {
  type AppendEventsRequest,
  type CheckedAppend,
  checkAppend,
  checkFence,
  checkPersistenceId,
  checkRecord,
  checkReplyRow,
  checkSequence,
  checkStoredEvent,
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
import {
  FeedListener,
  type FeedListenerSettings,
  type FeedListenerStats,
  feedListenerSettings,
} from "./feed-listener.ts";
import { FEED_CHANNEL, queryEventsSql } from "./feed-schema.ts";
import { ACQUIRE_LEASES_SQL, LEASE_BATCH_MAX_ROWS, RENEW_LEASES_SQL } from "./lease-batch-sql.ts";
import {
  CLAIM_OUTBOX_SQL,
  COMPLETE_OUTBOX_SQL,
  FAIL_OUTBOX_SQL,
  OUTBOX_COUNTS_SQL,
  OUTBOX_NOT_WRITTEN_SQLSTATE,
  PARKED_OUTBOX_SQL,
  PURGE_OUTBOX_SQL,
  RETRY_PARKED_OUTBOX_SQL,
  writeWithOutboxSql,
} from "./outbox-sql.ts";
import {
  APPEND_BATCH_SQL,
  APPEND_ONE_SQL,
  APPEND_OUTBOX_BATCH_SQL,
  leaseHeldBy,
  MIGRATION_LOCK_KEY,
  postgresMigrations,
  REVISION_MISMATCH_SQLSTATE,
  sessionOptions,
} from "./schema.ts";
import { decodeStateOutcome, type PendingState, revisionMoved, saveStates, WRITE_STATE_SQL } from "./state-batch.ts";

/** Options of {@link PostgresStore.connect}. */
/** `pg`, an optional peer dependency: importing this backend without it fails with one MissingDriverError. */
const { Client: PgClient, Pool: PgPool } = (await loadDriver("pg", "movie/persistence/postgres", () => import("pg")))
  .default;

export interface PostgresStoreOptions {
  /** `postgres://` or `postgresql://` URL (required). */
  connectionUri: string;
  /** Schema for every table (created if missing; set as search_path); default the server's default (public). */
  schema?: string;
  /** Connections in the pool; default 4. */
  poolSize?: number;
  /** Timeout, retry and circuit-breaker settings; defaults from docs/protocol.md §13.1. */
  resilience?: Partial<ResilienceSettings>;
  /** Timers for backoff and timeouts; default the real clock. */
  scheduler?: Scheduler;
  /** `application_name` of every connection (visible in pg_stat_activity); default "movie". */
  applicationName?: string;
  /** Called with pool-level errors of idle connections (a terminated backend); default ignore. */
  onPoolError?: (error: Error) => void;
  /**
   * Group commit of one-event appends: bounds of the batches, or false to send each append on its own.
   * Default { maxBatchSize: 64, maxConcurrentBatches: 1, maxWaiting: 10_000 }; past maxWaiting an append rejects
   * PersistenceOverloadedError at once.
   */
  groupCommit?: Partial<GroupCommitSettings> | false;
  /**
   * Timing of the feed's LISTEN connection (connect timeout, heartbeat, reconnect backoff); defaults in
   * defaultFeedListenerSettings.
   */
  feedListener?: Partial<FeedListenerSettings>;
}

/** A one-event append on its way to the group commit: the parameters of APPEND_ONE_SQL, in its order. */
interface PendingAppend {
  readonly persistenceId: string;
  readonly values: readonly unknown[];
  /** Its outbox messages (empty for most appends): they go in with its row, in the same statement, or not at all. */
  readonly outbox: readonly OutboxRecord[];
}

const UNIQUE_VIOLATION = "23505";

const schemaPattern = /^[a-z_][a-z0-9_]{0,62}$/;

const connectionErrorCodes = new Set(["57P01", "57P02", "57P03", "ECONNRESET", "ECONNREFUSED", "EPIPE", "ETIMEDOUT"]);

/** The tag columns of a tagged append: each tag and the 1-based position of its event. */
function tagColumns(a: CheckedAppend): [number[], string[]] {
  const tagIndex: number[] = [];
  const tags: string[] = [];
  a.events.forEach((event, i) => {
    for (const tag of checkTags("event.tags", event.tags)) {
      tagIndex.push(i + 1);
      tags.push(tag);
    }
  });
  return [tagIndex, tags];
}

/** True for errors that mean the connection (not the request) failed: the outcome of a write is unknown. */
export function isPostgresConnectionError(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: string }).code;
  if (code !== undefined && (connectionErrorCodes.has(code) || code.startsWith("08"))) return true;
  return /Connection terminated|connection ended|Client has encountered a connection error|not queryable/i.test(
    error.message,
  );
}

/**
 * Validates a PostgreSQL URL.
 * @throws PersistenceConfigurationError for a missing or malformed URL
 */
export function validatePostgresUri(uri: unknown): string {
  if (typeof uri !== "string" || uri.length === 0) {
    throw new PersistenceConfigurationError(
      "connectionUri",
      "the postgres backend needs a connection URI such as postgres://user@127.0.0.1:5432/db",
    );
  }
  let parsed: URL;
  try {
    parsed = new URL(uri);
  } catch {
    throw new PersistenceConfigurationError("connectionUri", `"${uri}" is not a URL; use postgres://user@host:port/db`);
  }
  if (parsed.protocol !== "postgres:" && parsed.protocol !== "postgresql:") {
    throw new PersistenceConfigurationError(
      "connectionUri",
      `"${parsed.protocol}" is not a PostgreSQL URL; it must start with postgres:// or postgresql://`,
    );
  }
  if (parsed.hostname.length === 0) {
    throw new PersistenceConfigurationError("connectionUri", "the URL names no host");
  }
  return uri;
}

interface StatusRow {
  status: number;
  revision: string;
}

type Queryable = Pick<Pool, "query">;

/**
 * The PostgreSQL backend (`pg` Pool). Each write is one round trip: a call of a migration-installed PL/pgSQL function
 * that checks the fence, detects duplicates and writes, in one implicit transaction. One-event appends, the hot path,
 * are plain statements instead, and those that arrive while one is in flight share the next one (group commit, see
 * GroupCommit and APPEND_BATCH_SQL). Leases are single statements on
 * the database clock (`clock_timestamp()`). Lost connections are retried with backoff (writes are idempotent by
 * OperationId), each attempt has a timeout, and a circuit breaker stops a dead database from piling up work. Every
 * connection starts with the startup options of sessionOptions (generic plans, and the schema as search_path), so a
 * connection pooler in front of the server must pass the `options` startup parameter through.
 */
export class PostgresStore implements PersistenceStore {
  readonly backendName = "postgres" as const;
  private closed = false;
  private readonly resilient: Resilient;
  private readonly appends: GroupCommit<PendingAppend, boolean>;
  /** Durable-state saves and deletes, group-committed like appends (state-batch.ts); each answers its outcome code. */
  private readonly states: GroupCommit<PendingState, number>;
  /**
   * @internal For benchmarks: false sends every lease call of a batch, and every durable-state write, on its own
   * (the behaviour before issue 23), so that before and after can alternate in one run.
   */
  batching = true;
  /**
   * @internal For benchmarks: false sends a one-event append that carries outbox messages alone, outside the group
   * commit (the behaviour before messages joined the batch), so that before and after can alternate in one run.
   */
  batchOutboxAppends = true;
  private readonly scheduler: Scheduler;
  private readonly feedListeners = new Set<() => void>();
  /** The LISTEN connection while anyone subscribes to feed commits (reconnected when lost; see feed-listener.ts). */
  private readonly listener: FeedListener;

  private constructor(
    /** @internal The pool, for tests and benchmarks that need raw SQL in the same schema. */
    readonly pool: Pool,
    /** The schema the tables live in. */
    readonly schema: string | null,
    resilience: ResilienceSettings,
    scheduler: Scheduler,
    groupCommit: GroupCommitSettings,
    listenerSettings: FeedListenerSettings,
    /**
     * Versions whose checksum this connect rewrote from an earlier build's version-and-name checksum to the statement
     * checksum (once per database; empty afterwards).
     */
    readonly rebaselinedMigrations: readonly number[],
  ) {
    this.resilient = new Resilient(resilience, scheduler, isPostgresConnectionError);
    this.scheduler = scheduler;
    this.appends = new GroupCommit(
      groupCommit,
      (a) => a.persistenceId,
      (batch) => this.insertAppends(batch),
    );
    this.states = new GroupCommit(
      groupCommit,
      (w) => w.persistenceId,
      (batch) => this.saveStates(batch),
    );
    this.listener = new FeedListener(
      () =>
        new PgClient({
          connectionString: pool.options.connectionString,
          application_name: "movie-feed-listener",
          options: sessionOptions(schema),
          keepAlive: true,
        }),
      FEED_CHANNEL,
      schema ?? "public",
      scheduler,
      listenerSettings,
      () => this.wakeFeedListeners(),
    );
  }

  /**
   * Connects, creates the schema if asked, and runs pending migrations under the advisory lock.
   * @throws PersistenceConfigurationError, UnsupportedSchemaVersionError, MigrationChecksumMismatchError,
   *   InvalidMigrationHistoryError, or the driver's connection error
   */
  static async connect(options: PostgresStoreOptions): Promise<PostgresStore> {
    const uri = validatePostgresUri(options.connectionUri);
    const schema = options.schema ?? null;
    if (schema !== null && !schemaPattern.test(schema)) {
      throw new PersistenceConfigurationError("schema", `"${schema}"; use lower-case letters, digits and _`);
    }
    const poolSize = options.poolSize ?? 4;
    if (!Number.isSafeInteger(poolSize) || poolSize < 1 || poolSize > 1000) {
      throw new PersistenceConfigurationError("poolSize", `${describe(poolSize)}; expected a whole number 1..1000`);
    }
    const resilience = { ...defaultResilience, ...options.resilience };
    // Disabled: every append leaves at once, alone (as many in flight as callers).
    const groupCommit =
      options.groupCommit === false
        ? groupCommitSettings({ maxBatchSize: 1, maxConcurrentBatches: 10_000 })
        : groupCommitSettings(options.groupCommit);
    const listenerSettings = feedListenerSettings(options.feedListener);
    const pool = new PgPool({
      connectionString: uri,
      max: poolSize,
      application_name: options.applicationName ?? "movie",
      options: sessionOptions(schema),
    });
    const onPoolError = options.onPoolError ?? (() => {});
    // An idle connection killed by the server surfaces here; without a listener it would crash the process.
    pool.on("error", onPoolError);
    // And a checked-out one: pg-pool takes its idle listener off a client while it is lent out, and an 'error' that
    // reaches it then with no query running (the server's FATAL for pg_terminate_backend, or the socket's reset after
    // it) had no listener and ended the process (the CI soak lost a node so, at its pg-terminate fault). Every client
    // keeps a listener of its own for its whole life. It only has to exist: a query running gets the error itself, an
    // idle client is reported by the pool's listener above, and the next query on a broken client fails and releases
    // it as broken.
    pool.on("connect", (client) => {
      client.on("error", ignoreReportedElsewhere);
    });
    let rebaselined: number[];
    try {
      rebaselined = await migrate(pool, schema);
    } catch (error) {
      await pool.end();
      throw error;
    }
    return new PostgresStore(
      pool,
      schema,
      resilience,
      options.scheduler ?? new RealScheduler(),
      groupCommit,
      listenerSettings,
      rebaselined,
    );
  }

  /** Retry, timeout and breaker counters. */
  get resilienceStats(): Readonly<ResilienceStats> {
    return this.resilient.stats;
  }

  /** Statements and batches of the group commit of one-event appends, and how many appends wait for a statement. */
  get groupCommitStats(): Readonly<GroupCommitStats & { waiting: number }> {
    return { ...this.appends.stats, waiting: this.appends.waiting };
  }

  /** Appends per statement of the group commit of one-event appends. */
  get groupCommitBatchSize(): ReadonlyHistogram {
    return this.appends.batchSize;
  }

  /** Saves and deletes per statement of the durable-state group commit. */
  get stateGroupCommitBatchSize(): ReadonlyHistogram {
    return this.states.batchSize;
  }

  /** The same for durable-state saves and deletes. */
  get stateGroupCommitStats(): Readonly<GroupCommitStats & { waiting: number }> {
    return { ...this.states.stats, waiting: this.states.waiting };
  }

  /** The circuit breaker's mode. */
  get circuitMode(): "closed" | "open" | "half-open" {
    return this.resilient.circuitMode;
  }

  async appendEvents(request: AppendEventsRequest): Promise<WriteResult> {
    const result = await this.appendUnwoken(request);
    // This process's own commits wake its readers without the round trip through NOTIFY (a spurious wake-up after a
    // duplicate or a refused append only costs a query).
    if (this.feedListeners.size > 0) this.wakeFeedListeners();
    return result;
  }

  private appendUnwoken(request: AppendEventsRequest): Promise<WriteResult> {
    this.open();
    const a = checkAppend(request);
    const fingerprint = eventsFingerprint(a.events);
    if (a.reply !== null) return this.appendReplied(a, a.reply, fingerprint);
    if (a.tagged) return this.appendTagged(a, fingerprint);
    // A one-event append joins the group commit, with its outbox messages if it has any (APPEND_OUTBOX_BATCH_SQL).
    if (a.events.length === 1 && (a.outbox.length === 0 || this.batchOutboxAppends)) {
      return this.appendOne(a, fingerprint);
    }
    return this.appendUnbatched(a, fingerprint);
  }

  /** An append as one movie_append_events statement of its own (with its outbox messages, if any). */
  private appendUnbatched(a: CheckedAppend, fingerprint: string): Promise<WriteResult> {
    return this.appendEventsCall(
      a,
      fingerprint,
      "movie_append",
      "SELECT movie_append_events($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) AS outcome",
      [],
    );
  }

  /**
   * An append whose events carry tags: movie_append_tagged (movie_append_events, then the tag rows, one statement),
   * outside the group commit.
   */
  private appendTagged(a: CheckedAppend, fingerprint: string): Promise<WriteResult> {
    const [tagIndex, tags] = tagColumns(a);
    return this.appendEventsCall(
      a,
      fingerprint,
      "movie_append_tagged",
      "SELECT movie_append_tagged($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) AS outcome",
      [tagIndex, tags],
    );
  }

  /**
   * An append that records a reply (migration 11): movie_append_replied writes the events, their tags and the reply in
   * one statement, outside the group commit. A duplicate gets the reply its first append recorded.
   */
  private async appendReplied(a: CheckedAppend, reply: ReplyRecord, fingerprint: string): Promise<WriteResult> {
    const [tagIndex, tags] = tagColumns(a);
    const result = await this.appendEventsCall(
      a,
      fingerprint,
      "movie_append_replied",
      "SELECT movie_append_replied($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17) AS outcome",
      [tagIndex, tags, reply.manifest, reply.payload],
    );
    if (!result.duplicate) return result;
    const stored = await this.query(
      "appendEvents",
      "movie_load_reply",
      "SELECT manifest, payload FROM operation_reply WHERE persistence_id = $1 AND operation_id = $2",
      [a.persistenceId, a.operationId],
    );
    const row = stored.rows[0] as Record<string, unknown> | undefined;
    return row === undefined ? result : { ...result, reply: checkReplyRow(a.persistenceId, result.revision, row) };
  }

  /**
   * One unbatched append statement (`movie_append_events` or its tagged form): the events, then `extra` parameters,
   * then the fence. A unique violation means a concurrent write of the same operation: the outcome is resolved.
   */
  private async appendEventsCall(
    a: CheckedAppend,
    fingerprint: string,
    statement: string,
    sql: string,
    extra: readonly unknown[],
  ): Promise<WriteResult> {
    // The first event goes as plain text parameters and only further ones as arrays: array literals cost
    // escaping on both sides, and most appends carry one event.
    const first = a.events[0];
    const more = a.events.length > 1 ? a.events.slice(1) : null;
    const write =
      a.outbox.length === 0 ? this.writeCall.bind(this) : this.writeWithOutbox.bind(this, a.outbox, a.fence);
    const row = await write(
      "appendEvents",
      statement,
      sql,
      [
        a.persistenceId,
        a.expectedRevision,
        a.operationId,
        fingerprint,
        first?.manifest ?? null,
        first?.payload ?? null,
        more?.map((e) => e.manifest) ?? null,
        more?.map((e) => e.payload) ?? null,
        ...extra,
        ...fenceArgs(a.fence),
      ],
      a.persistenceId,
      a.expectedRevision,
    ).catch((error: unknown) => {
      if ((error as { code?: string }).code !== UNIQUE_VIOLATION) throw error;
      return this.resolveAppend(a.persistenceId, a.operationId, fingerprint, a.expectedRevision, a.fence);
    });
    return this.writeOutcome(row, a.persistenceId, a.operationId, a.fence);
  }

  private async appendOne(a: CheckedAppend, fingerprint: string): Promise<WriteResult> {
    const event = a.events[0]!;
    // The settle call below takes the same values (in another parameter order), so one array serves both.
    const values = [
      a.persistenceId,
      a.expectedRevision,
      event.manifest,
      event.payload,
      a.operationId,
      fingerprint,
      ...fenceArgs(a.fence),
    ];
    const pending: PendingAppend = { persistenceId: a.persistenceId, values, outbox: a.outbox };
    // A settle answer of -1 means a concurrent write committed between the two statements: try again, a bounded
    // number of times (each retry sees a newer committed state).
    for (let attempt = 0; ; attempt++) {
      // Each append keeps its own timeout, retries and breaker admission: only the statement is shared.
      const inserted = await this.resilient.run("appendEvents", () =>
        this.closed ? Promise.reject(new StoreClosedError("postgres")) : this.appends.submit(pending),
      );
      if (inserted) return { revision: a.expectedRevision + 1, duplicate: false };
      // Not written, and it carries messages: the settle function below could write the event (after retention) but
      // not its messages, so the append goes alone on the unbatched path, which answers it and, if it writes, writes
      // the messages in the same statement.
      if (a.outbox.length > 0) return this.appendUnbatched(a, fingerprint);
      // Not written (a stale fence, a known operation id, a moved revision, a gap, or retention removed row
      // `expected`): the single-append settle function gives exactly the answer an append sent alone gets, the
      // fence checked first.
      const row = await this.writeCall(
        "appendEvents",
        "movie_append_one_settle",
        "SELECT movie_append_one_settle($1, $2, $5, $6, $3, $4, $7, $8, $9, $10, $11) AS outcome",
        values,
        a.persistenceId,
        a.expectedRevision,
      );
      if (row.status >= 0 || attempt >= 3) {
        if (row.status < 0) throw new ConcurrentWriteError(a.persistenceId, a.expectedRevision, a.expectedRevision);
        return this.writeOutcome(row, a.persistenceId, a.operationId, a.fence);
      }
    }
  }

  /**
   * One statement for a group of one-event appends (at most one per persistence id); answers, per append, whether
   * its row went in. One append goes as APPEND_ONE_SQL (a plain INSERT, the cheapest); several as APPEND_BATCH_SQL,
   * in persistence-id order so that two batches that share ids lock their index entries in the same order.
   */
  private async insertAppends(batch: readonly PendingAppend[]): Promise<PromiseSettledResult<boolean>[]> {
    if (this.closed) throw new StoreClosedError("postgres");
    if (batch.length === 1) return Promise.allSettled([this.insertAppend(batch[0]!)]);
    let written: Set<string>;
    try {
      written = await this.insertBatch(batch);
    } catch (error) {
      // A lost connection fails every append of the batch (each caller retries its own). Anything else the server
      // raised for the statement as a whole (a deadlock with another batch, a trigger) must not decide a batch-mate's
      // fate: each append then goes alone and gets its own answer.
      if (isPostgresConnectionError(error) || this.closed) throw error;
      return Promise.allSettled(batch.map((p) => this.insertAppend(p)));
    }
    return batch.map((p) => ({ status: "fulfilled", value: written.has(p.persistenceId) }));
  }

  /**
   * One statement for a group of durable-state writes (at most one per persistence id). A lone write calls
   * movie_write_state, as before; several go as SAVE_STATES_SQL, and each it did not write asks movie_write_state
   * alone for its answer (a stale fence, a retry, a conflict or a moved revision, each as a lone write would get it).
   */
  private async saveStates(batch: readonly PendingState[]): Promise<PromiseSettledResult<number>[]> {
    if (this.closed) throw new StoreClosedError("postgres");
    if (batch.length === 1) return Promise.allSettled([this.saveStateAlone(batch[0]!)]);
    let written: Set<string>;
    try {
      written = await saveStates(this.pool, batch);
    } catch (error) {
      // As for appends: a lost connection fails every write of the batch (each caller retries its own); anything
      // else the server raised for the statement as a whole must not decide a batch-mate's fate.
      if (isPostgresConnectionError(error) || this.closed) throw error;
      return Promise.allSettled(batch.map((p) => this.saveStateAlone(p)));
    }
    return Promise.allSettled(
      batch.map((p) =>
        written.has(p.persistenceId) ? Promise.resolve((p.expectedRevision + 1) * 4) : this.saveStateAlone(p),
      ),
    );
  }

  /** movie_write_state for one write; a moved revision (MV001) answers revisionMoved(actual). */
  private saveStateAlone(p: PendingState): Promise<number> {
    return this.pool.query({ name: "movie_write_state", text: WRITE_STATE_SQL, values: p.values as unknown[] }).then(
      (result) => Number(result.rows[0].outcome),
      (error: unknown) => {
        if ((error as { code?: string }).code === REVISION_MISMATCH_SQLSTATE) {
          return revisionMoved(Number((error as Error).message));
        }
        throw error;
      },
    );
  }

  /**
   * APPEND_BATCH_SQL for `batch`, or APPEND_OUTBOX_BATCH_SQL when any of its appends carries messages; the persistence
   * ids whose rows went in.
   */
  private async insertBatch(batch: readonly PendingAppend[]): Promise<Set<string>> {
    const sorted = [...batch].sort((x, y) => (x.persistenceId < y.persistenceId ? -1 : 1));
    // APPEND_BATCH_SQL takes one array per parameter of APPEND_ONE_SQL, so the row width is that statement's.
    const width = sorted[0]!.values.length;
    const columns: unknown[][] = Array.from({ length: width }, () => new Array<unknown>(sorted.length));
    sorted.forEach((p, row) => {
      for (let c = 0; c < width; c++) columns[c]![row] = p.values[c];
    });
    const withOutbox = sorted.some((p) => p.outbox.length > 0);
    if (withOutbox) {
      const messages: unknown[][] = [[], [], [], [], [], [], [], []];
      for (const p of sorted) {
        // The append's fence columns (APPEND_ONE_SQL's $7..$9): the shard each message is claimed under.
        const [cluster, type, shard] = [p.values[6], p.values[7], p.values[8]];
        for (const m of p.outbox) {
          messages[0]!.push(p.persistenceId);
          messages[1]!.push(m.messageId);
          messages[2]!.push(encodeDestination(m.destination));
          messages[3]!.push(m.manifest);
          messages[4]!.push(m.payload);
          messages[5]!.push(cluster);
          messages[6]!.push(type);
          messages[7]!.push(shard);
        }
      }
      columns.push(...messages);
    }
    const result = await this.pool.query(
      withOutbox
        ? { name: "movie_append_outbox_batch", text: APPEND_OUTBOX_BATCH_SQL, values: columns }
        : { name: "movie_append_batch", text: APPEND_BATCH_SQL, values: columns },
    );
    return new Set(result.rows.map((r: { persistence_id: string }) => r.persistence_id));
  }

  private insertAppend(p: PendingAppend): Promise<boolean> {
    // A lone append with messages is a batch of one (APPEND_ONE_SQL has no place for them).
    if (p.outbox.length > 0) return this.insertBatch([p]).then((written) => written.has(p.persistenceId));
    return this.pool.query({ name: "movie_append_one", text: APPEND_ONE_SQL, values: p.values as unknown[] }).then(
      (result) => result.rowCount === 1,
      (error: unknown) => {
        if ((error as { code?: string }).code === UNIQUE_VIOLATION) return false;
        throw error;
      },
    );
  }

  /** The append wrote nothing: ask the database whether it was a retry or a concurrent write. */
  /**
   * After a several-event append's unique violation: a stale fence (checked first, in the same statement, so a
   * stale owner never learns of a duplicate), else a duplicate or conflicting operation id, else a moved revision.
   */
  private resolveAppend(
    pid: string,
    op: string,
    fingerprint: string,
    expected: number,
    fence: ShardLeaseToken | null,
  ): Promise<StatusRow> {
    if (fence === null) {
      return this.writeCall(
        "appendEvents",
        "movie_append_resolve",
        "SELECT movie_append_resolve($1, $2, $3) AS outcome",
        [pid, op, fingerprint],
        pid,
        expected,
      );
    }
    // CASE evaluates the resolve (which may raise MV001) only when the lease is still this owner's.
    return this.writeCall(
      "appendEvents",
      "movie_append_resolve_fenced",
      `SELECT CASE WHEN EXISTS (SELECT 1 FROM shard_lease WHERE ${leaseHeldBy("$4", "$5", "$6", "$7", "$8")})
        THEN movie_append_resolve($1, $2, $3) ELSE movie_outcome(3, 0) END AS outcome`,
      [pid, op, fingerprint, ...fenceArgs(fence)],
      pid,
      expected,
    );
  }

  async loadEvents(persistenceId: string, afterSeq = 0): Promise<StoredEvent[]> {
    this.open();
    checkPersistenceId(persistenceId);
    checkSequence("afterSeq", afterSeq);
    const result = await this.query(
      "loadEvents",
      "movie_load_events",
      "SELECT sequence_nr, manifest, payload FROM event_journal WHERE persistence_id = $1 AND sequence_nr > $2 ORDER BY sequence_nr",
      [persistenceId, afterSeq],
    );
    return result.rows.map((row: Record<string, unknown>) =>
      checkStoredEvent(persistenceId, Number(row.sequence_nr), row.manifest, row.payload),
    );
  }

  async loadRevision(persistenceId: string): Promise<number> {
    this.open();
    checkPersistenceId(persistenceId);
    const result = await this.query(
      "loadRevision",
      "movie_load_revision",
      "SELECT movie_stream_revision($1) AS revision",
      [persistenceId],
    );
    return Number(result.rows[0].revision);
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
    const row = await this.fencedCall(
      "saveSnapshot",
      "movie_save_snapshot",
      "SELECT status, revision FROM movie_save_snapshot($1, $2, $3, $4, $5, $6, $7, $8, $9)",
      [persistenceId, snapshot.sequenceNr, snapshot.manifest, snapshot.payload, ...fenceArgs(f)],
      f,
    );
    return row.revision === "1";
  }

  async loadSnapshot(persistenceId: string): Promise<SnapshotRecord | null> {
    this.open();
    checkPersistenceId(persistenceId);
    const result = await this.query(
      "loadSnapshot",
      "movie_load_snapshot",
      "SELECT sequence_nr, manifest, payload FROM snapshot_store WHERE persistence_id = $1",
      [persistenceId],
    );
    if (result.rows.length === 0) return null;
    const row = result.rows[0] as Record<string, unknown>;
    const e = checkStoredEvent(persistenceId, Number(row.sequence_nr), row.manifest, row.payload);
    return { sequenceNr: e.sequenceNr, manifest: e.manifest, payload: e.payload };
  }

  async deleteSnapshot(persistenceId: string, fence?: ShardLeaseToken | null): Promise<boolean> {
    this.open();
    checkPersistenceId(persistenceId);
    const f = checkFence(fence);
    const row = await this.fencedCall(
      "deleteSnapshot",
      "movie_delete_snapshot",
      "SELECT status, revision FROM movie_delete_snapshot($1, $2, $3, $4, $5, $6)",
      [persistenceId, ...fenceArgs(f)],
      f,
    );
    return row.revision === "1";
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
    const row = await this.fencedCall(
      "deleteEventsTo",
      "movie_delete_events_to",
      "SELECT status, revision FROM movie_delete_events_to($1, $2, $3, $4, $5, $6, $7)",
      [persistenceId, toSequenceNr, ...fenceArgs(f)],
      f,
    );
    if (row.status === 4) {
      const snapshot = Number(row.revision);
      throw new UnsafeRetentionError(persistenceId, toSequenceNr, snapshot < 0 ? null : snapshot);
    }
    if (row.status === 5) {
      const checkpoint = Number(row.revision);
      const named = await this.query(
        "deleteEventsTo",
        "movie_lagging_projection",
        "SELECT projection_name FROM projection_checkpoint WHERE event_offset = $1 ORDER BY projection_name LIMIT 1",
        [checkpoint],
      );
      const name = named.rows[0]?.projection_name;
      throw new ProjectionBehindRetentionError(
        persistenceId,
        toSequenceNr,
        typeof name === "string" ? name : "(unknown)",
        checkpoint,
      );
    }
    return { deletedEvents: Number(row.revision), throughSeq: toSequenceNr };
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
    const result = await this.query(
      "loadState",
      "movie_load_state",
      "SELECT revision, manifest, payload, deleted FROM durable_state WHERE persistence_id = $1",
      [persistenceId],
    );
    if (result.rows.length === 0) return null;
    const row = result.rows[0] as Record<string, unknown>;
    const revision = Number(row.revision);
    if (!Number.isSafeInteger(revision) || typeof row.manifest !== "string" || row.manifest.length === 0) {
      throw new CorruptPersistentRecordError(
        persistenceId,
        revision,
        "durable state row has an invalid revision or manifest",
      );
    }
    return {
      revision,
      manifest: row.manifest,
      payload: row.payload === null ? null : String(row.payload),
      deleted: Number(row.deleted) === 1,
    };
  }

  async acquireShardLease(key: ShardLeaseKey, owner: string, durationMs: number): Promise<ShardLeaseToken | null> {
    this.open();
    validateLeaseKey(key);
    validateLeaseRequest(owner, durationMs);
    // docs/protocol.md §13.3 as one statement. The row is first locked FOR UPDATE, the one row lock that waits for
    // every fenced write in flight: entity writes hold it FOR SHARE, projection batches FOR KEY SHARE (§13.4; a plain
    // non-key UPDATE, as the DO UPDATE branch alone is, would not wait for those). The insert's row source counts the
    // locked rows, so it runs after that wait, and its movie_now_ms() is read then: a transfer sees the committed write.
    const result = await this.query(
      "acquireShardLease",
      "movie_acquire_lease_after_writes",
      `WITH waited AS MATERIALIZED (
          SELECT 1 FROM shard_lease WHERE cluster_name = $1::text AND entity_type = $2::text AND shard_id = $3::bigint
            FOR UPDATE)
        INSERT INTO shard_lease AS l (cluster_name, entity_type, shard_id, owner, epoch, lease_until_epoch_ms)
        SELECT $1::text, $2::text, $3::bigint, $4::text, 1, movie_now_ms() + $5::bigint FROM (SELECT count(*) FROM waited) w
        ON CONFLICT (cluster_name, entity_type, shard_id) DO UPDATE SET
          epoch = CASE WHEN l.owner = EXCLUDED.owner AND l.lease_until_epoch_ms > movie_now_ms()
            THEN l.epoch ELSE l.epoch + 1 END,
          owner = EXCLUDED.owner, lease_until_epoch_ms = movie_now_ms() + $5, updated_at = now()
        WHERE l.lease_until_epoch_ms <= movie_now_ms() OR l.owner = EXCLUDED.owner
        RETURNING owner, epoch, lease_until_epoch_ms`,
      [key.clusterName, key.entityType, key.shardId, owner, durationMs],
    );
    return result.rows.length === 0 ? null : leaseToken(key, result.rows[0]);
  }

  async renewShardLease(token: ShardLeaseToken, durationMs: number): Promise<ShardLeaseToken | null> {
    this.open();
    validateLeaseToken(token);
    validateLeaseRequest(token.owner, durationMs);
    const k = token.key;
    const result = await this.query(
      "renewShardLease",
      "movie_renew_lease",
      `UPDATE shard_lease SET lease_until_epoch_ms = movie_now_ms() + $6, updated_at = now()
        WHERE cluster_name = $1 AND entity_type = $2 AND shard_id = $3 AND owner = $4 AND epoch = $5
          AND lease_until_epoch_ms > movie_now_ms()
        RETURNING owner, epoch, lease_until_epoch_ms`,
      [k.clusterName, k.entityType, k.shardId, token.owner, token.epoch, durationMs],
    );
    return result.rows.length === 0 ? null : leaseToken(k, result.rows[0]);
  }

  async acquireShardLeases(
    keys: readonly ShardLeaseKey[],
    owner: string,
    durationMs: number,
  ): Promise<(ShardLeaseToken | null)[]> {
    this.open();
    for (const key of keys) validateLeaseKey(key);
    validateLeaseRequest(owner, durationMs);
    if (keys.length <= 1 || !this.batching) {
      return Promise.all(keys.map((key) => this.acquireShardLease(key, owner, durationMs)));
    }
    return this.leaseBatch(
      keys,
      (chunk) =>
        this.query("acquireShardLeases", "movie_acquire_leases", ACQUIRE_LEASES_SQL, [
          chunk.map((k) => k.clusterName),
          chunk.map((k) => k.entityType),
          chunk.map((k) => k.shardId),
          owner,
          durationMs,
        ]),
      (key) => key,
      (key) => this.acquireShardLease(key, owner, durationMs),
      () => true,
    );
  }

  async renewShardLeases(tokens: readonly ShardLeaseToken[], durationMs: number): Promise<(ShardLeaseToken | null)[]> {
    this.open();
    for (const t of tokens) {
      validateLeaseToken(t);
      validateLeaseRequest(t.owner, durationMs);
    }
    if (tokens.length <= 1 || !this.batching) {
      return Promise.all(tokens.map((t) => this.renewShardLease(t, durationMs)));
    }
    return this.leaseBatch(
      tokens,
      (chunk) =>
        this.query("renewShardLeases", "movie_renew_leases", RENEW_LEASES_SQL, [
          chunk.map((t) => t.key.clusterName),
          chunk.map((t) => t.key.entityType),
          chunk.map((t) => t.key.shardId),
          chunk.map((t) => t.owner),
          chunk.map((t) => t.epoch),
          durationMs,
        ]),
      (t) => t.key,
      (t) => this.renewShardLease(t, durationMs),
      // The same key twice (two tokens of one shard) shares one returned row: it answers only its own token.
      (t, row) => String(row.owner) === t.owner && Number(row.epoch) === t.epoch,
    );
  }

  /**
   * Sends `items` in statements of at most LEASE_BATCH_MAX_ROWS rows; every item its statement did not answer (its
   * row locked by a write in flight, or not this owner's to take or renew) is then asked on its own, with the single
   * statement, whose answer it gets (see lease-batch-sql.ts).
   */
  private async leaseBatch<T>(
    items: readonly T[],
    send: (chunk: readonly T[]) => Promise<QueryResult>,
    keyOf: (item: T) => ShardLeaseKey,
    alone: (item: T) => Promise<ShardLeaseToken | null>,
    answers: (item: T, row: Record<string, unknown>) => boolean,
  ): Promise<(ShardLeaseToken | null)[]> {
    const tokens = new Array<ShardLeaseToken | null>(items.length).fill(null);
    const unanswered: number[] = [];
    const chunks: number[] = [];
    for (let from = 0; from < items.length; from += LEASE_BATCH_MAX_ROWS) chunks.push(from);
    // The statements of one call run side by side on the pool (their rows are disjoint, and none waits for a lock).
    await Promise.all(
      chunks.map(async (from) => {
        const chunk = items.slice(from, from + LEASE_BATCH_MAX_ROWS);
        const result = await send(chunk);
        const rows = new Map<string, Record<string, unknown>>();
        for (const row of result.rows as Record<string, unknown>[]) {
          rows.set(leaseRowKey(String(row.cluster_name), String(row.entity_type), String(row.shard_id)), row);
        }
        chunk.forEach((item, i) => {
          const key = keyOf(item);
          const row = rows.get(leaseRowKey(key.clusterName, key.entityType, String(key.shardId)));
          if (row === undefined || !answers(item, row)) unanswered.push(from + i);
          else tokens[from + i] = leaseToken(key, row);
        });
      }),
    );
    await Promise.all(
      unanswered.map(async (i) => {
        tokens[i] = await alone(items[i]!);
      }),
    );
    return tokens;
  }

  async releaseShardLease(token: ShardLeaseToken): Promise<boolean> {
    this.open();
    validateLeaseToken(token);
    const k = token.key;
    const result = await this.query(
      "releaseShardLease",
      "movie_release_lease",
      `UPDATE shard_lease SET lease_until_epoch_ms = 0, updated_at = now()
        WHERE cluster_name = $1 AND entity_type = $2 AND shard_id = $3 AND owner = $4 AND epoch = $5`,
      [k.clusterName, k.entityType, k.shardId, token.owner, token.epoch],
    );
    return result.rowCount === 1;
  }

  async queryEvents(query?: EventQuery): Promise<EventPage> {
    this.open();
    const q = checkEventQuery(query);
    const values: unknown[] = [q.afterOffset, q.limit];
    if (q.entityTypes !== null) values.push(q.entityTypes);
    if (q.persistenceId !== null) values.push(q.persistenceId);
    if (q.tag !== null) values.push(q.tag);
    const types = q.entityTypes !== null;
    const pid = q.persistenceId !== null;
    const tag = q.tag !== null;
    const result = await this.query(
      "queryEvents",
      `movie_query_events_${Number(types)}${Number(pid)}${Number(tag)}`,
      queryEventsSql(types, pid, tag),
      values,
    );
    return feedPage(
      q,
      result.rows.map((r: Record<string, unknown>) =>
        checkFeedRow(r.event_offset, r.persistence_id, r.entity_type, r.sequence_nr, r.manifest, r.payload, r.tags),
      ),
    );
  }

  async latestOffset(): Promise<number> {
    this.open();
    const result = await this.query(
      "latestOffset",
      "movie_latest_offset",
      "SELECT coalesce(max(event_offset), 0) AS o FROM event_journal",
      [],
    );
    return Number(result.rows[0].o);
  }

  onEventsCommitted(listener: () => void): () => void {
    this.feedListeners.add(listener);
    if (!this.closed) this.listener.want();
    return () => {
      this.feedListeners.delete(listener);
      if (this.feedListeners.size === 0) this.listener.unwant();
    };
  }

  /** The LISTEN connection's phase and counters (see feed-listener.ts). */
  get feedListenerStats(): FeedListenerStats & { phase: string } {
    return { ...this.listener.stats, phase: this.listener.phase };
  }

  private wakeFeedListeners(): void {
    for (const listener of this.feedListeners) {
      try {
        listener();
      } catch {
        // A wake-up hint: a listener's failure is its own.
      }
    }
  }

  async loadProjectionOffset(name: string): Promise<number | null> {
    this.open();
    const result = await this.query(
      "loadProjectionOffset",
      "movie_load_checkpoint",
      "SELECT event_offset FROM projection_checkpoint WHERE projection_name = $1",
      [checkProjectionName(name)],
    );
    return result.rows.length === 0 ? null : Number(result.rows[0].event_offset);
  }

  async saveProjectionOffset(name: string, offset: number, fence?: ShardLeaseToken | null): Promise<void> {
    this.open();
    checkProjectionName(name);
    checkOffset("offset", offset);
    const f = checkFence(fence);
    // The fence check as in APPEND_ONE_SQL: no row written (and none returned) when the lease is not current.
    const result = await this.query(
      "saveProjectionOffset",
      "movie_save_checkpoint",
      `INSERT INTO projection_checkpoint AS c (projection_name, event_offset)
        SELECT $1, $2 WHERE ($3::text IS NULL OR EXISTS (SELECT 1 FROM shard_lease l WHERE ${leaseHeldBy("$3", "$4", "$5", "$6", "$7")} FOR SHARE))
        ON CONFLICT (projection_name) DO UPDATE SET event_offset = EXCLUDED.event_offset, updated_at = now()
        RETURNING 1`,
      [name, offset, ...fenceArgs(f)],
    );
    if (result.rowCount !== 1) throw new StaleShardOwnerError(f!);
  }

  async deleteProjectionOffset(name: string): Promise<boolean> {
    this.open();
    const result = await this.query(
      "deleteProjectionOffset",
      "movie_delete_checkpoint",
      "DELETE FROM projection_checkpoint WHERE projection_name = $1",
      [checkProjectionName(name)],
    );
    return result.rowCount === 1;
  }

  async loadProjectionControl(name: string): Promise<ProjectionControl> {
    this.open();
    const result = await this.query(
      "loadProjectionControl",
      "movie_load_projection_control",
      "SELECT paused, rebuild_from FROM projection_control WHERE projection_name = $1",
      [checkProjectionName(name)],
    );
    return result.rows.length === 0 ? defaultProjectionControl : controlOf(result.rows[0]);
  }

  async setProjectionControl(name: string, change: ProjectionControlChange): Promise<ProjectionControl> {
    this.open();
    checkProjectionName(name);
    const checked = checkProjectionControlChange(change);
    const result = await this.query(
      "setProjectionControl",
      "movie_set_projection_control",
      `INSERT INTO projection_control AS c (projection_name, paused, rebuild_from)
        VALUES ($1, coalesce($2::boolean, false), $3::bigint)
        ON CONFLICT (projection_name) DO UPDATE SET paused = coalesce($2::boolean, c.paused),
          rebuild_from = CASE WHEN $4::boolean THEN $3::bigint ELSE c.rebuild_from END, updated_at = now()
        RETURNING paused, rebuild_from`,
      [name, checked.paused ?? null, checked.rebuildFrom ?? null, checked.rebuildFrom !== undefined],
    );
    return controlOf(result.rows[0]);
  }

  async runProjectionBatch<R>(
    request: ProjectionBatchRequest,
    work: (tx: ProjectionTransaction) => Promise<R>,
  ): Promise<R> {
    this.open();
    const name = checkProjectionName(request.name);
    const expected = checkOffset("expectedOffset", request.expectedOffset);
    const next = checkOffset("newOffset", request.newOffset);
    const fence = checkFence(request.fence);
    const rebuild = request.completesRebuildFrom ?? null;
    if (rebuild !== null) checkOffset("completesRebuildFrom", rebuild);
    const client = await this.pool.connect();
    let broken: Error | undefined;
    // A checked-out client has no pool listener: a connection lost while the batch holds it (a server restart, a
    // terminated backend, a proxy dropping it) emitted an 'error' nobody handled, and that ended the process (the soak
    // found it: a projection node died on a database restart). Record it; the batch's next statement fails, the batch
    // rolls back, and the client is destroyed on release.
    const onLost = (error: Error) => {
      broken = error;
    };
    client.on("error", onLost);
    try {
      await client.query("BEGIN");
      try {
        if (fence !== null) {
          // FOR KEY SHARE until commit: a transfer of the lease (which locks the row FOR UPDATE first) waits for this
          // batch, as for every fenced write, but the owner's renewal (a non-key UPDATE: FOR NO KEY UPDATE) does not.
          // With FOR SHARE a batch longer than the lease's remaining time blocked its own lease's renewal until the
          // lease lapsed (docs/protocol.md §13.4). PostgreSQL keeps a KEY SHARE lock on the row's new version after a
          // non-key update, so a renewal in between does not release the batch's hold on the fence.
          const held = await client.query(
            `SELECT 1 FROM shard_lease WHERE ${leaseHeldBy("$1", "$2", "$3", "$4", "$5")} FOR KEY SHARE`,
            fenceArgs(fence),
          );
          if (held.rowCount !== 1) throw new StaleShardOwnerError(fence);
        }
        const current = await client.query(
          "SELECT event_offset FROM projection_checkpoint WHERE projection_name = $1 FOR UPDATE",
          [name],
        );
        const actual = current.rows.length === 0 ? 0 : Number(current.rows[0].event_offset);
        if (actual !== expected) throw new ProjectionCheckpointConflictError(name, expected, actual);
        const tx: ProjectionTransaction = {
          backend: "postgres",
          query: async (sql, params) => (await client.query(sql, params === undefined ? [] : [...params])).rows,
        };
        const result = await work(tx);
        if (rebuild !== null) {
          const cleared = await client.query(
            `UPDATE projection_control SET rebuild_from = NULL, updated_at = now()
              WHERE projection_name = $1 AND rebuild_from = $2`,
            [name, rebuild],
          );
          if (cleared.rowCount !== 1) throw new ProjectionRebuildSupersededError(name, rebuild);
        }
        await client.query(
          `INSERT INTO projection_checkpoint (projection_name, event_offset) VALUES ($1, $2)
            ON CONFLICT (projection_name) DO UPDATE SET event_offset = EXCLUDED.event_offset, updated_at = now()`,
          [name, next],
        );
        await client.query("COMMIT");
        return result;
      } catch (error) {
        await client.query("ROLLBACK").catch((rollbackError: unknown) => {
          broken = rollbackError as Error;
        });
        throw error;
      }
    } catch (error) {
      if (isPostgresConnectionError(error)) broken = error as Error;
      throw error;
    } finally {
      client.removeListener("error", onLost);
      // A connection that failed mid-transaction is destroyed rather than returned to the pool.
      client.release(broken);
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.listener.unwant();
    await this.pool.end();
  }

  private async writeState(
    request: SaveStateRequest | DeleteStateRequest,
    manifest: string,
    payload: string | null,
    deleted: boolean,
  ): Promise<WriteResult> {
    checkPersistenceId(request.persistenceId);
    checkSequence("expectedRevision", request.expectedRevision);
    const op = OperationId.from(request.operationId).value;
    const fence = checkFence(request.fence);
    const outbox = checkOutbox(request.outbox);
    if (this.batching && outbox.length === 0) {
      const values = [
        request.persistenceId,
        request.expectedRevision,
        op,
        stateFingerprint(manifest, payload, deleted),
        manifest,
        payload,
        deleted ? 1 : 0,
        ...fenceArgs(fence),
      ];
      const pending: PendingState = {
        persistenceId: request.persistenceId,
        expectedRevision: request.expectedRevision,
        values,
      };
      // Each write keeps its own timeout, retries and breaker admission: only the statement is shared.
      const outcome = decodeStateOutcome(
        await this.resilient.run(deleted ? "deleteState" : "saveState", () =>
          this.closed ? Promise.reject(new StoreClosedError("postgres")) : this.states.submit(pending),
        ),
      );
      if ("actual" in outcome)
        throw new ConcurrentWriteError(request.persistenceId, request.expectedRevision, outcome.actual);
      return this.writeOutcome(
        { status: outcome.status, revision: String(outcome.revision) },
        request.persistenceId,
        op,
        fence,
      );
    }
    const write = outbox.length === 0 ? this.writeCall.bind(this) : this.writeWithOutbox.bind(this, outbox, fence);
    const row = await write(
      deleted ? "deleteState" : "saveState",
      "movie_write_state",
      WRITE_STATE_SQL,
      [
        request.persistenceId,
        request.expectedRevision,
        op,
        stateFingerprint(manifest, payload, deleted),
        manifest,
        payload,
        deleted ? 1 : 0,
        ...fenceArgs(fence),
      ],
      request.persistenceId,
      request.expectedRevision,
    );
    return this.writeOutcome(row, request.persistenceId, op, fence);
  }

  private writeOutcome(row: StatusRow, pid: string, op: string, fence: ShardLeaseToken | null): WriteResult {
    switch (row.status) {
      case 0:
        return { revision: Number(row.revision), duplicate: false };
      case 1:
        return { revision: Number(row.revision), duplicate: true };
      case 2:
        throw new OperationConflictError(pid, op);
      default:
        throw new StaleShardOwnerError(fence!);
    }
  }

  private async writeCall(
    operation: string,
    name: string,
    text: string,
    values: unknown[],
    pid: string,
    expected: number,
  ): Promise<StatusRow> {
    try {
      const result = await this.query(operation, name, text, values);
      // revision * 4 + status, see movie_outcome in schema.ts.
      const outcome = Number(result.rows[0].outcome);
      if (outcome < 0) return { status: -1, revision: "0" };
      return { status: outcome % 4, revision: String(Math.floor(outcome / 4)) };
    } catch (error) {
      if ((error as { code?: string }).code === REVISION_MISMATCH_SQLSTATE) {
        throw new ConcurrentWriteError(pid, expected, Number((error as Error).message));
      }
      throw error;
    }
  }

  /**
   * {@link writeCall} with outbox messages: the write function's call and the outbox rows in one statement
   * (writeWithOutboxSql), so the rows commit only with a write that wrote. The write function checks the fence first
   * (FOR SHARE, held to the commit); a stale owner's, a duplicate's or a conflicting write's statement raises and
   * inserts nothing (a duplicate's rows came with the original write).
   */
  private async writeWithOutbox(
    outbox: readonly OutboxRecord[],
    fence: ShardLeaseToken | null,
    operation: string,
    name: string,
    text: string,
    values: unknown[],
    pid: string,
    expected: number,
  ): Promise<StatusRow> {
    const call = /^SELECT (movie_\w+\(.*\)) AS outcome$/s.exec(text)?.[1];
    if (call === undefined) throw new Error(`internal: ${name} is not a write function call`);
    try {
      return await this.writeCall(
        operation,
        `${name}_outbox`,
        writeWithOutboxSql(call, values.length + 1),
        [
          ...values,
          outbox.map((m) => m.messageId),
          outbox.map((m) => encodeDestination(m.destination)),
          outbox.map((m) => m.manifest),
          outbox.map((m) => m.payload),
          fence?.key.clusterName ?? null,
          fence?.key.entityType ?? null,
          fence?.key.shardId ?? null,
        ],
        pid,
        expected,
      );
    } catch (error) {
      if ((error as { code?: string }).code !== OUTBOX_NOT_WRITTEN_SQLSTATE) throw error;
      const outcome = Number((error as Error).message);
      return { status: outcome % 4, revision: String(Math.floor(outcome / 4)) };
    }
  }

  async claimOutbox(request: OutboxClaimRequest): Promise<OutboxClaim> {
    this.open();
    const { owner, limit, leaseMs, leases, unsharded } = checkClaim(request);
    const result = await this.query("claimOutbox", "movie_claim_outbox", CLAIM_OUTBOX_SQL, [
      owner,
      leaseMs,
      limit,
      leases.map((l) => l.key.clusterName),
      leases.map((l) => l.key.entityType),
      leases.map((l) => l.key.shardId),
      leases.map((l) => l.owner),
      leases.map((l) => l.epoch),
      unsharded,
    ]);
    const rows: ClaimedOutboxRow[] = [];
    const held = new Set<number>();
    for (const row of result.rows as Record<string, unknown>[]) {
      if (row.held_lease !== null && row.held_lease !== undefined) {
        held.add(Number(row.held_lease));
        continue;
      }
      const checked = checkClaimedRow(row);
      if (checked !== null) rows.push(checked);
    }
    return {
      rows: rows.sort((a, b) => a.offset - b.offset),
      staleLeases: leases.filter((_, i) => !held.has(i + 1)),
    };
  }

  async completeOutbox(rows: readonly OutboxClaimRef[]): Promise<OutboxSettleResult> {
    this.open();
    const list = checkClaimRefs(rows);
    if (list.length === 0) return { settled: 0, stale: 0 };
    const result = await this.query("completeOutbox", "movie_complete_outbox", COMPLETE_OUTBOX_SQL, [
      list.map((r) => r.offset),
      list.map((r) => r.claimEpoch),
    ]);
    return settleResult(result.rows[0]);
  }

  async failOutbox(owner: string, failures: readonly OutboxFailure[]): Promise<OutboxSettleResult> {
    this.open();
    checkOwner(owner);
    const checked = failures.map(checkFailure);
    if (checked.length === 0) return { settled: 0, stale: 0 };
    const result = await this.query("failOutbox", "movie_fail_outbox", FAIL_OUTBOX_SQL, [
      checked.map((f) => f.offset),
      checked.map((f) => f.error),
      checked.map((f) => f.park),
      checked.map((f) => f.retryAfterMs),
      owner,
      checked.map((f) => f.claimEpoch ?? null),
    ]);
    return settleResult(result.rows[0]);
  }

  async purgeOutbox(olderThanMs: number): Promise<number> {
    this.open();
    checkSequence("olderThanMs", olderThanMs);
    const result = await this.query("purgeOutbox", "movie_purge_outbox", PURGE_OUTBOX_SQL, [olderThanMs]);
    return result.rowCount ?? 0;
  }

  async outboxCounts(): Promise<OutboxCounts> {
    this.open();
    const row = (await this.query("outboxCounts", "movie_outbox_counts", OUTBOX_COUNTS_SQL, [])).rows[0];
    return outboxCountsOf(row);
  }

  async retryParkedOutbox(offsets: readonly number[]): Promise<number> {
    this.open();
    const list = checkOffsets(offsets);
    if (list.length === 0) return 0;
    const result = await this.query("retryParkedOutbox", "movie_retry_parked_outbox", RETRY_PARKED_OUTBOX_SQL, [list]);
    return result.rowCount ?? 0;
  }

  async parkedOutbox(limit: number): Promise<ParkedOutboxRow[]> {
    this.open();
    checkSequence("limit", limit);
    const result = await this.query("parkedOutbox", "movie_parked_outbox", PARKED_OUTBOX_SQL, [limit]);
    return (result.rows as Record<string, unknown>[]).map((r) => ({
      offset: Number(r.outbox_offset),
      messageId: typeof r.message_id === "string" ? r.message_id : "",
      persistenceId: typeof r.persistence_id === "string" ? r.persistence_id : "",
      attempts: Number(r.attempts),
      lastError: typeof r.last_error === "string" ? r.last_error : "",
    }));
  }

  private async fencedCall(
    operation: string,
    name: string,
    text: string,
    values: unknown[],
    fence: ShardLeaseToken | null,
  ): Promise<StatusRow> {
    const result = await this.query(operation, name, text, values);
    const row = result.rows[0] as StatusRow;
    if (row.status === 3) throw new StaleShardOwnerError(fence!);
    return row;
  }

  private query(operation: string, name: string, text: string, values: unknown[]): Promise<QueryResult> {
    // Named statements are parsed once per connection; the pool reuses them.
    return this.resilient.run(operation, () => {
      if (this.closed) return Promise.reject(new StoreClosedError("postgres"));
      return this.pool.query({ name, text, values });
    });
  }

  private open(): void {
    if (this.closed) throw new StoreClosedError("postgres");
  }
}

/** A settle statement's counts (PostgreSQL's count(*) arrives as text). */
function settleResult(row: { settled?: unknown; stale?: unknown } | undefined): OutboxSettleResult {
  return { settled: Number(row?.settled ?? 0), stale: Number(row?.stale ?? 0) };
}

function fenceArgs(fence: ShardLeaseToken | null): unknown[] {
  if (fence === null) return [null, null, null, null, null];
  return [fence.key.clusterName, fence.key.entityType, fence.key.shardId, fence.owner, fence.epoch];
}

function leaseRowKey(cluster: string, type: string, shard: string): string {
  return `${cluster}\u0000${type}\u0000${shard}`;
}

function leaseToken(key: ShardLeaseKey, row: Record<string, unknown>): ShardLeaseToken {
  return {
    key: { clusterName: key.clusterName, entityType: key.entityType, shardId: key.shardId },
    owner: String(row.owner),
    epoch: Number(row.epoch),
    leaseUntilEpochMs: Number(row.lease_until_epoch_ms),
  };
}

/** The listener every pool client keeps (see PostgresStore.connect): the error reaches its user by another path. */
function ignoreReportedElsewhere(): void {}

/** Every table, index and function of the current schema as `kind:name` (see checkRebaseline). */
const SCHEMA_OBJECTS_SQL = `SELECT CASE c.relkind WHEN 'i' THEN 'index:' ELSE 'table:' END || c.relname AS o
    FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p', 'i')
  UNION ALL SELECT 'function:' || p.proname FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace`;

/** Runs the pending migrations; returns the versions re-baselined from an earlier build's checksums. */
async function migrate(pool: Queryable & Pick<Pool, "connect">, schema: string | null): Promise<number[]> {
  const client = await pool.connect();
  // As in runProjectionBatch: a connection lost while checked out must fail the migration, not end the process.
  let lostError: Error | undefined;
  const onLost = (error: Error) => {
    lostError = error;
  };
  client.on("error", onLost);
  try {
    // Session-level lock: two nodes starting at once migrate one after the other (docs/protocol.md §13.2).
    await client.query("SELECT pg_advisory_lock($1::bigint)", [MIGRATION_LOCK_KEY.toString()]);
    try {
      // Under the lock: concurrent CREATE SCHEMA IF NOT EXISTS can still collide on the catalog's unique index.
      if (schema !== null) await client.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
      await client.query(`CREATE TABLE IF NOT EXISTS movie_schema_migration (version INTEGER PRIMARY KEY,
        name TEXT NOT NULL, checksum TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`);
      const applied = (await client.query("SELECT version, name, checksum FROM movie_schema_migration"))
        .rows as AppliedMigration[];
      const plan = planMigrations(postgresMigrations, applied);
      if (plan.rebaseline.length > 0) {
        // Rows of an earlier build (version and name only): the objects its history creates are the evidence that
        // this history ran; then each row gets the statement checksum, once, under the migration lock.
        const objects = await client.query(SCHEMA_OBJECTS_SQL);
        checkRebaseline(postgresMigrations, plan, new Set(objects.rows.map((r: { o: string }) => r.o)));
        await client.query("BEGIN");
        try {
          for (const m of plan.rebaseline) {
            await client.query("UPDATE movie_schema_migration SET checksum = $1 WHERE version = $2 AND name = $3", [
              m.checksum,
              m.version,
              m.name,
            ]);
          }
          await client.query("COMMIT");
        } catch (error) {
          await client.query("ROLLBACK");
          throw error;
        }
      }
      for (const migration of plan.pending) {
        await client.query("BEGIN");
        try {
          for (const sql of migration.statements) await client.query(sql);
          await client.query("INSERT INTO movie_schema_migration (version, name, checksum) VALUES ($1, $2, $3)", [
            migration.version,
            migration.name,
            migration.checksum,
          ]);
          await client.query("COMMIT");
        } catch (error) {
          await client.query("ROLLBACK");
          throw error;
        }
      }
      return plan.rebaseline.map((m) => m.version);
    } finally {
      await client.query("SELECT pg_advisory_unlock($1::bigint)", [MIGRATION_LOCK_KEY.toString()]);
    }
  } finally {
    client.removeListener("error", onLost);
    client.release(lostError);
  }
}

/** A projection_control row as a ProjectionControl (BIGINT arrives as a string). */
function controlOf(row: { paused: unknown; rebuild_from: unknown }): ProjectionControl {
  return { paused: row.paused === true, rebuildFrom: row.rebuild_from === null ? null : Number(row.rebuild_from) };
}
