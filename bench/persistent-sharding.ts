// Persistent sharding benchmark (`npm run bench:persistent-sharding`): three node processes on loopback and the local
// PostgreSQL, driven over IPC (bench/persistent-sharding-node.ts).
//  1. persistent sharded commands (an ask that appends one fenced event) per second with p50/p99 at concurrency 1, 16
//     and 256 entities, the caller on the shard owner and on a third node; beside them, in the same run and rounds,
//     the ceiling (raw single-row INSERT transactions at the same concurrency from the owner's process) and the
//     ordinary (in-memory) sharded ask;
//  2. failover: time until a third node's command succeeds again after the owner leaves gracefully, and after it is
//     killed (SIGKILL) and downed, for several leaseDuration values.
//  3. persistent sharding at scale (bench/persistent-scale.ts): lease upkeep at idle for 256 to 4,096 shards, and
//     fenced appends and durable-state saves against batched raw ceilings, before/after issue 23's batching.
// Rounds interleave the cases; the table reports medians. Figures are measurements, never assertions.
// MOVIE_BENCH_PART=scale runs only part 3, MOVIE_BENCH_PART=sharding only parts 1 and 2.
// MOVIE_POSTGRES_TEST_URL overrides the local server; MOVIE_BENCH_CASE_MS (default 1000) the measured time per case,
// MOVIE_BENCH_ROUNDS (default 3), MOVIE_BENCH_LEASES (default "1000,3000,10000") the failover lease durations.
import { randomBytes } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { PostgresStore } from "../src/persistence/postgres/index.ts";
import { runScaleBench } from "./persistent-scale.ts";
import { benchNodeOptions, converged, median, NodeProcess, until } from "./support/node-process.ts";
import { clock } from "./support/raw-frames.ts";

const url = process.env.MOVIE_POSTGRES_TEST_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const caseMs = Number(process.env.MOVIE_BENCH_CASE_MS ?? 1_000);
const warmupMs = 300;
const rounds = Number(process.env.MOVIE_BENCH_ROUNDS ?? 3);
const leases = (process.env.MOVIE_BENCH_LEASES ?? "1000,3000,10000")
  .split(",")
  .map(Number)
  .filter((ms) => ms > 0);
const concurrencies = (process.env.MOVIE_BENCH_CONCURRENCY ?? "1,16,100,256").split(",").map(Number);
const nodeScript = fileURLToPath(new URL("./persistent-sharding-node.ts", import.meta.url));
const schema = `movie_bench_ps_${process.pid}_${randomBytes(3).toString("hex")}`;
const runStarted = clock.now();
// Other work on the machine skews every figure: the load before the run is the one to read (the run adds ~3).
const loadBefore = loadavg().map((x) => +x.toFixed(2));
const say = (text: string): void => {
  process.stderr.write(`${((clock.now() - runStarted) / 1000).toFixed(1).padStart(5)}s  ${text}\n`);
};

interface Status {
  node: string;
  coordinator: string | null;
  converged: boolean;
  up: number;
  planned: number;
  handoffs: number;
  stats: Record<string, number>;
}
interface Loop {
  rate: number;
  p50: number;
  p99: number;
  ops: number;
  /** CPU µs per operation (warm-up included in the time, so slightly high) by the caller, coordinator, owner and PG. */
  cpu?: { caller: number; coordinator: number; owner: number; postgres: number };
}

/** Thrown to skip parts 1 and 2 (MOVIE_BENCH_PART=scale). */
class SkipSharding extends Error {}

/** One node process of this benchmark (bench/persistent-sharding-node.ts). */
class BenchNode extends NodeProcess<{ node: string; hostPort: string }> {
  constructor(label: string, seed: string) {
    super(
      label,
      nodeScript,
      [label, seed],
      benchNodeOptions({ env: { MOVIE_BENCH_PG_URL: url, MOVIE_BENCH_PG_SCHEMA: schema } }),
    );
  }

  status(name = ""): Promise<Status> {
    return this.request<Status>({ type: "status", name });
  }
}

/** CPU seconds (user + system) of process `pid` from /proc, or 0 where there is no /proc or the process is gone. */
function procCpuUs(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    // utime and stime, in clock ticks (100 per second on Linux).
    return (Number(fields[11]) + Number(fields[12])) * 10_000;
  } catch {
    return 0;
  }
}

/** CPU used so far by each node process and by each PostgreSQL backend of the three pools (µs, by pid). */
async function cpuSnapshot(nodes: readonly BenchNode[]): Promise<{ nodes: number[]; postgres: Map<number, number> }> {
  const replies = await Promise.all(
    nodes.map((n) => n.request<{ cpuUs: number; backendPids: number[] }>({ type: "cpu" })),
  );
  const pids = new Set(replies.flatMap((r) => r.backendPids));
  return { nodes: replies.map((r) => r.cpuUs), postgres: new Map([...pids].map((pid) => [pid, procCpuUs(pid)])) };
}

