// Cluster sharding benchmark (`npm run bench:sharding`): real node processes on loopback, driven over IPC.
//  1. allocation cost of the pure planner, 4,096 shards × 100 members (this process);
//  2. memory per active entity, 100k entities on a single-node cluster (a child with --expose-gc);
//  3. three nodes: sharded tell and ask when the caller is the coordinator, the owner, or a third node, with
//     coordinator routing and (the same run) direct routing (docs/protocol.md §8.8), the coordinator's and the owner's
//     CPU time per routed tell, and activations per second; beside them the remote ceiling between the same processes
//     in the same run (raw length-prefixed frames over a plain socket, and a plain Movie remote tell and ask);
//  4. two nodes: handoff of 256 shards holding 10k active entities when their owner leaves gracefully;
//  5. the direct batch's codec (this process): an owner's read and a caller's measure and write per envelope, beside
//     the same payload's own codec alone;
//  6. scaling: 4 and 6 node processes, every node but the coordinator telling another's entities at once, in both
//     routing modes: the coordinator's CPU time per routed tell and the cluster's tells per second, beside the same
//     ring of plain remote tells.
// Figures are measurements, never assertions. Counts are bounded; results go to bench/results/sharding.json.
// `--only=<parts>` (comma-separated) runs a subset, to compare two commits in alternating pairs quickly: allocation,
// memory (with the single-node activations), local (caller = coordinator = owner), 1-hop, 2-hop-owner, 2-hop (caller
// = third node), direct (direct routing: caller = owner, caller = third node), handoff, codec, scaling; e.g. `npm run bench:sharding -- --only=memory,local,2-hop`. Every routing part measures
// its ceilings in the same run.
import { mkdirSync, writeFileSync } from "node:fs";
import { cpus } from "node:os";
import { fileURLToPath } from "node:url";
import { Address, UniqueAddress } from "../src/actor/index.ts";
import { encodeNested, MessageRegistry } from "../src/remote/index.ts";
import {
  LeastLoadedAllocation,
  RateLimitedRebalance,
  RendezvousAllocation,
  type ShardAllocationStrategy,
  type ShardingMember,
  StableHashPartitioner,
  WeightedLeastLoadedAllocation,
} from "../src/sharding/index.ts";
import {
  AllocationPlanner,
  DirectBatch,
  DirectEnvelope,
  registerShardingWireTypes,
  shardingWireNames,
} from "../src/sharding/internal/index.ts";
import { benchNodeOptions, converged, median, NodeProcess, until } from "./support/node-process.ts";
import { clock } from "./support/raw-frames.ts";

const env = (name: string, fallback: number): number => Number(process.env[name] ?? fallback);
const entitiesPerRun = 16;
// The raw ceiling's run: a million frames (about 0.25-0.45 s here), at least as long in time as a tell round beside it,
// so that its own start and end (data still in the socket buffers when the last acknowledgement is awaited) weigh on
// it no more than a tell round's on the round; a shorter run lowers the ceiling and flatters every ratio to it.
const rawTells = env("MOVIE_BENCH_RAW_TELLS", 1_000_000);
const tellRounds = 3;
// Rounds of 200,000 tells (600,000 in all by default). A tell run keeps 20,000 unacknowledged: its first window's
// burst, while the receiver has nothing yet, and its last window's drain, while the sender waits, are a smaller share
// of a longer round (a third node's direct tells measured 0.19-0.30 of the ceiling in rounds of 72,000 and 0.25-0.42
// in rounds of 200,000, both beside a ceiling of 200,000 frames: docs/performance.md).
const tells = env("MOVIE_BENCH_SHARDED_TELLS", 600_000);
const tellWindow = 20_000;
/** Tells per round: a whole number of acknowledgements (500) on each of the entities. */
const tellRound = Math.max(1, Math.ceil(tells / tellRounds / (entitiesPerRun * 500))) * entitiesPerRun * 500;
// Warm-up before a lane's measured rounds: as many tells as a round, and as many sequential asks as the measured ones.
// After 16,000 tells a third node's first direct round still ran at 0.41-0.55 µs of caller CPU per tell against
// 0.28-0.31 in its third, and sequential asks after 500 got faster round by round (0.042, 0.035, 0.032 ms): the
// rounds' median then measured the optimizing compiler's progress, not the path (docs/performance.md).
const warmTells = tellRound;
const sequentialAsks = env("MOVIE_BENCH_SHARDED_ASKS", 2_000);
/** Rounds of sequential asks beside the network (in each, every ask right after one raw round trip). */
const askRounds = 3;
const askRound = Math.max(1, Math.round(sequentialAsks / askRounds));
const warmAsks = sequentialAsks;
const parallelAsks = env("MOVIE_BENCH_SHARDED_PARALLEL_ASKS", 20_000);
const inFlight = 100;
const activations = env("MOVIE_BENCH_ACTIVATIONS", 20_000);
const memoryEntities = env("MOVIE_BENCH_MEMORY_ENTITIES", 100_000);
const handoffEntities = env("MOVIE_BENCH_HANDOFF_ENTITIES", 10_000);
const handoffShards = 256;
/** Rounds of the scaling part (each: the plain ring, coordinator routing, direct routing). */
const scalingRounds = 3;
/** Tells each caller sends in a scaling round: a whole number of acknowledgements (500) on each of its entities. */
const scalingTells =
  Math.max(1, Math.round(env("MOVIE_BENCH_SCALING_TELLS", 96_000) / (entitiesPerRun * 500))) * entitiesPerRun * 500;
/** The cluster sizes of the scaling part. */
const scalingSizes = [4, 6];
const planShards = 4_096;
const planMembers = 100;
/** The node processes' hot message types declare binary fields unless MOVIE_BENCH_JSON=1 (bench/sharding-node.ts). */
const payload = process.env.MOVIE_BENCH_JSON !== "1" ? "binary codec" : "JSON";

