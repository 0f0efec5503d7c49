// The event feed on every backend, and PostgreSQL's commit-order guarantee: an append whose transaction is still open
// holds the feed lock, so a later append waits and gets a larger offset, and a reader never sees a later offset
// before an earlier one.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { MemoryStore, OperationId } from "../../src/persistence/index.ts";
import { SqliteStore } from "../../src/persistence/sqlite/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { feedContract, readAll } from "./feed-contract.ts";
import { freshPostgresStore, rawClient } from "./pg-fixture.ts";

const dir = mkdtempSync(join(tmpdir(), "movie-feed-"));
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

feedContract("memory", async () => {
  const store = new MemoryStore();
  return { store, dispose: () => store.close() };
});

feedContract("sqlite", async () => {
  const store = SqliteStore.open({ dbPath: join(dir, "feed.sqlite3") });
  return { store, dispose: () => store.close() };
});

feedContract("postgres", async () => {
  const { store, dispose } = await freshPostgresStore("feed");
  return { store, dispose };
});

feedContract("postgres without group commit", async () => {
  const { store, dispose } = await freshPostgresStore("feednogc", { groupCommit: false, poolSize: 8 });
  return { store, dispose };
});

test("postgres: an open append transaction holds the feed lock; a later append waits and gets the larger offset", async () => {
  const { store, url, schema, dispose } = await freshPostgresStore("feedorder");
  const raw = await rawClient(url, schema);
  try {
    await store.appendEvents({ persistenceId: "Order:warm", expectedRevision: 0, operationId: "w", events: [ev()] });
    await raw.query("BEGIN");
    await raw.query(
      "INSERT INTO event_journal (persistence_id, sequence_nr, manifest, payload) VALUES ('Order:slow', 1, 'm', '{}')",
    );
    const slowOffset = Number(
      (await raw.query("SELECT event_offset FROM event_feed WHERE persistence_id = 'Order:slow'")).rows[0].event_offset,
    );
    let done = false;
    const later = store
      .appendEvents({ persistenceId: "Order:fast", expectedRevision: 0, operationId: "f", events: [ev()] })
      .finally(() => {
        done = true;
      });
    // The later append's statement waits for the advisory (feed) lock held by the open transaction.
    const probe = await rawClient(url, schema);
    try {
      await eventually(
        async () =>
          (
            await probe.query(
              "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND wait_event = 'advisory' AND application_name = 'movie'",
            )
          ).rowCount === 1,
        { what: "the later append to wait for the feed lock" },
      );
      assert.equal(done, false);
      assert.deepEqual(
        (await readAll(store, { entityTypes: ["Order"] })).map((e) => e.persistenceId),
        ["Order:warm"],
        "a reader sees neither the open append nor the waiting one",
      );
    } finally {
      await probe.end();
    }
    await raw.query("COMMIT");
    await later;
    const events = await readAll(store, { entityTypes: ["Order"] });
    assert.deepEqual(
      events.map((e) => e.persistenceId),
      ["Order:warm", "Order:slow", "Order:fast"],
    );
    assert.equal(events[1]!.offset, slowOffset);
  } finally {
    await raw.end();
    await dispose();
  }
});

test("postgres: a group-commit batch takes the feed lock once and its offsets follow commit order", async () => {
  const { store, dispose } = await freshPostgresStore("feedbatch", { poolSize: 4 });
  try {
    const before = store.groupCommitStats;
    await Promise.all(
      Array.from({ length: 64 }, (_, i) =>
        store.appendEvents({
          persistenceId: `Batch:${i}`,
          expectedRevision: 0,
          operationId: OperationId.random(),
          events: [ev()],
        }),
      ),
    );
    const after = store.groupCommitStats;
    assert.ok(after.batches > before.batches, "the appends went in batches");
    const events = await readAll(store, { entityTypes: ["Batch"] }, 0, 100);
    assert.equal(events.length, 64);
    // One batch statement is one transaction: its rows' offsets are contiguous.
    const offsets = events.map((e) => e.offset);
    assert.equal(new Set(offsets).size, 64);
  } finally {
    await dispose();
  }
});

function ev() {
  return { manifest: "m", payload: "{}" };
}
