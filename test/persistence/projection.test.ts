// Projections on the real databases: exactly-once (the read model's rows and the checkpoint commit together),
// at-least-once (checkpoint after the handler), pause/resume/rebuild, stats, fencing by a shard lease, and retention
// refused while a projection lags.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { ManualScheduler, RealScheduler } from "../../src/actor/index.ts";
import {
  type FeedEvent,
  MemoryStore,
  OperationId,
  type PersistenceStore,
  ProjectionBehindRetentionError,
  ProjectionRunner,
  type ProjectionTransaction,
  StaleShardOwnerError,
} from "../../src/persistence/index.ts";
import { SqliteStore } from "../../src/persistence/sqlite/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { freshPostgresStore } from "./pg-fixture.ts";

const dir = mkdtempSync(join(tmpdir(), "movie-projection-"));
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const clock = new RealScheduler();
let n = 0;

interface Backend {
  name: "sqlite" | "postgres";
  open: () => Promise<{ store: PersistenceStore; dispose: () => Promise<void> }>;
  /** The read model's DDL and upsert on this backend. */
  ddl: (table: string) => string;
  add: (table: string) => string;
}

const backends: Backend[] = [
  {
    name: "sqlite",
    open: async () => {
      const store = SqliteStore.open({ dbPath: join(dir, `p${++n}.sqlite3`) });
      return { store, dispose: () => store.close() };
    },
    ddl: (t) =>
      `CREATE TABLE IF NOT EXISTS ${t} (id TEXT PRIMARY KEY, total INTEGER NOT NULL, events INTEGER NOT NULL)`,
    add: (t) =>
      `INSERT INTO ${t} (id, total, events) VALUES (?, ?, 1) ON CONFLICT (id) DO UPDATE SET total = total + excluded.total, events = events + 1`,
  },
  {
    name: "postgres",
    open: async () => {
      const { store, dispose } = await freshPostgresStore("proj");
      return { store, dispose };
    },
    ddl: (t) => `CREATE TABLE IF NOT EXISTS ${t} (id TEXT PRIMARY KEY, total BIGINT NOT NULL, events BIGINT NOT NULL)`,
    add: (t) =>
      `INSERT INTO ${t} AS r (id, total, events) VALUES ($1, $2, 1) ON CONFLICT (id) DO UPDATE SET total = r.total + EXCLUDED.total, events = r.events + 1`,
  },
];

async function append(store: PersistenceStore, pid: string, count: number, from = 0): Promise<void> {
  for (let i = 0; i < count; i++) {
    await store.appendEvents({
      persistenceId: pid,
      expectedRevision: from + i,
      operationId: OperationId.random(),
      events: [{ manifest: "Added", payload: JSON.stringify({ amount: i + 1 }) }],
    });
  }
}

const amount = (e: FeedEvent) => (JSON.parse(e.payload) as { amount: number }).amount;

async function readModel(store: PersistenceStore, table: string): Promise<Record<string, unknown>[]> {
  return store.runProjectionBatch(
    { name: `reader-${table}`, expectedOffset: 0, newOffset: 0 },
    (tx: ProjectionTransaction) => tx.query(`SELECT id, total, events FROM ${table} ORDER BY id`),
  );
}