const parts = [
  "allocation",
  "memory",
  "local",
  "1-hop",
  "2-hop-owner",
  "2-hop",
  "direct",
  "handoff",
  "codec",
  "scaling",
] as const;
type Part = (typeof parts)[number];
const onlyArg = process.argv.slice(2).find((a) => a.startsWith("--only="));
const selected: ReadonlySet<Part> = new Set(
  onlyArg === undefined
    ? parts
    : onlyArg
        .slice("--only=".length)
        .split(",")
        .map((word) => {
          if (!(parts as readonly string[]).includes(word)) {
            throw new Error(`bench: unknown part ${JSON.stringify(word)} in --only (one of ${parts.join(", ")})`);
          }
          return word as Part;
        }),
);
const runs = (part: Part): boolean => selected.has(part);

const nodeScript = fileURLToPath(new URL("./sharding-node.ts", import.meta.url));
const runStarted = clock.now();
/** Progress on stderr, so the table on stdout stays clean. */
const say = (text: string): void => {
  process.stderr.write(`${((clock.now() - runStarted) / 1000).toFixed(1).padStart(5)}s  ${text}\n`);
};

interface Ready {
  node: string;
  hostPort: string;
  address: string;
  rawSink: number;
  rawEcho: number;
}
/** A run of sequential asks: p50 and p99 latency, ms. */
interface Latency {
  p50: number;
  p99: number;
}

/**
 * Rounds of sequential asks, each ask right after one raw round trip: the medians of the rounds' ask p50 and p99 and
 * of their raw p50, the process the raw round trips went to, and every round.
 */
interface PairedLatency extends Latency {
  rttP50: number;
  rttTo: string;
  rounds: { p50: number; p99: number; rttP50: number }[];
}

/** A throughput run's answer: messages per second and the answering process's CPU µs per message. */
interface Rated {
  rate: number;
  cpuUs: number;
}
interface Status {
  node: string;
  coordinator: string | null;
  converged: boolean;
  up: number;
  planned: number;
  owners: Record<string, number>;
  entities: number;
  handoffs: number;
}

/** One node process of this benchmark (bench/sharding-node.ts). */
class BenchNode extends NodeProcess<Ready> {
  constructor(label: string, seed: string, nodeArgs: string[] = []) {
    super(
      label,
      nodeScript,
      [label, seed],
      benchNodeOptions({ execArgv: nodeArgs, env: { MOVIE_LOG_LEVEL: "error" } }),
    );
  }

  status(name = "Bench"): Promise<Status> {
    return this.request<Status>({ type: "status", name });
  }
}

/** Inits `name` on the non-coordinators first, so the coordinator's bootstrap plan already covers every node. */
async function initEverywhere(
  nodes: BenchNode[],
  coordinator: BenchNode,
  name: string,
  allocation = "default",
  routing: "coordinator" | "direct" = "coordinator",
) {
  for (const n of nodes) if (n !== coordinator) await n.request({ type: "init", name, allocation, routing });
  await coordinator.request({ type: "init", name, allocation, routing });
  await until(`a full plan of ${name} on every node`, async () => {
    const statuses = await Promise.all(nodes.map((n) => n.status(name)));
    return statuses.every((s) => s.planned === 256 && s.handoffs === 0);
  });
}

// ---------------------------------------------------------------- rows

interface Row {
  figure: string;
  value: number;
  unit: string;
  ceiling: number | null;
  ceilingOf: string;
  ratio: number | null;
}
const rows: Row[] = [];
function row(figure: string, value: number, unit: string, ceiling: number | null = null, ceilingOf = ""): void {
  if (ceiling === null) ceilingOf = "";
  const round = (x: number) => +x.toFixed(x >= 100 ? 0 : x >= 1 ? 2 : 3);
  rows.push({
    figure,
    value: round(value),
    unit,
    ceiling: ceiling === null ? null : round(ceiling),
    ceilingOf,
    ratio: ceiling === null ? null : +(value / ceiling).toFixed(2),
  });
}

// ---------------------------------------------------------------- 1. allocation cost (pure planner)

function planMembersOf(count: number): ShardingMember[] {
  return Array.from({ length: count }, (_, i) => ({
    uniqueAddress: new UniqueAddress(
      Address.tcp("shop", `10.0.${i >> 8}.${i & 255}`, 2551 + i),
      ((i + 1) * 2654435761).toString(16),
    ),
    status: "Up",
    roles: i % 4 === 0 ? ["large"] : [],
  }));
}

/** Median ms of `run` after one warm-up call: at least 5 samples, more while under 300 ms (at most 50). */
function medianMs(run: () => unknown): number {
  run();
  const samples: number[] = [];
  const started = clock.now();
  while (samples.length < 5 || (clock.now() - started < 300 && samples.length < 50)) {
    const t0 = clock.now();
    run();
    samples.push(clock.now() - t0);
  }
  samples.sort((a, b) => a - b);
  return samples[Math.floor(samples.length / 2)]!;
}

