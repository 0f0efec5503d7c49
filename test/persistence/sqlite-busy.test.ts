// SQLite's write lock held by another connection: the store blocks the event loop at most busySyncWaitMs per
// attempt and retries on the scheduler, so timers keep firing; the write completes once the lock is released, or
// rejects PersistenceTimeoutError after busyTimeoutMs. Plus the synchronous setting.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import Database from "better-sqlite3";
import { RealScheduler } from "../../src/actor/index.ts";
import { PersistenceConfigurationError, PersistenceTimeoutError } from "../../src/persistence/index.ts";
import { SqliteStore } from "../../src/persistence/sqlite/index.ts";

const dir = mkdtempSync(join(tmpdir(), "movie-sqlite-busy-"));
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
let n = 0;
const freshPath = () => join(dir, `db-${++n}.sqlite3`);
const clock = new RealScheduler();

/** Counts timer ticks every 5 ms and the longest gap between two, until stopped. */
function tickCounter() {
  const state = { ticks: 0, maxGapMs: 0, running: true };
  let last = clock.now();
  const tick = (): void => {
    const now = clock.now();
    state.maxGapMs = Math.max(state.maxGapMs, now - last);
    last = now;
    state.ticks++;
    if (state.running) clock.scheduleOnce(5, tick);
  };
  clock.scheduleOnce(5, tick);
  return state;
}

const append = (persistenceId: string) => ({
  persistenceId,
  expectedRevision: 0,
  operationId: `op-${persistenceId}`,
  events: [{ manifest: "m", payload: "{}" }],
});

test("sqlite: while another connection holds the write lock for ~1 s the event loop keeps ticking; the write then completes", async () => {
  const path = freshPath();
  const store = SqliteStore.open({ dbPath: path, busyTimeoutMs: 3000 });
  const holder = new Database(path);
  try {
    holder.exec("BEGIN IMMEDIATE");
    const ticks = tickCounter();
    let releasedAtMs = 0;
    clock.scheduleOnce(1000, () => {
      holder.exec("COMMIT");
      releasedAtMs = clock.now();
    });
    const written = store.appendEvents(append("p"));
    // Readers are not blocked by the writer in WAL mode, and nothing waits synchronously meanwhile.
    assert.equal(await store.loadRevision("p"), 0);
    const result = await written;
    const doneAtMs = clock.now();
    ticks.running = false;
    assert.deepEqual(result, { revision: 1, duplicate: false });
    assert.ok(releasedAtMs > 0 && doneAtMs >= releasedAtMs, "completed after the lock was released");
    assert.ok(ticks.ticks >= 20, `timers kept firing while the lock was held (${ticks.ticks} ticks)`);
    assert.ok(ticks.maxGapMs < 400, `the event loop was never blocked for long (longest gap ${ticks.maxGapMs} ms)`);
    assert.equal(store.stats.busyRetries, 1);
    assert.equal(store.stats.busyTimeouts, 0);
    assert.equal(await store.loadRevision("p"), 1);
  } finally {
    if (holder.inTransaction) holder.exec("ROLLBACK");
    holder.close();
    await store.close();
  }
});

/**
 * The other process (plain Node, no TypeScript loader, so it starts fast): takes the write lock, says so, holds it for
 * argv[2] ms with a synchronous sleep (it does nothing else), then commits and exits.
 */
const lockHolder = `
const Database = require("better-sqlite3");
const db = new Database(process.argv[1]);
db.exec("BEGIN IMMEDIATE");
db.exec("CREATE TABLE IF NOT EXISTS lock_probe (n INTEGER)");
process.stdout.write("locked\\n");
Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, Number(process.argv[2]));
db.exec("COMMIT");
db.close();
process.stdout.write("released\\n");
`;

