// The soak run: a PostgreSQL (through the harness's proxy), N node processes with a proxy on every link, client load
// on every node, the seeded fault schedule, then the final state read back through the entities and from the
// database. Everything lands in one run directory (docs/soak.md); the checker (check.ts) judges it.
import { randomBytes } from "node:crypto";
import { mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { PostgresStore } from "../../src/persistence/postgres/index.ts";
import { StableHashPartitioner } from "../../src/sharding/index.ts";
import { originNow, sinceMs } from "./clock.ts";
import { type Slot, SoakCluster, until } from "./cluster.ts";
import { type FaultContext, type FaultRecord, replaceDeadNode, runFault } from "./faults.ts";
import { JsonlWriter, readJsonl } from "./jsonl.ts";
import { chooseSoakPostgres } from "./postgres.ts";
import { TcpProxy } from "./proxy.ts";
import { type FaultKind, faultKinds, planRound } from "./schedule.ts";
import { soakKeySpace, soakLeaseDurationMs, soakListType, soakShardCount } from "./settings.ts";
import type { HistoryRecord, KeySpace } from "./workload.ts";

export interface SoakOptions {
  readonly dir: string;
  readonly nodes: number;
  /** How long the fault phase runs at least (ms); the first round, with every fault kind, always completes. */
  readonly faultPhaseMs: number;
  readonly seed: number;
  readonly workersPerNode: number;
  readonly thinkMs: number;
  readonly retryBudgetMs: number;
  /** The PostgreSQL to use instead of choosing one as `npm start` does (the CI soak passes the test server). */
  readonly postgresUrl?: string;
  /** Quiet time before each fault, drawn from [min, max) ms. */
  readonly gapMs: readonly [number, number];
  readonly say: (line: string) => void;
}

/** run.json (docs/soak.md). */
export interface RunMeta {
  readonly seed: number;
  readonly nodes: number;
  readonly workersPerNode: number;
  readonly startedAt: string;
  readonly durationMs: number;
  readonly loadPhase: { readonly start: number; readonly end: number };
  readonly postgres: string;
  readonly schema: string;
  readonly shardCount: number;
  readonly leaseDurationMs: number;
  readonly keys: KeySpace;
  readonly loadAverage: { readonly start: number[]; readonly end: number[] };
  readonly faultsByKind: Record<string, number>;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Runs one soak into `options.dir` (created). Returns the run directory. */
export async function runSoak(options: SoakOptions): Promise<string> {
  const { dir, say } = options;
  mkdirSync(join(dir, "nodes"), { recursive: true });
  const startedAt = new Date().toISOString();
  const loadStart = loadavg();
  const originText = originNow();
  const origin = BigInt(originText);
  const now = () => sinceMs(origin);
  const postgres = await chooseSoakPostgres(options.postgresUrl);
  say(`PostgreSQL: ${postgres.description}`);
  const target = new URL(postgres.url);
  const pgProxy = new TcpProxy("postgres", target.hostname, Number(target.port || 5432));
  await pgProxy.listen();
  const viaProxy = new URL(postgres.url);
  viaProxy.hostname = "127.0.0.1";
  viaProxy.port = String(pgProxy.port);
  const schema = `movie_soak_${randomBytes(4).toString("hex")}`;
  await (await PostgresStore.connect({ connectionUri: postgres.url, schema })).close();
  const cluster = await SoakCluster.create(
    { dir, schema, pgUrl: viaProxy.toString(), origin: originText },
    options.nodes,
  );
  const faultLog = new JsonlWriter(join(dir, "faults.jsonl"));
  const faults: FaultRecord[] = [];
  let loadPhase = { start: 0, end: 0 };
  try {
    say(`starting ${options.nodes} nodes (n0 frontend, the rest backends); every link through a proxy`);
    await cluster.start(cluster.slots[0]!, true);
    for (const slot of cluster.slots.slice(1)) await cluster.start(slot);
    if (!(await until(() => cluster.healthy(), 90_000))) throw new Error("the cluster did not form within 90 s");
    const startLoad = async (slot: Slot) => {
      const seed = options.seed * 1_000 + slot.index * 100 + slot.incarnation * 10;
      await slot.proc!.request(
        {
          type: "start-load",
          workers: options.workersPerNode,
          seed,
          thinkMs: options.thinkMs,
          retryBudgetMs: options.retryBudgetMs,
        },
        10_000,
      );
    };
    for (const slot of cluster.slots) await startLoad(slot);
    loadPhase = { start: now(), end: 0 };
    say(`load started: ${options.workersPerNode} client workers on each node`);
    const ctx: FaultContext = {
      cluster,
      pgProxy,
      postgres,
      leaseDurationMs: soakLeaseDurationMs,
      now,
      startLoad,
      say,
    };
    const shape = {
      backends: cluster.slots.filter((s) => s.role === "backend").map((s) => s.index),
      slots: cluster.slots.map((s) => s.index),
      leaseDurationMs: soakLeaseDurationMs,
      gapMs: options.gapMs,
    };
    const phaseStart = now();
    outer: for (let round = 0; ; round++) {
      for (const fault of planRound(options.seed, round, shape)) {
        if (round > 0 && now() - phaseStart >= options.faultPhaseMs) break outer;
        await sleep(fault.gapBeforeMs);
        await reviveExited(ctx, faultLog, faults);
        const targetName = fault.target >= 0 ? cluster.slots[fault.target]!.name : "";
        say(`fault ${fault.kind} ${targetName}`.trimEnd());
        const record = await runFault(ctx, fault);
        faults.push(record);
        faultLog.write(record);
        say(
          `  ${record.detail}; took ${((record.end - record.start) / 1000).toFixed(1)} s, ` +
            (record.recovered === null
              ? "NOT healthy again"
              : `healthy again after ${((record.recovered - record.end) / 1000).toFixed(1)} s`),
        );
      }
      if (now() - phaseStart >= options.faultPhaseMs) break;
    }
    await sleep(options.gapMs[0]);
    await reviveExited(ctx, faultLog, faults);
    say("stopping the load: writes in flight finish or run out their retry budget");
    await Promise.all(
      cluster.live().map((s) => s.proc!.request({ type: "stop-load" }, options.retryBudgetMs + 30_000)),
    );
    loadPhase = { start: loadPhase.start, end: now() };
    await until(() => cluster.healthy(), 60_000);
    say("reading every list and counter back through the entities, and from the database");
    const reader = cluster.live()[0]!;
    const finalEntities = await reader.proc!.request({ type: "read-final", keys: soakKeySpace() }, 600_000);
    writeFileSync(join(dir, "final-entities.json"), `${JSON.stringify(finalEntities)}\n`);
    writeFileSync(join(dir, "final-db.json"), `${JSON.stringify(await dumpDatabase(postgres.url, schema))}\n`);
  } finally {
    faultLog.close();
    await Promise.all(cluster.live().map((s) => s.proc!.shutdown(20_000)));
    await cluster.closeLinks();
    await pgProxy.close();
    const admin = new pg.Client({ connectionString: postgres.url });
    admin.on("error", () => undefined);
    await admin.connect().then(
      () => admin.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`),
      () => undefined,
    );
    await admin.end().catch(() => undefined);
    await postgres.stop();
  }
  mergeNodeFiles(dir);
  const faultsByKind: Record<string, number> = {};
  for (const kind of faultKinds) faultsByKind[kind] = faults.filter((f) => f.kind === kind).length;
  const meta: RunMeta = {
    seed: options.seed,
    nodes: options.nodes,
    workersPerNode: options.workersPerNode,
    startedAt,
    durationMs: now(),
    loadPhase,
    postgres: postgres.description,
    schema,
    shardCount: soakShardCount,
    leaseDurationMs: soakLeaseDurationMs,
    keys: soakKeySpace(),
    loadAverage: { start: loadStart, end: loadavg() },
    faultsByKind,
  };
  writeFileSync(join(dir, "run.json"), `${JSON.stringify(meta, null, 2)}\n`);
  return dir;
}

/** A node that exited on its own (downed, crashed) gets the dead-node procedure; logged as fault kind "node-exit". */
async function reviveExited(ctx: FaultContext, log: JsonlWriter, faults: FaultRecord[]): Promise<void> {
  for (const slot of ctx.cluster.slots) {
    if (slot.running || slot.address === null) continue;
    const start = ctx.now();
    const wallStart = new Date().toISOString();
    const detail = await replaceDeadNode(ctx, slot, slot.address);
    const end = ctx.now();
    const record: FaultRecord = {
      kind: "node-exit",
      target: slot.name,
      start,
      end,
      recovered: (await until(() => ctx.cluster.healthy(), 60_000)) ? ctx.now() : null,
      wallStart,
      detail: `exited by itself; ${detail}`,
    };
    ctx.say(`  ${slot.name} had exited by itself: ${detail}`);
    faults.push(record);
    log.write(record);
  }
}

/** The final rows: list events with their shard, epoch and write order; counters; shard leases. */
async function dumpDatabase(url: string, schema: string): Promise<object> {
  const client = new pg.Client({ connectionString: url, options: `-c search_path=${schema}` });
  await client.connect();
  try {
    const partitioner = new StableHashPartitioner();
    const events = await client.query<{
      persistence_id: string;
      sequence_nr: string;
      payload: string;
      shard_epoch: string | null;
      write_order: string | null;
    }>(
      `SELECT persistence_id, sequence_nr, payload, shard_epoch, write_order FROM event_journal
        WHERE persistence_id LIKE 'SoakList:%' ORDER BY write_order`,
    );
    const states = await client.query<{ persistence_id: string; revision: string; payload: string | null }>(
      "SELECT persistence_id, revision, payload FROM durable_state WHERE persistence_id LIKE 'SoakCounter:%'",
    );
    const leases = await client.query("SELECT entity_type, shard_id, owner, epoch FROM shard_lease ORDER BY 1, 2");
    return {
      events: events.rows.map((r) => {
        const key = r.persistence_id.slice("SoakList:".length);
        let value: unknown = null;
        try {
          value = (JSON.parse(r.payload) as { value?: unknown }).value ?? null;
        } catch {
          value = null;
        }
        return {
          key,
          seq: Number(r.sequence_nr),
          value,
          shard: partitioner.shardFor(soakListType, key, soakShardCount),
          epoch: r.shard_epoch === null ? null : Number(r.shard_epoch),
          writeOrder: r.write_order === null ? null : Number(r.write_order),
        };
      }),
      counters: states.rows.map((r) => {
        let state: { count?: unknown; ops?: unknown } = {};
        try {
          state = r.payload === null ? {} : (JSON.parse(r.payload) as typeof state);
        } catch {
          state = {};
        }
        return {
          key: r.persistence_id.slice("SoakCounter:".length),
          revision: Number(r.revision),
          count: state.count ?? null,
          ops: state.ops ?? null,
        };
      }),
      leases: leases.rows,
    };
  } finally {
    await client.end();
  }
}

/** Merges every node incarnation's history and delivery files into history.jsonl and deliveries.jsonl, by time. */
function mergeNodeFiles(dir: string): void {
  const files = readdirSync(join(dir, "nodes"));
  for (const [suffix, out] of [
    [".history.jsonl", "history.jsonl"],
    [".deliveries.jsonl", "deliveries.jsonl"],
  ] as const) {
    const all: { time: number }[] = [];
    for (const file of files.filter((f) => f.endsWith(suffix))) {
      all.push(...readJsonl<{ time: number }>(join(dir, "nodes", file)).records);
    }
    all.sort((a, b) => a.time - b.time);
    writeFileSync(join(dir, out), all.map((r) => JSON.stringify(r)).join("\n") + (all.length > 0 ? "\n" : ""));
  }
}

export type { FaultKind, HistoryRecord };