function allocationCost(): void {
  const members = planMembersOf(planMembers);
  const withoutOne = members.slice(1);
  // The ceiling: filling a shard → owner Map round robin, the least any full plan costs.
  const ceiling = medianMs(() => {
    const plan = new Map<number, UniqueAddress>();
    for (let s = 0; s < planShards; s++) plan.set(s, members[s % members.length]!.uniqueAddress);
    return plan;
  });
  const strategies: [string, ShardAllocationStrategy][] = [
    ["LeastLoaded", new LeastLoadedAllocation()],
    ["Rendezvous", new RendezvousAllocation()],
    ["WeightedLeastLoaded", new WeightedLeastLoadedAllocation((m) => (Array.from(m.roles).includes("large") ? 3 : 1))],
  ];
  for (const [name, strategy] of strategies) {
    const planner = new AllocationPlanner(planShards, strategy, new RateLimitedRebalance());
    const initial = planner.initial(members);
    row(
      `plan ${name}, ${planShards} shards × ${planMembers} members`,
      medianMs(() => planner.initial(members)),
      "ms",
      ceiling,
      "Map fill",
    );
    row(
      `reconcile ${name} after one member left`,
      medianMs(() => planner.reconcile(initial, withoutOne)),
      "ms",
      ceiling,
      "Map fill",
    );
  }
  // A shard lookup, which every routed message pays on its caller and again on its owner, beside the least a lookup of
  // an entity id by its text costs: a Map<string, number> hit (V8 keeps a string's hash in the string once computed,
  // so each id is a fresh string here, as one read off the network is). Up to 2^15 shards and above: Fnv1a64.mod's two
  // paths.
  const idOf = (i: number) => `order-${((i & 4_095) * 7_919).toString(36)}`;
  const lookups = 200_000;
  const nsPerLookup = (lookup: (id: string) => number): number =>
    (medianMs(() => {
      let sum = 0;
      for (let i = 0; i < lookups; i++) sum += lookup(idOf(i));
      return sum;
    }) *
      1e6) /
    lookups;
  const known = new Map(Array.from({ length: 4_096 }, (_, i) => [idOf(i), i]));
  const mapNs = nsPerLookup((id) => known.get(id) ?? 0);
  const partitioner = new StableHashPartitioner();
  for (const shards of [256, 1_000, 100_000]) {
    const ns = nsPerLookup((id) => partitioner.shardFor("Order", id, shards));
    row(`shard lookup (StableHashPartitioner), ${shards} shards`, ns, "ns", mapNs, "Map get");
  }
}

// ---------------------------------------------------------------- 5. the direct batch's codec (this process)

/** A 64-byte payload, as the node processes' tells carry (bench/sharding-node.ts Work). */
class CodecWork {
  constructor(
    readonly seq: number,
    readonly payload: string,
  ) {}
}

/**
 * What a direct batch of 64 envelopes (the caller's most per batch) costs per envelope to read (the owner) and to
 * measure and write (the caller), beside the ceiling of the payload's own codec alone: what any remote tell of it pays.
 * The read is measured twice: alone, and with the last 20,000 envelopes' reads kept alive, as an owner keeps a full
 * window of them until they are delivered (what it reads then survives young-generation collections).
 */
function batchCodecCost(): Record<string, number> {
  const registry = new MessageRegistry(null);
  registry.register(CodecWork, { name: "bench.codec.work", fields: { seq: "number", payload: "string" } });
  registerShardingWireTypes(registry);
  const batchCodec = registry.lookupName(shardingWireNames.directBatch)!.codec!;
  const workCodec = registry.lookupName("bench.codec.work")!.codec!;
  const perBatch = 64;
  const batches = 64;
  const text = "x".repeat(64);
  const sent = Array.from(
    { length: batches },
    (_, b) =>
      new DirectBatch(
        Array.from({ length: perBatch }, (_, i) => {
          const wire = encodeNested(registry, new CodecWork(b * perBatch + i, text));
          const id = `order-${((b * perBatch + i) & 15).toString(36)}`;
          return new DirectEnvelope(
            "User",
            "Order",
            id,
            7,
            "key",
            null,
            false,
            wire,
            0,
            null,
            3,
            "0123456789abcdef",
            42,
          );
        }),
        true,
      ),
  );
  const frames = sent.map((batch) => {
    const buf = Buffer.alloc(batchCodec.measure(batch));
    return buf.subarray(0, batchCodec.write(buf, 0, batch));
  });
  const works = sent.map((batch) => batch.envelopes.map((e) => e.message!.payload as CodecWork));
  const workFrames = works.map((list) =>
    list.map((w) => {
      const buf = Buffer.alloc(workCodec.measure(w));
      return buf.subarray(0, workCodec.write(buf, 0, w));
    }),
  );
  const scratch = Buffer.alloc(1 << 20);
  const kept: unknown[] = new Array(Math.ceil(20_000 / perBatch));
  const rounds = 400;
  const nsPerEnvelope = (run: (round: number) => unknown): number =>
    (medianMs(() => {
      let sink = 0;
      for (let r = 0; r < rounds; r++) sink += run(r) === null ? 0 : 1;
      return sink;
    }) *
      1e6) /
    (rounds * perBatch);
  const readNs = nsPerEnvelope((r) => {
    const f = frames[r % batches]!;
    return batchCodec.read(f, 0, f.length, Object.prototype);
  });
  const readKeptNs = nsPerEnvelope((r) => {
    const f = frames[r % batches]!;
    const read = batchCodec.read(f, 0, f.length, Object.prototype);
    kept[r % kept.length] = read;
    return read;
  });
  const payloadReadNs = nsPerEnvelope((r) => {
    const list = workFrames[r % batches]!;
    let last: unknown = null;
    for (let i = 0; i < list.length; i++) last = workCodec.read(list[i]!, 0, list[i]!.length, CodecWork.prototype);
    return last;
  });
  const keptWorks: unknown[] = new Array(kept.length);
  const payloadReadKeptNs = nsPerEnvelope((r) => {
    const list = workFrames[r % batches]!;
    const read: unknown[] = new Array(list.length);
    for (let i = 0; i < list.length; i++) read[i] = workCodec.read(list[i]!, 0, list[i]!.length, CodecWork.prototype);
    keptWorks[r % keptWorks.length] = read;
    return read;
  });
  const writeNs = nsPerEnvelope((r) => {
    const batch = sent[r % batches]!;
    batchCodec.measure(batch);
    return batchCodec.write(scratch, 0, batch);
  });
  const payloadWriteNs = nsPerEnvelope((r) => {
    const list = works[r % batches]!;
    let o = 0;
    for (let i = 0; i < list.length; i++) {
      workCodec.measure(list[i]!);
      o = workCodec.write(scratch, o, list[i]!);
    }
    return o;
  });
  const of = `${perBatch} per batch, 64-byte payloads`;
  row(`direct batch read, per envelope (${of})`, readNs, "ns", payloadReadNs, "payload read");
  row(`direct batch read, 20,000 envelopes kept`, readKeptNs, "ns", payloadReadKeptNs, "payload read, kept");
  row(`direct batch measure + write, per envelope (${of})`, writeNs, "ns", payloadWriteNs, "payload write");
  return { readNs, readKeptNs, payloadReadNs, payloadReadKeptNs, writeNs, payloadWriteNs };
}

