// Cluster membership benchmark (npm run bench:cluster): the CPU cost of receiving a gossip and a heartbeat ack in the
// membership core (bench/support/gossip-receive.ts; MOVIE_BENCH_CLUSTER_RECEIVE_ONLY=1 measures only that), time from
// start to converged Up for 3, 5 and 10 nodes, time to detect an unreachable node against the configured failure
// detector, and gossip bytes per second per node at steady state. Systems run in one process over loopback TCP (a
// 2-core machine cannot host 10 node processes usefully). Measured, never asserted. Writes
// bench/results/cluster.json.
import { mkdirSync, writeFileSync } from "node:fs";
import { ActorSystem, RealScheduler } from "../src/actor/index.ts";
import "../src/cluster/index.ts";
import type { Cluster, ClusterSettings } from "../src/cluster/index.ts";
import { MessageRegistry, type Remoting } from "../src/remote/index.ts";
import { gossipReceiveCost } from "./support/gossip-receive.ts";

const clock = new RealScheduler();

interface Node {
  system: ActorSystem;
  remoting: Remoting;
  cluster: Cluster;
  port: number;
}

async function startNode(seedPort: number | null, settings: ClusterSettings): Promise<Node> {
  const system = ActorSystem.create("bench");
  const remoting = await system.enableRemoting({ host: "127.0.0.1", port: 0 });
  const port = remoting.selfAddress.address.port!;
  const cluster = await system.enableCluster({
    ...settings,
    seedNodes: seedPort === null ? [] : [`127.0.0.1:${seedPort}`],
  });
  return { system, remoting, cluster, port };
}

function allUp(nodes: Node[], expected: number): boolean {
  return nodes.every((n) => {
    const s = n.cluster.snapshot();
    return s.converged && s.members.length === expected && s.members.every((m) => m.status === "Up");
  });
}

async function waitFor(condition: () => boolean, timeoutMs: number): Promise<number> {
  const start = clock.now();
  while (!condition()) {
    if (clock.now() - start > timeoutMs) throw new Error(`benchmark condition not met within ${timeoutMs} ms`);
    await new Promise<void>((resolve) => clock.scheduleOnce(1, resolve));
  }
  return clock.now() - start;
}

