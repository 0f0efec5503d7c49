// Migration checksums hash the statements: a history applied by a build whose migration SQL differs is refused on
// PostgreSQL and SQLite alike; a database recorded by an earlier build (version-and-name checksums) is re-baselined
// once when the objects its history creates exist, and refused when they do not.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import Database from "better-sqlite3";
import { ActorSystem } from "../../src/actor/index.ts";
import {
  legacyMigrationChecksum,
  type Migration,
  MigrationChecksumMismatchError,
  migrationChecksum,
  Database as PersistenceDatabase,
  planMigrations,
  schemaObjects,
} from "../../src/persistence/index.ts";
import { PostgresStore, postgresMigrations } from "../../src/persistence/postgres/index.ts";
import { SqliteStore, sqliteMigrations } from "../../src/persistence/sqlite/index.ts";
import { CapturingLogger } from "../actor/support.ts";
import { dropSchema, postgresTestUrl, rawClient, uniqueSchema } from "./pg-fixture.ts";

const dir = mkdtempSync(join(tmpdir(), "movie-migrations-"));
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
let n = 0;
const freshPath = () => join(dir, `db-${++n}.sqlite3`);

/** Every version this build knows, 1..n. */
const allVersions = sqliteMigrations.map((m) => m.version);
const fencing = (known: readonly Migration[]) => known[3]!;
/** The checksum a build whose migration 4 were `DROP TABLE shard_lease` would record. */
const tampered = (known: readonly Migration[]) => migrationChecksum(4, fencing(known).name, ["DROP TABLE shard_lease"]);

const mismatch = (version: number, missing?: string) => (error: unknown) => {
  assert.ok(error instanceof MigrationChecksumMismatchError, String(error));
  assert.equal(error.name, "MigrationChecksumMismatchError");
  assert.equal(error.version, version);
  if (missing === undefined) {
    assert.deepEqual(error.missingObjects, []);
    assert.match(error.message, /restore it from a backup/);
  } else {
    assert.ok(error.missingObjects.includes(missing), `${missing} in ${error.missingObjects.join(", ")}`);
    assert.match(error.message, /not migrated by this history/);
  }
  return true;
};

test("migration checksums: the statements are hashed; earlier builds' rows are planned for a re-baseline", () => {
  for (const known of [postgresMigrations, sqliteMigrations]) {
    const applied = known.map((m) => ({ version: m.version, name: m.name, checksum: m.checksum }));
    assert.deepEqual(planMigrations(known, applied), { pending: [], rebaseline: [], appliedThrough: known.length });
    assert.notEqual(tampered(known), fencing(known).checksum);
    // Same version and name, other statements: refused.
    const edited = applied.map((row) => (row.version === 4 ? { ...row, checksum: tampered(known) } : row));
    assert.throws(() => planMigrations(known, edited), mismatch(4));
    // One statement split in two hashes differently too (statements are length-prefixed).
    assert.notEqual(migrationChecksum(1, "x", ["ab", "c"]), migrationChecksum(1, "x", ["a", "bc"]));
    // Earlier builds' checksums: accepted for a re-baseline, in version order; the name must still match.
    const legacy = applied.map((row) => ({ ...row, checksum: legacyMigrationChecksum(row.version, row.name) }));
    const plan = planMigrations(known, legacy.slice(0, 5).reverse());
    assert.deepEqual(
      plan.rebaseline.map((m) => m.version),
      [1, 2, 3, 4, 5],
    );
    assert.deepEqual(
      plan.pending.map((m) => m.version),
      known.slice(5).map((m) => m.version),
    );
    const renamed = legacy.map((row) =>
      row.version === 2 ? { ...row, name: "other", checksum: legacyMigrationChecksum(2, "other") } : row,
    );
    assert.throws(() => planMigrations(known, renamed), mismatch(2));
  }
  // What the applied history leaves behind: created objects minus the ones a later migration dropped.
  const pg = schemaObjects(postgresMigrations, 7).map((o) => `${o.kind}:${o.name}`);
  assert.ok(pg.includes("table:shard_lease") && pg.includes("function:movie_append_one_settle"));
  assert.ok(schemaObjects(postgresMigrations, 5).some((o) => o.name === "movie_append_one_resolve"));
  assert.ok(!pg.includes("function:movie_append_one_resolve"), "dropped by migration 6");
  assert.ok(schemaObjects(sqliteMigrations, 7).some((o) => o.kind === "index" && o.name === "event_feed_pid_idx"));
});

