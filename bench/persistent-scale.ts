// Persistent sharding at scale (run by `npm run bench:persistent-sharding` after its own cases, or alone with
// MOVIE_BENCH_PART=scale): one process, the local PostgreSQL, real shard leases.
//  1. Lease upkeep at idle: two lease keepers (two "nodes", each its own pool) hold 256, 1,024 and 4,096 shards
//     between them with the default lease settings (10 s lease, 3 s renewal); the lease statements each node sends
//     per second while nothing else happens, counted at the store (each call is one autocommit transaction).
//  2. Fenced writes at 1, 16, 64 and 100 in flight: event appends and durable-state saves (each writer its own entity,
//     each write fenced by its shard's lease), beside a batched raw INSERT and a batched raw UPDATE of the same rows
//     shape, sent through the same group commit, in the same run (the ceilings).
// "before" and "after" are the same code with the batching switched off (every renewal, acquisition and state save
// its own statement, as before issue 23) and on; rounds alternate them. Figures are measurements, never assertions.
// MOVIE_BENCH_CASE_MS (default 800) measured time per write case, MOVIE_BENCH_ROUNDS (default 3), MOVIE_BENCH_IDLE_MS
// (default 6,500) the idle window per shard count, MOVIE_BENCH_SHARDS (default "256,1024,4096").
import { randomBytes } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import pg from "pg";
import { RealScheduler } from "../src/actor/index.ts";
import { defaultGroupCommit, GroupCommit } from "../src/persistence/group-commit.ts";
import type { ShardLeaseKey, ShardLeaseToken } from "../src/persistence/index.ts";
import { PostgresStore } from "../src/persistence/postgres/index.ts";
import { LeaseKeeper, type LeaseStore } from "../src/sharding/lease/index.ts";

const url = process.env.MOVIE_POSTGRES_TEST_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const caseMs = Number(process.env.MOVIE_BENCH_CASE_MS ?? 800);
const warmupMs = 200;
const rounds = Number(process.env.MOVIE_BENCH_ROUNDS ?? 3);
const idleMs = Number(process.env.MOVIE_BENCH_IDLE_MS ?? 6_500);
const shardCounts = (process.env.MOVIE_BENCH_SHARDS ?? "256,1024,4096").split(",").map(Number);
const concurrencies = (process.env.MOVIE_BENCH_CONCURRENCY ?? "1,16,64,100").split(",").map(Number);
const clock = new RealScheduler();
const payload = JSON.stringify({ kind: "Counted", n: 42, note: "x".repeat(64) });
const manifest = "bench.Counted";
const started = clock.now();
const say = (text: string): void => {
  process.stderr.write(`${((clock.now() - started) / 1000).toFixed(1).padStart(5)}s  ${text}\n`);
};

/** The batching switch of this build: present once issue 23's batching exists, absent before. */
interface Switchable {
  batching?: boolean;
}
type Mode = "before" | "after";
const canSwitch = (store: PostgresStore): boolean => "batching" in (store as unknown as Switchable);
const setMode = (store: PostgresStore, mode: Mode): void => {
  if (canSwitch(store)) (store as unknown as Switchable).batching = mode === "after";
};

/** Counts the lease statements a keeper sends (one call = one statement = one transaction). */
class CountingLeases implements LeaseStore {
  statements = 0;
  rows = 0;
  constructor(
    private readonly store: PostgresStore,
    private readonly batched: boolean,
  ) {}
  acquireShardLease(key: ShardLeaseKey, owner: string, durationMs: number) {
    this.statements++;
    this.rows++;
    return this.store.acquireShardLease(key, owner, durationMs);
  }
  renewShardLease(token: ShardLeaseToken, durationMs: number) {
    this.statements++;
    this.rows++;
    return this.store.renewShardLease(token, durationMs);
  }
  releaseShardLease(token: ShardLeaseToken) {
    this.statements++;
    this.rows++;
    return this.store.releaseShardLease(token);
  }
  get batch(): Pick<Required<LeaseStore>, "renewShardLeases" | "acquireShardLeases"> | null {
    const s = this.store as unknown as Required<LeaseStore>;
    if (!this.batched || typeof s.renewShardLeases !== "function") return null;
    return {
      renewShardLeases: (tokens, durationMs) => {
        this.statements += Math.ceil(tokens.length / 1000);
        this.rows += tokens.length;
        return s.renewShardLeases(tokens, durationMs);
      },
      acquireShardLeases: (keys, owner, durationMs) => {
        this.statements += Math.ceil(keys.length / 1000);
        this.rows += keys.length;
        return s.acquireShardLeases(keys, owner, durationMs);
      },
    };
  }
}

