// Persistence benchmark: event appends/s and p50/p99 latency on PostgreSQL and SQLite at concurrency 1, 4 and 64
// entities, with and without fencing, against a ceiling of plain single-row INSERT transactions of the same payload
// through `pg` at the same concurrency, measured in the same run; plus recovery time of a 10k-event entity. Beside
// the ceiling, for reference, the same raw INSERTs batched the way the store's group commit batches appends.
// Usage: npm run bench:persistence  (MOVIE_POSTGRES_TEST_URL overrides the local server; MOVIE_BENCH_SECONDS the
// duration of each measured case, default 0.4; MOVIE_BENCH_ROUNDS the interleaved rounds, default 3; more below).
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import Sqlite from "better-sqlite3";
import pg from "pg";
import { ActorSystem, RealScheduler } from "../src/actor/index.ts";
import {
  defaultGroupCommit,
  GroupCommit,
  type GroupCommitSettings,
  groupCommitSettings,
} from "../src/persistence/group-commit.ts";
import {
  Database,
  type EntityContext,
  EventSourcedBehavior,
  EventSourcedEffect,
  EventSourcing,
  type PersistenceStore,
  type ShardLeaseToken,
} from "../src/persistence/index.ts";
import { PostgresStore } from "../src/persistence/postgres/index.ts";
import { SqliteStore } from "../src/persistence/sqlite/index.ts";

const clock = new RealScheduler();
const url = process.env.MOVIE_POSTGRES_TEST_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const caseMs = Number(process.env.MOVIE_BENCH_SECONDS ?? "0.4") * 1000;
const rounds = Number(process.env.MOVIE_BENCH_ROUNDS ?? "3");
const warmupMs = 150;
// MOVIE_BENCH_GROUP_COMMIT="<maxBatchSize>x<maxConcurrentBatches>" (default the store's, 64x1) for the store and the
// batched reference alike; "off" sends every append alone.
const groupCommitEnv = process.env.MOVIE_BENCH_GROUP_COMMIT;
const groupCommit: GroupCommitSettings | false =
  groupCommitEnv === "off"
    ? false
    : groupCommitEnv === undefined
      ? defaultGroupCommit
      : groupCommitSettings({
          maxBatchSize: Number(groupCommitEnv.split("x")[0]),
          maxConcurrentBatches: Number(groupCommitEnv.split("x")[1]),
        });
// MOVIE_BENCH_CONCURRENCY="4,64" and MOVIE_BENCH_BACKENDS="postgres" narrow a run (default all levels, both backends).
const concurrencies = (process.env.MOVIE_BENCH_CONCURRENCY ?? "1,4,64").split(",").map(Number);
const backends = (process.env.MOVIE_BENCH_BACKENDS ?? "postgres,sqlite").split(",");
const payload = JSON.stringify({ kind: "ItemAdded", sku: "sku-000042", quantity: 3, note: "x".repeat(64) });
const manifest = "bench.ItemAdded";

