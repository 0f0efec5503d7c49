// Persistent sharding benchmark: sharded event-sourced commands per second and p50/p99 latency at concurrency 1, 16
// and 256 entities on the local PostgreSQL, each command an ask through the sharding coordinator that appends one
// fenced event; beside it the same asks to ordinary (in-memory) sharded entities, and as the ceiling plain
// single-row INSERT transactions on the same connection pool at the same concurrency, measured in the same run.
// One node over real loopback TCP (remoting + cluster + sharding in one process); the three-process runs and
// failover timings are not measured here yet.
// Usage: npm run bench:persistent-sharding  (MOVIE_POSTGRES_TEST_URL overrides the local server;
// MOVIE_BENCH_SECONDS the duration of each measured case, default 1).
import { randomBytes } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import pg from "pg";
import { AbstractBehavior, type ActorContext, ActorSystem, RealScheduler, silentLogger } from "../src/actor/index.ts";
import "../src/cluster/index.ts";
import { Database, Effect, type EntityContext, EventSourcedBehavior, EventSourcing } from "../src/persistence/index.ts";
import { PostgresStore } from "../src/persistence/postgres/index.ts";
import { MessageRegistry } from "../src/remote/index.ts";
import { ClusterSharding } from "../src/sharding/index.ts";
import { initEventSourced } from "../src/sharding/persistent/index.ts";

const clock = new RealScheduler();
const url = process.env.MOVIE_POSTGRES_TEST_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const caseMs = Number(process.env.MOVIE_BENCH_SECONDS ?? "1") * 1000;
const warmupMs = 500; // covers lease acquisition and recovery of each new entity
const concurrencies = [1, 16, 256];
const poolSize = 16;

abstract class BenchCommand {}
class Bump extends BenchCommand {
  constructor(readonly op: string) {
    super();
  }
}
class BumpReply {
  constructor(readonly n: number) {}
}
class Bumped {
  constructor(readonly at: number) {}
}
for (const c of [Bump, BumpReply]) MessageRegistry.register(c);

class PersistentCounter extends EventSourcedBehavior<BenchCommand, Bumped, { n: number }> {
  emptyState() {
    return { n: 0 };
  }
  applyEvent(state: { n: number }) {
    return { n: state.n + 1 };
  }
  handleCommand(_state: { n: number }, command: BenchCommand, ctx: EntityContext<BenchCommand>) {
    const op = command instanceof Bump ? command.op : "none";
    return Effect.persist<Bumped, { n: number }>(new Bumped(1), op).thenRun((s) =>
      ctx.sender?.tell(new BumpReply(s.n)),
    );
  }
}

