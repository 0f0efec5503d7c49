/**
 * The PostgreSQL side of the event feed (migration 9): offsets, entity types and tags of committed events, assigned
 * by a statement-level trigger on event_journal, so every append path (the one-event hot path, group commit's batch
 * statement, movie_append_events, movie_append_one_settle) gets offsets without an edit and a group-commit batch takes
 * the feed lock once, not once per row. The statement texts are part of a checksummed migration: keep them
 * byte-identical.
 */

/** Migration 9's transaction advisory lock of feed offsets (0x4d4f564945455654), one for the whole database. */
export const FEED_LOCK_KEY = 0x4d4f564945455654n;

/**
 * From migration 13 the feed lock is the two-key advisory lock (FEED_LOCK_CLASS, hashtext(schema)) (docs/protocol.md
 * §13.2): offsets are per schema, so only one schema's appends need to wait for each other. With migration 9's single
 * key, every Movie schema of a database (one per deployment, or per test) serialised its appends behind every other's,
 * and one schema's long append transaction stalled the others' appends.
 */
export const FEED_LOCK_CLASS = 0x4d4f5646;

/** The LISTEN/NOTIFY channel of feed commits; the payload is the schema that committed (current_schema()). */
export const FEED_CHANNEL = "movie_event_feed";

/**
 * Migration 13: the feed trigger locks its own schema's offsets only (`TG_TABLE_SCHEMA`: the journal's schema, whatever
 * the search_path). Two schemas whose names hash alike share the lock, which only makes them wait for each other.
 */
export const feedLockPerSchemaMigration: string[] = [
  `CREATE OR REPLACE FUNCTION movie_feed_append() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        -- A statement that inserted nothing (a stale fence, a retry) takes no lock.
        IF NOT EXISTS (SELECT 1 FROM movie_new_events) THEN
          RETURN NULL;
        END IF;
        PERFORM pg_advisory_xact_lock(${FEED_LOCK_CLASS}, hashtext(TG_TABLE_SCHEMA));
        INSERT INTO event_feed (persistence_id, sequence_nr, entity_type)
          SELECT n.persistence_id, n.sequence_nr, split_part(n.persistence_id, ':', 1) FROM movie_new_events n
          ORDER BY n.persistence_id, n.sequence_nr;
        PERFORM pg_notify('${FEED_CHANNEL}', current_schema());
        RETURN NULL;
      END $$`,
];

/** The sequence of feed offsets from migration 16, one per schema. */
export const FEED_OFFSET_SEQUENCE = "event_journal_offset";

/**
 * From migration 16 the feed lock is the single-key advisory lock (FEED_LOCK_CLASS << 32 | the oid of the schema's
 * FEED_OFFSET_SEQUENCE): in pg_locks, classid FEED_LOCK_CLASS, objid that oid, objsubid 1. The key is exact per schema
 * (migration 13's hashtext could make two schemas share it) and folds to a constant when a statement is planned.
 */
export const FEED_LOCK_KEY_SQL = `(${FEED_LOCK_CLASS}::bigint << 32) | '${FEED_OFFSET_SEQUENCE}'::regclass::oid::bigint`;

/**
 * Migration 16: the offset on the journal row (docs/persistence-feed.md, "Offsets and the feed lock"). Migration 9's
 * trigger cost a PostgreSQL append 11 to 20 % of its rate, nearly all of it its second row: the event_feed heap row
 * and its three index entries (bench/feed-cost-breakdown.ts). Now `event_journal.event_offset` is a column whose
 * default is one CASE of built-in functions, evaluated for each row the append statement writes, before the row is
 * inserted: the feed lock (granted once; every later row of the transaction finds it held, a local lookup), the
 * notification (queued once; later rows' are duplicates the server drops), then the next value of the schema's offset
 * sequence. No PL/pgSQL runs per row or per statement. The lock is held to the commit, as before, so offsets are
 * handed out in commit order; a statement that writes no row (a stale fence, a retry) evaluates no default and takes
 * no lock. Every writer takes the lock before it inserts its first journal row, so a holder never waits for another
 * writer's uncommitted journal row (that writer would hold the lock).
 *
 * Every event keeps its offset; an event without a feed row (a trigger dropped by hand) gets the next offsets in its
 * created_at order, and the sequence starts above every offset migration 9's identity handed out (a gap is never
 * filled later). event_feed becomes a view of the journal with the same columns, for SQL written against it; its tags
 * stay in event_tag. Queries filter entity types without an index (the feed table's index entry per event was a
 * third of its cost), reading forward in offset order as SQLite does.
 */
