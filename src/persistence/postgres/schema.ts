import { buildMigrations, type Migration } from "../migrations.ts";

/** The advisory lock that serialises migrations across nodes (REFERENCE §4.4). */
export const MIGRATION_LOCK_KEY = 0x4d4f564945505253n;

/** SQLSTATE raised by the write functions when the stream or state revision is not the expected one. */
export const REVISION_MISMATCH_SQLSTATE = "MV001";

// Write functions: each runs a whole fenced write as one statement, so an append costs one round trip (the issue's
// note: separate BEGIN/SELECT/INSERT/COMMIT round trips fell to 48% of the raw INSERT ceiling). Status codes:
// 0 written, 1 duplicate, 2 operation conflict, 3 stale shard owner. A revision mismatch raises MV001 so that the
// operation-id row inserted earlier in the same statement rolls back. The fence row is locked FOR SHARE: writers on
// one shard do not queue behind each other, but a transfer or renewal (an UPDATE of that row) waits for every
// in-flight fenced write to commit, which is what REFERENCE §4.6 requires of the lock.
const fenceCheck = `
  IF p_owner IS NOT NULL THEN
    PERFORM 1 FROM shard_lease
      WHERE cluster_name = p_cluster AND entity_type = p_type AND shard_id = p_shard AND owner = p_owner
        AND epoch = p_epoch AND lease_until_epoch_ms > movie_now_ms()
      FOR SHARE;
    IF NOT FOUND THEN
      RETURN QUERY SELECT 3, 0::bigint; RETURN;
    END IF;
  END IF;`;

const fenceParams = "p_cluster text, p_type text, p_shard bigint, p_owner text, p_epoch bigint";

