import { buildMigrations, type Migration } from "../migrations.ts";
import { feedLockPerSchemaMigration, feedMigration, journalOffsetMigration } from "./feed-schema.ts";
import { OUTBOX_GUARD_FUNCTION, outboxShardClaimsMigration } from "./outbox-sql.ts";

/** The advisory lock that serialises migrations across nodes (docs/protocol.md §13.2). */
export const MIGRATION_LOCK_KEY = 0x4d4f564945505253n;

/** SQLSTATE raised by the write functions when the stream or state revision is not the expected one. */
export const REVISION_MISMATCH_SQLSTATE = "MV001";

// Write functions: each runs a whole fenced write as one statement, so an append costs one round trip (the issue's
// note: separate BEGIN/SELECT/INSERT/COMMIT round trips fell to 48% of the raw INSERT ceiling). Status codes:
// 0 written, 1 duplicate, 2 operation conflict, 3 stale shard owner. A revision mismatch raises MV001 so that the
// operation-id row inserted earlier in the same statement rolls back. The fence row is locked FOR SHARE: writers on
// one shard do not queue behind each other, but a transfer or renewal (an UPDATE of that row) waits for every
// in-flight fenced write to commit, which is what docs/protocol.md §13.4 requires of the lock.
/**
 * The condition under which a shard_lease row is the fence's: this owner, this epoch, unexpired on the database clock.
 * Its text is part of checksummed migrations (through fenceCheckWith) and must stay byte-identical.
 */
export const leaseHeldBy = (cluster: string, type: string, shard: string, owner: string, epoch: string) =>
  `cluster_name = ${cluster} AND entity_type = ${type} AND shard_id = ${shard} AND owner = ${owner}
        AND epoch = ${epoch} AND lease_until_epoch_ms > movie_now_ms()`;
const fenceCheckWith = (stale: string) => `
  IF p_owner IS NOT NULL THEN
    PERFORM 1 FROM shard_lease
      WHERE ${leaseHeldBy("p_cluster", "p_type", "p_shard", "p_owner", "p_epoch")}
      FOR SHARE;
    IF NOT FOUND THEN
      ${stale}
    END IF;
  END IF;`;
const fenceCheck = fenceCheckWith("status := 3; revision := 0; RETURN;");
const fenceCheckScalar = fenceCheckWith("RETURN movie_outcome(3, 0);");

// A known operation id answers at once: 1 (duplicate) when its fingerprint matches, else 2 (conflict). The journal
// row holds it until retention moves it to journal_operation. The text must stay byte-identical: migrations that use
// it are checksummed.
const operationOutcome = `SELECT j.fingerprint, j.operation_revision INTO v_fingerprint, v_previous FROM event_journal j
          WHERE j.persistence_id = p_pid AND j.operation_id = p_op;
        IF NOT FOUND THEN
          SELECT o.fingerprint, o.revision INTO v_fingerprint, v_previous FROM journal_operation o
            WHERE o.persistence_id = p_pid AND o.operation_id = p_op;
        END IF;
        IF FOUND THEN
          RETURN movie_outcome(CASE WHEN v_fingerprint = p_fingerprint THEN 1 ELSE 2 END, v_previous);
        END IF;`;

const fenceParams = "p_cluster text, p_type text, p_shard bigint, p_owner text, p_epoch bigint";
const fenceTypes = "text, text, bigint, text, bigint";