async function sleep(ms: number): Promise<void> {
  await new Promise<void>((resolve) => clock.scheduleOnce(ms, resolve));
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

async function terminate(nodes: Node[]): Promise<void> {
  await Promise.all(nodes.map((n) => n.system.terminate()));
}

// The ceiling: one raw remote round trip between two systems on this machine, the floor of any join.
class BenchPing {
  constructor(readonly n: number) {}
}
MessageRegistry.register(BenchPing, { name: "movie.bench.cluster.ping" });

async function remoteRoundTripMs(): Promise<number> {
  const a = ActorSystem.create("bench");
  const b = ActorSystem.create("bench");
  await a.enableRemoting({ host: "127.0.0.1", port: 0 });
  await b.enableRemoting({ host: "127.0.0.1", port: 0 });
  const { Behaviors } = await import("../src/actor/index.ts");
  b.spawn(
    Behaviors.receive<BenchPing>((m, ctx) => ctx.sender?.tell(new BenchPing(m.n))),
    "echo",
  );
  const ref = a.actorSelection(`${b.address}/user/echo`);
  await ref.ask(new BenchPing(0), BenchPing, 5_000);
  const samples: number[] = [];
  for (let i = 0; i < 200; i++) {
    const t = clock.now();
    await ref.ask(new BenchPing(i), BenchPing, 5_000);
    samples.push(clock.now() - t);
  }
  await Promise.all([a.terminate(), b.terminate()]);
  return median(samples);
}

// Gossip and joins every 10 ms with fanout n, as the original's cluster benchmark does. Its 20 ms / 250 ms detector
// is not used here: ten systems in one 2-core process lag their event loops past 250 ms while connecting, and the
// resulting false unreachables (counted below) would dominate what is measured.
const convergenceSettings = (n: number, gossipIntervalMs = 10, fanout = n): ClusterSettings => ({
  joinRetryInterval: 10,
  gossipInterval: gossipIntervalMs,
  gossipFanout: fanout,
  failureDetector: { heartbeatInterval: 100, heartbeatTimeout: 2_000 },
});

async function convergence(
  n: number,
  settings = convergenceSettings(n),
): Promise<{ ms: number; falseUnreachable: number }> {
  const start = clock.now();
  const first = await startNode(null, settings);
  const rest = await Promise.all(Array.from({ length: n - 1 }, () => startNode(first.port, settings)));
  const nodes = [first, ...rest];
  await waitFor(() => allUp(nodes, n), 30_000);
  const elapsed = clock.now() - start;
  const falseUnreachable = nodes.reduce((sum, x) => sum + x.cluster.stats.heartbeatTimeouts, 0);
  await terminate(nodes);
  return { ms: elapsed, falseUnreachable };
}

async function detection(heartbeatIntervalMs: number, heartbeatTimeoutMs: number): Promise<number> {
  const settings: ClusterSettings = {
    joinRetryInterval: 20,
    gossipInterval: 20,
    failureDetector: { heartbeatInterval: heartbeatIntervalMs, heartbeatTimeout: heartbeatTimeoutMs },
  };
  const first = await startNode(null, settings);
  const rest = await Promise.all(Array.from({ length: 4 }, () => startNode(first.port, settings)));
  const nodes = [first, ...rest];
  await waitFor(() => allUp(nodes, 5), 30_000);
  await sleep(heartbeatIntervalMs * 3);
  const victim = nodes[4]!;
  const survivors = nodes.slice(0, 4);
  const victimAddress = victim.cluster.selfAddress;
  const t = clock.now();
  await victim.system.terminate();
  await waitFor(
    () => survivors.every((s) => s.cluster.snapshot().unreachable.some((u) => u.equals(victimAddress))),
    30_000,
  );
  const elapsed = clock.now() - t;
  await terminate(survivors);
  return elapsed;
}

async function gossipBytes(n: number, gossipIntervalMs: number, windowMs: number) {
  const settings: ClusterSettings = { joinRetryInterval: 20, gossipInterval: gossipIntervalMs };
  const first = await startNode(null, settings);
  const rest = await Promise.all(Array.from({ length: n - 1 }, () => startNode(first.port, settings)));
  const nodes = [first, ...rest];
  await waitFor(() => allUp(nodes, n), 30_000);
  await sleep(gossipIntervalMs * 2);
  const gossip0 = nodes.map((x) => x.cluster.stats.gossipBytesSent);
  const rounds0 = nodes.map((x) => x.cluster.stats.gossipRounds);
  const wire0 = nodes.map((x) => x.remoting.stats.bytesOut);
  const t = clock.now();
  await sleep(windowMs);
  const seconds = (clock.now() - t) / 1000;
  // Per round, then times the nominal rounds per second: a window holds a whole number of rounds, so bytes over
  // the window alone would be off by up to one round.
  const gossipPerNode = nodes.map((x, i) => {
    const rounds = Math.max(1, x.cluster.stats.gossipRounds - rounds0[i]!);
    return ((x.cluster.stats.gossipBytesSent - gossip0[i]!) / rounds) * (1000 / gossipIntervalMs);
  });
  const wirePerNode = nodes.map((x, i) => (x.remoting.stats.bytesOut - wire0[i]!) / seconds);
  await terminate(nodes);
  return { gossipBytesPerSecond: median(gossipPerNode), wireBytesPerSecond: median(wirePerNode) };
}

const rows: Record<string, string | number>[] = [];
const results: Record<string, unknown> = {
  machine: { cpus: (await import("node:os")).cpus().length, node: process.version },
};

const receiveResults = [gossipReceiveCost(10, 20_000), gossipReceiveCost(100, 3_000)];
results.receive = receiveResults;
for (const r of receiveResults) {
  rows.push({
    measure: `receive a steady-state gossip, ${r.members} members (JSON.parse, decode, step; best of 5)`,
    value: r.gossipUs.toFixed(1),
    unit: "µs",
    ratio: `${(r.gossipUs / r.parseUs).toFixed(2)}x JSON.parse alone (${r.parseUs.toFixed(1)} µs)`,
  });
  rows.push({
    measure: `receive a heartbeat ack, ${r.members} members (step; best of 5)`,
    value: r.heartbeatAckUs.toFixed(2),
    unit: "µs",
    ratio: "",
  });
}
const writeResults = (): void => {
  console.table(rows);
  mkdirSync("bench/results", { recursive: true });
  writeFileSync("bench/results/cluster.json", `${JSON.stringify(results, null, 2)}\n`);
  console.log("wrote bench/results/cluster.json");
};
if (process.env.MOVIE_BENCH_CLUSTER_RECEIVE_ONLY === "1") {
  writeResults();
  process.exit(0);
}

const rttMs = await remoteRoundTripMs();
results.remoteRoundTripMs = rttMs;
rows.push({ measure: "remote ask round trip (ceiling)", value: rttMs.toFixed(3), unit: "ms", ratio: "1.00" });

const convergenceResults: Record<string, unknown>[] = [];
for (const n of [3, 5, 10]) {
  const runs: number[] = [];
  let falseUnreachable = 0;
  for (let i = 0; i < 5; i++) {
    const r = await convergence(n);
    runs.push(r.ms);
    falseUnreachable += r.falseUnreachable;
  }
  const ms = median(runs);
  convergenceResults.push({
    nodes: n,
    medianMs: ms,
    runsMs: runs,
    gossipIntervalMs: 10,
    joinRetryIntervalMs: 10,
    heartbeatIntervalMs: 100,
    heartbeatTimeoutMs: 2_000,
    falseUnreachable,
  });
  rows.push({
    measure: `start to converged Up, ${n} nodes (gossip 10 ms, fanout ${n})`,
    value: ms.toFixed(1),
    unit: "ms",
    ratio: `${(ms / rttMs).toFixed(0)}x rtt, ${(ms / 10).toFixed(1)} rounds, median of 5`,
  });
}
{
  // The same at a more ordinary pace: gossip every 100 ms to 3 peers, where the digest acks of all 9 peers take
  // several rounds to collect.
  const runs: number[] = [];
  for (let i = 0; i < 3; i++) runs.push((await convergence(10, convergenceSettings(10, 100, 3))).ms);
  const ms = median(runs);
  convergenceResults.push({ nodes: 10, medianMs: ms, runsMs: runs, gossipIntervalMs: 100, gossipFanout: 3 });
  rows.push({
    measure: "start to converged Up, 10 nodes (gossip 100 ms, fanout 3)",
    value: ms.toFixed(1),
    unit: "ms",
    ratio: `${(ms / rttMs).toFixed(0)}x rtt, ${(ms / 100).toFixed(1)} rounds, median of 3`,
  });
}
results.convergence = convergenceResults;

const detectionResults: Record<string, unknown>[] = [];
for (const [interval, timeout] of [
  [20, 250],
  [50, 500],
]) {
  const runs: number[] = [];
  for (let i = 0; i < 3; i++) runs.push(await detection(interval!, timeout!));
  const ms = median(runs);
  detectionResults.push({ heartbeatIntervalMs: interval, heartbeatTimeoutMs: timeout, medianMs: ms, runsMs: runs });
  rows.push({
    measure: `detect unreachable (heartbeat ${interval} ms, timeout ${timeout} ms), 4 survivors`,
    value: ms.toFixed(1),
    unit: "ms",
    // The last ack may be up to one interval old when the node dies, so detection lands in timeout ± interval.
    ratio: `${(ms / timeout!).toFixed(2)}x timeout (window ${((timeout! - interval!) / timeout!).toFixed(2)}-${((timeout! + interval!) / timeout!).toFixed(2)})`,
  });
}
results.detection = detectionResults;

const gossipResults: Record<string, unknown>[] = [];
for (const n of [5, 10]) {
  const r = await gossipBytes(n, 1_000, 4_000);
  gossipResults.push({ nodes: n, gossipIntervalMs: 1000, heartbeatIntervalMs: 1000, ...r });
  rows.push({
    measure: `steady-state gossip per node, ${n} nodes (gossip 1 s, fanout 3)`,
    value: r.gossipBytesPerSecond.toFixed(0),
    unit: "B/s",
    ratio: `${((r.gossipBytesPerSecond / r.wireBytesPerSecond) * 100).toFixed(0)}% of ${r.wireBytesPerSecond.toFixed(0)} B/s on the wire`,
  });
}
results.gossip = gossipResults;

writeResults();
