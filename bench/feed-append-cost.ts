// What the event feed costs an append (issue 20 asks for at most ~10 %): fenced one-event appends, each writer its own
// shard, at concurrency 1, 4 and 64, on PostgreSQL and SQLite, into a store with the feed and into one without it, the
// write path as it was before the feed (the client code of an untagged append is the same): on PostgreSQL the
// journal's offset column (migration 16) is dropped; on SQLite the journal is put back to its shape before the feed (migration 1's table: no offset
// column, no feed trigger). The two sides alternate in pairs within one process, the order flipping each round so that
// drifting load favours neither; the figure is the median of the per-pair ratios (with / without), beside the median
// rates. Beside the rates, this process's CPU time per append (user + system): on SQLite, where an append runs in
// this process, it is the append's cost and varies much less with the machine's load than the rate does.
// Usage: npx tsx --conditions=movie-source bench/feed-append-cost.ts
//   MOVIE_POSTGRES_TEST_URL overrides the local server; MOVIE_BENCH_SECONDS is each case's duration (default 0.3);
//   MOVIE_BENCH_ROUNDS the pairs per case (default 7); MOVIE_BENCH_BACKENDS "postgres", "sqlite" or both
//   (default "postgres,sqlite"). Writes bench/results/feed-append-cost.json.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import pg from "pg";
import { RealScheduler } from "../src/actor/index.ts";
import type { PersistenceStore, ShardLeaseToken } from "../src/persistence/index.ts";
import { PostgresStore } from "../src/persistence/postgres/index.ts";
import { SqliteStore, sqliteMigrations } from "../src/persistence/sqlite/index.ts";

const clock = new RealScheduler();
const url = process.env.MOVIE_POSTGRES_TEST_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const caseMs = Number(process.env.MOVIE_BENCH_SECONDS ?? "0.3") * 1000;
const rounds = Number(process.env.MOVIE_BENCH_ROUNDS ?? "7");
const backends = (process.env.MOVIE_BENCH_BACKENDS ?? "postgres,sqlite").split(",");
const warmupMs = 100;
const payload = JSON.stringify({ kind: "ItemAdded", sku: "sku-000042", quantity: 3, note: "x".repeat(64) });

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

interface Sample {
  /** Appends per second. */
  rate: number;
  /** This process's CPU time (user + system) per append, in microseconds. */
  cpuUs: number;
}

/** `fences.length` writers appending one event at a time for a warm-up, then `caseMs`. */
async function appendRate(store: PersistenceStore, label: string, fences: ShardLeaseToken[]): Promise<Sample> {
  const revisions = new Array<number>(fences.length).fill(0);
  let op = 0;
  let phaseEnd = clock.now() + warmupMs;
  let count = 0;
  let recording = false;
  const worker = async (w: number) => {
    while (clock.now() < phaseEnd) {
      const r = await store.appendEvents({
        persistenceId: `Bench:${label}-${w}`,
        expectedRevision: revisions[w]!,
        operationId: `${label}-${w}-${++op}`,
        events: [{ manifest: "bench.ItemAdded", payload }],
        fence: fences[w]!,
      });
      revisions[w] = r.revision;
      if (recording) count++;
    }
  };
  const workers = fences.map((_, w) => w);
  await Promise.all(workers.map(worker));
  recording = true;
  const started = clock.now();
  const cpu = process.cpuUsage();
  phaseEnd = started + caseMs;
  await Promise.all(workers.map(worker));
  const used = process.cpuUsage(cpu);
  return { rate: (count * 1000) / (clock.now() - started), cpuUs: (used.user + used.system) / count };
}

async function leases(store: PersistenceStore, concurrency: number, side: string): Promise<ShardLeaseToken[]> {
  const out: ShardLeaseToken[] = [];
  for (let w = 0; w < concurrency; w++) {
    const key = { clusterName: "bench", entityType: `B${side}${concurrency}`, shardId: w };
    out.push((await store.acquireShardLease(key, "bench", 600_000))!);
  }
  return out;
}

interface Row {
  backend: string;
  concurrency: number;
  withoutFeed: number;
  withFeed: number;
  /** Median of the per-pair ratios with / without. */
  ratio: number;
  pairs: [number, number][];
  /** Median CPU microseconds per append, without and with the feed, and the median of the per-pair ratios. */
  cpuUsWithoutFeed: number;
  cpuUsWithFeed: number;
  cpuRatio: number;
  cpuPairs: [number, number][];
}

