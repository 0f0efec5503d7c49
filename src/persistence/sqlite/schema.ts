import { buildMigrations, type Migration } from "../migrations.ts";

/** SQLite's "now" in epoch milliseconds: the database clock for leases (docs/protocol.md §13.3). */
export const SQLITE_NOW_MS = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)";

/** The entity type of persistence id `pid` in SQL: its prefix before the first ":" (PostgreSQL's split_part). */
export const entityTypeSql = (pid: string) =>
  `CASE WHEN instr(${pid}, ':') > 0 THEN substr(${pid}, 1, instr(${pid}, ':') - 1) ELSE ${pid} END`;

/**
 * The persistence id of the journal's offset high-water row (see migration 12): no event has it, since a persistence
 * id is never empty.
 */
export const OFFSET_HIGH_WATER_PID = "";

/** The SQLite migrations (the PostgreSQL tables with SQLite types, and from version 12 the offset on the journal). */
export const sqliteMigrations: readonly Migration[] = buildMigrations([
  [
    `CREATE TABLE IF NOT EXISTS event_journal (persistence_id TEXT NOT NULL, sequence_nr INTEGER NOT NULL,
      manifest TEXT NOT NULL, payload TEXT NOT NULL, created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
      PRIMARY KEY (persistence_id, sequence_nr)) WITHOUT ROWID`,
    `CREATE TABLE IF NOT EXISTS event_stream (persistence_id TEXT PRIMARY KEY, revision INTEGER NOT NULL)`,
    `CREATE TABLE IF NOT EXISTS journal_operation (persistence_id TEXT NOT NULL, operation_id TEXT NOT NULL,
      fingerprint TEXT NOT NULL, revision INTEGER NOT NULL, PRIMARY KEY (persistence_id, operation_id)) WITHOUT ROWID`,
    `CREATE TABLE IF NOT EXISTS snapshot_store (persistence_id TEXT PRIMARY KEY, sequence_nr INTEGER NOT NULL,
      manifest TEXT NOT NULL, payload TEXT NOT NULL, updated_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)`,
    `CREATE TABLE IF NOT EXISTS durable_state (persistence_id TEXT PRIMARY KEY, revision INTEGER NOT NULL,
      manifest TEXT NOT NULL, payload TEXT NULL, deleted INTEGER NOT NULL DEFAULT 0,
      updated_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)`,
    `CREATE TABLE IF NOT EXISTS state_operation (persistence_id TEXT NOT NULL, operation_id TEXT NOT NULL,
      fingerprint TEXT NOT NULL, revision INTEGER NOT NULL, PRIMARY KEY (persistence_id, operation_id)) WITHOUT ROWID`,
  ],
  [
    `CREATE TABLE IF NOT EXISTS event_feed (event_offset INTEGER PRIMARY KEY AUTOINCREMENT, persistence_id TEXT NOT NULL,
      sequence_nr INTEGER NOT NULL, manifest TEXT NOT NULL, payload TEXT NOT NULL,
      created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP, UNIQUE (persistence_id, sequence_nr))`,
    `CREATE INDEX IF NOT EXISTS event_feed_pid_idx ON event_feed (persistence_id, event_offset)`,
    `CREATE TABLE IF NOT EXISTS projection_checkpoint (projection_name TEXT PRIMARY KEY, event_offset INTEGER NOT NULL,
      updated_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)`,
  ],
  [
    `CREATE TABLE IF NOT EXISTS persistence_outbox (outbox_offset INTEGER PRIMARY KEY AUTOINCREMENT,
      message_id TEXT NOT NULL UNIQUE, persistence_id TEXT NOT NULL, operation_id TEXT NOT NULL,
      destination TEXT NOT NULL, manifest TEXT NOT NULL, payload TEXT NOT NULL, delivered INTEGER NOT NULL DEFAULT 0,
      attempts INTEGER NOT NULL DEFAULT 0, lease_owner TEXT NULL, lease_until_epoch_ms INTEGER NOT NULL DEFAULT 0,
      last_error TEXT NULL, created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP, delivered_at TEXT NULL)`,
    `CREATE INDEX IF NOT EXISTS persistence_outbox_pending_idx ON persistence_outbox (delivered, outbox_offset)`,
  ],
  [
    `CREATE TABLE IF NOT EXISTS shard_lease (cluster_name TEXT NOT NULL, entity_type TEXT NOT NULL,
      shard_id INTEGER NOT NULL, owner TEXT NOT NULL, epoch INTEGER NOT NULL, lease_until_epoch_ms INTEGER NOT NULL,
      updated_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP, PRIMARY KEY (cluster_name, entity_type, shard_id))`,
  ],
  // Versions 5 to 7 change only PostgreSQL functions; SQLite records them so both backends share one version history.
  [],
  [],
  [],
  // Version 8 records the shard epoch on PostgreSQL event rows: SQLite never runs fenced cluster owners (§4.7).
  [],
  // The event feed (see postgres/feed-schema.ts). SQLite has one writer at a time, so AUTOINCREMENT offsets are in
  // commit order without a lock; a row trigger gives every journal insert its feed row.
  [
    "DROP INDEX IF EXISTS event_feed_pid_idx",
    "DROP TABLE IF EXISTS event_feed",
    "DROP TABLE IF EXISTS event_tag",
    `CREATE TABLE IF NOT EXISTS event_feed (event_offset INTEGER PRIMARY KEY AUTOINCREMENT,
      persistence_id TEXT NOT NULL, sequence_nr INTEGER NOT NULL, entity_type TEXT NOT NULL,
      created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP, UNIQUE (persistence_id, sequence_nr))`,
    "CREATE INDEX IF NOT EXISTS event_feed_type_idx ON event_feed (entity_type, event_offset)",
    `CREATE TABLE IF NOT EXISTS event_tag (tag TEXT NOT NULL, event_offset INTEGER NOT NULL,
      PRIMARY KEY (tag, event_offset)) WITHOUT ROWID`,
    "CREATE INDEX IF NOT EXISTS event_tag_offset_idx ON event_tag (event_offset)",
    `INSERT INTO event_feed (persistence_id, sequence_nr, entity_type)
      SELECT persistence_id, sequence_nr, ${entityTypeSql("persistence_id")} FROM event_journal
      ORDER BY created_at, persistence_id, sequence_nr`,
    `CREATE TRIGGER IF NOT EXISTS movie_event_feed AFTER INSERT ON event_journal FOR EACH ROW BEGIN
      INSERT INTO event_feed (persistence_id, sequence_nr, entity_type)
        VALUES (NEW.persistence_id, NEW.sequence_nr, ${entityTypeSql("NEW.persistence_id")});
    END`,
  ],
  // Outbox dispatch (see postgres/schema.ts, migration 10).
  [
    "CREATE INDEX IF NOT EXISTS persistence_outbox_claim_idx ON persistence_outbox (outbox_offset) WHERE delivered = 0",
    `CREATE INDEX IF NOT EXISTS persistence_outbox_delivered_idx ON persistence_outbox (delivered_at)
      WHERE delivered = 1`,
  ],
  // Reply-with-effects (migration 11): a reply recorded in the append's transaction, returned to a retry of the same
  // operation.
  [
    `CREATE TABLE IF NOT EXISTS operation_reply (persistence_id TEXT NOT NULL, operation_id TEXT NOT NULL,
      manifest TEXT NOT NULL, payload TEXT NOT NULL, created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP,
      PRIMARY KEY (persistence_id, operation_id))`,
  ],
  // The feed offset moves onto the journal row, as its rowid: a feed entry costs no second row. Migration 9's layout
  // (a trigger inserting an event_feed row with three indexes and an AUTOINCREMENT counter per event) took a third of
  // SQLite's append rate; an append now writes the journal row and its (persistence_id, sequence_nr) index entry.
  // A rowid without AUTOINCREMENT is max(rowid) + 1, so offsets stay in commit order (one writer at a time); that
  // retention deleting the newest rows cannot hand their offsets out again is kept by a high-water row (persistence
  // id OFFSET_HIGH_WATER_PID, at most one) that retention writes when it deletes the largest offset. Existing events
  // keep their offsets; event_tag rows keep pointing at them.
  [
    "DROP TRIGGER IF EXISTS movie_event_feed",
    "ALTER TABLE event_journal RENAME TO event_journal_before_v12",
    `CREATE TABLE IF NOT EXISTS event_journal (event_offset INTEGER PRIMARY KEY, persistence_id TEXT NOT NULL,
      sequence_nr INTEGER NOT NULL, manifest TEXT NOT NULL, payload TEXT NOT NULL,
      created_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)`,
    "CREATE UNIQUE INDEX IF NOT EXISTS event_journal_pid_seq_idx ON event_journal (persistence_id, sequence_nr)",
    // The largest offset migration 9's counter handed out, even when retention deleted its row since.
    `INSERT INTO event_journal (event_offset, persistence_id, sequence_nr, manifest, payload)
      SELECT seq, '', 0, 'movie.offset-high-water', '' FROM sqlite_sequence WHERE name = 'event_feed' AND seq > 0`,
    // Every event with its feed offset; one without a feed row (written with the trigger dropped by hand) gets the
    // next ones, in commit-time order.
    `INSERT INTO event_journal (event_offset, persistence_id, sequence_nr, manifest, payload, created_at)
      SELECT f.event_offset, j.persistence_id, j.sequence_nr, j.manifest, j.payload, j.created_at
      FROM event_journal_before_v12 j
        LEFT JOIN event_feed f ON f.persistence_id = j.persistence_id AND f.sequence_nr = j.sequence_nr
      ORDER BY f.event_offset IS NULL, f.event_offset, j.created_at, j.persistence_id, j.sequence_nr`,
    `DELETE FROM event_journal WHERE persistence_id = '' AND event_offset < (SELECT max(event_offset) FROM event_journal)`,
    "DROP TABLE event_journal_before_v12",
    "DROP INDEX IF EXISTS event_feed_type_idx",
    "DROP TABLE IF EXISTS event_feed",
  ],
  // Version 13 gives PostgreSQL's feed lock a key per schema; a SQLite database is one schema (nothing to do).
  [],
  // An operator's control of a projection (pause, a pending rebuild), read by whoever runs it.
  [
    `CREATE TABLE IF NOT EXISTS projection_control (projection_name TEXT PRIMARY KEY,
      paused INTEGER NOT NULL DEFAULT 0, rebuild_from INTEGER NULL, updated_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)`,
  ],
  // Claims follow shard ownership (see postgres/outbox-sql.ts, outboxShardClaimsMigration): the sender's shard and
  // the epoch of the current claim, NULL for every existing row (claimable by any claimer that wants rows without a
  // shard). The migration runs in one transaction with its history row, so a plain ADD COLUMN runs once.
  [
    "ALTER TABLE persistence_outbox ADD COLUMN sender_cluster TEXT NULL",
    "ALTER TABLE persistence_outbox ADD COLUMN sender_type TEXT NULL",
    "ALTER TABLE persistence_outbox ADD COLUMN sender_shard INTEGER NULL",
    "ALTER TABLE persistence_outbox ADD COLUMN claim_epoch INTEGER NULL",
    `CREATE INDEX IF NOT EXISTS persistence_outbox_shard_claim_idx
      ON persistence_outbox (sender_type, sender_shard, outbox_offset) WHERE delivered = 0`,
    `CREATE INDEX IF NOT EXISTS persistence_outbox_unsharded_claim_idx ON persistence_outbox (outbox_offset)
      WHERE delivered = 0 AND sender_shard IS NULL`,
    "DROP INDEX IF EXISTS persistence_outbox_claim_idx",
  ],
  // Version 16 moves PostgreSQL's feed offset onto the journal row, where SQLite's has been since version 12.
  [],
]);
