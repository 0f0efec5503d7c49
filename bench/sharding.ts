// Cluster sharding benchmark (`npm run bench:sharding`). Three actor systems in one process over real loopback TCP
// (remoting + cluster + sharding each), plus the pure cores. The ceiling of the routed figures is a plain remote
// tell/ask between two of the same systems, measured in the same run. Results go to bench/results/sharding.json.
// Counts are bounded so the whole run stays well under a minute.
import { mkdirSync, writeFileSync } from "node:fs";
import { cpus } from "node:os";
import {
  AbstractBehavior,
  type ActorContext,
  ActorSystem,
  RealScheduler,
  silentLogger,
  UniqueAddress,
} from "../src/actor/index.ts";
import "../src/cluster/index.ts";
import { MessageRegistry } from "../src/remote/index.ts";
import { Fnv1a64 } from "../src/sharding/hash/fnv1a64.ts";
import {
  AllocationPlanner,
  ClusterSharding,
  LeastLoadedAllocation,
  RateLimitedRebalance,
  RendezvousAllocation,
  type ShardingMember,
  StableHashPartitioner,
} from "../src/sharding/index.ts";

const clock = new RealScheduler();
const tells = Number(process.env.MOVIE_BENCH_SHARDING_TELLS ?? 30_000);
const asks = Number(process.env.MOVIE_BENCH_SHARDING_ASKS ?? 2_000);
const entities = Number(process.env.MOVIE_BENCH_SHARDING_ENTITIES ?? 100_000);
const inFlight = 100;

abstract class Cmd {}
class Tick extends Cmd {
  constructor(readonly n: number) {
    super();
  }
}
class Ping extends Cmd {}
class Pong {}
MessageRegistry.register(Tick, { name: "bench.sharding.tick" });
MessageRegistry.register(Ping, { name: "bench.sharding.ping" });
MessageRegistry.register(Pong, { name: "bench.sharding.pong" });

let received = 0;
class Counter extends AbstractBehavior<Cmd> {
  receive(message: Cmd, ctx: ActorContext<Cmd>): void {
    if (message instanceof Tick) received++;
    else ctx.sender?.tell(new Pong());
  }
}
class PlainSink extends AbstractBehavior<unknown> {
  receive(message: unknown, ctx: ActorContext<unknown>): void {
    if (message instanceof Tick) received++;
    else ctx.sender?.tell(new Pong());
  }
}

interface Row {
  name: string;
  value: number;
  unit: string;
  ceiling?: number;
  ratio?: number;
}
const rows: Row[] = [];
const row = (name: string, value: number, unit: string, ceiling?: number) =>
  rows.push({
    name,
    value: Math.round(value),
    unit,
    ...(ceiling === undefined ? {} : { ceiling: Math.round(ceiling), ratio: value / ceiling }),
  });

async function waitFor(condition: () => boolean, timeoutMs = 30_000): Promise<void> {
  const start = clock.now();
  while (!condition()) {
    if (clock.now() - start > timeoutMs) throw new Error("benchmark condition timed out");
    await new Promise((resolve) => setImmediate(resolve));
  }
}

// ------------------------------------------------------------------ pure cores

function benchPartitioner(): void {
  const p = new StableHashPartitioner();
  const ids = Array.from({ length: 100_000 }, (_, i) => `order-${i}`);
  let sink = 0;
  let start = clock.now();
  for (const id of ids) sink += p.shardFor("Order", id, 256);
  const halves = ids.length / ((clock.now() - start) / 1000);
  start = clock.now();
  const enc = new TextEncoder();
  for (const id of ids) {
    let h = 14695981039346656037n;
    for (const b of [...enc.encode("Order"), 0, ...enc.encode(id)])
      h = ((h ^ BigInt(b)) * 1099511628211n) & 0xffff_ffff_ffff_ffffn;
    sink += Number(h % 256n);
  }
  const bigint = ids.length / ((clock.now() - start) / 1000);
  if (sink < 0) console.log(sink);
  row("partitioner shardFor (two 32-bit halves)", halves, "ops/s");
  row("partitioner shardFor (BigInt reference)", bigint, "ops/s");
  void Fnv1a64;
}