for (const backend of backends) {
  describe(`projections: ${backend.name}`, () => {
    test("exactly-once: the read model and the checkpoint commit together; a failing batch commits neither", async () => {
      const { store, dispose } = await backend.open();
      const table = `totals_${++n}`;
      try {
        await store.runProjectionBatch({ name: "ddl", expectedOffset: 0, newOffset: 0 }, async (tx) => {
          await tx.query(backend.ddl(table));
        });
        await append(store, "Account:a", 5);
        await append(store, "Account:b", 3);
        await append(store, "Other:x", 2);
        let failOnce = true;
        const runner = ProjectionRunner.start(
          {
            name: "totals",
            mode: "exactly-once",
            source: { entityTypes: ["Account"] },
            batchSize: 3,
            pollIntervalMs: 20,
            handler: async (event, tx) => {
              await tx.query(backend.add(table), [event.persistenceId, amount(event)]);
              // The first batch fails after writing a row: nothing of it may commit.
              if (failOnce && event.sequenceNr === 2) {
                failOnce = false;
                throw new Error("handler failed mid-batch");
              }
            },
          },
          store,
          clock,
          { retryBackoffMs: 5 },
        );
        const latest = await store.latestOffset();
        await eventually(() => runner.stats.checkpoint >= latest - 2 && runner.stats.lag === 0, {
          what: "the projection to catch up",
          describe: () => runner.stats,
        });
        await eventually(async () => (await readModel(store, table)).length === 2, { what: "two accounts" });
        assert.deepEqual(
          (await readModel(store, table)).map((r) => [r.id, Number(r.total), Number(r.events)]),
          [
            ["Account:a", 15, 5],
            ["Account:b", 6, 3],
          ],
          "every event counted once despite the failed batch",
        );
        assert.equal(runner.stats.failures, 1);
        assert.match(runner.stats.lastError ?? "", /handler failed mid-batch/);
        // New events flow in; a restart continues from the checkpoint without double counting.
        await runner.stop();
        await append(store, "Account:a", 1, 5);
        const again = ProjectionRunner.start(
          {
            name: "totals",
            mode: "exactly-once",
            source: { entityTypes: ["Account"] },
            pollIntervalMs: 20,
            handler: async (event, tx) => {
              await tx.query(backend.add(table), [event.persistenceId, amount(event)]);
            },
          },
          store,
          clock,
        );
        await eventually(async () => Number((await readModel(store, table))[0]!.events) === 6, {
          what: "the restarted projection to count the new event once",
          describe: () => again.stats,
        });
        assert.equal(Number((await readModel(store, table))[0]!.total), 16);
        await again.stop();
      } finally {
        await dispose();
      }
    });

    test("a stale instance (its shard lease moved) commits nothing and stops with StaleShardOwnerError", async () => {
      const { store, dispose } = await backend.open();
      const table = `stale_${++n}`;
      try {
        await store.runProjectionBatch({ name: "ddl", expectedOffset: 0, newOffset: 0 }, async (tx) => {
          await tx.query(backend.ddl(table));
        });
        const key = { clusterName: "c", entityType: "movie.projection", shardId: 0 };
        const lease = (await store.acquireShardLease(key, "node-a", 60_000))!;
        await append(store, "Account:s", 2);
        let gate: (() => void) | null = null;
        const runner = ProjectionRunner.start(
          {
            name: "fenced",
            mode: "exactly-once",
            pollIntervalMs: 20,
            handler: async (event, tx) => {
              await tx.query(backend.add(table), [event.persistenceId, amount(event)]);
              if (event.sequenceNr === 3) await new Promise<void>((resolve) => (gate = resolve));
            },
          },
          store,
          clock,
          { fence: lease },
        );
        await eventually(() => runner.stats.checkpoint > 0, { what: "the first batch", describe: () => runner.stats });
        // The lease moves to node-b (released, then acquired at epoch + 1) while no batch is in flight.
        assert.ok(await store.releaseShardLease(lease));
        const newer = (await store.acquireShardLease(key, "node-b", 60_000))!;
        assert.equal(newer.epoch, lease.epoch + 1);
        const before = runner.stats.checkpoint;
        await append(store, "Account:s", 1, 2);
        await eventually(() => runner.status === "stale", {
          what: "the stale instance to stop",
          describe: () => runner.stats,
        });
        assert.match(runner.stats.lastError ?? "", /StaleShardOwnerError/);
        assert.equal(runner.stats.checkpoint, before);
        assert.equal(await store.loadProjectionOffset("fenced"), before, "the checkpoint did not move");
        const rows = await readModel(store, table);
        assert.equal(Number(rows[0]!.events), 2, "the stale batch's row write rolled back");
        (gate as (() => void) | null)?.();
        await assert.rejects(() => store.saveProjectionOffset("fenced", 99, lease), StaleShardOwnerError);
        await store.saveProjectionOffset("fenced", before, newer);
      } finally {
        await dispose();
      }
    });
  });
}