// ---------------------------------------------------------------- 2. memory per entity (single node)

async function memory(): Promise<Record<string, number>> {
  const node = new BenchNode("memory", "self", ["--expose-gc"]);
  await node.ready;
  await converged([node]);
  say("memory node up");
  await initEverywhere([node], node, "Bench");
  const m = await node.request<Record<string, number>>({ type: "memory", name: "Bench", count: memoryEntities });
  // The node replies to shutdown with how long terminating its actor system took.
  const terminateMs = (await node.shutdown<{ terminateMs: number }>())?.terminateMs ?? Number.NaN;
  row(`heap per active entity (${m.entities} on one node)`, m.bytesPerEntity!, "bytes", m.plainBytes!, "plain Map");
  row("activations/s, single node (caller = coordinator = owner)", m.activationRate!, "/s", m.spawnRate!, "spawn");
  row("CPU per activation, single node", m.activationCpuUs!, "µs", m.spawnCpuUs!, "spawn");
  row(`terminate a node with ${m.entities} entities`, terminateMs, "ms");
  return { ...m, terminateMs };
}

// ---------------------------------------------------------------- 3. three nodes: routing

async function routing(): Promise<Record<string, unknown>> {
  const first = new BenchNode("n1", "self");
  const seed = (await first.ready).hostPort;
  const others = [new BenchNode("n2", seed), new BenchNode("n3", seed)];
  const nodes = [first, ...others];
  const ready = await Promise.all(nodes.map((n) => n.ready));
  const statuses = await converged(nodes);
  const coordinatorText = statuses[0]!.coordinator!;
  const index = ready.findIndex((r) => r.node === coordinatorText);
  const coordinator = nodes[index]!;
  const [owner, third] = nodes.filter((n) => n !== coordinator) as [BenchNode, BenchNode];
  const info = (n: BenchNode) => ready[nodes.indexOf(n)]!;
  say("three nodes converged");
  await initEverywhere(nodes, coordinator, "Bench");
  // The same entities' type with direct routing (docs/protocol.md §8.8), measured beside it in the same run.
  if (runs("direct")) await initEverywhere(nodes, coordinator, "BenchDirect", "default", "direct");
  say("plan ready; ceilings");

  // The ceiling: third node → owner, straight over one connection (raw frames), and a plain Movie remote tell/ask.
  const target = info(owner);
  await third.request({ type: "rawTell", address: target.address, port: target.rawSink, count: 50_000 });
  await third.request({ type: "plainTell", address: target.address, count: warmTells, window: tellWindow });
  // Ceiling rounds before, between and after the scenarios; medians, so host load hits ceiling and figures alike.
  const rawRates: number[] = [];
  const plainRates: number[] = [];
  let frameBytes = 0;
  // The receiving node's CPU per plain remote tell (the owner's, over the plainTell rounds): the least a node that
  // takes a message off the network pays, beside the coordinator's and the owner's CPU per sharded tell.
  const plainReceiveCpu: number[] = [];
  const plainSendCpu: number[] = [];
  const cpuOf = async (n: BenchNode) => (await n.request<{ cpuUs: number }>({ type: "cpu" })).cpuUs;
  const ceilingRound = async (): Promise<void> => {
    const r = await third.request<{ rate: number; frameBytes: number }>({
      type: "rawTell",
      address: target.address,
      port: target.rawSink,
      count: rawTells,
    });
    rawRates.push(r.rate);
    frameBytes = r.frameBytes;
    const ownerCpu0 = await cpuOf(owner);
    const p = await third.request<{ rate: number; cpuUs: number }>({
      type: "plainTell",
      address: target.address,
      count: tellRound,
      window: tellWindow,
    });
    plainRates.push(p.rate);
    plainSendCpu.push(p.cpuUs);
    plainReceiveCpu.push(((await cpuOf(owner)) - ownerCpu0) / tellRound);
  };
  await ceilingRound();
  // Sequential asks in rounds, each ask right after one raw round trip between the same two processes: the raw round
  // trip's p50 depends on where the scheduler puts the two processes (about 0.02 ms on one CPU, 0.04-0.08 ms on two,
  // changing within a run: docs/performance.md), so a raw measurement beside asks measured seconds later compared
  // different placements. Each figure is the median of its rounds' p50s, beside the median of their raw p50s.
  // `caller` asks (a plain ask to the owner's sink, or sharded asks to `ids` of `name`); its raw round trips go to
  // `echo`, the process its ask goes to first.
  const sequentialAskRounds = async (
    caller: BenchNode,
    echo: BenchNode,
    ids: readonly string[] | null,
    name: string | null,
  ): Promise<PairedLatency> => {
    const rounds: PairedLatency["rounds"] = [];
    for (let round = 0; round < askRounds; round++) {
      const r = await caller.request<PairedLatency["rounds"][number]>({
        type: "asksBesideRaw",
        address: target.address,
        port: info(echo).rawEcho,
        ...(name === null ? {} : { name, ids }),
        count: askRound,
      });
      rounds.push({ p50: r.p50, p99: r.p99, rttP50: r.rttP50 });
    }
    return {
      p50: median(rounds.map((r) => r.p50)),
      p99: median(rounds.map((r) => r.p99)),
      rttP50: median(rounds.map((r) => r.rttP50)),
      rttTo: echo === coordinator ? "coordinator" : echo === owner ? "owner" : "third node",
      rounds,
    };
  };
  await third.request({ type: "plainAsk", address: target.address, count: warmAsks, inFlight: 1 });
  const plainAsk1 = await sequentialAskRounds(third, owner, null, null);
  const plainAskN = await third.request<{ rate: number; p50: number; p99: number }>({
    type: "plainAsk",
    address: target.address,
    count: parallelAsks,
    inFlight,
  });
  const scenarios = (
    [
      ["local", "caller = coordinator = owner (no network)", coordinator, coordinator, "Bench"],
      ["1-hop", "caller = coordinator, owner remote (1 hop)", coordinator, owner, "Bench"],
      ["2-hop-owner", "caller = owner, via coordinator (2 hops)", owner, owner, "Bench"],
      ["2-hop", "caller = third node (2 hops)", third, owner, "Bench"],
      ["direct", "direct routing, caller = owner (no network)", owner, owner, "BenchDirect"],
      ["direct", "direct routing, caller = third node (1 hop)", third, owner, "BenchDirect"],
    ] as const
  ).filter(([part]) => runs(part));
  // The in-process ceiling: a plain tell and ask to an actor of the caller's own process (no sharding), in rounds.
  const localTells: Rated[] = [];
  const localAsks: Rated[] = [];
  const localCeilingRound = async (): Promise<void> => {
    localTells.push(await coordinator.request<Rated>({ type: "localTell", count: tellRound, window: tellWindow }));
    localAsks.push(await coordinator.request<Rated>({ type: "localAsk", count: parallelAsks, inFlight }));
  };
  const results: Record<string, unknown> = {
    rawRates,
    plainRates,
    rawRtt: plainAsk1.rttP50,
    plainAsk1,
    plainAskN,
    coordinator: coordinatorText,
    owner: info(owner).node,
    third: info(third).node,
  };
  const measured: {
    name: string;
    local: boolean;
    tell: { rate: number; cpuUs: number; coordinatorCpuUs: number; ownerCpuUs: number };
    ask1: Latency & { rttP50?: number; rttTo?: string };
    askN: Rated;
  }[] = [];
  for (const [i, [part, name, caller, entityOwner, type]] of scenarios.entries()) {
    say(name);
    if (part === "local") {
      await coordinator.request({ type: "localTell", count: warmTells, window: tellWindow });
      for (let round = 0; round < tellRounds; round++) await localCeilingRound();
    }
    const { ids } = await caller.request<{ ids: string[] }>({
      type: "pick",
      name: type,
      owner: info(entityOwner).node,
      prefix: `s${i}`,
      count: entitiesPerRun,
    });
    // Direct routing: sequential asks first take the grants (each shard's first message goes through the coordinator
    // with a probe behind it, the next waits for the owner's grant): the rows measure the steady state.
    if (type === "BenchDirect") await caller.request({ type: "shardedAsk", name: type, ids, count: 200, inFlight: 1 });
    await caller.request({ type: "shardedTell", name: type, ids, count: warmTells, window: tellWindow });
    const tellRates: number[] = [];
    const tellCpu: number[] = [];
    const tellSystemCpu: number[] = [];
    const tellFramesPerWrite: number[] = [];
    // The coordinator's and the owner's CPU over the tell rounds, per message (they are other processes when the
    // caller is not the coordinator): what a hop costs there, whatever else loads the host.
    const coordinatorCpu0 = await cpuOf(coordinator);
    const ownerCpu0 = await cpuOf(entityOwner);
    for (let round = 0; round < tellRounds; round++) {
      const r = await caller.request<Rated & { systemUs: number; framesPerWrite: number }>({
        type: "shardedTell",
        name: type,
        ids,
        count: tellRound,
        window: tellWindow,
      });
      tellRates.push(r.rate);
      tellCpu.push(r.cpuUs);
      tellSystemCpu.push(r.systemUs);
      tellFramesPerWrite.push(r.framesPerWrite);
    }
    const told = tellRounds * tellRound;
    const tell = {
      rate: median(tellRates),
      rounds: tellRates,
      cpuUs: median(tellCpu),
      cpuRounds: tellCpu,
      systemCpuRounds: tellSystemCpu,
      framesPerWriteRounds: tellFramesPerWrite,
      coordinatorCpuUs: ((await cpuOf(coordinator)) - coordinatorCpu0) / told,
      ownerCpuUs: ((await cpuOf(entityOwner)) - ownerCpu0) / told,
    };
    await caller.request({ type: "shardedAsk", name: type, ids, count: warmAsks, inFlight: 1 });
    // In-process: the coordinator is the owner, or (direct routing) the caller owns the shard itself.
    const local = caller === entityOwner && (caller === coordinator || type === "BenchDirect");
    // Beside raw round trips to the process the ask goes to first (the owner, or the coordinator routing it) when a
    // network is in the way; in process, one run.
    const firstHop = type === "BenchDirect" || caller === coordinator ? entityOwner : coordinator;
    const ask1: Latency & { rttP50?: number; rttTo?: string } = local
      ? await caller.request<Latency>({ type: "shardedAsk", name: type, ids, count: sequentialAsks, inFlight: 1 })
      : await sequentialAskRounds(caller, firstHop, ids, type);
    const askN = await caller.request<Rated & { p50: number; p99: number }>({
      type: "shardedAsk",
      name: type,
      ids,
      count: parallelAsks,
      inFlight,
    });
    results[name] = { tell, ask1, askN };
    measured.push({ name, local, tell, ask1, askN });
    // After the 1-hop row, after the last coordinator-routed row and at the end.
    if (part === "1-hop" || part === "2-hop" || i === scenarios.length - 1) await ceilingRound();
  }
  const act = !runs("1-hop")
    ? null
    : await coordinator.request<{ rate: number }>({
        type: "activate",
        name: "Bench",
        owner: info(owner).node,
        prefix: "act",
        count: activations,
        window: 2_000,
      });
  const raw = median(rawRates);
  const plain = median(plainRates);
  row(`raw frames tell, third → owner, ${frameBytes}-byte frames (ceiling)`, raw, "msg/s", raw, "raw");
  row("movie remote tell, third → owner", plain, "msg/s", raw, "raw");
  // Third node ↔ owner, each round trip right before a plain remote ask (the rounds of that ask).
  row("raw round trip p50, third → owner (ceiling)", plainAsk1.rttP50, "ms", plainAsk1.rttP50, "raw rtt");
  row("movie remote ask p50 (1 in flight)", plainAsk1.p50, "ms", plainAsk1.rttP50, "raw rtt, same rounds");
  row("movie remote ask p99 (1 in flight)", plainAsk1.p99, "ms");
  row(`movie remote ask, ${inFlight} in flight`, plainAskN.rate, "asks/s");
  results.plainReceiveCpu = plainReceiveCpu;
  row(
    "receiver CPU per movie remote tell (ceiling)",
    median(plainReceiveCpu),
    "µs",
    median(plainReceiveCpu),
    "remote receive",
  );
  results.plainSendCpu = plainSendCpu;
  row("sender CPU per movie remote tell (ceiling)", median(plainSendCpu), "µs", median(plainSendCpu), "remote send");
  const localTell = median(localTells.map((t) => t.rate));
  const localAsk = median(localAsks.map((a) => a.rate));
  const localTellCpu = median(localTells.map((t) => t.cpuUs));
  const localAskCpu = median(localAsks.map((a) => a.cpuUs));
  if (localTells.length > 0) {
    row("plain local tell, caller's own process (in-process ceiling)", localTell, "msg/s", localTell, "local tell");
    row(`plain local ask, ${inFlight} in flight (in-process ceiling)`, localAsk, "asks/s", localAsk, "local ask");
    results.localTells = localTells;
    results.localAsks = localAsks;
  }
  for (const m of measured) {
    // The in-process case stands beside a plain local tell and ask; the others beside the network ceiling.
    const [tellCeiling, tellOf, askCeiling, askOf, rttCeiling] = m.local
      ? [localTell, "local tell", localAsk, "local ask", null]
      : [raw, "raw", plainAskN.rate, "remote ask", m.ask1.rttP50 ?? null];
    row(`sharded tell, ${m.name}`, m.tell.rate, "msg/s", tellCeiling, tellOf);
    row(`sharded ask, ${m.name}, ${inFlight} in flight`, m.askN.rate, "asks/s", askCeiling, askOf);
    // Beside the raw round trip to the process the ask goes to first (for a caller through the coordinator, the
    // coordinator: its second leg, to the owner, has no raw round trip beside it).
    row(
      `sharded ask p50, ${m.name}, 1 in flight`,
      m.ask1.p50,
      "ms",
      rttCeiling,
      `raw rtt to the ${m.ask1.rttTo}, same rounds`,
    );
    row(`sharded ask p99, ${m.name}, 1 in flight`, m.ask1.p99, "ms");
    if (!m.local) {
      const receive = median(plainReceiveCpu);
      // The caller's own CPU (median round) beside a plain remote tell's sender: what routing and batching add there.
      row(`caller CPU per sharded tell, ${m.name}`, m.tell.cpuUs, "µs", median(plainSendCpu), "remote send");
      row(`coordinator CPU per sharded tell, ${m.name}`, m.tell.coordinatorCpuUs, "µs", receive, "remote receive");
      row(`owner CPU per sharded tell, ${m.name}`, m.tell.ownerCpuUs, "µs", receive, "remote receive");
    }
    if (m.local) {
      // Every part of an in-process message runs in this one process: its CPU time per message is the whole cost,
      // and other load on the host disturbs it far less than the rate.
      row(`CPU per sharded tell, ${m.name}`, m.tell.cpuUs, "µs", localTellCpu, "local tell");
      row(`CPU per sharded ask, ${m.name}, ${inFlight} in flight`, m.askN.cpuUs, "µs", localAskCpu, "local ask");
    }
  }
  if (act !== null) {
    row("activations/s, caller = coordinator, owner remote", act.rate, "/s", plain, "remote tell");
    results.activations = act;
  }
  results.stats = await Promise.all(nodes.map((n) => n.status()));
  await Promise.all(nodes.map((n) => n.shutdown()));
  return results;
}