export const journalOffsetMigration = (fenceCheck: string): string[] => [
  "DROP TRIGGER IF EXISTS movie_event_feed ON event_journal",
  "DROP FUNCTION IF EXISTS movie_feed_append()",
  `CREATE SEQUENCE IF NOT EXISTS ${FEED_OFFSET_SEQUENCE}`,
  "ALTER TABLE event_journal ADD COLUMN IF NOT EXISTS event_offset BIGINT NULL",
  `UPDATE event_journal j SET event_offset = f.event_offset FROM event_feed f
      WHERE f.persistence_id = j.persistence_id AND f.sequence_nr = j.sequence_nr`,
  `UPDATE event_journal j SET event_offset = m.high + r.n
      FROM (SELECT persistence_id, sequence_nr,
              row_number() OVER (ORDER BY created_at, persistence_id, sequence_nr) AS n
            FROM event_journal WHERE event_offset IS NULL) r,
        (SELECT greatest((SELECT coalesce(max(event_offset), 0) FROM event_feed),
            coalesce(pg_sequence_last_value(pg_get_serial_sequence('event_feed', 'event_offset')::regclass), 0)) AS high) m
      WHERE j.persistence_id = r.persistence_id AND j.sequence_nr = r.sequence_nr`,
  `SELECT setval('${FEED_OFFSET_SEQUENCE}', greatest(h.high, 1), h.high > 0)
      FROM (SELECT greatest((SELECT coalesce(max(event_offset), 0) FROM event_journal),
            coalesce(pg_sequence_last_value(pg_get_serial_sequence('event_feed', 'event_offset')::regclass), 0)) AS high) h`,
  "ALTER TABLE event_journal ALTER COLUMN event_offset SET NOT NULL",
  "CREATE UNIQUE INDEX IF NOT EXISTS event_journal_offset_idx ON event_journal (event_offset)",
  `ALTER TABLE event_journal ALTER COLUMN event_offset SET DEFAULT CASE
      WHEN pg_advisory_xact_lock(${FEED_LOCK_KEY_SQL}) IS NULL THEN NULL
      WHEN pg_notify('${FEED_CHANNEL}', current_schema()) IS NULL THEN NULL
      ELSE nextval('${FEED_OFFSET_SEQUENCE}'::regclass) END`,
  "DROP INDEX IF EXISTS event_feed_type_idx",
  "DROP TABLE event_feed",
  `CREATE VIEW event_feed AS SELECT j.event_offset, j.persistence_id, j.sequence_nr,
      split_part(j.persistence_id, ':', 1) AS entity_type, j.created_at FROM event_journal j`,
  // The tags of the rows the append wrote, by their offsets on the journal rows.
  `CREATE OR REPLACE FUNCTION movie_append_tagged(p_pid text, p_expected bigint, p_op text, p_fingerprint text,
        p_manifest text, p_payload text, p_more_manifests text[], p_more_payloads text[], p_tag_index int[],
        p_tags text[], p_cluster text, p_type text, p_shard bigint, p_owner text, p_epoch bigint)
      RETURNS bigint LANGUAGE plpgsql AS $$
      DECLARE
        v_outcome bigint;
      BEGIN
        v_outcome := movie_append_events(p_pid, p_expected, p_op, p_fingerprint, p_manifest, p_payload,
          p_more_manifests, p_more_payloads, p_cluster, p_type, p_shard, p_owner, p_epoch);
        IF v_outcome >= 0 AND v_outcome % 4 = 0 AND v_outcome / 4 > p_expected THEN
          INSERT INTO event_tag (tag, event_offset)
            SELECT t.tag, j.event_offset FROM unnest(p_tag_index, p_tags) AS t(i, tag)
              JOIN event_journal j ON j.persistence_id = p_pid AND j.sequence_nr = p_expected + t.i
            ON CONFLICT DO NOTHING;
        END IF;
        RETURN v_outcome;
      END $$`,
  // Retention: the tags of the rows it removes go first (their offsets leave with the rows).
  `CREATE OR REPLACE FUNCTION movie_delete_events_to(p_pid text, p_seq bigint, p_cluster text, p_type text,
        p_shard bigint, p_owner text, p_epoch bigint, OUT status int, OUT revision bigint)
      LANGUAGE plpgsql AS $$
      DECLARE
        v_snapshot bigint;
        v_deleted bigint;
        v_max_offset bigint;
        v_behind bigint;
      BEGIN
        ${fenceCheck}
        SELECT s.sequence_nr INTO v_snapshot FROM snapshot_store s WHERE s.persistence_id = p_pid FOR SHARE;
        IF v_snapshot IS NULL OR v_snapshot < p_seq THEN
          status := 4; revision := coalesce(v_snapshot, -1); RETURN;
        END IF;
        SELECT max(j.event_offset) INTO v_max_offset FROM event_journal j
          WHERE j.persistence_id = p_pid AND j.sequence_nr <= p_seq;
        IF v_max_offset IS NOT NULL THEN
          SELECT min(c.event_offset) INTO v_behind FROM projection_checkpoint c WHERE c.event_offset < v_max_offset;
          IF v_behind IS NOT NULL THEN
            status := 5; revision := v_behind; RETURN;
          END IF;
        END IF;
        INSERT INTO event_stream AS s (persistence_id, revision) VALUES (p_pid, movie_stream_revision(p_pid))
          ON CONFLICT (persistence_id) DO UPDATE SET revision = greatest(s.revision, EXCLUDED.revision);
        INSERT INTO journal_operation (persistence_id, operation_id, fingerprint, revision)
          SELECT j.persistence_id, j.operation_id, j.fingerprint, j.operation_revision FROM event_journal j
            WHERE j.persistence_id = p_pid AND j.sequence_nr <= p_seq AND j.operation_id IS NOT NULL
          ON CONFLICT DO NOTHING;
        DELETE FROM event_tag WHERE event_offset IN (SELECT j.event_offset FROM event_journal j
          WHERE j.persistence_id = p_pid AND j.sequence_nr <= p_seq);
        DELETE FROM event_journal WHERE persistence_id = p_pid AND sequence_nr <= p_seq;
        GET DIAGNOSTICS v_deleted = ROW_COUNT;
        status := 0; revision := v_deleted;
      END $$`,
];