test("sqlite: another process holding the write lock for ~1 s does not stall this one's event loop", async () => {
  const path = freshPath();
  const store = SqliteStore.open({ dbPath: path, busyTimeoutMs: 4000 });
  const child = spawn(process.execPath, ["-e", lockHolder, path, "1000"], { stdio: ["ignore", "pipe", "inherit"] });
  try {
    let output = "";
    const exited = new Promise<number | null>((resolve) => child.on("exit", resolve));
    await new Promise<void>((resolve, reject) => {
      child.stdout.on("data", (chunk: Buffer) => {
        output += chunk.toString();
        if (output.includes("locked")) resolve();
      });
      child.on("exit", () => reject(new Error(`the child exited before locking: ${output}`)));
    });
    const ticks = tickCounter();
    const result = await store.appendEvents(append("x"));
    ticks.running = false;
    assert.deepEqual(result, { revision: 1, duplicate: false });
    assert.ok(output.includes("released") || (await exited) === 0, "written after the other process committed");
    assert.ok(ticks.ticks >= 20, `timers kept firing while the lock was held (${ticks.ticks} ticks)`);
    assert.ok(ticks.maxGapMs < 400, `the event loop was never blocked for long (longest gap ${ticks.maxGapMs} ms)`);
    assert.equal(await exited, 0);
  } finally {
    child.kill();
    await store.close();
  }
});

test("sqlite: a lock held past busyTimeoutMs rejects PersistenceTimeoutError without blocking; nothing was written", async () => {
  const path = freshPath();
  const store = SqliteStore.open({ dbPath: path, busyTimeoutMs: 1_000 });
  // Well above any stall of a loaded machine (one of 240 ms failed a 200 ms bound), and far below what a blocking wait
  // would show (a whole busyTimeoutMs).
  const holder = new Database(path);
  try {
    holder.exec("BEGIN IMMEDIATE");
    const ticks = tickCounter();
    const started = clock.now();
    await assert.rejects(store.appendEvents(append("t")), (error: unknown) => {
      assert.ok(error instanceof PersistenceTimeoutError);
      assert.equal(error.operation, "appendEvents");
      assert.equal(error.timeoutMs, 1_000);
      return true;
    });
    await assert.rejects(
      store.acquireShardLease({ clusterName: "c", entityType: "T", shardId: 1 }, "node", 1000),
      PersistenceTimeoutError,
    );
    ticks.running = false;
    assert.ok(clock.now() - started >= 2_000, "each waited its busyTimeoutMs");
    assert.ok(ticks.maxGapMs < 500, `the event loop was never blocked for long (longest gap ${ticks.maxGapMs} ms)`);
    assert.deepEqual(store.stats, { busyRetries: 2, busyTimeouts: 2 });
    holder.exec("COMMIT");
    assert.equal(await store.loadRevision("t"), 0);
    assert.deepEqual(await store.appendEvents(append("t")), { revision: 1, duplicate: false });
  } finally {
    if (holder.inTransaction) holder.exec("ROLLBACK");
    holder.close();
    await store.close();
  }
});

test("sqlite: synchronous is normal by default, full on request; bad busy and synchronous settings are refused", async () => {
  const normal = SqliteStore.open({ dbPath: freshPath() });
  assert.equal(normal.synchronous, "normal");
  await normal.close();
  const full = SqliteStore.open({ dbPath: freshPath(), synchronous: "full" });
  assert.equal(full.synchronous, "full");
  await full.close();
  const bad: [string, object][] = [
    ["synchronous", { synchronous: "off" }],
    ["synchronous", { synchronous: { toString: 1 } }],
    ["busyTimeoutMs", { busyTimeoutMs: -1 }],
    ["busyTimeoutMs", { busyTimeoutMs: "5" }],
    ["busySyncWaitMs", { busySyncWaitMs: 51 }],
    ["busySyncWaitMs", { busySyncWaitMs: 1.5 }],
  ];
  for (const [setting, options] of bad) {
    assert.throws(
      () => SqliteStore.open({ dbPath: freshPath(), ...options }),
      (error: unknown) => error instanceof PersistenceConfigurationError && error.setting === setting,
    );
  }
});