/** CPU the backends alive at `after` used since `before`; pg's pool closes idle clients, so the set can change. */
function postgresDelta(before: Map<number, number>, after: Map<number, number>): number {
  let sum = 0;
  for (const [pid, us] of after) sum += us - (before.get(pid) ?? 0);
  return sum;
}

/** Inits on the non-coordinators first, so the coordinator's bootstrap plan covers every node. */
async function initEverywhere(
  nodes: BenchNode[],
  name: string,
  kind: string,
  leaseDuration = 10_000,
  rebalance = false,
) {
  const statuses = await converged(nodes);
  const coordinator = nodes[statuses.findIndex((s) => s.node === s.coordinator)]!;
  for (const n of nodes) if (n !== coordinator) await n.request({ type: "init", name, kind, leaseDuration, rebalance });
  await coordinator.request({ type: "init", name, kind, leaseDuration, rebalance });
  await until(`a full plan of ${name}`, async () => {
    const all = await Promise.all(nodes.map((n) => n.status(name)));
    return all.every((s) => s.planned === 64 && s.handoffs === 0);
  });
  return { coordinator, statuses };
}

const nodes: BenchNode[] = [];
let exitCode = 0;
const part = process.env.MOVIE_BENCH_PART ?? "all";
try {
  if (part === "scale") throw new SkipSharding();
  // The schema once, before the nodes connect, so that three migrations do not race.
  await (await PostgresStore.connect({ connectionUri: url, schema, poolSize: 1 })).close();
  const first = new BenchNode("n1", "self");
  nodes.push(first);
  const seed = (await first.ready).hostPort;
  nodes.push(new BenchNode("n2", seed), new BenchNode("n3", seed));
  await Promise.all(nodes.map((n) => n.ready));
  const { coordinator, statuses } = await initEverywhere(nodes, "Persistent", "persistent");
  await initEverywhere(nodes, "Memory", "memory");
  await initEverywhere(nodes, "Durable", "durable");
  // The owner and the third node are the two non-coordinators: a caller on the owner goes owner → coordinator →
  // owner; one on the third node goes third → coordinator → owner.
  const [owner, third] = nodes.filter((n) => n !== coordinator) as [BenchNode, BenchNode];
  const ownerAddress = statuses[nodes.indexOf(owner)]!.node;
  say(`coordinator ${coordinator.name}, owner ${owner.name}, third node ${third.name}`);
  const idsOf = async (name: string) =>
    (await owner.request<{ ids: string[] }>({ type: "pick", name, owner: ownerAddress, prefix: "e", count: 256 })).ids;
  const persistentIds = await idsOf("Persistent");
  const durableIds = await idsOf("Durable");
  const memoryIds = await idsOf("Memory");

  const samples = new Map<string, Loop[]>();
  const record = (key: string, loop: Loop) => samples.set(key, [...(samples.get(key) ?? []), loop]);
  const roles = [third, coordinator, owner];
  /** Runs one case on `caller` and adds the CPU each process spent on it, per operation. */
  const measured = async (caller: BenchNode, command: { type: string; [field: string]: unknown }): Promise<Loop> => {
    const before = await cpuSnapshot(roles);
    const loop = await caller.request<Loop>(command);
    const after = await cpuSnapshot(roles);
    // The warm-up's operations are not counted in `ops` but its CPU is: scale to the whole case.
    const ops = loop.ops * (1 + warmupMs / caseMs);
    const per = (us: number) => +(us / ops).toFixed(1);
    const used = roles.map((_, i) => after.nodes[i]! - before.nodes[i]!);
    const callerUs = caller === owner ? 0 : used[0]!;
    return {
      ...loop,
      cpu: {
        caller: per(callerUs),
        coordinator: per(used[1]!),
        owner: per(used[2]!),
        postgres: per(postgresDelta(before.postgres, after.postgres)),
      },
    };
  };
  for (let round = 1; round <= rounds; round++) {
    for (const c of concurrencies) {
      const run = `r${round}c${c}`;
      const common = { warmupMs, ms: caseMs };
      const cases: [string, () => Promise<Loop>][] = [
        ["ceiling", () => measured(owner, { type: "rawInsert", concurrency: c, run, ...common })],
      ];
      for (const [where, caller] of [
        ["owner", owner],
        ["third", third],
      ] as const) {
        const ids = persistentIds.slice(0, c);
        cases.push(
          [
            `persistent-${where}`,
            () => measured(caller, { type: "ask", name: "Persistent", ids, run: `${run}${where}`, ...common }),
          ],
          [
            `memory-${where}`,
            () => measured(caller, { type: "ask", name: "Memory", ids: memoryIds.slice(0, c), run, ...common }),
          ],
        );
      }
      // Durable state (caller on the owner) with the batching of issue 23 off ("before") and on ("after").
      for (const [mode, on] of [
        ["before", false],
        ["after", true],
      ] as const) {
        cases.push([
          `durable-owner-${mode}`,
          async () => {
            await owner.request({ type: "batching", on });
            try {
              return await measured(owner, {
                type: "ask",
                name: "Durable",
                ids: durableIds.slice(0, c),
                run: `${run}d${mode}`,
                ...common,
              });
            } finally {
              await owner.request({ type: "batching", on: true });
            }
          },
        ]);
      }
      // The order rotates from round to round, so that no case always runs first (or right after another).
      for (let i = 0; i < cases.length; i++) {
        const [key, runCase] = cases[(i + round - 1) % cases.length]!;
        record(`${key}/${c}`, await runCase());
      }
      say(`round ${round}, concurrency ${c} done`);
    }
  }

  interface Row {
    figure: string;
    concurrency: number;
    opsPerSec: number;
    p50Ms: number;
    p99Ms: number;
    ceilingOpsPerSec: number | null;
    ratio: number | null;
    /** Lowest and highest per-round ratio. */
    ratioRange: string | null;
    cpuUsPerOp: string;
  }
  const rows: Row[] = [];
  const figures: [string, string][] = [
    ["ceiling", "raw single-row INSERT transaction (ceiling)"],
    ["persistent-owner", "persistent sharded ask, caller on the owner"],
    ["persistent-third", "persistent sharded ask, caller on a third node"],
    ["durable-owner-before", "durable-state sharded ask, caller on the owner, saves alone (before)"],
    ["durable-owner-after", "durable-state sharded ask, caller on the owner, saves group-committed"],
    ["memory-owner", "ordinary sharded ask, caller on the owner"],
    ["memory-third", "ordinary sharded ask, caller on a third node"],
  ];
  const ratios = (loops: readonly Loop[], c: number) =>
    loops.map((l, i) => l.rate / samples.get(`ceiling/${c}`)![i]!.rate);
  for (const c of concurrencies) {
    const ceiling = median(samples.get(`ceiling/${c}`)!.map((l) => l.rate));
    for (const [key, figure] of figures) {
      const loops = samples.get(`${key}/${c}`)!;
      const rate = median(loops.map((l) => l.rate));
      const persistent = key.startsWith("persistent") || key.startsWith("durable");
      rows.push({
        figure,
        concurrency: c,
        opsPerSec: Math.round(rate),
        p50Ms: +median(loops.map((l) => l.p50)).toFixed(2),
        p99Ms: +median(loops.map((l) => l.p99)).toFixed(2),
        ceilingOpsPerSec: persistent ? Math.round(ceiling) : null,
        // Per round, against that round's ceiling, then the median.
        ratio: persistent ? +median(ratios(loops, c)).toFixed(2) : null,
        ratioRange: persistent
          ? `${Math.min(...ratios(loops, c)).toFixed(2)}–${Math.max(...ratios(loops, c)).toFixed(2)}`
          : null,
        // Medians per process: caller (when not the owner) / coordinator / owner / PostgreSQL backends.
        cpuUsPerOp: (["caller", "coordinator", "owner", "postgres"] as const)
          .map((p) => median(loops.map((l) => l.cpu?.[p] ?? 0)).toFixed(0))
          .join(" / "),
      });
    }
  }
  console.table(rows);
  console.log(
    "cpuUsPerOp: CPU µs per operation (median of rounds) of the caller (third node only) / coordinator / owner / the owner's PostgreSQL backends",
  );

  // Failover: a fresh victim process owns the probe's shard; the third node's probe measures until it answers again.
  interface Failover {
    mode: "graceful leave" | "SIGKILL + down";
    leaseDurationMs: number;
    recoveryMs: number;
    epochBefore: number;
    epochAfter: number;
    failedAttempts: number;
  }
  const failovers: Failover[] = [];
  const survivors = [coordinator, owner, third];
  let victims = 0;
  for (const leaseDuration of leases) {
    for (const mode of ["graceful leave", "SIGKILL + down"] as const) {
      const victim = new BenchNode(`v${++victims}`, seed);
      const live = [...survivors, victim];
      nodes.push(victim);
      const victimAddress = (await victim.ready).node;
      const name = `Failover${victims}`;
      say(`victim ${victim.name} up`);
      await initEverywhere(live, name, "persistent", leaseDuration, true);
      say(`${name} planned`);
      let probe: string | null = null;
      await until(`a shard of ${name} on the victim`, async () => {
        probe = (
          await coordinator.request<{ entityId: string | null }>({
            type: "pickOne",
            name,
            owner: victimAddress,
            prefix: "p",
          })
        ).entityId;
        return probe !== null;
      });
      // Let rebalancing settle, so that only the failover moves the probe's shard.
      await until("no handoff running", async () => (await coordinator.status(name)).handoffs === 0);
      const before = await third.request<{ epoch: number }>({
        type: "askUntilOk",
        name,
        entityId: probe,
        op: "before",
        timeoutMs: 30_000,
      });
      let t0: number;
      if (mode === "graceful leave") {
        t0 = clock.now();
        await victim.request({ type: "leave" });
      } else {
        victim.process.kill("SIGKILL");
        await victim.whenExited();
        t0 = clock.now();
        // The operator's step: down the dead node through a survivor (forwarded to the leader).
        await coordinator.request({ type: "down", node: victimAddress });
      }
      const recovery = third.request<{ epoch: number; failures: number }>({
        type: "askUntilOk",
        name,
        entityId: probe,
        op: "after",
        timeoutMs: leaseDuration * 3 + 30_000,
      });
      if (mode !== "graceful leave") {
        // Repeated until membership shows it gone (a down may arrive before the leader has the node's state).
        await until("the down to take effect", async () => {
          const s = await third.status();
          if (s.up === survivors.length && s.converged) return true;
          await coordinator.request({ type: "down", node: victimAddress }).catch(() => undefined);
          return false;
        });
      }
      const after = await recovery;
      const recoveryMs = clock.now() - t0;
      failovers.push({
        mode,
        leaseDurationMs: leaseDuration,
        recoveryMs: Math.round(recoveryMs),
        epochBefore: before.epoch,
        epochAfter: after.epoch,
        failedAttempts: after.failures,
      });
      say(`failover ${mode}, lease ${leaseDuration} ms: ${Math.round(recoveryMs)} ms`);
      if (mode === "graceful leave") {
        await until("the victim removed", async () => (await third.status()).up === survivors.length);
        await victim.shutdown();
      }
      await converged(survivors);
    }
  }
  console.table(failovers);

  // Durable state against event sourcing, per round (same caller, same owner), then the median.
  for (const c of concurrencies) {
    const events = samples.get(`persistent-owner/${c}`)!;
    const of = (mode: string) =>
      median(samples.get(`durable-owner-${mode}/${c}`)!.map((l, i) => l.rate / events[i]!.rate)).toFixed(2);
    console.log(
      `durable-state / event-sourced ask at ${c} in flight (caller on the owner): before ${of("before")}, after ${of("after")} (goal >= 0.8 at 100)`,
    );
  }
  const at16 = rows.filter((r) => r.concurrency === 16 && r.ratio !== null);
  for (const r of at16) {
    console.log(
      `${r.figure} at concurrency 16: ${r.opsPerSec}/s = ${(100 * r.ratio!).toFixed(0)}% of the raw INSERT ceiling (target >= 50%)`,
    );
  }
  const load = loadavg().map((x) => +x.toFixed(2));
  console.log(
    `load average before the run ${loadBefore.join(" ")}, after ${load.join(" ")}; ${rounds} interleaved rounds of ${caseMs} ms per case`,
  );
  const stats = await Promise.all(survivors.map((n) => n.status()));
  mkdirSync("bench/results", { recursive: true });
  writeFileSync(
    "bench/results/persistent-sharding.json",
    JSON.stringify(
      {
        processes: 3,
        caseMs,
        rounds,
        poolSizePerNode: 16,
        loadAverageBefore: loadBefore,
        loadAverageAfter: load,
        rows,
        failovers,
        leaseCounters: stats.map((s) => ({
          node: s.node,
          acquisitions: s.stats.leaseAcquisitions,
          renewals: s.stats.leaseRenewals,
          losses: s.stats.leaseLosses,
          retries: s.stats.leaseRetries,
        })),
        measuredAt: new Date(clock.wallNow()).toISOString(),
      },
      null,
      2,
    ),
  );
} catch (error) {
  if (!(error instanceof SkipSharding)) {
    console.error(error);
    exitCode = 1;
  }
} finally {
  await Promise.all(nodes.map((n) => n.shutdown().catch(() => undefined)));
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await client.end();
}
if (exitCode === 0 && part !== "sharding") {
  try {
    await runScaleBench();
  } catch (error) {
    console.error(error);
    exitCode = 1;
  }
}
process.exit(exitCode);
