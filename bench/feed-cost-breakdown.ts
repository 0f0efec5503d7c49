// Where the PostgreSQL feed's append cost goes (issue 20): fenced one-event appends, each writer its own shard, at
// concurrency 1, 4 and 64, into one schema per variant of the feed, every variant measured once per round in a rotating
// order beside the schema without the feed; the figure is the median of the per-round ratios (variant / no feed).
// Usage: npx tsx --conditions=movie-source bench/feed-cost-breakdown.ts
//   MOVIE_BENCH_SECONDS per case (default 0.3), MOVIE_BENCH_ROUNDS (default 9), MOVIE_BENCH_VARIANTS (comma list).
import { readFileSync } from "node:fs";
import { loadavg } from "node:os";
import pg from "pg";
import { RealScheduler } from "../src/actor/index.ts";
import type { PersistenceStore, ShardLeaseToken } from "../src/persistence/index.ts";
import { PostgresStore } from "../src/persistence/postgres/index.ts";

const clock = new RealScheduler();
const url = process.env.MOVIE_POSTGRES_TEST_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const caseMs = Number(process.env.MOVIE_BENCH_SECONDS ?? "0.3") * 1000;
const rounds = Number(process.env.MOVIE_BENCH_ROUNDS ?? "9");
const payload = JSON.stringify({ kind: "ItemAdded", sku: "sku-000042", quantity: 3, note: "x".repeat(64) });
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const fn = (body: string) => `CREATE OR REPLACE FUNCTION movie_feed_append() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    IF NOT EXISTS (SELECT 1 FROM movie_new_events) THEN RETURN NULL; END IF;
    ${body}
    RETURN NULL;
  END $$`;
const lock = "PERFORM pg_advisory_xact_lock(1297045062, hashtext(TG_TABLE_SCHEMA));";
const insert = `INSERT INTO event_feed (persistence_id, sequence_nr, entity_type)
      SELECT n.persistence_id, n.sequence_nr, split_part(n.persistence_id, ':', 1) FROM movie_new_events n
      ORDER BY n.persistence_id, n.sequence_nr;`;
const notify = "PERFORM pg_notify('movie_event_feed', current_schema());";
// The offset on the journal row, from a column default evaluated per row before its insert.
const onJournal = (notifyInDefault: boolean, typeIndex: boolean) => [
  "DROP TRIGGER movie_event_feed ON event_journal",
  "CREATE SEQUENCE movie_event_offset",
  "ALTER TABLE event_journal ADD COLUMN event_offset BIGINT NULL",
  `CREATE FUNCTION movie_next_offset() RETURNS bigint LANGUAGE plpgsql AS $$
    BEGIN
      PERFORM pg_advisory_xact_lock(1297045062, hashtext(current_schema()));
      ${notifyInDefault ? notify : ""}
      RETURN nextval('movie_event_offset');
    END $$`,
  "ALTER TABLE event_journal ALTER COLUMN event_offset SET DEFAULT movie_next_offset()",
  "CREATE UNIQUE INDEX event_journal_offset_idx ON event_journal (event_offset)",
  ...(typeIndex
    ? ["CREATE INDEX event_journal_type_idx ON event_journal (split_part(persistence_id, ':', 1), event_offset)"]
    : []),
  ...(notifyInDefault
    ? []
    : [
        `CREATE FUNCTION movie_feed_notify() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN ${notify} RETURN NULL; END $$`,
        `CREATE TRIGGER movie_feed_notify AFTER INSERT ON event_journal FOR EACH STATEMENT
          EXECUTE FUNCTION movie_feed_notify()`,
      ]),
];

// The offset from a column default that is one CASE expression of built-in functions (no PL/pgSQL call per row): the
// lock (a local re-grant after the first row), the notification (a duplicate after the first row), then nextval.
const onJournalCase = (withNotify: boolean, typeIndex: boolean) => [
  "DROP TRIGGER movie_event_feed ON event_journal",
  "CREATE SEQUENCE movie_event_offset",
  "ALTER TABLE event_journal ADD COLUMN event_offset BIGINT NULL",
  `ALTER TABLE event_journal ALTER COLUMN event_offset SET DEFAULT CASE
    WHEN pg_advisory_xact_lock((1297045062::bigint << 32) | 'movie_event_offset'::regclass::oid::bigint) IS NULL THEN NULL
    ${withNotify ? "WHEN pg_notify('movie_event_feed', current_schema()) IS NULL THEN NULL" : ""}
    ELSE nextval('movie_event_offset'::regclass) END`,
  "CREATE UNIQUE INDEX event_journal_offset_idx ON event_journal (event_offset)",
  ...(typeIndex
    ? ["CREATE INDEX event_journal_type_idx ON event_journal (split_part(persistence_id, ':', 1), event_offset)"]
    : []),
];

const variants: Record<string, string[]> = {
  journal_case: onJournalCase(true, false),
  journal_case_nonotify: onJournalCase(false, false),
  journal_case_typeidx: onJournalCase(true, true),
  full: [],
  nonotify: [fn(`${lock} ${insert}`)],
  nolock: [fn(`${insert} ${notify}`)],
  noinsert: [fn(`${lock} ${notify}`)],
  lockinsert_nonotify: [fn(`${lock} ${insert}`)],
  emptytrigger: [fn("")],
  journal_notifyfn: onJournal(true, false),
  journal_notifytrig: onJournal(false, false),
  journal_notifyfn_typeidx: onJournal(true, true),
  journal_nonotify: [
    ...onJournal(true, false).slice(0, 3),
    `CREATE FUNCTION movie_next_offset() RETURNS bigint LANGUAGE plpgsql AS $$
    BEGIN
      PERFORM pg_advisory_xact_lock(1297045062, hashtext(current_schema()));
      RETURN nextval('movie_event_offset');
    END $$`,
    ...onJournal(true, false).slice(4),
  ],
};
const chosen = (process.env.MOVIE_BENCH_VARIANTS ?? Object.keys(variants).join(",")).split(",");