// ---------------------------------------------------------------- 4. two nodes: handoff

async function handoff(): Promise<Record<string, unknown>> {
  const first = new BenchNode("h1", "self");
  const second = new BenchNode("h2", (await first.ready).hostPort);
  const nodes = [first, second];
  const ready = await Promise.all(nodes.map((n) => n.ready));
  const statuses = await converged(nodes);
  const coordinator = nodes[ready.findIndex((r) => r.node === statuses[0]!.coordinator)]!;
  const owner = nodes.find((n) => n !== coordinator)!;
  const coordinatorNode = ready[nodes.indexOf(coordinator)]!.node;
  const ownerNode = ready[nodes.indexOf(owner)]!.node;
  // Every shard on the highest address, which is never the coordinator: it stays put while the owner leaves.
  say("two nodes converged");
  await initEverywhere(nodes, coordinator, "Parcel", "highest");
  await until(
    "every Parcel shard on the owner",
    async () => (await coordinator.status("Parcel")).owners[ownerNode] === 256,
  );
  await coordinator.request({
    type: "activate",
    name: "Parcel",
    owner: ownerNode,
    prefix: "p",
    count: handoffEntities,
    window: 2_000,
  });
  const before = await owner.status("Parcel");
  say(`${before.entities} entities active on the owner; it leaves`);
  const watch = coordinator.request<{ ms: number; handoffShards: number }>({
    type: "watchHandoff",
    name: "Parcel",
    owner: coordinatorNode,
    shards: handoffShards,
    timeoutMs: 30_000,
  });
  const left = owner.request<{ ms: number }>({ type: "leave" });
  const [moved, leave] = await Promise.all([watch, left]);
  row(`handoff of ${handoffShards} shards, ${before.entities} active entities (owner leaves)`, moved.ms, "ms");
  row("owner's graceful leave, until removed", leave.ms, "ms");
  await Promise.all(nodes.map((n) => n.shutdown()));
  return { entitiesBefore: before.entities, moved, leave };
}