// Optimistic concurrency comes from the journal's primary key: the append inserts sequence numbers expected+1..,
// and a unique violation says someone else got there first (or this operation id already exists: its partial unique
// index). The gap check makes sure row `expected` exists (or retention recorded that revision), so a writer ahead of
// the stream cannot leave a hole. `firstAppend` is the condition under which an append at revision 0 may write:
// migration 4 had a bare `p_expected = 0`, which let a writer at 0 refill sequence numbers that retention removed
// (migration 7 replaces the function).
const appendEventsFunction = (
  firstAppend: string,
  epoch = false,
) => `CREATE OR REPLACE FUNCTION movie_append_events(p_pid text, p_expected bigint, p_op text, p_fingerprint text,
        p_manifest text, p_payload text, p_more_manifests text[], p_more_payloads text[], ${fenceParams})
      RETURNS bigint LANGUAGE plpgsql AS $$
      DECLARE
        v_count bigint := CASE WHEN p_manifest IS NULL THEN 0 ELSE 1 + coalesce(array_length(p_more_manifests, 1), 0) END;
        v_revision bigint := p_expected + v_count;
        v_fingerprint text;
        v_previous bigint;
        v_actual bigint;
        v_contiguous boolean;
      BEGIN
        ${fenceCheckScalar}
        -- One statement (each costs an executor run): operation ids kept outside the journal, and the gap check.
        SELECT o.fingerprint, o.revision,
            ${firstAppend}
            OR EXISTS (SELECT 1 FROM event_journal j WHERE j.persistence_id = p_pid AND j.sequence_nr = p_expected)
            OR EXISTS (SELECT 1 FROM event_stream s WHERE s.persistence_id = p_pid AND s.revision = p_expected)
          INTO v_fingerprint, v_previous, v_contiguous
          FROM (SELECT 1) AS one
          LEFT JOIN journal_operation o ON o.persistence_id = p_pid AND o.operation_id = p_op;
        IF v_fingerprint IS NOT NULL THEN
          RETURN movie_outcome(CASE WHEN v_fingerprint = p_fingerprint THEN 1 ELSE 2 END, v_previous);
        END IF;
        IF v_count = 0 THEN
          SELECT j.fingerprint, j.operation_revision INTO v_fingerprint, v_previous FROM event_journal j
            WHERE j.persistence_id = p_pid AND j.operation_id = p_op;
          IF FOUND THEN
            RETURN movie_outcome(CASE WHEN v_fingerprint = p_fingerprint THEN 1 ELSE 2 END, v_previous);
          END IF;
          v_actual := movie_stream_revision(p_pid);
          IF v_actual <> p_expected THEN
            RAISE EXCEPTION USING ERRCODE = '${REVISION_MISMATCH_SQLSTATE}', MESSAGE = v_actual::text;
          END IF;
          INSERT INTO journal_operation (persistence_id, operation_id, fingerprint, revision)
            VALUES (p_pid, p_op, p_fingerprint, p_expected) ON CONFLICT DO NOTHING;
          IF NOT FOUND THEN
            SELECT o.fingerprint, o.revision INTO v_fingerprint, v_previous FROM journal_operation o
              WHERE o.persistence_id = p_pid AND o.operation_id = p_op;
            RETURN movie_outcome(CASE WHEN v_fingerprint = p_fingerprint THEN 1 ELSE 2 END, v_previous);
          END IF;
          RETURN movie_outcome(0, p_expected);
        END IF;
        IF v_contiguous THEN
          -- A plain INSERT (no ON CONFLICT: speculative insertion costs an extra WAL record and index pass). A
          -- unique violation, on sequence expected+1 or on the operation id, aborts the statement and the client
          -- asks movie_append_resolve what happened. Once the first row is ours, no writer can claim a later
          -- sequence, since their gap check cannot see this uncommitted row.
          INSERT INTO event_journal (persistence_id, sequence_nr, manifest, payload, operation_id, fingerprint,
              operation_revision${epoch ? ", shard_epoch" : ""})
            VALUES (p_pid, p_expected + 1, p_manifest, p_payload, p_op, p_fingerprint, v_revision${epoch ? ", p_epoch" : ""});
          IF v_count > 1 THEN
            INSERT INTO event_journal (persistence_id, sequence_nr, manifest, payload${epoch ? ", shard_epoch" : ""})
              SELECT p_pid, p_expected + 1 + t.i, t.m, t.p${epoch ? ", p_epoch" : ""}
                FROM unnest(p_more_manifests, p_more_payloads) WITH ORDINALITY AS t(m, p, i);
          END IF;
          RETURN movie_outcome(0, v_revision);
        END IF;
        RETURN movie_append_resolve(p_pid, p_op, p_fingerprint);
      END $$`;

/**
 * Whether an append at revision 0 may write: retention that removed row 1 moved that row's operation id (every
 * append's first row carries one) to journal_operation with a revision above 0, and an empty append above 0 implies
 * events. Read from journal_operation, which every append path already names, rather than event_stream; the hot-path
 * statements and movie_append_events (migration 7) share this one condition.
 */
const firstAppendOne = (pid: string, alias: string) =>
  `NOT EXISTS (SELECT 1 FROM journal_operation ${alias} WHERE ${alias}.persistence_id = ${pid} AND ${alias}.revision > 0)`;