interface Row {
  backend: string;
  mode: string;
  concurrency: number;
  opsPerSec: number;
  p50Ms: number;
  p99Ms: number;
  /** Benchmark-process CPU (user + system) per operation, in microseconds. */
  clientCpuUsPerOp: number;
  ops: number;
  ratioToCeiling: number | null;
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** Runs `concurrency` loops of `op(worker, i)` for warm-up then `caseMs`; returns throughput and latency. */
async function measure(concurrency: number, op: (worker: number, i: number) => Promise<unknown>) {
  const latencies: number[] = [];
  let phaseEnd = clock.now() + warmupMs;
  let recording = false;
  const counters = new Array<number>(concurrency).fill(0);
  const worker = async (w: number) => {
    while (clock.now() < phaseEnd) {
      const start = clock.now();
      await op(w, counters[w]!++);
      if (recording) latencies.push(clock.now() - start);
    }
  };
  await Promise.all(counters.map((_, w) => worker(w)));
  recording = true;
  const cpuBefore = process.cpuUsage();
  const started = clock.now();
  phaseEnd = started + caseMs;
  await Promise.all(counters.map((_, w) => worker(w)));
  const elapsedMs = clock.now() - started;
  const cpu = process.cpuUsage(cpuBefore);
  latencies.sort((a, b) => a - b);
  return {
    ops: latencies.length,
    clientCpuUsPerOp: (cpu.user + cpu.system) / Math.max(1, latencies.length),
    opsPerSec: (latencies.length * 1000) / elapsedMs,
    p50Ms: percentile(latencies, 50),
    p99Ms: percentile(latencies, 99),
  };
}

async function appendCase(
  store: PersistenceStore,
  label: string,
  concurrency: number,
  fences: readonly ShardLeaseToken[] | null,
): Promise<Omit<Row, "backend" | "mode" | "ratioToCeiling">> {
  const revisions = new Array<number>(concurrency).fill(0);
  const run = `${label}-${concurrency}-${fences === null ? "u" : `f${fences.length}`}`;
  const result = await measure(concurrency, async (w, i) => {
    const r = await store.appendEvents({
      persistenceId: `bench-${run}-${w}`,
      expectedRevision: revisions[w]!,
      operationId: `${run}-${w}-${i}`,
      events: [{ manifest, payload }],
      fence: fences === null ? null : fences[w % fences.length]!,
    });
    revisions[w] = r.revision;
  });
  return { concurrency, ...result };
}

let ceilingRun = 0;
// The ceiling runs on the store's own pool (same connections, same concurrency).
async function pgCeiling(pool: pg.Pool, concurrency: number) {
  await pool.query(`CREATE TABLE IF NOT EXISTS bench_ceiling (persistence_id TEXT NOT NULL, sequence_nr BIGINT NOT NULL,
    manifest TEXT NOT NULL, payload TEXT NOT NULL, created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (persistence_id, sequence_nr))`);
  const run = `c${concurrency}-${++ceilingRun}`;
  return measure(concurrency, (w, i) =>
    pool.query({
      name: "bench_ceiling_insert",
      text: "INSERT INTO bench_ceiling (persistence_id, sequence_nr, manifest, payload) VALUES ($1, $2, $3, $4)",
      values: [`${run}-${w}`, i, manifest, payload],
    }),
  );
}

// For reference, not the ceiling: the same raw INSERTs coalesced exactly as the store coalesces appends (the same
// GroupCommit bounds, one multi-row INSERT ... SELECT FROM unnest per batch), to show what batching alone gives.
async function pgBatchedInsert(pool: pg.Pool, concurrency: number) {
  const run = `b${concurrency}-${++ceilingRun}`;
  const batcher = new GroupCommit<[string, number], void>(
    groupCommit === false ? defaultGroupCommit : groupCommit,
    ([pid]) => pid,
    async (rows) => {
      await pool.query({
        name: "bench_ceiling_insert_batch",
        text: `INSERT INTO bench_ceiling (persistence_id, sequence_nr, manifest, payload)
          SELECT t.pid, t.seq, $3, $4 FROM unnest($1::text[], $2::bigint[]) AS t(pid, seq)`,
        values: [rows.map((r) => r[0]), rows.map((r) => r[1]), manifest, payload],
      });
      return rows.map((): PromiseSettledResult<void> => ({ status: "fulfilled", value: undefined }));
    },
  );
  return measure(concurrency, (w, i) => batcher.submit([`${run}-${w}`, i]));
}

function sqliteCeiling(path: string, concurrency: number) {
  const db = new Sqlite(path);
  db.pragma("journal_mode = WAL");
  db.pragma("synchronous = NORMAL");
  db.exec(`CREATE TABLE IF NOT EXISTS bench_ceiling (persistence_id TEXT NOT NULL, sequence_nr INTEGER NOT NULL,
    manifest TEXT NOT NULL, payload TEXT NOT NULL, PRIMARY KEY (persistence_id, sequence_nr))`);
  const insert = db.prepare("INSERT INTO bench_ceiling VALUES (?, ?, ?, ?)");
  const run = `c${concurrency}-${++ceilingRun}`;
  return measure(concurrency, async (w, i) => insert.run(`${run}-${w}`, i, manifest, payload)).finally(() =>
    db.close(),
  );
}

// Recovery benchmark entity: counts events.
abstract class Cmd {}
class Get extends Cmd {}
class Count {
  constructor(readonly n: number) {}
}
class Counting extends EventSourcedBehavior<Cmd, { n: number }, { n: number }> {
  emptyState() {
    return { n: 0 };
  }
  applyEvent(state: { n: number }) {
    return { n: state.n + 1 };
  }
  handleCommand(state: { n: number }, _c: Cmd, ctx: EntityContext<Cmd>) {
    return EventSourcedEffect.none<{ n: number }, { n: number }>().thenRun(() => ctx.sender?.tell(new Count(state.n)));
  }
}

async function recoveryCase(store: PersistenceStore, backend: string, events: number) {
  const out: { backend: string; events: number; snapshot: boolean; recoveryMs: number }[] = [];
  for (const withSnapshot of [false, true]) {
    const pid = `Recover:${backend}-${withSnapshot ? "snap" : "plain"}`;
    for (let rev = 0; rev < events; rev += 500) {
      const batch = Array.from({ length: 500 }, (_, i) => ({
        manifest: "json",
        payload: JSON.stringify({ i: rev + i, payload }),
      }));
      await store.appendEvents({
        persistenceId: pid,
        expectedRevision: rev,
        operationId: `load-${rev}`,
        events: batch,
      });
    }
    if (withSnapshot)
      await store.saveSnapshot(pid, { sequenceNr: events, manifest: "json", payload: JSON.stringify({ n: events }) });
    const system = ActorSystem.create("bench");
    await Database.get(system).use(store);
    const type = EventSourcing.get(system).registerEntity(Counting, Cmd, () => new Counting(), { name: "Recover" });
    const started = clock.now();
    const reply = await EventSourcing.get(system)
      .getEntityRef<Cmd>(type.id(`${backend}-${withSnapshot ? "snap" : "plain"}`))
      .ask(new Get(), Count, 60_000);
    const recoveryMs = clock.now() - started;
    if (reply.n !== events) throw new Error(`recovered ${reply.n} events, expected ${events}`);
    await system.terminate();
    out.push({ backend, events, snapshot: withSnapshot, recoveryMs });
  }
  return out;
}

/** Median of each measured field over rounds. */
function median(results: Awaited<ReturnType<typeof measure>>[]) {
  const mid = (xs: number[]) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  return {
    opsPerSec: mid(results.map((r) => r.opsPerSec)),
    p50Ms: mid(results.map((r) => r.p50Ms)),
    p99Ms: mid(results.map((r) => r.p99Ms)),
    clientCpuUsPerOp: mid(results.map((r) => r.clientCpuUsPerOp)),
    ops: results.reduce((n, r) => n + r.ops, 0),
  };
}

// The machine may be shared: ceiling and appends run interleaved, round after round, and each is reported as the
// median over rounds, so that load drifting during the run affects both sides alike.
async function compare(
  backend: string,
  concurrency: number,
  ceiling: () => Promise<Awaited<ReturnType<typeof measure>>>,
  store: PersistenceStore,
  batched: (() => Promise<Awaited<ReturnType<typeof measure>>>) | null = null,
): Promise<Row[]> {
  // Fenced appends two ways: every entity in one shard (all writers lock one lease row: the worst case), and each
  // entity in its own shard (as 64 entities hashed over 256 shards mostly are).
  const lease = (shardId: number) =>
    store.acquireShardLease({ clusterName: "bench", entityType: `B${concurrency}`, shardId }, "bench", 600_000);
  const oneShard = [(await lease(0))!];
  const ownShards: ShardLeaseToken[] = [];
  for (let w = 0; w < concurrency; w++) ownShards.push((await lease(w + 1))!);
  const samples: Record<string, Awaited<ReturnType<typeof measure>>[]> = {
    ceiling: [],
    batched: [],
    append: [],
    one: [],
    own: [],
  };
  for (let round = 0; round < rounds; round++) {
    samples.ceiling!.push(await ceiling());
    if (batched !== null) samples.batched!.push(await batched());
    samples.append!.push(await appendCase(store, `${backend}${round}`, concurrency, null));
    samples.one!.push(await appendCase(store, `${backend}${round}one`, concurrency, oneShard));
    samples.own!.push(await appendCase(store, `${backend}${round}own`, concurrency, ownShards));
  }
  const c = median(samples.ceiling!);
  const row = (mode: string, m: ReturnType<typeof median>): Row => ({
    backend,
    mode,
    concurrency,
    ...m,
    ratioToCeiling: m.opsPerSec / c.opsPerSec,
  });
  return [
    row("ceiling: raw INSERT", c),
    ...(batched === null ? [] : [row("raw INSERT, batched", median(samples.batched!))]),
    row("append", median(samples.append!)),
    row("fenced, shard each", median(samples.own!)),
    row("fenced, one shard", median(samples.one!)),
  ];
}

async function main(): Promise<void> {
  const loadAtStart = loadavg();
  const rows: Row[] = [];
  const schema = `movie_bench_${process.pid}`;
  const dir = mkdtempSync(join(tmpdir(), "movie-bench-"));
  const recovery: Awaited<ReturnType<typeof recoveryCase>> = [];
  const batching: { concurrency: number; statements: number; appendsPerStatement: number; largestBatch: number }[] = [];
  const setup = new pg.Client({ connectionString: url });
  await setup.connect();
  await setup.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
  await setup.end();
  try {
    for (const concurrency of backends.includes("postgres") ? concurrencies : []) {
      const store = await PostgresStore.connect({ connectionUri: url, schema, poolSize: concurrency, groupCommit });
      const before = store.groupCommitStats;
      rows.push(
        ...(await compare(
          "postgres",
          concurrency,
          () => pgCeiling(store.pool, concurrency),
          store,
          () => pgBatchedInsert(store.pool, concurrency),
        )),
      );
      // Over all one-event appends of this level (warm-ups included; the multi-event recovery load is not batched).
      const after = store.groupCommitStats;
      const statements = after.statements - before.statements;
      batching.push({
        concurrency,
        statements,
        appendsPerStatement:
          (statements + after.batchedItems - before.batchedItems - (after.batches - before.batches)) / statements,
        largestBatch: after.largestBatch,
      });
      if (concurrency === 1) recovery.push(...(await recoveryCase(store, "postgres", 10_000)));
      await store.close();
    }
    for (const concurrency of backends.includes("sqlite") ? concurrencies : []) {
      const path = join(dir, `bench-${concurrency}.sqlite3`);
      const store = SqliteStore.open({ dbPath: path });
      rows.push(...(await compare("sqlite", concurrency, () => sqliteCeiling(path, concurrency), store)));
      if (concurrency === 1) recovery.push(...(await recoveryCase(store, "sqlite", 10_000)));
      await store.close();
    }
  } finally {
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    await admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await admin.end();
    rmSync(dir, { recursive: true, force: true });
  }

  const pad = (s: string, n: number) => s.padEnd(n);
  const gc = groupCommit === false ? "off" : `${groupCommit.maxBatchSize}x${groupCommit.maxConcurrentBatches}`;
  console.log(
    `payload ${payload.length} B, ${caseMs} ms per case, median of ${rounds} interleaved rounds, group commit ${gc}, 1-minute load ${loadAtStart[0]!.toFixed(2)} at the start, ${loadavg()[0]!.toFixed(2)} at the end`,
  );
  console.log(
    `${pad("backend", 10)}${pad("mode", 24)}${pad("conc", 6)}${pad("ops/s", 10)}${pad("p50 ms", 9)}${pad("p99 ms", 9)}${pad("client µs", 11)}vs ceiling`,
  );
  for (const r of rows) {
    console.log(
      `${pad(r.backend, 10)}${pad(r.mode, 24)}${pad(String(r.concurrency), 6)}${pad(r.opsPerSec.toFixed(0), 10)}${pad(
        r.p50Ms.toFixed(2),
        9,
      )}${pad(r.p99Ms.toFixed(2), 9)}${pad(r.clientCpuUsPerOp.toFixed(0), 11)}${r.ratioToCeiling === null ? "" : `${(r.ratioToCeiling * 100).toFixed(0)}%`}`,
    );
  }
  for (const b of batching)
    console.log(
      `postgres group commit at ${b.concurrency}: ${b.appendsPerStatement.toFixed(1)} appends per statement, largest ${b.largestBatch}`,
    );
  console.log("recovery of a 10k-event entity:");
  for (const r of recovery)
    console.log(
      `  ${pad(r.backend, 10)}${r.snapshot ? "with snapshot   " : "without snapshot"} ${r.recoveryMs.toFixed(1)} ms`,
    );
  mkdirSync("bench/results", { recursive: true });
  writeFileSync(
    "bench/results/persistence.json",
    `${JSON.stringify({ payloadBytes: payload.length, caseMs, rounds, groupCommit, loadAverage: { start: loadAtStart, end: loadavg() }, batching, appends: rows, recovery }, null, 2)}\n`,
  );
}

await main();