test("sqlite: a history with other SQL is refused; an earlier build's is re-baselined once if its objects exist", async () => {
  const path = freshPath();
  (await SqliteStore.open({ dbPath: path })).close();
  const raw = new Database(path);
  raw.prepare("UPDATE movie_schema_migration SET checksum = ? WHERE version = 4").run(tampered(sqliteMigrations));
  assert.throws(() => SqliteStore.open({ dbPath: path }), mismatch(4));
  // As an earlier build left it: every row with the version-and-name checksum.
  const legacyRows = raw.prepare("UPDATE movie_schema_migration SET checksum = ? WHERE version = ?");
  for (const m of sqliteMigrations) legacyRows.run(legacyMigrationChecksum(m.version, m.name), m.version);
  const first = SqliteStore.open({ dbPath: path });
  assert.deepEqual(first.rebaselinedMigrations, allVersions);
  await first.close();
  const rows = raw.prepare("SELECT version, checksum FROM movie_schema_migration ORDER BY version").all() as {
    version: number;
    checksum: string;
  }[];
  assert.deepEqual(
    rows.map((r) => r.checksum),
    sqliteMigrations.map((m) => m.checksum),
  );
  const second = SqliteStore.open({ dbPath: path });
  assert.deepEqual(second.rebaselinedMigrations, [], "once");
  await second.close();
  // An earlier build's rows over a database that lacks what the history creates: refused, nothing rewritten.
  for (const m of sqliteMigrations) legacyRows.run(legacyMigrationChecksum(m.version, m.name), m.version);
  raw.exec("DROP TABLE shard_lease");
  assert.throws(() => SqliteStore.open({ dbPath: path }), mismatch(1, "table shard_lease"));
  const kept = raw.prepare("SELECT checksum FROM movie_schema_migration WHERE version = 1").get() as {
    checksum: string;
  };
  assert.equal(kept.checksum, legacyMigrationChecksum(1, sqliteMigrations[0]!.name));
  raw.close();
});

test("postgres: a history with other SQL is refused; an earlier build's is re-baselined once if its objects exist", async () => {
  const url = await postgresTestUrl();
  const schema = uniqueSchema("checksum");
  const raw = await rawClient(url, schema);
  try {
    await (await PostgresStore.connect({ connectionUri: url, schema, poolSize: 1 })).close();
    await raw.query("UPDATE movie_schema_migration SET checksum = $1 WHERE version = 4", [
      tampered(postgresMigrations),
    ]);
    await assert.rejects(PostgresStore.connect({ connectionUri: url, schema, poolSize: 1 }), mismatch(4));
    const setLegacy = async () => {
      for (const m of postgresMigrations) {
        await raw.query("UPDATE movie_schema_migration SET checksum = $1 WHERE version = $2", [
          legacyMigrationChecksum(m.version, m.name),
          m.version,
        ]);
      }
    };
    await setLegacy();
    const first = await PostgresStore.connect({ connectionUri: url, schema, poolSize: 1 });
    assert.deepEqual(first.rebaselinedMigrations, allVersions);
    await first.close();
    const rows = await raw.query("SELECT checksum FROM movie_schema_migration ORDER BY version");
    assert.deepEqual(
      rows.rows.map((r: { checksum: string }) => r.checksum),
      postgresMigrations.map((m) => m.checksum),
    );
    const second = await PostgresStore.connect({ connectionUri: url, schema, poolSize: 1 });
    assert.deepEqual(second.rebaselinedMigrations, [], "once");
    await second.close();
    await setLegacy();
    await raw.query("DROP TABLE shard_lease CASCADE");
    await assert.rejects(
      PostgresStore.connect({ connectionUri: url, schema, poolSize: 1 }),
      mismatch(1, "table shard_lease"),
    );
    await raw.query("DROP FUNCTION movie_append_one_settle");
    await assert.rejects(
      PostgresStore.connect({ connectionUri: url, schema, poolSize: 1 }),
      mismatch(1, "function movie_append_one_settle"),
    );
    const kept = await raw.query("SELECT checksum FROM movie_schema_migration WHERE version = 1");
    assert.equal(kept.rows[0].checksum, legacyMigrationChecksum(1, postgresMigrations[0]!.name));
  } finally {
    await raw.end();
    await dropSchema(url, schema);
  }
});