// The rare path of a one-event append (migration 5; migration 8 adds the shard epoch to the row it writes). With
// epoch false the text stays byte-identical to migration 5's, which is checksummed.
const appendOneSettleFunction = (epoch = false) =>
  `CREATE OR REPLACE FUNCTION movie_append_one_settle(p_pid text, p_expected bigint, p_op text, p_fingerprint text,
        p_manifest text, p_payload text, ${fenceParams})
      RETURNS bigint LANGUAGE plpgsql AS $$
      DECLARE
        v_fingerprint text;
        v_previous bigint;
        v_actual bigint;
      BEGIN
        ${fenceCheckScalar}
        ${operationOutcome}
        v_actual := movie_stream_revision(p_pid);
        IF v_actual <> p_expected THEN
          RAISE EXCEPTION USING ERRCODE = '${REVISION_MISMATCH_SQLSTATE}', MESSAGE = v_actual::text;
        END IF;
        IF p_expected = 0 OR EXISTS (SELECT 1 FROM event_journal j WHERE j.persistence_id = p_pid
            AND j.sequence_nr = p_expected) THEN
          -- Row \`expected\` is visible now: a concurrent write committed after the hot path looked. Try again.
          RETURN -1;
        END IF;
        -- Retention removed row \`expected\`; event_stream vouches for the revision.
        BEGIN
          INSERT INTO event_journal (persistence_id, sequence_nr, manifest, payload, operation_id, fingerprint,
              operation_revision${epoch ? ", shard_epoch" : ""})
            VALUES (p_pid, p_expected + 1, p_manifest, p_payload, p_op, p_fingerprint, p_expected + 1${epoch ? ", p_epoch" : ""});
        EXCEPTION WHEN unique_violation THEN
          RETURN -1;
        END;
        RETURN movie_outcome(0, p_expected + 1);
      END $$`;