function benchAllocation(): void {
  const members: ShardingMember[] = Array.from({ length: 100 }, (_, i) => ({
    uniqueAddress: UniqueAddress.parse(`movie.tcp://movie@10.0.${Math.floor(i / 250)}.${i % 250}:2551#uid${i}`),
    status: "Up",
    roles: [],
  }));
  for (const [name, allocation] of [
    ["LeastLoaded", new LeastLoadedAllocation()],
    ["Rendezvous", new RendezvousAllocation()],
  ] as const) {
    const planner = new AllocationPlanner(4096, allocation, new RateLimitedRebalance());
    const start = clock.now();
    const plan = planner.initial(members);
    const initialMs = clock.now() - start;
    const t2 = clock.now();
    planner.reconcile(plan, members.slice(1));
    const reconcileMs = clock.now() - t2;
    row(`${name} plan 4,096 shards x 100 members`, initialMs, "ms");
    row(`${name} reconcile after a member left`, reconcileMs, "ms");
  }
}

// ------------------------------------------------------------------ three systems over loopback

async function startNode(seedPort: number | null) {
  const system = ActorSystem.create("bench", { logger: silentLogger });
  const remoting = await system.enableRemoting({ host: "127.0.0.1", port: 0 });
  const port = remoting.selfAddress.address.port!;
  const cluster = await system.enableCluster({
    seedNodes: [`127.0.0.1:${seedPort ?? port}`],
    joinRetryInterval: 30,
    gossipInterval: 50,
    failureDetector: { heartbeatInterval: 200, heartbeatTimeout: 5_000 },
  });
  const sharding = ClusterSharding.get(system);
  sharding.init("Bench", Cmd, { shardCount: 64 }, () => new Counter());
  return { system, remoting, cluster, sharding, port };
}

/** Messages the sharding layer rejected (fail closed) across the running nodes; they never arrive. */
let rejectedNow: () => number = () => 0;
let lostTells = 0;

async function throughput(send: (i: number) => void, count: number): Promise<number> {
  const target = received + count;
  const rejectedBefore = rejectedNow();
  const start = clock.now();
  for (let i = 0; i < count; i++) {
    try {
      send(i);
    } catch {
      lostTells++;
    }
    if (i % 1_000 === 999) await new Promise((resolve) => setImmediate(resolve));
  }
  await waitFor(() => received + (rejectedNow() - rejectedBefore) + lostTells >= target);
  return (count - (target - received)) / ((clock.now() - start) / 1000);
}

async function askLatency(
  ask: () => Promise<unknown>,
  count: number,
): Promise<{ perSec: number; p50: number; p99: number }> {
  const latencies: number[] = [];
  const start = clock.now();
  let next = 0;
  const worker = async () => {
    while (next < count) {
      next++;
      const t = clock.now();
      await ask();
      latencies.push(clock.now() - t);
    }
  };
  await Promise.all(Array.from({ length: Math.min(inFlight, count) }, worker));
  latencies.sort((a, b) => a - b);
  return {
    perSec: count / ((clock.now() - start) / 1000),
    p50: latencies[Math.floor(latencies.length * 0.5)]!,
    p99: latencies[Math.floor(latencies.length * 0.99)]!,
  };
}

