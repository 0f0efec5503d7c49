import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import Database from "better-sqlite3";
import {
  CorruptPersistentRecordError,
  MigrationChecksumMismatchError,
  PersistenceConfigurationError,
  UnsupportedSchemaVersionError,
} from "../../src/persistence/index.ts";
import { SqliteStore, sqliteMigrations } from "../../src/persistence/sqlite/index.ts";
import { storeContract } from "./store-contract.ts";

const dir = mkdtempSync(join(tmpdir(), "movie-sqlite-"));
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
let n = 0;
const freshPath = () => join(dir, `db-${++n}.sqlite3`);

storeContract("sqlite", async () => {
  const store = SqliteStore.open({ dbPath: freshPath() });
  return { store, dispose: () => store.close() };
});

test("sqlite: an unopenable path is a PersistenceConfigurationError", () => {
  assert.throws(
    () => SqliteStore.open({ dbPath: join(dir, "missing-dir", "x", "db.sqlite3") }),
    (e: unknown) => e instanceof PersistenceConfigurationError && e.setting === "dbPath",
  );
  assert.throws(() => SqliteStore.open({ dbPath: "" }), PersistenceConfigurationError);
});

test("sqlite: reopening keeps data; a newer or altered schema is refused", async () => {
  const path = freshPath();
  const store = SqliteStore.open({ dbPath: path });
  await store.appendEvents({
    persistenceId: "p",
    expectedRevision: 0,
    operationId: "o",
    events: [{ manifest: "m", payload: "{}" }],
  });
  await store.close();
  const again = SqliteStore.open({ dbPath: path });
  assert.equal(await again.loadRevision("p"), 1);
  await again.close();
  const raw = new Database(path);
  const future = sqliteMigrations.length + 1;
  raw.prepare("INSERT INTO movie_schema_migration (version, name, checksum) VALUES (?, 'future', 'x')").run(future);
  raw.close();
  assert.throws(() => SqliteStore.open({ dbPath: path }), UnsupportedSchemaVersionError);
  const raw2 = new Database(path);
  raw2.prepare("DELETE FROM movie_schema_migration WHERE version = ?").run(future);
  raw2.prepare("UPDATE movie_schema_migration SET checksum = 'tampered' WHERE version = 2").run();
  raw2.close();
  assert.throws(() => SqliteStore.open({ dbPath: path }), MigrationChecksumMismatchError);
});

test("sqlite: a corrupt journal row is a typed error naming persistence id and sequence", async () => {
  const path = freshPath();
  const store = SqliteStore.open({ dbPath: path });
  await store.appendEvents({
    persistenceId: "c",
    expectedRevision: 0,
    operationId: "o",
    events: [{ manifest: "m", payload: "{}" }],
  });
  const raw = new Database(path);
  raw.prepare("UPDATE event_journal SET payload = x'00ff' WHERE persistence_id = 'c'").run();
  raw.close();
  await assert.rejects(
    store.loadEvents("c"),
    (e: unknown) => e instanceof CorruptPersistentRecordError && e.persistenceId === "c" && e.sequenceNr === 1,
  );
  await store.close();
});