/** The PostgreSQL migrations, version 1 first. */
export const postgresMigrations: readonly Migration[] = buildMigrations([
  [
    // The first journal row of an append also carries its operation id, fingerprint and resulting revision, so
    // that an append is one heap row per event plus index entries (see movie_append_events). Operation ids of empty
    // appends, and of rows removed by retention, live in journal_operation; event_stream keeps the revision across
    // retention.
    `CREATE TABLE IF NOT EXISTS event_journal (persistence_id TEXT NOT NULL, sequence_nr BIGINT NOT NULL,
      manifest TEXT NOT NULL, payload TEXT NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
      operation_id TEXT NULL, fingerprint TEXT NULL, operation_revision BIGINT NULL,
      PRIMARY KEY (persistence_id, sequence_nr))`,
    `CREATE UNIQUE INDEX IF NOT EXISTS event_journal_operation_idx ON event_journal (persistence_id, operation_id)
      WHERE operation_id IS NOT NULL`,
    `CREATE TABLE IF NOT EXISTS event_stream (persistence_id TEXT PRIMARY KEY, revision BIGINT NOT NULL)`,
    `CREATE TABLE IF NOT EXISTS journal_operation (persistence_id TEXT NOT NULL, operation_id TEXT NOT NULL,
      fingerprint TEXT NOT NULL, revision BIGINT NOT NULL, PRIMARY KEY (persistence_id, operation_id))`,
    `CREATE TABLE IF NOT EXISTS snapshot_store (persistence_id TEXT PRIMARY KEY, sequence_nr BIGINT NOT NULL,
      manifest TEXT NOT NULL, payload TEXT NOT NULL, updated_at TIMESTAMPTZ NOT NULL DEFAULT now())`,
    `CREATE TABLE IF NOT EXISTS durable_state (persistence_id TEXT PRIMARY KEY, revision BIGINT NOT NULL,
      manifest TEXT NOT NULL, payload TEXT NULL, deleted BIGINT NOT NULL DEFAULT 0,
      updated_at TIMESTAMPTZ NOT NULL DEFAULT now())`,
    `CREATE TABLE IF NOT EXISTS state_operation (persistence_id TEXT NOT NULL, operation_id TEXT NOT NULL,
      fingerprint TEXT NOT NULL, revision BIGINT NOT NULL, PRIMARY KEY (persistence_id, operation_id))`,
  ],
  [
    `CREATE TABLE IF NOT EXISTS event_feed (event_offset BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      persistence_id TEXT NOT NULL, sequence_nr BIGINT NOT NULL, manifest TEXT NOT NULL, payload TEXT NOT NULL,
      created_at TIMESTAMPTZ NOT NULL DEFAULT now(), UNIQUE (persistence_id, sequence_nr))`,
    `CREATE INDEX IF NOT EXISTS event_feed_pid_idx ON event_feed (persistence_id, event_offset)`,
    `CREATE TABLE IF NOT EXISTS projection_checkpoint (projection_name TEXT PRIMARY KEY, event_offset BIGINT NOT NULL,
      updated_at TIMESTAMPTZ NOT NULL DEFAULT now())`,
  ],
  [
    `CREATE TABLE IF NOT EXISTS persistence_outbox (outbox_offset BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      message_id TEXT NOT NULL UNIQUE, persistence_id TEXT NOT NULL, operation_id TEXT NOT NULL,
      destination TEXT NOT NULL, manifest TEXT NOT NULL, payload TEXT NOT NULL, delivered BOOLEAN NOT NULL DEFAULT false,
      attempts INTEGER NOT NULL DEFAULT 0, lease_owner TEXT NULL, lease_until_epoch_ms BIGINT NOT NULL DEFAULT 0,
      last_error TEXT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now(), delivered_at TIMESTAMPTZ NULL)`,
    `CREATE INDEX IF NOT EXISTS persistence_outbox_pending_idx ON persistence_outbox (delivered, outbox_offset)`,
  ],
  [
    `CREATE TABLE IF NOT EXISTS shard_lease (cluster_name TEXT NOT NULL, entity_type TEXT NOT NULL,
      shard_id BIGINT NOT NULL, owner TEXT NOT NULL, epoch BIGINT NOT NULL, lease_until_epoch_ms BIGINT NOT NULL,
      updated_at TIMESTAMPTZ NOT NULL DEFAULT now(), PRIMARY KEY (cluster_name, entity_type, shard_id))`,
    // The database clock (docs/protocol.md §13.3): clock_timestamp() moves within a transaction, unlike now().
    `CREATE OR REPLACE FUNCTION movie_now_ms() RETURNS bigint LANGUAGE sql VOLATILE AS
      $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint $$`,
    // The hot write functions return one bigint, revision * 4 + status, rather than a record: a set-returning call
    // in FROM materialises a tuplestore per call, a scalar in the target list does not.
    `CREATE OR REPLACE FUNCTION movie_outcome(p_status int, p_revision bigint) RETURNS bigint LANGUAGE sql IMMUTABLE AS
      $$ SELECT p_revision * 4 + p_status $$`,
    `CREATE OR REPLACE FUNCTION movie_stream_revision(p_pid text) RETURNS bigint LANGUAGE sql STABLE AS
      $$ SELECT greatest(
        (SELECT max(sequence_nr) FROM event_journal WHERE persistence_id = p_pid),
        (SELECT revision FROM event_stream WHERE persistence_id = p_pid), 0) $$`,
    // After an append wrote nothing: a duplicate or conflicting retry of this operation id, or else the revision
    // moved (MV001 with the current revision).
    `CREATE OR REPLACE FUNCTION movie_append_resolve(p_pid text, p_op text, p_fingerprint text) RETURNS bigint
      LANGUAGE plpgsql AS $$
      DECLARE
        v_fingerprint text;
        v_previous bigint;
        v_actual bigint;
      BEGIN
        ${operationOutcome}
        v_actual := movie_stream_revision(p_pid);
        RAISE EXCEPTION USING ERRCODE = '${REVISION_MISMATCH_SQLSTATE}', MESSAGE = v_actual::text;
      END $$`,
    // After the single-statement append (see APPEND_ONE_SQL) inserted nothing: a stale fence (checked first, so a
    // stale owner never learns of a duplicate), a duplicate or conflicting operation id, or a moved revision (MV001).
    // -1 means none of these holds any more (a concurrent write committed meanwhile): the client tries again.
    `CREATE OR REPLACE FUNCTION movie_append_one_resolve(p_pid text, p_expected bigint, p_op text, p_fingerprint text,
        ${fenceParams})
      RETURNS bigint LANGUAGE plpgsql AS $$
      DECLARE
        v_fingerprint text;
        v_previous bigint;
        v_actual bigint;
      BEGIN
        ${fenceCheckScalar}
        ${operationOutcome}
        v_actual := movie_stream_revision(p_pid);
        IF v_actual = p_expected THEN
          RETURN -1;
        END IF;
        RAISE EXCEPTION USING ERRCODE = '${REVISION_MISMATCH_SQLSTATE}', MESSAGE = v_actual::text;
      END $$`,
    // See appendEventsFunction (replaced in migration 7).
    appendEventsFunction("p_expected = 0"),
    `CREATE OR REPLACE FUNCTION movie_write_state(p_pid text, p_expected bigint, p_op text, p_fingerprint text,
        p_manifest text, p_payload text, p_deleted bigint, ${fenceParams})
      RETURNS bigint LANGUAGE plpgsql AS $$
      DECLARE
        v_revision bigint := p_expected + 1;
        v_previous record;
        v_actual bigint;
      BEGIN
        ${fenceCheckScalar}
        INSERT INTO state_operation (persistence_id, operation_id, fingerprint, revision)
          VALUES (p_pid, p_op, p_fingerprint, v_revision) ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
          SELECT o.fingerprint, o.revision INTO v_previous FROM state_operation o
            WHERE o.persistence_id = p_pid AND o.operation_id = p_op;
          IF v_previous.fingerprint = p_fingerprint THEN
            RETURN movie_outcome(1, v_previous.revision);
          END IF;
          RETURN movie_outcome(2, v_previous.revision);
        END IF;
        IF p_expected = 0 THEN
          INSERT INTO durable_state (persistence_id, revision, manifest, payload, deleted)
            VALUES (p_pid, v_revision, p_manifest, p_payload, p_deleted) ON CONFLICT DO NOTHING;
        ELSE
          UPDATE durable_state d SET revision = v_revision, manifest = p_manifest, payload = p_payload,
              deleted = p_deleted, updated_at = now()
            WHERE d.persistence_id = p_pid AND d.revision = p_expected;
        END IF;
        IF NOT FOUND THEN
          SELECT d.revision INTO v_actual FROM durable_state d WHERE d.persistence_id = p_pid;
          RAISE EXCEPTION USING ERRCODE = '${REVISION_MISMATCH_SQLSTATE}', MESSAGE = coalesce(v_actual, 0)::text;
        END IF;
        RETURN movie_outcome(0, v_revision);
      END $$`,
    `CREATE OR REPLACE FUNCTION movie_save_snapshot(p_pid text, p_seq bigint, p_manifest text, p_payload text,
        ${fenceParams}, OUT status int, OUT revision bigint)
      LANGUAGE plpgsql AS $$
      BEGIN
        ${fenceCheck}
        INSERT INTO snapshot_store AS s (persistence_id, sequence_nr, manifest, payload)
          VALUES (p_pid, p_seq, p_manifest, p_payload)
          ON CONFLICT (persistence_id) DO UPDATE SET sequence_nr = EXCLUDED.sequence_nr, manifest = EXCLUDED.manifest,
            payload = EXCLUDED.payload, updated_at = now()
          WHERE EXCLUDED.sequence_nr >= s.sequence_nr;
        status := 0; revision := (CASE WHEN FOUND THEN 1 ELSE 0 END)::bigint;
      END $$`,
    `CREATE OR REPLACE FUNCTION movie_delete_snapshot(p_pid text, ${fenceParams}, OUT status int, OUT revision bigint)
      LANGUAGE plpgsql AS $$
      BEGIN
        ${fenceCheck}
        DELETE FROM snapshot_store WHERE persistence_id = p_pid;
        status := 0; revision := (CASE WHEN FOUND THEN 1 ELSE 0 END)::bigint;
      END $$`,
    // Status 4: no snapshot covers the requested sequence (revision carries the snapshot's sequence, or -1).
    `CREATE OR REPLACE FUNCTION movie_delete_events_to(p_pid text, p_seq bigint, ${fenceParams}, OUT status int, OUT revision bigint)
      LANGUAGE plpgsql AS $$
      DECLARE
        v_snapshot bigint;
        v_deleted bigint;
      BEGIN
        ${fenceCheck}
        SELECT s.sequence_nr INTO v_snapshot FROM snapshot_store s WHERE s.persistence_id = p_pid FOR SHARE;
        IF v_snapshot IS NULL OR v_snapshot < p_seq THEN
          status := 4; revision := coalesce(v_snapshot, -1); RETURN;
        END IF;
        -- Keep what the deleted rows carried: the stream revision and their operation ids.
        INSERT INTO event_stream AS s (persistence_id, revision) VALUES (p_pid, movie_stream_revision(p_pid))
          ON CONFLICT (persistence_id) DO UPDATE SET revision = greatest(s.revision, EXCLUDED.revision);
        INSERT INTO journal_operation (persistence_id, operation_id, fingerprint, revision)
          SELECT j.persistence_id, j.operation_id, j.fingerprint, j.operation_revision FROM event_journal j
            WHERE j.persistence_id = p_pid AND j.sequence_nr <= p_seq AND j.operation_id IS NOT NULL
          ON CONFLICT DO NOTHING;
        DELETE FROM event_journal WHERE persistence_id = p_pid AND sequence_nr <= p_seq;
        GET DIAGNOSTICS v_deleted = ROW_COUNT;
        DELETE FROM event_feed WHERE persistence_id = p_pid AND sequence_nr <= p_seq;
        status := 0; revision := v_deleted;
      END $$`,
  ],
  [
    // The one-event hot path (APPEND_ONE_SQL) no longer reads event_stream: every relation a statement names costs
    // a lock and an index open per execution, and event_stream only matters once retention has removed row
    // `expected`. That rare case lands here, where the append is written under the same fence lock.
    appendOneSettleFunction(),
  ],
  [
    // The client no longer calls movie_append_one_resolve (movie_append_one_settle took its place in migration 5);
    // migration 4 stays as applied, so the function goes here.
    `DROP FUNCTION IF EXISTS movie_append_one_resolve(text, bigint, text, text, ${fenceTypes})`,
  ],
  [
    // An append at revision 0 after retention removed row 1 must not write (it would refill removed sequence numbers
    // below the snapshot); it now falls through to movie_append_resolve, which answers MV001 with the revision.
    appendEventsFunction(`(p_expected = 0 AND ${firstAppendOne("p_pid", "o0")})`),
  ],
  [
    // Each event row records the shard epoch it was written under (NULL for an unfenced write) and a write order
    // taken from a sequence at insert, both in the fenced statement itself, so that an external checker (the chaos
    // soak, docs/soak.md) can verify per shard that epochs never go backwards in write order. The fence makes that
    // hold: a transfer waits for every in-flight write of the old epoch (FOR SHARE) and later writers see the new
    // one. Both columns are added NULL and the default set afterwards, so existing rows are not rewritten.
    "ALTER TABLE event_journal ADD COLUMN IF NOT EXISTS shard_epoch BIGINT NULL",
    "CREATE SEQUENCE IF NOT EXISTS event_journal_write_order",
    "ALTER TABLE event_journal ADD COLUMN IF NOT EXISTS write_order BIGINT NULL",
    "ALTER TABLE event_journal ALTER COLUMN write_order SET DEFAULT nextval('event_journal_write_order')",
    appendEventsFunction(`(p_expected = 0 AND ${firstAppendOne("p_pid", "o0")})`, true),
    appendOneSettleFunction(true),
  ],
  // The event feed: offsets assigned under the feed lock by a trigger, entity types, tags (see feed-schema.ts).
  feedMigration(fenceCheck),
  [
    // Outbox dispatch (docs/outbox.md). lease_until_epoch_ms is "not claimable before": a claim's end, a retry's
    // backoff, or PARKED_UNTIL_MS for a parked row (no new column: the migration stays re-runnable on SQLite, which
    // has no ADD COLUMN IF NOT EXISTS). The claim reads the oldest undelivered rows through a partial index whose
    // size is the backlog; the purge finds delivered rows by their delivery time.
    `CREATE INDEX IF NOT EXISTS persistence_outbox_claim_idx ON persistence_outbox (outbox_offset) WHERE NOT delivered`,
    `CREATE INDEX IF NOT EXISTS persistence_outbox_delivered_idx ON persistence_outbox (delivered_at) WHERE delivered`,
    // A write with messages is one statement (writeWithOutboxSql): this guard aborts it when the write wrote nothing.
    OUTBOX_GUARD_FUNCTION,
  ],
  // Reply-with-effects: a reply recorded in the append's transaction, returned to a retry of the same operation.
  [
    `CREATE TABLE IF NOT EXISTS operation_reply (persistence_id TEXT NOT NULL, operation_id TEXT NOT NULL,
      manifest TEXT NOT NULL, payload TEXT NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
      PRIMARY KEY (persistence_id, operation_id))`,
    // movie_append_tagged (fenced, duplicate-aware; empty tag arrays add no tags), then the reply when the append
    // wrote its events: one statement, so the reply commits with the events or not at all.
    `CREATE OR REPLACE FUNCTION movie_append_replied(p_pid text, p_expected bigint, p_op text, p_fingerprint text,
        p_manifest text, p_payload text, p_more_manifests text[], p_more_payloads text[], p_tag_index int[],
        p_tags text[], p_reply_manifest text, p_reply_payload text, p_cluster text, p_type text, p_shard bigint,
        p_owner text, p_epoch bigint)
      RETURNS bigint LANGUAGE plpgsql AS $$
      DECLARE
        v_outcome bigint;
      BEGIN
        v_outcome := movie_append_tagged(p_pid, p_expected, p_op, p_fingerprint, p_manifest, p_payload,
          p_more_manifests, p_more_payloads, p_tag_index, p_tags, p_cluster, p_type, p_shard, p_owner, p_epoch);
        IF v_outcome >= 0 AND v_outcome % 4 = 0 AND v_outcome / 4 > p_expected THEN
          INSERT INTO operation_reply (persistence_id, operation_id, manifest, payload)
            VALUES (p_pid, p_op, p_reply_manifest, p_reply_payload) ON CONFLICT DO NOTHING;
        END IF;
        RETURN v_outcome;
      END $$`,
  ],
  // Version 12 moves SQLite's feed offset onto the journal row; PostgreSQL records it to keep one version history.
  [],
  // The feed lock per schema (see feed-schema.ts).
  feedLockPerSchemaMigration,
  // An operator's control of a projection (pause, a pending rebuild), read by whichever node runs it.
  [
    `CREATE TABLE IF NOT EXISTS projection_control (projection_name TEXT PRIMARY KEY,
      paused BOOLEAN NOT NULL DEFAULT false, rebuild_from BIGINT NULL, updated_at TIMESTAMPTZ NOT NULL DEFAULT now())`,
  ],
  outboxShardClaimsMigration,
  // The feed offset on the journal row, assigned by the column's default under the feed lock (see feed-schema.ts).
  journalOffsetMigration(fenceCheck),
]);