async function benchCluster(): Promise<void> {
  const first = await startNode(null);
  const nodes = [first, await startNode(first.port), await startNode(first.port)];
  rejectedNow = () => nodes.reduce((sum, n) => sum + n.sharding.stats.rejectedEnvelopes, 0);
  try {
    await waitFor(() =>
      nodes.every((n) => {
        const s = n.cluster.snapshot();
        return (
          s.converged &&
          s.members.filter((m) => m.status === "Up").length === 3 &&
          n.sharding.allocations("Bench").size === 64
        );
      }),
    );
    await waitFor(() => nodes.every((n) => n.sharding.handoffsInProgress === 0));
    const sorted = [...nodes].sort((a, b) => UniqueAddress.compare(a.cluster.selfAddress, b.cluster.selfAddress));
    const [coordinator, caller, owner] = sorted as [(typeof nodes)[0], (typeof nodes)[0], (typeof nodes)[0]];
    const ownedBy = (node: (typeof nodes)[0]) => {
      for (let i = 0; ; i++)
        if (coordinator.sharding.ownerFor("Bench", `e-${i}`)?.equals(node.cluster.selfAddress)) return `e-${i}`;
    };
    // ceiling: plain remote tell/ask from caller to an actor on owner
    const sink = owner.system.spawn(() => new PlainSink(), "sink");
    const remoteSink = caller.system.actorSelection(sink.path.toString());
    // Warm up both paths (JIT, connections) before anything is measured.
    await throughput(() => remoteSink.tell(new Tick(1)), 5_000);
    await askLatency(() => remoteSink.ask(new Ping(), Pong, 10_000), 500);
    const warm = coordinator.sharding.entityRefFor<Cmd>("Bench", ownedBy(owner));
    await throughput(() => warm.tell(new Tick(1)), 5_000);
    await askLatency(() => warm.ask(new Ping(), Pong, 10_000), 500);
    const ceilingTell = await throughput(() => remoteSink.tell(new Tick(1)), tells);
    const ceilingAsk = await askLatency(() => remoteSink.ask(new Ping(), Pong, 10_000), asks);
    row("ceiling: plain remote tell (caller -> owner)", ceilingTell, "msg/s");
    row("ceiling: plain remote ask, 100 in flight", ceilingAsk.perSec, "asks/s");
    const cases: [string, (typeof nodes)[0], string][] = [
      ["caller is the coordinator (owner remote, 1 hop)", coordinator, ownedBy(owner)],
      ["caller is the owner (coordinator remote, 2 legs)", owner, ownedBy(owner)],
      ["caller is a third node (caller -> coordinator -> owner)", caller, ownedBy(owner)],
      ["caller, coordinator and owner on one node (local)", coordinator, ownedBy(coordinator)],
    ];
    for (const [label, from, id] of cases) {
      const ref = from.sharding.entityRefFor<Cmd>("Bench", id);
      await ref.ask(new Ping(), Pong, 10_000);
      const t = await throughput(() => ref.tell(new Tick(1)), tells);
      row(`sharded tell, ${label}`, t, "msg/s", ceilingTell);
      const a = await askLatency(() => ref.ask(new Ping(), Pong, 10_000), asks);
      row(`sharded ask, ${label}`, a.perSec, "asks/s", ceilingAsk.perSec);
      row(`sharded ask p50, ${label}`, a.p50 * 1000, "us");
      row(`sharded ask p99, ${label}`, a.p99 * 1000, "us");
    }
    // activations per second on the coordinator-owned shards through activate()
    const local = coordinator.sharding;
    const before = local.stats.activations;
    const start = clock.now();
    const ids: string[] = [];
    for (let i = 0; ids.length < 2_000; i++)
      if (local.ownerFor("Bench", `act-${i}`)?.equals(coordinator.cluster.selfAddress)) ids.push(`act-${i}`);
    for (const id of ids) local.entityRefFor<Cmd>("Bench", id).tell(new Tick(1));
    await waitFor(() => local.stats.activations - before >= ids.length);
    row("activations (first message, local owner)", ids.length / ((clock.now() - start) / 1000), "entities/s");
  } finally {
    await Promise.all(nodes.map((n) => n.system.terminate()));
  }
}

// ------------------------------------------------------------------ memory per entity (one node)

