// Where the PostgreSQL feed's append cost goes (issue 20): fenced one-event appends, each writer its own shard, at
// concurrency 1, 4 and 64, into one schema per variant of the feed (migration 13's trigger and migration 16's column
// default, each whole and with parts left out), every variant measured once per round in a rotating order beside a
// schema without the feed. Rates swing with a shared machine's load, so beside them it reports the CPU time the
// server processes of each store's pool spent per append (/proc/<pid>/schedstat: PostgreSQL must run on this host),
// and its difference to the schema without the feed in the same round: the feed's server-side cost. Figures are
// medians over the rounds.
// Usage: npx tsx --conditions=movie-source bench/feed-cost-breakdown.ts
//   MOVIE_BENCH_SECONDS per case (default 0.3), MOVIE_BENCH_ROUNDS (default 9), MOVIE_BENCH_VARIANTS (comma list).
import { readFileSync } from "node:fs";
import { loadavg } from "node:os";
import pg from "pg";
import { RealScheduler } from "../src/actor/index.ts";
import type { PersistenceStore, ShardLeaseToken } from "../src/persistence/index.ts";
import {
  FEED_CHANNEL,
  FEED_LOCK_CLASS,
  FEED_LOCK_KEY_SQL,
  FEED_OFFSET_SEQUENCE,
  feedLockPerSchemaMigration,
  feedMigration,
} from "../src/persistence/postgres/feed-schema.ts";
import { PostgresStore } from "../src/persistence/postgres/index.ts";

const clock = new RealScheduler();
const url = process.env.MOVIE_POSTGRES_TEST_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const caseMs = Number(process.env.MOVIE_BENCH_SECONDS ?? "0.3") * 1000;
const rounds = Number(process.env.MOVIE_BENCH_ROUNDS ?? "9");
const payload = JSON.stringify({ kind: "ItemAdded", sku: "sku-000042", quantity: 3, note: "x".repeat(64) });
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

// Every schema is migrated by this build (migration 16: the offset on the journal row); each variant rebuilds a part.
/** The write path before the feed: the journal without its offset column (the event_feed view reads it). */
const noFeed = ["DROP VIEW event_feed", "ALTER TABLE event_journal DROP COLUMN event_offset"];

/** The feed as migrations 9 and 13 built it: a statement trigger filling the event_feed table under the feed lock. */
const migration13 = [...noFeed, ...feedMigration(""), ...feedLockPerSchemaMigration];
/** Migration 13's trigger function with this body after its "inserted nothing" check. */
const m13With = (body: string) => [
  ...migration13,
  `CREATE OR REPLACE FUNCTION movie_feed_append() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NOT EXISTS (SELECT 1 FROM movie_new_events) THEN RETURN NULL; END IF;
      ${body}
      RETURN NULL;
    END $$`,
];
const lock = `PERFORM pg_advisory_xact_lock(${FEED_LOCK_CLASS}, hashtext(TG_TABLE_SCHEMA));`;
const insert = `INSERT INTO event_feed (persistence_id, sequence_nr, entity_type)
      SELECT n.persistence_id, n.sequence_nr, split_part(n.persistence_id, ':', 1) FROM movie_new_events n
      ORDER BY n.persistence_id, n.sequence_nr;`;
const notify = `PERFORM pg_notify('${FEED_CHANNEL}', current_schema());`;

/** Migration 16's default with these parts (with neither, a plain nextval: write_order's default costs as much). */
const m16Default = (parts: { lock: boolean; notify: boolean }) =>
  !parts.lock && !parts.notify
    ? `ALTER TABLE event_journal ALTER COLUMN event_offset SET DEFAULT nextval('${FEED_OFFSET_SEQUENCE}'::regclass)`
    : `ALTER TABLE event_journal ALTER COLUMN event_offset SET DEFAULT CASE
    ${parts.lock ? `WHEN pg_advisory_xact_lock(${FEED_LOCK_KEY_SQL}) IS NULL THEN NULL` : ""}
    ${parts.notify ? `WHEN pg_notify('${FEED_CHANNEL}', current_schema()) IS NULL THEN NULL` : ""}
    ELSE nextval('${FEED_OFFSET_SEQUENCE}'::regclass) END`;

const variants: Record<string, string[]> = {
  // Migration 13 (the build before migration 16) and its parts.
  m13: migration13,
  m13_without_notify: m13With(`${lock} ${insert}`),
  m13_without_lock: m13With(`${insert} ${notify}`),
  m13_without_feed_rows: m13With(`${lock} ${notify}`),
  m13_trigger_only: m13With(""),
  // Migration 16 and its parts.
  m16: [],
  m16_without_notify: [m16Default({ lock: true, notify: false })],
  m16_nextval_only: [m16Default({ lock: false, notify: false })],
  m16_with_type_index: [
    "CREATE INDEX event_journal_type_idx ON event_journal (split_part(persistence_id, ':', 1), event_offset)",
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
    const statements = name === "off" ? noFeed : variants[name]!;
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