test("Database.configure logs the versions it re-baselined, once", async () => {
  const path = freshPath();
  (await SqliteStore.open({ dbPath: path })).close();
  const raw = new Database(path);
  for (const m of sqliteMigrations) {
    raw
      .prepare("UPDATE movie_schema_migration SET checksum = ? WHERE version = ?")
      .run(legacyMigrationChecksum(m.version, m.name), m.version);
  }
  raw.close();
  for (const expected of [allVersions, null]) {
    const logger = new CapturingLogger();
    const system = ActorSystem.create("rebaseline", { logger });
    try {
      await PersistenceDatabase.get(system).configure({ backend: "sqlite", dbPath: path });
      const lines = logger.records.filter((r) => /re-baselined/.test(r.message));
      assert.deepEqual(
        lines.map((r) => (r.context as { versions: number[] }).versions),
        expected === null ? [] : [expected],
      );
    } finally {
      await system.terminate();
    }
  }
});

test("an earlier build's database at an older version is re-baselined, then migrated on (SQLite at 4, PostgreSQL at 6)", async () => {
  const path = freshPath();
  // The database an earlier build at version 4 left: migrations 1..4 (their statements are checksummed, so these are
  // the ones it ran), recorded with version-and-name checksums.
  const raw = new Database(path);
  raw.exec(`CREATE TABLE movie_schema_migration (version INTEGER PRIMARY KEY, name TEXT NOT NULL,
    checksum TEXT NOT NULL, applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)`);
  for (const m of sqliteMigrations.slice(0, 4)) {
    for (const sql of m.statements) raw.exec(sql);
    raw
      .prepare("INSERT INTO movie_schema_migration (version, name, checksum) VALUES (?, ?, ?)")
      .run(m.version, m.name, legacyMigrationChecksum(m.version, m.name));
  }
  const lite = SqliteStore.open({ dbPath: path });
  assert.deepEqual(lite.rebaselinedMigrations, [1, 2, 3, 4]);
  await lite.close();
  assert.deepEqual(
    (raw.prepare("SELECT checksum FROM movie_schema_migration ORDER BY version").all() as { checksum: string }[]).map(
      (r) => r.checksum,
    ),
    sqliteMigrations.map((m) => m.checksum),
  );
  raw.close();

  const url = await postgresTestUrl();
  const schema = uniqueSchema("checksum4");
  const client = await rawClient(url, schema);
  try {
    // The database an earlier build at version 6 left: migrations 1..6 as they are checksummed (at 6, not 4: 6 drops
    // a function that 1..4 leave behind), recorded with version-and-name checksums.
    await client.query(`CREATE SCHEMA ${schema}`);
    await client.query(`CREATE TABLE movie_schema_migration (version INTEGER PRIMARY KEY, name TEXT NOT NULL,
      checksum TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`);
    for (const m of postgresMigrations.slice(0, 6)) {
      for (const sql of m.statements) await client.query(sql);
      await client.query("INSERT INTO movie_schema_migration (version, name, checksum) VALUES ($1, $2, $3)", [
        m.version,
        m.name,
        legacyMigrationChecksum(m.version, m.name),
      ]);
    }
    const store = await PostgresStore.connect({ connectionUri: url, schema, poolSize: 1 });
    assert.deepEqual(store.rebaselinedMigrations, [1, 2, 3, 4, 5, 6]);
    assert.deepEqual(
      await store.appendEvents({ persistenceId: "p", expectedRevision: 0, operationId: "o", events: [ev] }),
      { revision: 1, duplicate: false },
      "migrations 7 and on ran on top",
    );
    await store.close();
    const rows = await client.query("SELECT checksum FROM movie_schema_migration ORDER BY version");
    assert.deepEqual(
      rows.rows.map((r: { checksum: string }) => r.checksum),
      postgresMigrations.map((m) => m.checksum),
    );
  } finally {
    await client.end();
    await dropSchema(url, schema);
  }
});

const ev = { manifest: "m", payload: "{}" };