async function compare(backend: string, withFeed: PersistenceStore, withoutFeed: PersistenceStore): Promise<Row[]> {
  const rows: Row[] = [];
  for (const concurrency of [1, 4, 64]) {
    const on = await leases(withFeed, concurrency, "on");
    const off = await leases(withoutFeed, concurrency, "off");
    const samples: [Sample, Sample][] = [];
    for (let round = 0; round < rounds; round++) {
      const offFirst = round % 2 === 0;
      const a = offFirst ? await appendRate(withoutFeed, `off${concurrency}r${round}`, off) : null;
      const b = await appendRate(withFeed, `on${concurrency}r${round}`, on);
      const c = a ?? (await appendRate(withoutFeed, `off${concurrency}r${round}`, off));
      samples.push([c, b]);
    }
    const pairs = samples.map(([c, b]): [number, number] => [c.rate, b.rate]);
    const cpuPairs = samples.map(([c, b]): [number, number] => [c.cpuUs, b.cpuUs]);
    rows.push({
      backend,
      concurrency,
      withoutFeed: median(pairs.map((p) => p[0])),
      withFeed: median(pairs.map((p) => p[1])),
      ratio: median(pairs.map((p) => p[1] / p[0])),
      pairs,
      cpuUsWithoutFeed: median(cpuPairs.map((p) => p[0])),
      cpuUsWithFeed: median(cpuPairs.map((p) => p[1])),
      // As a rate ratio: CPU per append without / with, so below 100 % means the feed costs.
      cpuRatio: median(cpuPairs.map((p) => p[0] / p[1])),
      cpuPairs,
    });
  }
  return rows;
}

async function main(): Promise<void> {
  const loadAtStart = loadavg()[0]!;
  const schema = `movie_benchf_${process.pid}`;
  const dir = mkdtempSync(join(tmpdir(), "movie-benchf-"));
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  const rows: Row[] = [];
  try {
    if (backends.includes("postgres")) {
      const pgOn = await PostgresStore.connect({ connectionUri: url, schema: `${schema}_on`, poolSize: 4 });
      const pgOff = await PostgresStore.connect({ connectionUri: url, schema: `${schema}_off`, poolSize: 4 });
      try {
        // The write path before the feed: the journal without its offset column (migration 16), whose default takes
        // the feed lock and the offset; the event_feed view reads that column.
        await pgOff.pool.query("DROP VIEW event_feed; ALTER TABLE event_journal DROP COLUMN event_offset");
        rows.push(...(await compare("postgres", pgOn, pgOff)));
      } finally {
        await pgOn.close();
        await pgOff.close();
      }
    }
    if (backends.includes("sqlite")) {
      const liteOn = SqliteStore.open({ dbPath: join(dir, "on.sqlite3") });
      const liteOff = SqliteStore.open({ dbPath: join(dir, "off.sqlite3") });
      try {
        // The journal as it was before the feed: migration 1's table (dropping the table drops any trigger on it).
        const raw = new Database(join(dir, "off.sqlite3"));
        raw.exec("DROP TABLE event_journal");
        raw.exec(sqliteMigrations[0]!.statements.find((sql) => sql.includes("event_journal"))!);
        raw.close();
        rows.push(...(await compare("sqlite", liteOn, liteOff)));
      } finally {
        await liteOn.close();
        await liteOff.close();
      }
    }
  } finally {
    if (backends.includes("postgres")) {
      for (const side of ["on", "off"]) await admin.query(`DROP SCHEMA IF EXISTS ${schema}_${side} CASCADE`);
    }
    await admin.end();
    rmSync(dir, { recursive: true, force: true });
  }
  const loadAtEnd = loadavg()[0]!;
  console.log(
    `fenced one-event appends/s, ${rounds} alternating pairs of ${caseMs} ms; 1-minute load ${loadAtStart.toFixed(1)} → ${loadAtEnd.toFixed(1)}`,
  );
  console.log(
    "backend   conc  without feed  with feed  median pair ratio  CPU µs/append without/with  CPU ratio  pairs (without/with)",
  );
  for (const r of rows) {
    console.log(
      `${r.backend.padEnd(10)}${String(r.concurrency).padEnd(6)}${r.withoutFeed.toFixed(0).padEnd(14)}${r.withFeed.toFixed(0).padEnd(11)}${`${(r.ratio * 100).toFixed(0)} %`.padEnd(19)}${`${r.cpuUsWithoutFeed.toFixed(1)} / ${r.cpuUsWithFeed.toFixed(1)}`.padEnd(28)}${`${(r.cpuRatio * 100).toFixed(0)} %`.padEnd(11)}${r.pairs.map((p) => `${p[0].toFixed(0)}/${p[1].toFixed(0)}`).join(" ")}`,
    );
  }
  mkdirSync("bench/results", { recursive: true });
  writeFileSync(
    "bench/results/feed-append-cost.json",
    `${JSON.stringify({ caseMs, rounds, backends, loadAtStart, loadAtEnd, rows }, null, 2)}\n`,
  );
}

await main();