function leaseStoreOf(counting: CountingLeases): LeaseStore {
  const batch = counting.batch;
  return batch === null
    ? {
        acquireShardLease: (k, o, d) => counting.acquireShardLease(k, o, d),
        renewShardLease: (t, d) => counting.renewShardLease(t, d),
        releaseShardLease: (t) => counting.releaseShardLease(t),
      }
    : {
        acquireShardLease: (k, o, d) => counting.acquireShardLease(k, o, d),
        renewShardLease: (t, d) => counting.renewShardLease(t, d),
        releaseShardLease: (t) => counting.releaseShardLease(t),
        ...batch,
      };
}

interface UpkeepRow {
  mode: Mode;
  shards: number;
  acquireMs: number;
  acquireStatements: number;
  idleStatementsPerSecPerNode: number;
  idleRowsPerSecPerNode: number;
  losses: number;
  failedAcquisitions: number;
}

async function upkeep(stores: PostgresStore[], shards: number, mode: Mode, cluster: string): Promise<UpkeepRow> {
  const counters = stores.map((s) => new CountingLeases(s, mode === "after"));
  const counts = { leaseAcquisitions: 0, leaseRenewals: 0, leaseLosses: 0 };
  const keepers = counters.map(
    (c, n) =>
      new LeaseKeeper(
        {
          clusterName: cluster,
          entityType: "Upkeep",
          owner: `bench-node-${n}`,
          leaseDurationMs: 10_000,
          leaseRenewIntervalMs: 3_000,
        },
        leaseStoreOf(c),
        clock,
        { stopEntities: () => {}, count: (counter, by) => (counts[counter] += by), safeToOwn: () => true },
        { renewalRounds: mode === "after" },
      ),
  );
  const t0 = clock.now();
  // A node's start: every shard it owns is wanted at once (the deliveries the plan sends it); a refused or failed
  // acquisition (a timeout under load) is asked again, as the retry barrier would.
  let failedAcquisitions = 0;
  await Promise.all(
    keepers.map(async (k, n) => {
      let wanted: number[] = [];
      for (let s = n; s < shards; s += keepers.length) {
        k.own(s);
        wanted.push(s);
      }
      for (let attempt = 0; wanted.length > 0; attempt++) {
        if (attempt > 60) throw new Error(`node ${n}: ${wanted.length} shards not acquired`);
        // A refusal under overload (timeouts, the breaker open) is asked again after a pause, as a retry would be.
        if (attempt > 0) await new Promise<void>((r) => clock.scheduleOnce(500, r));
        const outcomes = await Promise.allSettled(wanted.map((s) => k.acquire(s)));
        wanted = wanted.filter((_, i) => outcomes[i]!.status === "rejected");
        failedAcquisitions += wanted.length;
      }
    }),
  );
  const acquireMs = clock.now() - t0;
  const acquireStatements = counters.reduce((sum, c) => sum + c.statements, 0);
  const before = counters.map((c) => [c.statements, c.rows] as const);
  await new Promise<void>((r) => clock.scheduleOnce(idleMs, r));
  const perSec = (i: 0 | 1) =>
    counters.reduce((sum, c, n) => sum + (i === 0 ? c.statements : c.rows) - before[n]![i], 0) /
    counters.length /
    (idleMs / 1000);
  const row: UpkeepRow = {
    mode,
    shards,
    acquireMs: Math.round(acquireMs),
    acquireStatements,
    idleStatementsPerSecPerNode: +perSec(0).toFixed(2),
    idleRowsPerSecPerNode: +perSec(1).toFixed(1),
    losses: counts.leaseLosses,
    failedAcquisitions,
  };
  await Promise.all(keepers.map((k) => k.stopAll()));
  return row;
}

interface Loop {
  rate: number;
  p50: number;
  p99: number;
}

async function closedLoops(concurrency: number, once: (worker: number, i: number) => Promise<unknown>): Promise<Loop> {
  const latencies: number[] = [];
  let measuring = false;
  let stop = false;
  let ops = 0;
  const worker = async (w: number) => {
    for (let i = 0; !stop; i++) {
      const t = clock.now();
      await once(w, i);
      if (measuring) {
        ops++;
        latencies.push(clock.now() - t);
      }
    }
  };
  const loops = Array.from({ length: concurrency }, (_, w) => worker(w));
  await new Promise<void>((r) => clock.scheduleOnce(warmupMs, r));
  measuring = true;
  const t0 = clock.now();
  await new Promise<void>((r) => clock.scheduleOnce(caseMs, r));
  measuring = false;
  const elapsed = clock.now() - t0;
  stop = true;
  await Promise.all(loops);
  latencies.sort((a, b) => a - b);
  const at = (q: number) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))] ?? 0;
  return { rate: (ops * 1000) / elapsed, p50: +at(0.5).toFixed(2), p99: +at(0.99).toFixed(2) };
}