/**
 * The startup options of every connection of a store (libpq `options`): the schema as search_path, and generic plans
 * for every prepared statement. Each statement the store prepares looks rows up by primary key, so one plan serves
 * every parameter value; under PostgreSQL's default (`auto`) the group-commit statement (APPEND_BATCH_SQL) was planned
 * afresh on every execution: its custom plan, costed for the actual array length, always looks cheaper than the
 * generic one, costed for a guessed 10 elements, so each statement paid its planning (about 0.2 ms, a quarter of a
 * 4-row statement on the project's machine; see docs/persistence.md, Figures). Generic plans are rebuilt when the
 * tables' statistics change, as custom ones are.
 */
export function sessionOptions(schema: string | null): string {
  const options = ["-c plan_cache_mode=force_generic_plan"];
  if (schema !== null) options.push(`-c search_path=${schema}`);
  return options.join(" ");
}

/** Every migration's SQL as one script, for review or manual application (`movie persistence migrate --print`). */
export function postgresMigrationSql(): string {
  const lines = [
    `-- movie persistence schema (PostgreSQL), versions 1..${postgresMigrations.length}`,
    `SELECT pg_advisory_lock(${MIGRATION_LOCK_KEY});`,
    `CREATE TABLE IF NOT EXISTS movie_schema_migration (version INTEGER PRIMARY KEY, name TEXT NOT NULL,
  checksum TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now());`,
  ];
  for (const m of postgresMigrations) {
    lines.push(`-- migration ${m.version}: ${m.name}`, "BEGIN;");
    for (const sql of m.statements) lines.push(`${sql};`);
    lines.push(
      `INSERT INTO movie_schema_migration (version, name, checksum) VALUES (${m.version}, '${m.name}', '${m.checksum}');`,
      "COMMIT;",
    );
  }
  lines.push(`SELECT pg_advisory_unlock(${MIGRATION_LOCK_KEY});`);
  return `${lines.join("\n")}\n`;
}