async function benchMemory(): Promise<void> {
  const node = await startNode(null);
  try {
    await waitFor(() => node.sharding.allocations("Bench").size === 64);
    global.gc?.();
    const heapBefore = process.memoryUsage().heapUsed;
    const start = clock.now();
    for (let i = 0; i < entities; i++) {
      node.sharding.entityRefFor<Cmd>("Bench", `m-${i}`).tell(new Tick(i));
      if (i % 5_000 === 4_999) await new Promise((resolve) => setImmediate(resolve));
    }
    await waitFor(() => node.sharding.localEntityCount >= entities, 60_000);
    const elapsed = clock.now() - start;
    global.gc?.();
    const heapAfter = process.memoryUsage().heapUsed;
    row(
      `activations, ${entities.toLocaleString("en")} entities on one node`,
      entities / (elapsed / 1000),
      "entities/s",
    );
    row("heap per active entity", (heapAfter - heapBefore) / entities, "bytes");
  } finally {
    await node.system.terminate();
  }
}

// ------------------------------------------------------------------ handoff of 256 shards with 10k entities

async function benchHandoff(): Promise<void> {
  const first = await startNode(null);
  const second = await startNode(first.port);
  const nodes = [first, second];
  try {
    for (const n of nodes) n.sharding.init("Move", Cmd, { shardCount: 256 }, () => new Counter());
    await waitFor(() =>
      nodes.every(
        (n) =>
          n.cluster.snapshot().converged &&
          n.sharding.allocations("Move").size === 256 &&
          n.sharding.handoffsInProgress === 0,
      ),
    );
    const planner = new AllocationPlanner(256, new LeastLoadedAllocation(), new RateLimitedRebalance());
    await waitFor(() => {
      const plan = first.sharding.allocations("Move");
      return (
        nodes.every(
          (n) =>
            n.sharding.handoffsInProgress === 0 &&
            n.sharding.planGeneration("Move") === first.sharding.planGeneration("Move"),
        ) &&
        planner.reconcile(plan, first.cluster.snapshot().members).moved.length === 0 &&
        new Set([...plan.values()].map(String)).size === 2
      );
    });
    const [stay, leave] = [...nodes].sort((a, b) =>
      UniqueAddress.compare(a.cluster.selfAddress, b.cluster.selfAddress),
    ) as [(typeof nodes)[0], (typeof nodes)[0]];
    const target = received + 10_000;
    for (let i = 0; i < 10_000; i++) {
      stay.sharding.entityRefFor<Cmd>("Move", `h-${i}`).tell(new Tick(i));
      if (i % 1_000 === 999) await new Promise((resolve) => setImmediate(resolve));
    }
    await waitFor(() => received >= target);
    const moving = [...stay.sharding.allocations("Move").values()].filter((o) =>
      o.equals(leave.cluster.selfAddress),
    ).length;
    const entitiesOnLeaver = leave.sharding.localEntityCount;
    const start = clock.now();
    const left = leave.cluster.leave().catch(() => {});
    await waitFor(
      () =>
        stay.sharding.handoffsInProgress === 0 &&
        [...stay.sharding.allocations("Move").values()].every((o) => !o.equals(leave.cluster.selfAddress)),
      60_000,
    );
    row(
      `handoff of ${moving} shards with ${entitiesOnLeaver.toLocaleString("en")} entities (graceful leave)`,
      clock.now() - start,
      "ms",
    );
  } finally {
    await Promise.all(nodes.map((n) => n.system.terminate()));
  }
}

benchPartitioner();
benchAllocation();
await benchCluster();
await benchHandoff();
await benchMemory();

const width = Math.max(...rows.map((r) => r.name.length));
console.log(`cluster sharding benchmark (${cpus().length} CPUs, node ${process.version})`);
for (const r of rows) {
  const ratio =
    r.ratio === undefined ? "" : `   ${(r.ratio * 100).toFixed(1)}% of ceiling ${r.ceiling!.toLocaleString("en")}`;
  console.log(`${r.name.padEnd(width)}  ${r.value.toLocaleString("en").padStart(12)} ${r.unit}${ratio}`);
}
if (lostTells > 0) console.log(`(${lostTells} tells failed closed during the run and are not counted)`);
mkdirSync("bench/results", { recursive: true });
writeFileSync(
  "bench/results/sharding.json",
  JSON.stringify({ cpus: cpus().length, node: process.version, rows }, null, 2),
);
process.exit(0);