class MemoryCounter extends AbstractBehavior<BenchCommand> {
  private n = 0;
  receive(_message: BenchCommand, ctx: ActorContext<BenchCommand>): void {
    ctx.sender?.tell(new BumpReply(++this.n));
  }
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** Runs `concurrency` loops of `op(worker, i)` for a warm-up, then for `caseMs`; returns throughput and latency. */
async function measure(concurrency: number, op: (worker: number, i: number) => Promise<unknown>) {
  const latencies: number[] = [];
  const counters = new Array<number>(concurrency).fill(0);
  let phaseEnd = clock.now() + warmupMs;
  let recording = false;
  const worker = async (w: number) => {
    while (clock.now() < phaseEnd) {
      const start = clock.now();
      await op(w, counters[w]!++);
      if (recording) latencies.push(clock.now() - start);
    }
  };
  await Promise.all(counters.map((_, w) => worker(w)));
  recording = true;
  const started = clock.now();
  phaseEnd = started + caseMs;
  await Promise.all(counters.map((_, w) => worker(w)));
  const elapsedMs = clock.now() - started;
  latencies.sort((a, b) => a - b);
  return {
    ops: latencies.length,
    opsPerSec: Math.round((latencies.length * 1000) / elapsedMs),
    p50Ms: Number(percentile(latencies, 50).toFixed(2)),
    p99Ms: Number(percentile(latencies, 99).toFixed(2)),
  };
}

const schema = `movie_bench_ps_${process.pid}_${randomBytes(3).toString("hex")}`;
const store = await PostgresStore.connect({ connectionUri: url, schema, poolSize });
const system = ActorSystem.create("bench", { logger: silentLogger });
const remoting = await system.enableRemoting({ host: "127.0.0.1", port: 0 });
const cluster = await system.enableCluster({ seedNodes: [`127.0.0.1:${remoting.selfAddress.address.port}`] });
await new Promise<void>((resolve) => {
  const check = () => {
    const s = cluster.snapshot();
    if (s.converged && s.members.some((m) => m.status === "Up")) resolve();
    else clock.scheduleOnce(10, check);
  };
  check();
});
await Database.get(system).use(store);
Database.get(system).codec.register(Bumped);
const sharding = ClusterSharding.get(system);
const counters = EventSourcing.get(system).registerEntity(
  PersistentCounter,
  BenchCommand,
  () => new PersistentCounter(),
  {
    name: "BenchCounter",
  },
);
const persistent = initEventSourced(sharding, counters, { shardCount: 64 });
const ordinary = sharding.init("MemoryCounter", BenchCommand, { shardCount: 64 }, () => new MemoryCounter());

await store.pool.query(`CREATE TABLE IF NOT EXISTS bench_ceiling (persistence_id TEXT NOT NULL,
  sequence_nr BIGINT NOT NULL, manifest TEXT NOT NULL, payload TEXT NOT NULL, PRIMARY KEY (persistence_id, sequence_nr))`);
const payload = JSON.stringify(new Bumped(1));

interface Row {
  case: string;
  concurrency: number;
  opsPerSec: number;
  p50Ms: number;
  p99Ms: number;
  ops: number;
  ratioToCeiling: number | null;
}
const rows: Row[] = [];
let run = 0;
try {
  for (const concurrency of concurrencies) {
    run++;
    // One single-row INSERT per transaction (autocommit: one round trip), as the fenced append is one statement.
    const ceiling = await measure(concurrency, (w, i) =>
      store.pool.query({
        name: "bench_ceiling_insert",
        text: "INSERT INTO bench_ceiling VALUES ($1, $2, $3, $4)",
        values: [`r${run}-${w}`, i, "bench.Bumped", payload],
      }),
    );
    rows.push({ case: "raw INSERT transaction (ceiling)", concurrency, ...ceiling, ratioToCeiling: 1 });
    const persisted = await measure(concurrency, (w, i) =>
      sharding.entityRefFor(persistent, `c${run}-${w}`).ask(new Bump(`r${run}-${w}-${i}`), BumpReply, 30_000),
    );
    rows.push({
      case: "persistent sharded ask (fenced append)",
      concurrency,
      ...persisted,
      ratioToCeiling: Number((persisted.opsPerSec / ceiling.opsPerSec).toFixed(3)),
    });
    const plain = await measure(concurrency, (w) =>
      sharding.entityRefFor(ordinary, `m${run}-${w}`).ask(new Bump("x"), BumpReply, 30_000),
    );
    rows.push({ case: "ordinary sharded ask (in memory)", concurrency, ...plain, ratioToCeiling: null });
  }
  const stats = sharding.stats;
  console.table(rows);
  console.log(
    `lease acquisitions ${stats.leaseAcquisitions}, renewals ${stats.leaseRenewals}, losses ${stats.leaseLosses}, retries ${stats.leaseRetries}`,
  );
  const at16 = rows.find((r) => r.case.startsWith("persistent") && r.concurrency === 16)!;
  console.log(
    `persistent commands at concurrency 16: ${at16.opsPerSec}/s = ${(100 * at16.ratioToCeiling!).toFixed(0)}% of the raw INSERT ceiling (target >= 50%)`,
  );
  mkdirSync("bench/results", { recursive: true });
  writeFileSync(
    "bench/results/persistent-sharding.json",
    JSON.stringify({ caseMs, poolSize, rows, stats, measuredAt: new Date(clock.wallNow()).toISOString() }, null, 2),
  );
} finally {
  await system.terminate();
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await client.end();
  await store.close().catch(() => undefined);
}
