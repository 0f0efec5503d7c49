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
import { soakProjectionName, soakProjectionSlices, soakReadModelTable } from "./projection.ts";
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
  /** The fault kinds to inject; default all. */
  readonly kinds?: readonly FaultKind[];
  /** How long a downed node gets to exit by itself once resumed or healed (ms); default 10,000. */
  readonly downedExitWaitMs?: number;
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
  await withSchema(postgres.url, schema, (client) => client.query(soakReadModelTable));
  const cluster = await SoakCluster.create(
    { dir, schema, pgUrl: viaProxy.toString(), origin: originText },
    options.nodes,
  );
  const faultLog = new JsonlWriter(join(dir, "faults.jsonl"));
  const faults: FaultRecord[] = [];
  let loadPhase = { start: 0, end: 0 };
  const checkpoints = new CheckpointSampler(postgres.url, schema, join(dir, "checkpoints.jsonl"), now);
  try {
    checkpoints.start();
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
      downedExitWaitMs: options.downedExitWaitMs ?? 10_000,
      now,
      startLoad,
      say,
    };
    const shape = {
      backends: cluster.slots.filter((s) => s.role === "backend").map((s) => s.index),
      slots: cluster.slots.map((s) => s.index),
      leaseDurationMs: soakLeaseDurationMs,
      gapMs: options.gapMs,
      ...(options.kinds === undefined ? {} : { kinds: options.kinds }),
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
    say("waiting for the outbox to drain and the projection to catch up");
    const drainStart = now();
    const drained = await until(() => drainedAndCaughtUp(postgres.url, schema), 120_000);
    say(
      drained
        ? `  drained and caught up after ${((now() - drainStart) / 1000).toFixed(1)} s`
        : "  NOT drained or caught up within 120 s",
    );
    await checkpoints.stop();
    say("reading every list and counter back through the entities, and from the database");
    const reader = cluster.live()[0]!;
    const finalEntities = await reader.proc!.request({ type: "read-final", keys: soakKeySpace() }, 600_000);
    writeFileSync(join(dir, "final-entities.json"), `${JSON.stringify(finalEntities)}\n`);
    writeFileSync(join(dir, "final-db.json"), `${JSON.stringify(await dumpDatabase(postgres.url, schema))}\n`);
  } finally {
    await checkpoints.stop();
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
  for (const kind of [...faultKinds, "node-exit"]) faultsByKind[kind] = faults.filter((f) => f.kind === kind).length;
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
      selfExited: null,
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
    const readModel = await client.query<{
      persistence_id: string;
      sequence_nr: string;
      value: string | null;
      times: number;
    }>("SELECT persistence_id, sequence_nr, value, times FROM soak_read_model ORDER BY persistence_id, sequence_nr");
    const tallies = await client.query<{ persistence_id: string; payload: string; operation_id: string | null }>(
      "SELECT persistence_id, payload, operation_id FROM event_journal WHERE persistence_id LIKE 'SoakTally:%'",
    );
    const outbox = await client.query<{ pending: string; parked: string; delivered: string }>(
      `SELECT count(*) FILTER (WHERE NOT delivered AND lease_until_epoch_ms < ${Number.MAX_SAFE_INTEGER}) AS pending,
        count(*) FILTER (WHERE NOT delivered AND lease_until_epoch_ms >= ${Number.MAX_SAFE_INTEGER}) AS parked,
        count(*) FILTER (WHERE delivered) AS delivered FROM persistence_outbox`,
    );
    const checkpointRows = await client.query<{ projection_name: string; event_offset: string }>(
      "SELECT projection_name, event_offset FROM projection_checkpoint ORDER BY 1",
    );
    const latest = await client.query<{ o: string }>("SELECT coalesce(max(event_offset), 0) AS o FROM event_feed");
    return {
      projection: {
        slices: soakProjectionSlices,
        readModel: readModel.rows.map((r) => ({
          key: r.persistence_id.slice("SoakList:".length),
          seq: Number(r.sequence_nr),
          value: r.value,
          times: Number(r.times),
        })),
        checkpoints: checkpointRows.rows.map((r) => ({ name: r.projection_name, offset: Number(r.event_offset) })),
        latestOffset: Number(latest.rows[0]!.o),
        // Each slice's lease epoch at the end: epoch - 1 owner changes (kills, handoffs, leaves) of that slice.
        sliceEpochs: (leases.rows as { entity_type: string; epoch: string }[])
          .filter((r) => r.entity_type === `projection-${soakProjectionName}`)
          .map((r) => Number(r.epoch)),
      },
      outbox: {
        pending: Number(outbox.rows[0]!.pending),
        parked: Number(outbox.rows[0]!.parked),
        delivered: Number(outbox.rows[0]!.delivered),
        tallies: tallies.rows.map((r) => {
          let value: unknown = null;
          try {
            value = (JSON.parse(r.payload) as { value?: unknown }).value ?? null;
          } catch {
            value = null;
          }
          return { key: r.persistence_id.slice("SoakTally:".length), value, messageId: r.operation_id };
        }),
      },
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

/** Runs `work` with a client whose search_path is the run's schema, straight to the server (not through the proxy). */
async function withSchema<T>(url: string, schema: string, work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, options: `-c search_path=${schema}` });
  client.on("error", () => undefined);
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** The outbox has nothing pending and every slice of the soak projection is at the feed's latest offset. */
async function drainedAndCaughtUp(url: string, schema: string): Promise<boolean> {
  try {
    return await withSchema(url, schema, async (client) => {
      const pending = await client.query<{ n: string }>(
        `SELECT count(*) AS n FROM persistence_outbox WHERE NOT delivered AND lease_until_epoch_ms < ${Number.MAX_SAFE_INTEGER}`,
      );
      const behind = await client.query<{ n: string }>(
        `SELECT count(*) AS n FROM projection_checkpoint
          WHERE projection_name LIKE 'soak-lists/%' AND event_offset >= (SELECT coalesce(max(event_offset), 0) FROM event_feed)`,
      );
      return Number(pending.rows[0]!.n) === 0 && Number(behind.rows[0]!.n) === soakProjectionSlices;
    });
  } catch {
    return false;
  }
}

/**
 * Samples every projection checkpoint every 500 ms on its own connection straight to the server (so a frozen proxy
 * does not stop it; a restarted server only costs the samples until it answers), into checkpoints.jsonl:
 * `{ time, name, offset }`. The checker requires each name's offsets never to go back.
 */
class CheckpointSampler {
  private running = false;
  private loop: Promise<void> = Promise.resolve();
  private readonly out: JsonlWriter;

  constructor(
    private readonly url: string,
    private readonly schema: string,
    path: string,
    private readonly now: () => number,
  ) {
    this.out = new JsonlWriter(path);
  }

  start(): void {
    this.running = true;
    this.loop = this.run();
  }

  async stop(): Promise<void> {
    if (!this.running) return;
    this.running = false;
    await this.loop;
    this.out.close();
  }

  private async run(): Promise<void> {
    let client: pg.Client | null = null;
    while (this.running) {
      try {
        if (client === null) {
          client = new pg.Client({
            connectionString: this.url,
            options: `-c search_path=${this.schema}`,
            connectionTimeoutMillis: 2_000,
            query_timeout: 2_000,
          });
          client.on("error", () => undefined);
          await client.connect();
        }
        const rows = await client.query<{ projection_name: string; event_offset: string }>(
          "SELECT projection_name, event_offset FROM projection_checkpoint",
        );
        const time = this.now();
        for (const r of rows.rows) this.out.write({ time, name: r.projection_name, offset: Number(r.event_offset) });
      } catch {
        await client?.end().catch(() => undefined);
        client = null;
      }
      await sleep(500);
    }
    await client?.end().catch(() => undefined);
  }
}