/**
 * Migration 9's statements. `fenceCheck` is the fenced-write prologue of schema.ts (returns status 3 when stale).
 *
 * The trigger takes the feed lock and inserts the feed rows at the end of the journal INSERT statement; the lock is
 * held until the transaction ends, so offsets are handed out in commit order: the lock is released after the commit
 * became visible (PostgreSQL releases locks after ProcArrayEndTransaction), so a transaction that gets a larger
 * offset commits after every smaller one. Every append statement is its own implicit transaction, so the lock is held
 * from the feed insert through the commit only. Feed rows carry no payload: queries read it from the journal row.
 */
export const feedMigration = (fenceCheck: string): string[] => [
  // Migration 2's table was never written; its new shape drops the payload copy and adds the entity type. (Run over a
  // database whose history rows were removed by hand, the feed is rebuilt from the journal.)
  "DROP INDEX IF EXISTS event_feed_pid_idx",
  "DROP TABLE IF EXISTS event_feed",
  "DROP TABLE IF EXISTS event_tag",
  `CREATE TABLE IF NOT EXISTS event_feed (event_offset BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      persistence_id TEXT NOT NULL, sequence_nr BIGINT NOT NULL, entity_type TEXT NOT NULL,
      created_at TIMESTAMPTZ NOT NULL DEFAULT now(), UNIQUE (persistence_id, sequence_nr))`,
  "CREATE INDEX IF NOT EXISTS event_feed_type_idx ON event_feed (entity_type, event_offset)",
  `CREATE TABLE IF NOT EXISTS event_tag (tag TEXT NOT NULL, event_offset BIGINT NOT NULL,
      PRIMARY KEY (tag, event_offset))`,
  "CREATE INDEX IF NOT EXISTS event_tag_offset_idx ON event_tag (event_offset)",
  // Events written before this migration get offsets in their commit-time order.
  `INSERT INTO event_feed (persistence_id, sequence_nr, entity_type)
      SELECT persistence_id, sequence_nr, split_part(persistence_id, ':', 1) FROM event_journal
      ORDER BY created_at, persistence_id, sequence_nr`,
  `CREATE OR REPLACE FUNCTION movie_feed_append() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        -- A statement that inserted nothing (a stale fence, a retry) takes no lock.
        IF NOT EXISTS (SELECT 1 FROM movie_new_events) THEN
          RETURN NULL;
        END IF;
        PERFORM pg_advisory_xact_lock(${FEED_LOCK_KEY});
        INSERT INTO event_feed (persistence_id, sequence_nr, entity_type)
          SELECT n.persistence_id, n.sequence_nr, split_part(n.persistence_id, ':', 1) FROM movie_new_events n
          ORDER BY n.persistence_id, n.sequence_nr;
        PERFORM pg_notify('${FEED_CHANNEL}', current_schema());
        RETURN NULL;
      END $$`,
  "DROP TRIGGER IF EXISTS movie_event_feed ON event_journal",
  `CREATE TRIGGER movie_event_feed AFTER INSERT ON event_journal REFERENCING NEW TABLE AS movie_new_events
      FOR EACH STATEMENT EXECUTE FUNCTION movie_feed_append()`,
  // A tagged append: movie_append_events, then the tags of the rows it wrote, in the same transaction (the feed lock
  // is already held). p_tag_index[i] is the 1-based position of p_tags[i]'s event in the append.
  `CREATE OR REPLACE FUNCTION movie_append_tagged(p_pid text, p_expected bigint, p_op text, p_fingerprint text,
        p_manifest text, p_payload text, p_more_manifests text[], p_more_payloads text[], p_tag_index int[],
        p_tags text[], p_cluster text, p_type text, p_shard bigint, p_owner text, p_epoch bigint)
      RETURNS bigint LANGUAGE plpgsql AS $$
      DECLARE
        v_outcome bigint;
      BEGIN
        v_outcome := movie_append_events(p_pid, p_expected, p_op, p_fingerprint, p_manifest, p_payload,
          p_more_manifests, p_more_payloads, p_cluster, p_type, p_shard, p_owner, p_epoch);
        IF v_outcome >= 0 AND v_outcome % 4 = 0 AND v_outcome / 4 > p_expected THEN
          INSERT INTO event_tag (tag, event_offset)
            SELECT t.tag, f.event_offset FROM unnest(p_tag_index, p_tags) AS t(i, tag)
              JOIN event_feed f ON f.persistence_id = p_pid AND f.sequence_nr = p_expected + t.i
            ON CONFLICT DO NOTHING;
        END IF;
        RETURN v_outcome;
      END $$`,
  // Retention also removes the feed rows' tags, and refuses (status 5, revision = the lagging checkpoint) while a
  // projection's checkpoint is below the largest offset it would delete (docs/protocol.md §13.1).
  `CREATE OR REPLACE FUNCTION movie_delete_events_to(p_pid text, p_seq bigint, p_cluster text, p_type text,
        p_shard bigint, p_owner text, p_epoch bigint, OUT status int, OUT revision bigint)
      LANGUAGE plpgsql AS $$
      DECLARE
        v_snapshot bigint;
        v_deleted bigint;
        v_max_offset bigint;
        v_behind bigint;
      BEGIN
        ${fenceCheck}
        SELECT s.sequence_nr INTO v_snapshot FROM snapshot_store s WHERE s.persistence_id = p_pid FOR SHARE;
        IF v_snapshot IS NULL OR v_snapshot < p_seq THEN
          status := 4; revision := coalesce(v_snapshot, -1); RETURN;
        END IF;
        SELECT max(f.event_offset) INTO v_max_offset FROM event_feed f
          WHERE f.persistence_id = p_pid AND f.sequence_nr <= p_seq;
        IF v_max_offset IS NOT NULL THEN
          SELECT min(c.event_offset) INTO v_behind FROM projection_checkpoint c WHERE c.event_offset < v_max_offset;
          IF v_behind IS NOT NULL THEN
            status := 5; revision := v_behind; RETURN;
          END IF;
        END IF;
        INSERT INTO event_stream AS s (persistence_id, revision) VALUES (p_pid, movie_stream_revision(p_pid))
          ON CONFLICT (persistence_id) DO UPDATE SET revision = greatest(s.revision, EXCLUDED.revision);
        INSERT INTO journal_operation (persistence_id, operation_id, fingerprint, revision)
          SELECT j.persistence_id, j.operation_id, j.fingerprint, j.operation_revision FROM event_journal j
            WHERE j.persistence_id = p_pid AND j.sequence_nr <= p_seq AND j.operation_id IS NOT NULL
          ON CONFLICT DO NOTHING;
        DELETE FROM event_journal WHERE persistence_id = p_pid AND sequence_nr <= p_seq;
        GET DIAGNOSTICS v_deleted = ROW_COUNT;
        DELETE FROM event_tag WHERE event_offset IN (SELECT f.event_offset FROM event_feed f
          WHERE f.persistence_id = p_pid AND f.sequence_nr <= p_seq);
        DELETE FROM event_feed WHERE persistence_id = p_pid AND sequence_nr <= p_seq;
        status := 0; revision := v_deleted;
      END $$`,
];

