// SQLite migration 12 on a database the previous schema (version 11) wrote: every event keeps its feed offset and
// tags, an event that has no feed row gets a new offset, and no offset the old counter handed out (retention deleted
// its row since) is handed out again.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import Database from "better-sqlite3";
import type { FeedEvent } from "../../src/persistence/index.ts";
import { SqliteStore, sqliteMigrations } from "../../src/persistence/sqlite/index.ts";
import { readAll } from "./feed-contract.ts";

const dir = mkdtempSync(join(tmpdir(), "movie-sqlite-v12-"));
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
let n = 0;

/**
 * A database as a build at version 11 leaves it: migrations 1..11 (their statements are checksummed, so they are the
 * ones that build ran) and events written the way it wrote them, the row trigger giving each its feed row.
 */
function version11Database(): { path: string; raw: Database.Database } {
  const path = join(dir, `v11-${++n}.sqlite3`);
  const raw = new Database(path);
  raw.exec(`CREATE TABLE movie_schema_migration (version INTEGER PRIMARY KEY, name TEXT NOT NULL,
    checksum TEXT NOT NULL, applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)`);
  for (const m of sqliteMigrations.slice(0, 11)) {
    for (const sql of m.statements) raw.exec(sql);
    raw
      .prepare("INSERT INTO movie_schema_migration (version, name, checksum) VALUES (?, ?, ?)")
      .run(m.version, m.name, m.checksum);
  }
  return { path, raw };
}

/** Appends event `seq` of `pid` as a version-11 store did (the trigger writes the feed row); returns its offset. */
function oldAppend(raw: Database.Database, pid: string, seq: number, tags: string[] = []): number {
  raw
    .prepare("INSERT INTO event_stream (persistence_id, revision) VALUES (?, ?) ON CONFLICT DO UPDATE SET revision = ?")
    .run(pid, seq, seq);
  raw
    .prepare("INSERT INTO event_journal (persistence_id, sequence_nr, manifest, payload) VALUES (?, ?, 'm', ?)")
    .run(pid, seq, JSON.stringify({ pid, seq }));
  const offset = (
    raw.prepare("SELECT event_offset FROM event_feed WHERE persistence_id = ? AND sequence_nr = ?").get(pid, seq) as {
      event_offset: number;
    }
  ).event_offset;
  for (const tag of tags) raw.prepare("INSERT INTO event_tag (tag, event_offset) VALUES (?, ?)").run(tag, offset);
  return offset;
}

/** What version 11's retention did to the newest event of `pid`: its journal, feed and tag rows go. */
function oldDelete(raw: Database.Database, pid: string, seq: number): void {
  raw
    .prepare(
      "DELETE FROM event_tag WHERE event_offset IN (SELECT event_offset FROM event_feed WHERE persistence_id = ? AND sequence_nr = ?)",
    )
    .run(pid, seq);
  raw.prepare("DELETE FROM event_journal WHERE persistence_id = ? AND sequence_nr = ?").run(pid, seq);
  raw.prepare("DELETE FROM event_feed WHERE persistence_id = ? AND sequence_nr = ?").run(pid, seq);
}

const summary = (events: FeedEvent[]) =>
  events.map((e) => `${e.offset} ${e.persistenceId}#${e.sequenceNr} ${e.entityType} ${e.payload} [${e.tags}]`);

test("sqlite migration 12: events keep their offsets and tags; the offsets retention deleted are not reused", async () => {
  const { path, raw } = version11Database();
  const expected: string[] = [];
  const offsetA1 = oldAppend(raw, "Order:a", 1, ["big", "eu"]);
  const offsetB1 = oldAppend(raw, "Stock:b", 1);
  const offsetA2 = oldAppend(raw, "Order:a", 2, ["eu"]);
  oldAppend(raw, "Stock:b", 2);
  const deleted = oldAppend(raw, "Stock:b", 3, ["gone"]);
  oldDelete(raw, "Stock:b", 3);
  oldDelete(raw, "Stock:b", 2);
  expected.push(
    `${offsetA1} Order:a#1 Order {"pid":"Order:a","seq":1} [big,eu]`,
    `${offsetB1} Stock:b#1 Stock {"pid":"Stock:b","seq":1} []`,
    `${offsetA2} Order:a#2 Order {"pid":"Order:a","seq":2} [eu]`,
  );
  raw.close();

  const store = SqliteStore.open({ dbPath: path });
  try {
    assert.deepEqual(summary(await readAll(store)), expected);
    assert.deepEqual(summary(await readAll(store, { entityTypes: ["Order"] })), [expected[0], expected[2]]);
    assert.deepEqual(
      (await readAll(store, { tag: "eu" })).map((e) => e.offset),
      [offsetA1, offsetA2],
    );
    assert.equal(await store.latestOffset(), deleted, "the largest offset handed out, though its event is gone");
    const next = await store.appendEvents({
      persistenceId: "Stock:b",
      expectedRevision: 3,
      operationId: "after-migration",
      events: [{ manifest: "m", payload: "{}", tags: ["new"] }],
    });
    assert.equal(next.revision, 4);
    const [added] = await readAll(store, {}, offsetA2);
    assert.ok(added !== undefined && added.offset > deleted, `new event at ${added?.offset}, after ${deleted}`);
    assert.deepEqual(added.tags, ["new"]);
    assert.deepEqual(await store.loadEvents("Order:a"), [
      { sequenceNr: 1, manifest: "m", payload: '{"pid":"Order:a","seq":1}' },
      { sequenceNr: 2, manifest: "m", payload: '{"pid":"Order:a","seq":2}' },
    ]);
  } finally {
    await store.close();
  }
  const after = new Database(path);
  try {
    const tables = after.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as { name: string }[];
    assert.ok(!tables.some((t) => t.name === "event_feed" || t.name.startsWith("event_journal_")), "old tables gone");
    assert.deepEqual(
      after.prepare("SELECT version, checksum FROM movie_schema_migration ORDER BY version").all(),
      sqliteMigrations.map((m) => ({ version: m.version, checksum: m.checksum })),
    );
  } finally {
    after.close();
  }
});

test("sqlite migration 12: an event written with the feed trigger dropped gets an offset after all the others", async () => {
  const { path, raw } = version11Database();
  const first = oldAppend(raw, "Order:x", 1);
  const newest = oldAppend(raw, "Order:y", 1);
  oldDelete(raw, "Order:y", 1);
  // By hand, as the append benchmark's "without feed" side did: a journal row with no feed row.
  const trigger = sqliteMigrations[8]!.statements.find((sql) => sql.startsWith("CREATE TRIGGER"))!;
  raw.exec("DROP TRIGGER movie_event_feed");
  raw
    .prepare("INSERT INTO event_journal (persistence_id, sequence_nr, manifest, payload) VALUES (?, 1, 'm', '{}')")
    .run("Order:z");
  raw.exec(trigger);
  raw.close();

  const store = SqliteStore.open({ dbPath: path });
  try {
    const events = await readAll(store);
    assert.deepEqual(
      events.map((e) => e.persistenceId),
      ["Order:x", "Order:z"],
    );
    assert.equal(events[0]!.offset, first);
    assert.ok(events[1]!.offset > newest, `the feed-less event at ${events[1]!.offset}, after ${newest}`);
    await store.appendEvents({
      persistenceId: "Order:x",
      expectedRevision: 1,
      operationId: "next",
      events: [{ manifest: "m", payload: "{}" }],
    });
    const last = (await readAll(store, { persistenceId: "Order:x" })).at(-1)!;
    assert.equal(last.offset, events[1]!.offset + 1);
  } finally {
    await store.close();
  }
});