describe("projections: every backend", () => {
  const all: { name: string; open: () => Promise<{ store: PersistenceStore; dispose: () => Promise<void> }> }[] = [
    {
      name: "memory",
      open: async () => {
        const store = new MemoryStore();
        return { store, dispose: () => store.close() };
      },
    },
    ...backends,
  ];
  for (const backend of all) {
    test(`${backend.name}: at-least-once checkpoints after the handler; pause, resume and rebuild; retention waits for it`, async () => {
      const { store, dispose } = await backend.open();
      try {
        await append(store, "Ledger:l", 7);
        const seen: number[] = [];
        const runner = ProjectionRunner.start(
          {
            name: "ledger",
            mode: "at-least-once",
            checkpointEvery: 3,
            batchSize: 5,
            pollIntervalMs: 20,
            handler: (event) => {
              seen.push(event.offset);
            },
          },
          store,
          clock,
        );
        const latest = await store.latestOffset();
        await eventually(() => runner.stats.checkpoint === latest, { what: "catch-up", describe: () => runner.stats });
        assert.equal(await store.loadProjectionOffset("ledger"), latest);
        assert.equal(seen.length, 7);
        assert.equal(runner.stats.processed, 7);
        assert.equal(runner.stats.lag, 0);
        // Paused: new events wait, and the lag shows them.
        runner.pause();
        await eventually(() => runner.status === "paused", { what: "paused" });
        await append(store, "Ledger:l", 2, 7);
        await store.saveSnapshot("Ledger:l", { sequenceNr: 9, manifest: "s", payload: "{}" });
        // Retention may not delete the two events the projection has not passed.
        await assert.rejects(
          () => store.deleteEventsTo("Ledger:l", 9),
          (e: unknown) =>
            e instanceof ProjectionBehindRetentionError &&
            e.projectionName === "ledger" &&
            e.checkpointOffset === latest,
        );
        assert.equal(seen.length, 7);
        runner.resume();
        const newest = await store.latestOffset();
        await eventually(() => runner.stats.checkpoint === newest, { what: "resumed", describe: () => runner.stats });
        assert.equal(seen.length, 9);
        // Rebuild from the start: every event is handled again, in order.
        await runner.rebuildFrom(0);
        await eventually(() => seen.length === 18 && runner.stats.checkpoint === newest, {
          what: "the rebuild",
          describe: () => ({ seen: seen.length, stats: runner.stats }),
        });
        assert.deepEqual(seen.slice(9), seen.slice(0, 9));
        // Caught up: retention goes through.
        assert.equal((await store.deleteEventsTo("Ledger:l", 9)).deletedEvents, 9);
        await runner.stop();
        assert.equal(runner.status, "stopped");
      } finally {
        await dispose();
      }
    });
  }
});

// A stop() while the checkpoint loads used to be overwritten by "running": the projection kept polling
// and stop() never returned (found by test/persistence/postgres-feed-wake.test.ts's bounds test hanging).
test("stop() right after start() wins over the checkpoint load: the projection stops and stop() returns", async () => {
  const store = new MemoryStore();
  const stopped = ProjectionRunner.start(
    { name: "stop-early", mode: "at-least-once", handler: () => {}, pollIntervalMs: 60_000 },
    store,
    clock,
  );
  let returned = false;
  const stopping = stopped.stop().then(() => {
    returned = true;
  });
  await eventually(() => returned, { what: "stop() to return", describe: () => stopped.stats });
  await stopping;
  assert.equal(stopped.status, "stopped");
  await store.close();
});