/**
 * The statement of a feed page with these filters: $1 after offset, $2 limit, then the present filters in the order
 * entity types (text[]), persistence id, tag. One statement per filter combination rather than `$n IS NULL OR ...`:
 * every connection uses generic plans (sessionOptions), and a generic plan of the catch-all form could not use the
 * persistence-id or tag index. From migration 16 the page reads the journal in offset order (its offset index); the
 * entity type is the persistence id's prefix, filtered without an index; tags come from event_tag.
 */
export function queryEventsSql(types: boolean, pid: boolean, tag: boolean): string {
  const where = ["j.event_offset > $1"];
  let n = 3;
  if (types) where.push(`split_part(j.persistence_id, ':', 1) = ANY($${n++}::text[])`);
  if (pid) where.push(`j.persistence_id = $${n++}`);
  if (tag) {
    where.push(
      `j.event_offset IN (SELECT g.event_offset FROM event_tag g WHERE g.tag = $${n++} AND g.event_offset > $1)`,
    );
  }
  return `SELECT j.event_offset, j.persistence_id, split_part(j.persistence_id, ':', 1) AS entity_type, j.sequence_nr,
    j.manifest, j.payload,
    (SELECT array_agg(t.tag ORDER BY t.tag) FROM event_tag t WHERE t.event_offset = j.event_offset) AS tags
  FROM event_journal j
  WHERE ${where.join(" AND ")}
  ORDER BY j.event_offset
  LIMIT $2`;
}