const median = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0
    ? 0
    : s.length % 2 === 1
      ? s[(s.length - 1) / 2]!
      : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

/** Batched raw writes through the same group commit as the store (64 per statement, one in flight). */
function rawBatcher(pool: pg.Pool, text: string, name: string) {
  return new GroupCommit<[string, number], boolean>(
    defaultGroupCommit,
    ([id]) => id,
    async (batch) => {
      const sorted = [...batch].sort((a, b) => (a[0] < b[0] ? -1 : 1));
      await pool.query({
        name,
        text,
        values: [
          sorted.map((b) => b[0]),
          sorted.map((b) => b[1]),
          sorted.map(() => manifest),
          sorted.map(() => payload),
        ],
      });
      return batch.map(() => ({ status: "fulfilled", value: true }) as const);
    },
  );
}

export async function runScaleBench(): Promise<void> {
  const schema = `movie_bench_scale_${process.pid}_${randomBytes(3).toString("hex")}`;
  const loadBefore = loadavg().map((x) => +x.toFixed(2));
  const stores: PostgresStore[] = [];
  try {
    const main = await PostgresStore.connect({ connectionUri: url, schema, poolSize: 16 });
    stores.push(main);
    const modes: Mode[] = canSwitch(main) ? ["before", "after"] : ["before"];
    say(`schema ${schema}; modes ${modes.join(", ")}`);

    // 1. Lease upkeep at idle, each case on two fresh stores (an overloaded case may leave a breaker open).
    const upkeepRows: UpkeepRow[] = [];
    let clusterN = 0;
    for (const [n, shards] of shardCounts.entries()) {
      // The order alternates from one shard count to the next, and each case starts after a pause: an overloaded
      // "before" case leaves the database busy for a while, which must not fall on the case after it only.
      for (const mode of n % 2 === 1 ? modes : [...modes].reverse()) {
        await new Promise<void>((r) => clock.scheduleOnce(3_000, r));
        const two = [
          await PostgresStore.connect({ connectionUri: url, schema, poolSize: 16 }),
          await PostgresStore.connect({ connectionUri: url, schema, poolSize: 16 }),
        ];
        for (const s of two) setMode(s, mode);
        const row = await upkeep(two, shards, mode, `upkeep${clusterN++}`).finally(() =>
          Promise.all(two.map((s) => s.close())),
        );
        upkeepRows.push(row);
        say(
          `upkeep ${mode} ${shards} shards: ${row.idleStatementsPerSecPerNode} statements/s per node at idle (acquired in ${row.acquireMs} ms, ${row.acquireStatements} statements)`,
        );
      }
    }
    console.table(upkeepRows);

    // 2. Fenced writes against batched raw ceilings.
    await main.pool.query(`CREATE TABLE IF NOT EXISTS bench_raw_insert (id TEXT NOT NULL, seq BIGINT NOT NULL,
      manifest TEXT NOT NULL, payload TEXT NOT NULL, PRIMARY KEY (id, seq))`);
    await main.pool.query(`CREATE TABLE IF NOT EXISTS bench_raw_state (id TEXT PRIMARY KEY, revision BIGINT NOT NULL,
      manifest TEXT NOT NULL, payload TEXT NOT NULL)`);
    const rawInsert = rawBatcher(
      main.pool,
      "INSERT INTO bench_raw_insert SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[])",
      "bench_raw_insert",
    );
    const rawUpdate = rawBatcher(
      main.pool,
      `UPDATE bench_raw_state s SET revision = t.r, manifest = t.m, payload = t.p
        FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[]) AS t(id, r, m, p) WHERE s.id = t.id`,
      "bench_raw_update",
    );
    const shardsForWrites = 64;
    const fences: ShardLeaseToken[] = [];
    for (let s = 0; s < shardsForWrites; s++) {
      const t = await main.acquireShardLease(
        { clusterName: "writes", entityType: "W", shardId: s },
        "writer",
        3_600_000,
      );
      fences.push(t!);
    }
    const maxC = Math.max(...concurrencies);
    const samples = new Map<string, Loop[]>();
    const record = (key: string, loop: Loop) => samples.set(key, [...(samples.get(key) ?? []), loop]);
    let runN = 0;
    for (let round = 1; round <= rounds; round++) {
      for (const c of concurrencies) {
        const cases: [string, () => Promise<Loop>][] = [];
        const run = `r${runN++}`;
        cases.push(["raw INSERT (batched)", () => closedLoops(c, (w, i) => rawInsert.submit([`${run}-${w}`, i]))]);
        // The UPDATE's rows exist beforehand, so each statement updates (as the durable saves after the first do).
        cases.push([
          "raw UPDATE (batched)",
          async () => {
            await main.pool.query(
              "INSERT INTO bench_raw_state SELECT id, 0, 'm', '{}' FROM unnest($1::text[]) AS id ON CONFLICT DO NOTHING",
              [Array.from({ length: maxC }, (_, w) => `${run}u-${w}`)],
            );
            return closedLoops(c, (w, i) => rawUpdate.submit([`${run}u-${w}`, i + 1]));
          },
        ]);
        for (const mode of modes) {
          cases.push([
            `event append ${mode}`,
            () => {
              setMode(main, mode);
              return closedLoops(c, (w, i) =>
                main.appendEvents({
                  persistenceId: `${run}e${mode}-${w}`,
                  expectedRevision: i,
                  operationId: `${run}-${w}-${i}`,
                  events: [{ manifest, payload }],
                  fence: fences[w % shardsForWrites]!,
                }),
              );
            },
          ]);
          cases.push([
            `durable save ${mode}`,
            () => {
              setMode(main, mode);
              return closedLoops(c, (w, i) =>
                main.saveState({
                  persistenceId: `${run}s${mode}-${w}`,
                  expectedRevision: i,
                  operationId: `${run}-${w}-${i}`,
                  manifest,
                  payload,
                  fence: fences[w % shardsForWrites]!,
                }),
              );
            },
          ]);
        }
        // Rotate the order from round to round, so that no case always runs first.
        for (let i = 0; i < cases.length; i++) {
          const [key, runCase] = cases[(i + round - 1) % cases.length]!;
          record(`${key}/${c}`, await runCase());
        }
        say(`writes: round ${round}, ${c} in flight done`);
      }
    }
    interface WriteRow {
      figure: string;
      inFlight: number;
      opsPerSec: number;
      p50Ms: number;
      p99Ms: number;
      ofCeiling: number;
      ceiling: string;
    }
    const writeRows: WriteRow[] = [];
    const keys = [...new Set([...samples.keys()].map((k) => k.slice(0, k.lastIndexOf("/"))))];
    for (const c of concurrencies) {
      for (const key of keys) {
        const loops = samples.get(`${key}/${c}`)!;
        const ceilingKey =
          key.startsWith("event") || key.includes("INSERT") ? "raw INSERT (batched)" : "raw UPDATE (batched)";
        const ceilings = samples.get(`${ceilingKey}/${c}`)!;
        writeRows.push({
          figure: key,
          inFlight: c,
          opsPerSec: Math.round(median(loops.map((l) => l.rate))),
          p50Ms: median(loops.map((l) => l.p50)),
          p99Ms: median(loops.map((l) => l.p99)),
          // Per round against that round's ceiling, then the median.
          ofCeiling: +median(loops.map((l, i) => l.rate / ceilings[i]!.rate)).toFixed(2),
          ceiling: ceilingKey,
        });
      }
    }
    console.table(writeRows);
    for (const c of concurrencies) {
      for (const mode of modes) {
        const ev = samples.get(`event append ${mode}/${c}`)!;
        const ds = samples.get(`durable save ${mode}/${c}`)!;
        console.log(
          `${mode}: durable save / event append at ${c} in flight = ${median(ds.map((d, i) => d.rate / ev[i]!.rate)).toFixed(2)}`,
        );
      }
    }
    const load = loadavg().map((x) => +x.toFixed(2));
    console.log(
      `load average before ${loadBefore.join(" ")}, after ${load.join(" ")}; ${rounds} rounds of ${caseMs} ms`,
    );
    mkdirSync("bench/results", { recursive: true });
    writeFileSync(
      "bench/results/persistent-scale.json",
      JSON.stringify(
        {
          caseMs,
          rounds,
          idleMs,
          loadAverageBefore: loadBefore,
          loadAverageAfter: load,
          upkeep: upkeepRows,
          writes: writeRows,
          groupCommit: { appendsAndSaves: main.groupCommitStats },
          measuredAt: new Date(clock.wallNow()).toISOString(),
        },
        null,
        2,
      ),
    );
  } finally {
    await Promise.all(stores.map((s) => s.close().catch(() => undefined)));
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await client.end();
  }
}

if (process.argv[1]?.endsWith("persistent-scale.ts")) await runScaleBench();