// ---------------------------------------------------------------- 5. scaling: 4 and 6 node processes

/**
 * `size` node processes; every node but the coordinator tells the entities of the next one (a ring over the
 * non-coordinators, so every tell crosses the network and none is the coordinator's own), all at once, in rounds that
 * alternate the same ring of plain remote tells (the ceiling), coordinator routing and direct routing. On a 2-core
 * host the rates are CPU-bound and fall as processes are added; what the part shows is where the CPU goes: the
 * coordinator's time per routed tell, which coordinator routing pays for every node's traffic and direct routing
 * should not.
 */
async function scaling(size: number): Promise<Record<string, unknown>> {
  const first = new BenchNode(`x${size}-1`, "self");
  const seed = (await first.ready).hostPort;
  const nodes = [first, ...Array.from({ length: size - 1 }, (_, i) => new BenchNode(`x${size}-${i + 2}`, seed))];
  const ready = await Promise.all(nodes.map((n) => n.ready));
  const statuses = await converged(nodes);
  const coordinator = nodes[ready.findIndex((r) => r.node === statuses[0]!.coordinator)]!;
  const callers = nodes.filter((n) => n !== coordinator);
  say(`${size} nodes converged`);
  await initEverywhere(nodes, coordinator, "Bench");
  await initEverywhere(nodes, coordinator, "BenchDirect", "default", "direct");
  const cpuOf = async (n: BenchNode) => (await n.request<{ cpuUs: number }>({ type: "cpu" })).cpuUs;
  // The coordinator's CPU while nothing is routed (gossip, heartbeats, plan polls), per ms: taken off its CPU in a
  // round, so that what remains is what the round's routing cost it.
  const idle0 = await cpuOf(coordinator);
  const idleStarted = clock.now();
  await new Promise<void>((resolve) => setTimeout(resolve, 1_000));
  const idleUsPerMs = ((await cpuOf(coordinator)) - idle0) / (clock.now() - idleStarted);
  // The ceiling: the same ring of callers, each telling the next one's plain sink (a Movie remote tell, no sharding)
  // as many messages, all at once: what these processes carry on these two cores without any routing.
  const ring = (i: number) => ready[nodes.indexOf(callers[(i + 1) % callers.length]!)]!.address;
  await Promise.all(
    callers.map((c, i) => c.request({ type: "plainTell", address: ring(i), count: 16_000, window: tellWindow })),
  );
  const ids = new Map<string, string[][]>();
  for (const [type, mode] of [
    ["Bench", "coordinator"],
    ["BenchDirect", "direct"],
  ] as const) {
    const picked = await Promise.all(
      callers.map(async (caller, i) => {
        const next = callers[(i + 1) % callers.length]!;
        const owner = ready[nodes.indexOf(next)]!.node;
        const answer = await caller.request<{ ids: string[] }>({
          type: "pick",
          name: type,
          owner,
          prefix: `x${size}${mode[0]}${i}`,
          count: entitiesPerRun,
        });
        return answer.ids;
      }),
    );
    ids.set(type, picked);
    // The steady state: entities active and, with direct routing, the grants taken (as the routing part does).
    await Promise.all(
      callers.map((c, i) => c.request({ type: "shardedAsk", name: type, ids: picked[i], count: 200, inFlight: 1 })),
    );
    await Promise.all(
      callers.map((c, i) =>
        c.request({ type: "shardedTell", name: type, ids: picked[i], count: entitiesPerRun * 500, window: tellWindow }),
      ),
    );
  }
  // Rounds of the three, alternating (ring, coordinator routing, direct routing), so load that comes and goes on the
  // host falls on all three. Each is measured the same way: every caller's tells over the round's wall time, with the
  // same window and count per caller.
  const plainRates: number[] = [];
  const rounds = new Map<string, { rate: number; coordinatorCpuUs: number; coordinatorCpuUsWithIdle: number }[]>([
    ["Bench", []],
    ["BenchDirect", []],
  ]);
  const told = scalingTells * callers.length;
  for (let round = 0; round < scalingRounds; round++) {
    say(`${size} nodes, round ${round + 1} of ${scalingRounds}: plain ring, coordinator routing, direct routing`);
    const plainStarted = clock.now();
    await Promise.all(
      callers.map((c, i) =>
        c.request({ type: "plainTell", address: ring(i), count: scalingTells, window: tellWindow }),
      ),
    );
    plainRates.push((told / (clock.now() - plainStarted)) * 1000);
    for (const type of ["Bench", "BenchDirect"]) {
      const picked = ids.get(type)!;
      const cpu0 = await cpuOf(coordinator);
      const started = clock.now();
      await Promise.all(
        callers.map((c, i) =>
          c.request({ type: "shardedTell", name: type, ids: picked[i], count: scalingTells, window: tellWindow }),
        ),
      );
      const ms = clock.now() - started;
      const usedUs = (await cpuOf(coordinator)) - cpu0;
      // Above idle; 0 when the round cost the coordinator no more than its idle rate would have.
      const busyUs = usedUs - idleUsPerMs * ms;
      rounds.get(type)!.push({
        rate: (told / ms) * 1000,
        coordinatorCpuUs: Math.max(0, busyUs) / told,
        coordinatorCpuUsWithIdle: usedUs / told,
      });
    }
  }
  const plainRate = median(plainRates);
  const modeOf = (type: string) => {
    const r = rounds.get(type)!;
    return {
      rate: median(r.map((x) => x.rate)),
      coordinatorCpuUs: median(r.map((x) => x.coordinatorCpuUs)),
      coordinatorCpuUsWithIdle: median(r.map((x) => x.coordinatorCpuUsWithIdle)),
      rounds: r,
    };
  };
  const byCoordinator = modeOf("Bench");
  const direct = modeOf("BenchDirect");
  const of = `${size} nodes, ${callers.length} callers at once`;
  row(`coordinator CPU per routed tell above idle, coordinator routing, ${of}`, byCoordinator.coordinatorCpuUs, "µs");
  row(
    `coordinator CPU per routed tell with its idle work, direct routing, ${of}`,
    direct.coordinatorCpuUsWithIdle,
    "µs",
    byCoordinator.coordinatorCpuUsWithIdle,
    "coordinator routing, with idle",
  );
  row(
    `coordinator CPU per routed tell above idle, direct routing, ${of}`,
    direct.coordinatorCpuUs,
    "µs",
    byCoordinator.coordinatorCpuUs,
    "coordinator routing",
  );
  row(`cluster plain remote tells/s, the same ring, ${of} (ceiling)`, plainRate, "msg/s", plainRate, "plain ring");
  row(`cluster tells/s, coordinator routing, ${of}`, byCoordinator.rate, "msg/s", plainRate, "plain ring");
  row(`cluster tells/s, direct routing, ${of}`, direct.rate, "msg/s", plainRate, "plain ring");
  const modes = { coordinator: byCoordinator, direct, idleCoordinatorUsPerMs: idleUsPerMs, plainRates };
  await Promise.all(nodes.map((n) => n.shutdown()));
  return { size, callers: callers.length, tellsPerCaller: scalingTells, rounds: scalingRounds, plainRate, modes };
}