/**
 * The hot path: a one-event append as a single plain INSERT ... SELECT (no PL/pgSQL call). Its WHERE clause is the
 * fence check (the lease row locked FOR SHARE, so a transfer waits for this write to commit), the check that the
 * operation id is not among those kept outside the journal, and the gap check (row `expected` exists, or for revision
 * 0 that retention never removed events: firstAppendOne); the journal's
 * unique indexes catch a concurrent write at the same revision and a reused operation id. Inserting no row, or a
 * unique violation, sends the client to movie_append_one_settle, which also writes the append when retention removed
 * row `expected`.
 */
export const APPEND_ONE_SQL = `INSERT INTO event_journal (persistence_id, sequence_nr, manifest, payload, operation_id,
    fingerprint, operation_revision, shard_epoch)
  SELECT $1, $2::bigint + 1, $3, $4, $5, $6, $2::bigint + 1, $11::bigint
  WHERE ($7::text IS NULL OR EXISTS (SELECT 1 FROM shard_lease l WHERE l.cluster_name = $7 AND l.entity_type = $8
      AND l.shard_id = $9 AND l.owner = $10 AND l.epoch = $11 AND l.lease_until_epoch_ms > movie_now_ms() FOR SHARE))
    AND NOT EXISTS (SELECT 1 FROM journal_operation o WHERE o.persistence_id = $1 AND o.operation_id = $5)
    AND (($2::bigint = 0 AND ${firstAppendOne("$1", "o0")})
      OR EXISTS (SELECT 1 FROM event_journal j WHERE j.persistence_id = $1 AND j.sequence_nr = $2::bigint))`;

