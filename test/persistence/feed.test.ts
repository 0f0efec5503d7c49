// The event feed on every backend, and PostgreSQL's commit-order guarantee: an append whose transaction is still open
// holds the feed lock, so a later append waits and gets a larger offset, and a reader never sees a later offset
// before an earlier one.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { MemoryStore, OperationId } from "../../src/persistence/index.ts";
import { FEED_LOCK_CLASS, FEED_OFFSET_SEQUENCE } from "../../src/persistence/postgres/feed-schema.ts";
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
      await eventually(async () => (await feedLockWaiters(probe, schema)) === 1, {
        what: "the later append to wait for the feed lock",
      });
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

/**
 * Appends waiting for `schema`'s feed lock (migration 16: the one-key advisory lock FEED_LOCK_CLASS << 32 | the oid of
 * the schema's offset sequence, which pg_locks shows as classid, objid and objsubid 1).
 */
async function feedLockWaiters(
  client: { query: (sql: string, values: unknown[]) => Promise<{ rows: unknown[] }> },
  schema: string,
) {
  const result = await client.query(
    `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objsubid = 1
       AND classid::bigint = $1 AND objid = to_regclass(quote_ident($2) || '.${FEED_OFFSET_SEQUENCE}')::oid`,
    [FEED_LOCK_CLASS, schema],
  );
  return (result.rows[0] as { n: number }).n;
}

test("postgres: the feed lock is per schema: an open append in one schema holds back its own schema's appends only", async () => {
  const a = await freshPostgresStore("feedlocka");
  const b = await freshPostgresStore("feedlockb");
  const raw = await rawClient(a.url, a.schema);
  const probe = await rawClient(a.url, a.schema);
  try {
    await raw.query("BEGIN");
    await raw.query(
      "INSERT INTO event_journal (persistence_id, sequence_nr, manifest, payload) VALUES ('Order:open', 1, 'm', '{}')",
    );
    // Another schema appends while the first one's feed lock is held (migration 9's single key made it wait).
    const other = await b.store.appendEvents({
      persistenceId: "Order:b",
      expectedRevision: 0,
      operationId: "b",
      events: [ev()],
    });
    assert.deepEqual([other.revision, other.duplicate], [1, false]);
    assert.equal(await feedLockWaiters(probe, b.schema), 0);
    // The same schema's append waits for it.
    let done = false;
    const same = a.store
      .appendEvents({ persistenceId: "Order:a", expectedRevision: 0, operationId: "a", events: [ev()] })
      .finally(() => {
        done = true;
      });
    let waiters = 0;
    await eventually(
      async () => {
        waiters = await feedLockWaiters(probe, a.schema);
        return waiters === 1;
      },
      { what: "the same schema's append to wait for its feed lock", describe: () => ({ waiters }) },
    );
    assert.equal(done, false);
    await raw.query("COMMIT");
    await same;
    assert.deepEqual(
      (await readAll(a.store, { entityTypes: ["Order"] })).map((e) => e.persistenceId),
      ["Order:open", "Order:a"],
    );
  } finally {
    await raw.end();
    await probe.end();
    await a.dispose();
    await b.dispose();
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