/** The PostgreSQL migrations 1..4. */
export const postgresMigrations: readonly Migration[] = buildMigrations([
  [
    `CREATE TABLE IF NOT EXISTS event_journal (persistence_id TEXT NOT NULL, sequence_nr BIGINT NOT NULL,
      manifest TEXT NOT NULL, payload TEXT NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
      PRIMARY KEY (persistence_id, sequence_nr))`,
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
    // The database clock (REFERENCE §4.5): clock_timestamp() moves within a transaction, unlike now().
    `CREATE OR REPLACE FUNCTION movie_now_ms() RETURNS bigint LANGUAGE sql VOLATILE AS
      $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint $$`,
    `CREATE OR REPLACE FUNCTION movie_append_events(p_pid text, p_expected bigint, p_op text, p_fingerprint text,
        p_manifests text[], p_payloads text[], ${fenceParams})
      RETURNS TABLE (status int, revision bigint) LANGUAGE plpgsql AS $$
      DECLARE
        v_count bigint := coalesce(array_length(p_manifests, 1), 0);
        v_revision bigint := p_expected + v_count;
        v_previous record;
        v_actual bigint;
      BEGIN
        ${fenceCheck}
        INSERT INTO journal_operation (persistence_id, operation_id, fingerprint, revision)
          VALUES (p_pid, p_op, p_fingerprint, v_revision) ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
          SELECT o.fingerprint, o.revision INTO v_previous FROM journal_operation o
            WHERE o.persistence_id = p_pid AND o.operation_id = p_op;
          IF v_previous.fingerprint = p_fingerprint THEN
            RETURN QUERY SELECT 1, v_previous.revision; RETURN;
          END IF;
          RETURN QUERY SELECT 2, v_previous.revision; RETURN;
        END IF;
        IF v_count = 0 THEN
          SELECT s.revision INTO v_actual FROM event_stream s WHERE s.persistence_id = p_pid;
          IF coalesce(v_actual, 0) <> p_expected THEN
            RAISE EXCEPTION USING ERRCODE = '${REVISION_MISMATCH_SQLSTATE}', MESSAGE = coalesce(v_actual, 0)::text;
          END IF;
          RETURN QUERY SELECT 0, p_expected; RETURN;
        END IF;
        IF p_expected = 0 THEN
          INSERT INTO event_stream AS s (persistence_id, revision) VALUES (p_pid, v_revision)
            ON CONFLICT (persistence_id) DO UPDATE SET revision = EXCLUDED.revision WHERE s.revision = 0;
        ELSE
          UPDATE event_stream s SET revision = v_revision WHERE s.persistence_id = p_pid AND s.revision = p_expected;
        END IF;
        IF NOT FOUND THEN
          SELECT s.revision INTO v_actual FROM event_stream s WHERE s.persistence_id = p_pid;
          RAISE EXCEPTION USING ERRCODE = '${REVISION_MISMATCH_SQLSTATE}', MESSAGE = coalesce(v_actual, 0)::text;
        END IF;
        INSERT INTO event_journal (persistence_id, sequence_nr, manifest, payload)
          SELECT p_pid, p_expected + t.i, t.m, t.p FROM unnest(p_manifests, p_payloads) WITH ORDINALITY AS t(m, p, i);
        RETURN QUERY SELECT 0, v_revision;
      END $$`,
    `CREATE OR REPLACE FUNCTION movie_write_state(p_pid text, p_expected bigint, p_op text, p_fingerprint text,
        p_manifest text, p_payload text, p_deleted bigint, ${fenceParams})
      RETURNS TABLE (status int, revision bigint) LANGUAGE plpgsql AS $$
      DECLARE
        v_revision bigint := p_expected + 1;
        v_previous record;
        v_actual bigint;
      BEGIN
        ${fenceCheck}
        INSERT INTO state_operation (persistence_id, operation_id, fingerprint, revision)
          VALUES (p_pid, p_op, p_fingerprint, v_revision) ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
          SELECT o.fingerprint, o.revision INTO v_previous FROM state_operation o
            WHERE o.persistence_id = p_pid AND o.operation_id = p_op;
          IF v_previous.fingerprint = p_fingerprint THEN
            RETURN QUERY SELECT 1, v_previous.revision; RETURN;
          END IF;
          RETURN QUERY SELECT 2, v_previous.revision; RETURN;
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
        RETURN QUERY SELECT 0, v_revision;
      END $$`,
    `CREATE OR REPLACE FUNCTION movie_save_snapshot(p_pid text, p_seq bigint, p_manifest text, p_payload text,
        ${fenceParams})
      RETURNS TABLE (status int, revision bigint) LANGUAGE plpgsql AS $$
      BEGIN
        ${fenceCheck}
        INSERT INTO snapshot_store AS s (persistence_id, sequence_nr, manifest, payload)
          VALUES (p_pid, p_seq, p_manifest, p_payload)
          ON CONFLICT (persistence_id) DO UPDATE SET sequence_nr = EXCLUDED.sequence_nr, manifest = EXCLUDED.manifest,
            payload = EXCLUDED.payload, updated_at = now()
          WHERE EXCLUDED.sequence_nr >= s.sequence_nr;
        RETURN QUERY SELECT 0, (CASE WHEN FOUND THEN 1 ELSE 0 END)::bigint;
      END $$`,
    `CREATE OR REPLACE FUNCTION movie_delete_snapshot(p_pid text, ${fenceParams})
      RETURNS TABLE (status int, revision bigint) LANGUAGE plpgsql AS $$
      BEGIN
        ${fenceCheck}
        DELETE FROM snapshot_store WHERE persistence_id = p_pid;
        RETURN QUERY SELECT 0, (CASE WHEN FOUND THEN 1 ELSE 0 END)::bigint;
      END $$`,
    // Status 4: no snapshot covers the requested sequence (revision carries the snapshot's sequence, or -1).
    `CREATE OR REPLACE FUNCTION movie_delete_events_to(p_pid text, p_seq bigint, ${fenceParams})
      RETURNS TABLE (status int, revision bigint) LANGUAGE plpgsql AS $$
      DECLARE
        v_snapshot bigint;
        v_deleted bigint;
      BEGIN
        ${fenceCheck}
        SELECT s.sequence_nr INTO v_snapshot FROM snapshot_store s WHERE s.persistence_id = p_pid FOR SHARE;
        IF v_snapshot IS NULL OR v_snapshot < p_seq THEN
          RETURN QUERY SELECT 4, coalesce(v_snapshot, -1); RETURN;
        END IF;
        DELETE FROM event_journal WHERE persistence_id = p_pid AND sequence_nr <= p_seq;
        GET DIAGNOSTICS v_deleted = ROW_COUNT;
        DELETE FROM event_feed WHERE persistence_id = p_pid AND sequence_nr <= p_seq;
        RETURN QUERY SELECT 0, v_deleted;
      END $$`,
  ],
]);

/** Every migration's SQL as one script, for review or manual application (`movie persistence migrate --print`). */
export function postgresMigrationSql(): string {
  const lines = [
    "-- movie persistence schema (PostgreSQL), versions 1..4",
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