/**
 * Group commit of one-event appends (see GroupCommit): APPEND_ONE_SQL for many appends at once, one row of the arrays
 * $1..$11 per append (APPEND_ONE_SQL's parameters in its order), at most one append per persistence id. Each row
 * keeps its own fence check (its lease row locked FOR SHARE, read per row so a transfer waits for the whole batch to
 * commit), its operation-id check and its gap check. ON CONFLICT DO NOTHING, unlike the single INSERT, so that a
 * concurrent write or a reused operation id skips that row instead of aborting its batch-mates; RETURNING names the
 * rows that went in, and every other append asks movie_append_one_settle for its answer. The gap check is a scalar
 * subquery rather than EXISTS so that the planner cannot turn it into a hashed scan of the whole journal (it may do
 * that with an EXISTS under OR when the table looks small); each row is one primary-key probe.
 */
export const APPEND_BATCH_SQL = `INSERT INTO event_journal (persistence_id, sequence_nr, manifest, payload, operation_id,
    fingerprint, operation_revision, shard_epoch)
  SELECT t.pid, t.expected + 1, t.manifest, t.payload, t.op, t.fingerprint, t.expected + 1, t.epoch
  FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
      $9::bigint[], $10::text[], $11::bigint[])
    AS t(pid, expected, manifest, payload, op, fingerprint, cluster, type, shard, owner, epoch)
  WHERE (t.cluster IS NULL OR EXISTS (SELECT 1 FROM shard_lease l WHERE l.cluster_name = t.cluster
      AND l.entity_type = t.type AND l.shard_id = t.shard AND l.owner = t.owner AND l.epoch = t.epoch
      AND l.lease_until_epoch_ms > movie_now_ms() FOR SHARE))
    AND NOT EXISTS (SELECT 1 FROM journal_operation o WHERE o.persistence_id = t.pid AND o.operation_id = t.op)
    AND ((t.expected = 0 AND ${firstAppendOne("t.pid", "o0")}) OR (SELECT true FROM event_journal j WHERE j.persistence_id = t.pid
      AND j.sequence_nr = t.expected))
  ON CONFLICT DO NOTHING
  RETURNING persistence_id`;