/** The server processes of a store's pool, all of them opened (the pool has 4). */
async function backendPids(store: PostgresStore): Promise<number[]> {
  const clients = await Promise.all([0, 1, 2, 3].map(() => store.pool.connect()));
  try {
    return await Promise.all(
      clients.map(async (c) => Number((await c.query("SELECT pg_backend_pid() AS p")).rows[0].p)),
    );
  } finally {
    for (const c of clients) c.release();
  }
}

/** Nanoseconds these processes have run on a CPU (/proc/<pid>/schedstat, first field). */
const cpuNs = (pids: number[]) =>
  pids.reduce((sum, pid) => sum + Number(readFileSync(`/proc/${pid}/schedstat`, "utf8").split(" ")[0]), 0);

interface Sample {
  rate: number;
  /** Server backend CPU µs per append. */
  serverUs: number;
  /** This process's CPU µs per append. */
  clientUs: number;
}

async function appendRate(store: PostgresStore, label: string, fences: ShardLeaseToken[]): Promise<Sample> {
  const pids = await backendPids(store);
  const revisions = new Array<number>(fences.length).fill(0);
  let op = 0;
  let phaseEnd = clock.now() + 100;
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
  const server0 = cpuNs(pids);
  const client0 = process.cpuUsage();
  phaseEnd = started + caseMs;
  await Promise.all(workers.map(worker));
  const client = process.cpuUsage(client0);
  return {
    rate: (count * 1000) / (clock.now() - started),
    serverUs: (cpuNs(pids) - server0) / 1000 / count,
    clientUs: (client.user + client.system) / count,
  };
}

async function leases(store: PersistenceStore, concurrency: number): Promise<ShardLeaseToken[]> {
  const out: ShardLeaseToken[] = [];
  for (let w = 0; w < concurrency; w++) {
    out.push(
      (await store.acquireShardLease(
        { clusterName: "bench", entityType: `B${concurrency}`, shardId: w },
        "bench",
        600_000,
      ))!,
    );
  }
  return out;
}

const base = `movie_feed20_bd_${process.pid}`;
const names = ["off", ...chosen];
const stores = new Map<string, PostgresStore>();
const admin = new pg.Client({ connectionString: url });
await admin.connect();
try {
  for (const name of names) {
    const store = await PostgresStore.connect({ connectionUri: url, schema: `${base}_${name}`, poolSize: 4 });
    stores.set(name, store);
    const statements = name === "off" ? ["DROP TRIGGER movie_event_feed ON event_journal"] : variants[name]!;
    for (const sql of statements) await store.pool.query(sql);
  }
  const load0 = loadavg()[0]!;
  for (const concurrency of [1, 4, 64]) {
    const fences = new Map<string, ShardLeaseToken[]>();
    for (const name of names) fences.set(name, await leases(stores.get(name)!, concurrency));
    const rates = new Map<string, Sample[]>(names.map((n) => [n, []]));
    for (let round = 0; round < rounds; round++) {
      const order = names.map((_, i) => names[(i + round) % names.length]!);
      for (const name of order) {
        rates.get(name)!.push(await appendRate(stores.get(name)!, `${name}${concurrency}r${round}`, fences.get(name)!));
      }
    }
    const off = rates.get("off")!;
    console.log(
      `concurrency ${concurrency}: no feed: median ${median(off.map((s) => s.rate)).toFixed(0)}/s, server CPU ${median(off.map((s) => s.serverUs)).toFixed(1)} µs/append, client ${median(off.map((s) => s.clientUs)).toFixed(1)}`,
    );
    for (const name of chosen) {
      const r = rates.get(name)!;
      const ratio = median(r.map((x, i) => x.rate / off[i]!.rate));
      const serverAdded = median(r.map((x, i) => x.serverUs - off[i]!.serverUs));
      const cpuRatio = median(r.map((x, i) => (off[i]!.serverUs + off[i]!.clientUs) / (x.serverUs + x.clientUs)));
      console.log(
        `  ${name.padEnd(26)} ${median(r.map((s) => s.rate))
          .toFixed(0)
          .padStart(
            7,
          )}/s  rate ratio ${(ratio * 100).toFixed(0)} %  server CPU ${median(r.map((s) => s.serverUs)).toFixed(1)} µs (+${serverAdded.toFixed(1)})  server+client CPU ratio ${(cpuRatio * 100).toFixed(0)} %  server µs pairs ${r.map((x, i) => `${off[i]!.serverUs.toFixed(0)}/${x.serverUs.toFixed(0)}`).join(" ")}`,
      );
    }
  }
  console.log(`1-minute load ${load0.toFixed(1)} → ${loadavg()[0]!.toFixed(1)}; ${rounds} rounds of ${caseMs} ms`);
} finally {
  for (const s of stores.values()) await s.close();
  for (const name of names) await admin.query(`DROP SCHEMA IF EXISTS ${base}_${name} CASCADE`);
  await admin.end();
}