test("stats: eventsPerSecond is the events handled in the last 10 s over the span, 0 before a meaningful span (virtual clock)", async () => {
  const store = new MemoryStore();
  const clock = new ManualScheduler();
  const runner = ProjectionRunner.start(
    { name: "rate", mode: "at-least-once", pollIntervalMs: 60_000, handler: () => {} },
    store,
    clock,
  );
  try {
    // Each write is one append of several events, so each is one batch.
    const write = (from: number, count: number) =>
      store.appendEvents({
        persistenceId: "Rate:a",
        expectedRevision: from,
        operationId: OperationId.random(),
        events: Array.from({ length: count }, () => ({ manifest: "Added", payload: "{}" })),
      });
    await write(0, 4);
    await eventually(() => runner.stats.processed === 4, { what: "the first 4 events", describe: () => runner.stats });
    await write(4, 6);
    await eventually(() => runner.stats.processed === 10, { what: "6 more events", describe: () => runner.stats });
    // Two batches at the same instant right after the start: no span to measure (it used to report 6,000 events/s).
    assert.equal(runner.stats.eventsPerSecond, 0, "no rate before a second has passed");
    clock.advance(2_000);
    assert.equal(runner.stats.eventsPerSecond, 5, "10 events since the start, 2 s ago");
    clock.advance(2_000);
    assert.equal(runner.stats.eventsPerSecond, 2.5, "no new events: the rate falls as time passes");
    clock.advance(20_000);
    assert.equal(runner.stats.eventsPerSecond, 0, "nothing in the last 10 s");
    assert.equal(runner.stats.lag, 0);
    assert.equal(runner.stats.consecutiveFailures, 0);
    assert.equal(runner.stats.lastErrorAtEpochMs, null);
  } finally {
    await runner.stop();
  }
});

// The full suite under load once saw a paused projection handle two events appended after pause(): its batch had
// read the latest offset before the pause and the page after the appends. A page read across a pause is dropped,
// and a batch paused between two events checkpoints what it handled and stops there.
describe("projections: pause against a batch in flight", () => {
  for (const mode of ["at-least-once", "exactly-once"] as const) {
    test(`${mode}: a page read across pause() reaches no handler; resume() handles it`, async () => {
      const store = new MemoryStore();
      await append(store, "Ledger:p", 3);
      let gate: (() => void) | null = null;
      // Reads of the latest offset once the page's read is held: the paused loop's polls come after the batch ended.
      let pausedPolls = 0;
      const reading = new Proxy(store, {
        get(target, key, receiver) {
          if (key === "latestOffset" && gate !== null) pausedPolls++;
          if (key !== "queryEvents") return Reflect.get(target, key, receiver);
          return async (query: Parameters<MemoryStore["queryEvents"]>[0]) => {
            if (gate === null && (query?.afterOffset ?? 0) > 0) await new Promise<void>((r) => (gate = r));
            return target.queryEvents(query);
          };
        },
      });
      const seen: number[] = [];
      const runner = ProjectionRunner.start(
        {
          name: `paused-${mode}`,
          mode,
          batchSize: 10,
          pollIntervalMs: 5,
          ...(mode === "at-least-once" ? { checkpointEvery: 1 } : {}),
          handler: (event: FeedEvent) => {
            seen.push(event.offset);
          },
        } as Parameters<typeof ProjectionRunner.start>[0],
        reading,
        clock,
      );
      try {
        await eventually(() => seen.length === 3 && gate !== null, { what: "the next page's read held" });
        runner.pause();
        await append(store, "Ledger:p", 2, 3);
        const release = gate as unknown as () => void;
        release();
        await eventually(() => runner.status === "paused", { what: "paused" });
        // The held page's batch has ended once the paused loop polls the latest offset (twice: one may be the
        // batch's own read before the page).
        const polls = pausedPolls;
        await eventually(() => pausedPolls >= polls + 2, {
          what: "the paused loop polling",
          describe: () => pausedPolls,
        });
        assert.deepEqual(seen, [1, 2, 3], "nothing appended after pause() was handled");
        runner.resume();
        await eventually(() => seen.length === 5, { what: "resumed", describe: () => ({ seen, stats: runner.stats }) });
        assert.deepEqual(seen, [1, 2, 3, 4, 5]);
      } finally {
        await runner.stop();
      }
    });
  }
});