/**
 * Group commit of one-event appends of which some carry outbox messages: APPEND_BATCH_SQL as a data-modifying WITH,
 * and the messages of the appends it wrote in the same statement. $1..$11 are APPEND_BATCH_SQL's arrays; $12..$16 hold
 * one element per message (the sending append's persistence id, the message id, destination, manifest, payload), in
 * each append's message order, and $17..$19 the sending append's shard (its fence's cluster, entity type and shard id,
 * null when unfenced: migration 15). A message goes in only when its append's row went in (the join on `written`), so
 * messages commit with their events or not at all, under the same fence check, and an append that was a duplicate, a
 * conflict or stale writes none (it then goes alone on the unbatched path for its answer). The feed trigger fires at
 * the end of the whole statement, so the batch still takes the feed lock once. A message id already present is
 * skipped, as on the unbatched path.
 */
export const APPEND_OUTBOX_BATCH_SQL = `WITH written AS (${APPEND_BATCH_SQL.replace(
  /RETURNING persistence_id$/,
  "RETURNING persistence_id, operation_id",
)}),
  outbox AS (INSERT INTO persistence_outbox (message_id, persistence_id, operation_id, destination, manifest, payload,
      sender_cluster, sender_type, sender_shard)
    SELECT m.id, w.persistence_id, w.operation_id, m.destination, m.manifest, m.payload, m.cluster, m.type, m.shard
    FROM unnest($12::text[], $13::text[], $14::text[], $15::text[], $16::text[], $17::text[], $18::text[],
        $19::bigint[]) WITH ORDINALITY AS m(pid, id, destination, manifest, payload, cluster, type, shard, position)
      JOIN written w ON w.persistence_id = m.pid
    ORDER BY m.position
    ON CONFLICT (message_id) DO NOTHING)
  SELECT persistence_id FROM written`;