// ---------------------------------------------------------------- main

if (runs("allocation")) {
  say("allocation cost");
  allocationCost();
}
let memoryResult: Record<string, number> | null = null;
if (runs("memory")) {
  say("memory per entity");
  memoryResult = await memory();
}
let routingResult: Record<string, unknown> | null = null;
if (runs("local") || runs("1-hop") || runs("2-hop-owner") || runs("2-hop") || runs("direct")) {
  say("three nodes: routing");
  routingResult = await routing();
}
let handoffResult: Record<string, unknown> | null = null;
if (runs("handoff")) {
  say("two nodes: handoff");
  handoffResult = await handoff();
}
let codecResult: Record<string, number> | null = null;
if (runs("codec")) {
  say("the direct batch's codec");
  codecResult = batchCodecCost();
}
const scalingResult: Record<string, unknown>[] = [];
if (runs("scaling")) {
  for (const size of scalingSizes) {
    say(`scaling: ${size} node processes`);
    scalingResult.push(await scaling(size));
  }
}
const totalSeconds = (clock.now() - runStarted) / 1000;

console.log(
  `cluster sharding, node processes on loopback; ${cpus().length} CPUs, Node ${process.version}; ${payload} payloads; ${tellRounds} × ${tellRound} tells over ` +
    `${entitiesPerRun} entities per scenario, ${sequentialAsks} sequential asks, ${parallelAsks} asks at ${inFlight} ` +
    `in flight; ratio = value / ceiling (same run); total ${totalSeconds.toFixed(1)} s`,
);
console.table(
  rows.map((r) => ({
    figure: r.figure,
    value: r.value,
    unit: r.unit,
    ceiling: r.ceiling === null ? "" : `${r.ceiling} (${r.ceilingOf})`,
    ratio: r.ratio === null ? "" : r.ratio.toFixed(2),
  })),
);
mkdirSync(new URL("./results/", import.meta.url), { recursive: true });
writeFileSync(
  new URL("./results/sharding.json", import.meta.url),
  `${JSON.stringify(
    {
      bench: "sharding",
      node: process.version,
      cpus: cpus().length,
      payload,
      totalSeconds,
      parts: [...selected],
      workload: {
        entitiesPerRun,
        tellRounds,
        tellRound,
        tellWindow,
        sequentialAsks,
        parallelAsks,
        inFlight,
        rawTells,
        activations,
        memoryEntities,
        handoffEntities,
        handoffShards,
        planShards,
        planMembers,
        scalingSizes,
        scalingTells,
      },
      rows,
      memory: memoryResult,
      routing: routingResult,
      handoff: handoffResult,
      codec: codecResult,
      scaling: scalingResult,
    },
    null,
    2,
  )}\n`,
);
