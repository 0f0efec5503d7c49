// One node of the sharding benchmark (bench/sharding.ts starts it as a child process and drives it over IPC).
// Usage: node --import tsx bench/sharding-node.ts <label> <seedHostPort|self>
// Every node runs an actor system named "shop" on loopback; listeners bind port 0. Each command carries an `id` and
// gets exactly one reply with the same `id` (or `error`).
import {
  AbstractBehavior,
  type ActorContext,
  type ActorRef,
  ActorSystem,
  STOP,
  type UniqueAddress,
} from "../src/actor/index.ts";
import "../src/cluster/index.ts";
import { MessageRegistry, type RemoteActorRef } from "../src/remote/index.ts";
import {
  ClusterSharding,
  eligibleMembers,
  RateLimitedRebalance,
  type ShardAllocationStrategy,
  type ShardedEntityType,
  type ShardingMember,
} from "../src/sharding/index.ts";
import { electCoordinator } from "../src/sharding/internal/index.ts";
import { ownedIds } from "./support/owned-ids.ts";
import {
  clock,
  envelopeFrame,
  listenLoopback,
  payloadText,
  pct,
  RawRoundTripper,
  rawEchoServer,
  rawRoundTrips,
  rawSinkServer,
  rawTell,
} from "./support/raw-frames.ts";

/** Every entity (and the plain sink) acknowledges each `ackEvery` tells it received with `Ack(ackEvery)`. */
const ackEvery = 500;

/** The entity's message type. */
abstract class BenchCommand {}
/** A tell of the throughput runs (64-byte payload, as the remoting benchmark's). */
class Work extends BenchCommand {
  constructor(
    readonly seq: number,
    readonly payload: string,
  ) {
    super();
  }
}
/** An ask: the entity answers `Pong(seq)`. */
class Ping extends BenchCommand {
  constructor(
    readonly seq: number,
    readonly payload: string,
  ) {
    super();
  }
}
/** The first message to a fresh entity: answered with `Ack(1)` (activations), or only counted when senderless. */
class Touch extends BenchCommand {}
class Ack {
  constructor(readonly count: number) {}
}
class Pong {
  constructor(readonly seq: number) {}
}
// The hot types declare binary fields, as in the remoting benchmark (MOVIE_BENCH_JSON=1 measures JSON payloads).
const binary = process.env.MOVIE_BENCH_JSON !== "1";
const seqAndText = binary ? { fields: { seq: "number", payload: "string" } as const } : {};
MessageRegistry.register(Work, { name: "bench.sharding.work", ...seqAndText });
MessageRegistry.register(Ping, { name: "bench.sharding.ping", ...seqAndText });
MessageRegistry.register(Touch, { name: "bench.sharding.touch" });
MessageRegistry.register(Ack, { name: "bench.sharding.ack", ...(binary ? { fields: { count: "number" } } : {}) });
MessageRegistry.register(Pong, { name: "bench.sharding.pong", ...(binary ? { fields: { seq: "number" } } : {}) });

/** Senderless Touches handled in this process (the memory run waits for all of them). */
let touched = 0;

class BenchEntity extends AbstractBehavior<BenchCommand> {
  private count = 0;
  receive(message: BenchCommand, ctx: ActorContext<BenchCommand>): void {
    if (message instanceof Work) {
      if (++this.count % ackEvery === 0) ctx.sender?.tell(new Ack(ackEvery));
    } else if (message instanceof Ping) {
      ctx.sender?.tell(new Pong(message.seq));
    } else if (message instanceof Touch) {
      if (ctx.sender === null) touched++;
      else ctx.sender.tell(new Ack(1));
    }
  }
}

/** The plain remote-tell and remote-ask target beside the sharded figures. */
class Sink extends AbstractBehavior<unknown> {
  private count = 0;
  receive(message: unknown, ctx: ActorContext<unknown>): void {
    if (message instanceof Work) {
      if (++this.count % ackEvery === 0) ctx.sender?.tell(new Ack(ackEvery));
    } else if (message instanceof Ping) {
      ctx.sender?.tell(new Pong(message.seq));
    }
  }
}

class AckCollector extends AbstractBehavior<unknown> {
  acked = 0;
  waiter: (() => void) | null = null;
  receive(message: unknown): void {
    if (message instanceof Ack) {
      this.acked += message.count;
      this.waiter?.();
    }
  }
}

/**
 * Places every shard on the highest eligible address (the handoff run): the lowest address stays coordinator while
 * the owner leaves, so the measured handoff is driven by one coordinator throughout.
 */
class HighestAddressAllocation implements ShardAllocationStrategy {
  readonly configurationKey = "BenchHighestAddressAllocation";
  allocate(_shardId: number, members: readonly ShardingMember[]): UniqueAddress | null {
    return eligibleMembers(members).at(-1)?.uniqueAddress ?? null;
  }
  allocateAll(shardCount: number, members: readonly ShardingMember[]): Map<number, UniqueAddress> {
    const plan = new Map<number, UniqueAddress>();
    const owner = eligibleMembers(members).at(-1)?.uniqueAddress;
    if (owner !== undefined) for (let s = 0; s < shardCount; s++) plan.set(s, owner);
    return plan;
  }
}

type Command = { id: number; type: string; [field: string]: unknown };

const [label = "node", seed = "self"] = process.argv.slice(2);
const system = ActorSystem.create("shop");
const remoting = await system.enableRemoting({ host: "127.0.0.1", port: 0 });
const self = remoting.selfAddress;
const cluster = await system.enableCluster({
  seedNodes: [seed === "self" ? self.address.hostPort : seed],
  gossipInterval: 200,
  failureDetector: { heartbeatInterval: 200, heartbeatTimeout: 3_000 },
});
const sharding = ClusterSharding.get(system);
const types = new Map<string, ShardedEntityType<BenchCommand>>();
const acks = new AckCollector();
const ackRef = system.spawn(acks, "acks");
const localSink = system.spawn(new Sink(), "sink");
const [rawSink, rawEcho] = await Promise.all([
  listenLoopback(rawSinkServer(false, ackEvery)),
  listenLoopback(rawEchoServer()),
]);

function initType(name: string, allocation: string, routing: "coordinator" | "direct"): void {
  if (types.has(name)) return;
  const options =
    allocation === "highest"
      ? {
          allocation: new HighestAddressAllocation(),
          rebalance: new RateLimitedRebalance({ maxConcurrent: 256 }),
          routing,
        }
      : { routing };
  types.set(
    name,
    sharding.init(name, BenchCommand, options, () => new BenchEntity()),
  );
}

function typeNamed(name: unknown): ShardedEntityType<BenchCommand> {
  const t = types.get(String(name));
  if (t === undefined) throw new Error(`${label}: type ${String(name)} is not initialised`);
  return t;
}

function status(typeName: string): object {
  const snapshot = cluster.snapshot();
  const owners: Record<string, number> = {};
  let planned = 0;
  const type = types.get(typeName);
  if (type !== undefined) {
    for (const owner of sharding.allocations(type).values()) {
      owners[owner.toString()] = (owners[owner.toString()] ?? 0) + 1;
      planned++;
    }
  }
  return {
    node: self.toString(),
    coordinator: electCoordinator(snapshot)?.toString() ?? null,
    converged: snapshot.converged,
    up: snapshot.members.filter((m) => m.status === "Up").length,
    members: snapshot.members.length,
    planned,
    owners,
    entities: sharding.localEntityCount,
    handoffs: sharding.handoffsInProgress,
    stats: sharding.stats,
  };
}

/** Entity ids `${prefix}-i` whose shard this node's plan puts on `owner`. */
function pick(type: ShardedEntityType<BenchCommand>, owner: string, prefix: string, count: number): string[] {
  return ownedIds(sharding, type, owner, prefix, count);
}

/** The exact bytes of a plain Ping ask from this node to `address`'s sink (the raw round trip's frame). */
function pingFrame(address: string): Buffer {
  const sink = system.actorSelection(`${address}/user/sink`) as RemoteActorRef;
  return envelopeFrame(MessageRegistry.default.lookupType(Ping)!, new Ping(1234, payloadText), {
    headerId: 0,
    recipient: sink.path.localPart,
    sender: `${system.address}/temp/$abc`,
    senderUid: self.uid,
  });
}

async function waitAcks(target: number): Promise<void> {
  while (acks.acked < target) await new Promise<void>((r) => (acks.waiter = r));
}

/** Tells `count` messages round robin to `targets` with at most `window` unacknowledged; msg/s. */
async function tellRun(send: (seq: number) => void, count: number, window: number): Promise<number> {
  return (await tellRunCpu(send, count, window)).rate;
}

/** This process's CPU time (user + system, all threads) in µs since `since` (process.cpuUsage), per `count`. */
function cpuUsPer(since: NodeJS.CpuUsage, count: number): number {
  const used = process.cpuUsage(since);
  return (used.user + used.system) / count;
}

/**
 * {@link tellRun} with this process's CPU µs per message: when caller, coordinator and owner are this process, the
 * whole cost of a message, a figure that load from other processes on the host disturbs far less than the rate.
 */
async function tellRunCpu(
  send: (seq: number) => void,
  count: number,
  window: number,
): Promise<{ rate: number; cpuUs: number; systemUs: number; framesPerWrite: number }> {
  const base = acks.acked;
  const cpu = process.cpuUsage();
  const { writes, framesOut } = remoting.stats;
  const started = clock.now();
  let sent = 0;
  while (sent < count) {
    while (sent < count && sent - (acks.acked - base) < window) send(sent++);
    await new Promise<void>((r) => (acks.waiter = r));
  }
  await waitAcks(base + count);
  const rate = (count / (clock.now() - started)) * 1000;
  const cpuUs = cpuUsPer(cpu, count);
  // The kernel's share of it (socket writes and reads), and how many frames a socket write carried on average: a
  // caller's CPU per tell that varies from run to run shows here whether its writes or its own work changed.
  const systemUs = process.cpuUsage(cpu).system / count;
  const after = remoting.stats;
  return { rate, cpuUs, systemUs, framesPerWrite: (after.framesOut - framesOut) / Math.max(1, after.writes - writes) };
}

/** `count` asks with `inFlight` outstanding; rate and sorted latencies (ms). */
async function askRun(ask: (seq: number) => Promise<unknown>, count: number, inFlight: number) {
  const latencies: number[] = [];
  let next = 0;
  const cpu = process.cpuUsage();
  const started = clock.now();
  const worker = async (): Promise<void> => {
    while (next < count) {
      const seq = next++;
      const t0 = clock.now();
      await ask(seq);
      latencies.push(clock.now() - t0);
    }
  };
  await Promise.all(Array.from({ length: inFlight }, worker));
  const rate = (count / (clock.now() - started)) * 1000;
  const cpuUs = cpuUsPer(cpu, count);
  latencies.sort((a, b) => a - b);
  return { rate, cpuUs, p50: pct(latencies, 50), p99: pct(latencies, 99) };
}

function gc(): void {
  const collect = (globalThis as { gc?: () => void }).gc;
  if (collect === undefined) throw new Error("the memory run needs --expose-gc");
  collect();
  collect();
}

async function sleep(ms: number): Promise<void> {
  await new Promise<void>((r) => clock.scheduleOnce(ms, r));
}

/** Retained heap of `count` entities on this single node, and the plain-Map ceiling, in bytes per entry. */
async function memoryRun(type: ShardedEntityType<BenchCommand>, count: number) {
  // The ceiling: a plain object per id in a Map (what any entity table costs at the least).
  gc();
  const plainBefore = process.memoryUsage().heapUsed;
  const plain = new Map<string, { id: string; count: number }>();
  for (let i = 0; i < count; i++) {
    const id = `plain-${i}`;
    plain.set(id, { id, count: 0 });
  }
  gc();
  const plainBytes = (process.memoryUsage().heapUsed - plainBefore) / count;
  if (plain.size !== count) throw new Error("plain map lost entries");
  plain.clear();
  gc();
  const before = process.memoryUsage().heapUsed;
  const beforeEntities = sharding.localEntityCount;
  const cpu = process.cpuUsage();
  const t0 = clock.now();
  const base = touched;
  for (let i = 0; i < count; i++) sharding.entityRefFor(type, `m-${i}`).tell(new Touch());
  while (touched - base < count) await sleep(1);
  const activationRate = (count / (clock.now() - t0)) * 1000;
  const activationCpuUs = cpuUsPer(cpu, count);
  await sleep(50);
  gc();
  const after = process.memoryUsage().heapUsed;
  const entities = sharding.localEntityCount - beforeEntities;
  // Measured after the entity figures, so that its garbage never counts against them.
  // Spawn ceiling: plain actors started under /user, the floor of an activation.
  const spawnCpu = process.cpuUsage();
  const spawnStarted = clock.now();
  let started = 0;
  class Started extends AbstractBehavior<unknown> {
    override preStart(): void {
      started++;
    }
    receive(): void {}
  }
  const spawned: ActorRef<unknown>[] = [];
  for (let i = 0; i < count; i++) spawned.push(system.spawn(new Started()));
  while (started < count) await sleep(1);
  const spawnRate = (count / (clock.now() - spawnStarted)) * 1000;
  const spawnCpuUs = cpuUsPer(spawnCpu, count);
  for (const ref of spawned) ref.sendSystem(STOP);
  spawned.length = 0;
  return {
    entities,
    bytesPerEntity: (after - before) / entities,
    plainBytes,
    activationRate,
    activationCpuUs,
    spawnRate,
    spawnCpuUs,
  };
}

async function handle(command: Command): Promise<object> {
  switch (command.type) {
    case "init":
      initType(
        String(command.name),
        String(command.allocation ?? "default"),
        command.routing === "direct" ? "direct" : "coordinator",
      );
      return {};
    case "status":
      return status(String(command.name ?? "Bench"));
    case "pick":
      return {
        ids: pick(typeNamed(command.name), String(command.owner), String(command.prefix), Number(command.count)),
      };
    case "shardedTell": {
      const type = typeNamed(command.name);
      const refs = (command.ids as string[]).map((id) => sharding.entityRefFor(type, id));
      const count = Number(command.count);
      if (count % (refs.length * ackEvery) !== 0) throw new Error("tell count must be a multiple of ids × ackEvery");
      return tellRunCpu(
        (seq) => refs[seq % refs.length]!.tell(new Work(seq, payloadText), ackRef),
        count,
        Number(command.window),
      );
    }
    case "shardedAsk": {
      const type = typeNamed(command.name);
      const refs = (command.ids as string[]).map((id) => sharding.entityRefFor(type, id));
      return askRun(
        (seq) => refs[seq % refs.length]!.ask(new Ping(seq, payloadText), Pong, 10_000),
        Number(command.count),
        Number(command.inFlight),
      );
    }
    case "activate": {
      // Fresh ids on `owner`, one Touch each (a window of them unacknowledged): each creates an entity there.
      const type = typeNamed(command.name);
      const ids = pick(type, String(command.owner), String(command.prefix), Number(command.count));
      const refs = ids.map((id) => sharding.entityRefFor(type, id));
      const rate = await tellRun((seq) => refs[seq]!.tell(new Touch(), ackRef), refs.length, Number(command.window));
      return { rate, entities: ids.length };
    }
    case "localTell": {
      // The in-process ceiling: this process's own sink, no sharding between.
      return tellRunCpu(
        (seq) => localSink.tell(new Work(seq, payloadText), ackRef),
        Number(command.count),
        Number(command.window),
      );
    }
    case "cpu": {
      // This process's CPU time so far (µs): the driver takes differences around a run on another node.
      const used = process.cpuUsage();
      return { cpuUs: used.user + used.system };
    }
    case "localAsk":
      return askRun(
        (seq) => localSink.ask(new Ping(seq, payloadText), Pong, 10_000),
        Number(command.count),
        Number(command.inFlight),
      );
    case "plainTell": {
      const sink = system.actorSelection(`${command.address}/user/sink`);
      // With this process's CPU per tell: what a plain remote tell costs its sender (the ceiling of a remote caller's).
      return tellRunCpu(
        (seq) => sink.tell(new Work(seq, payloadText), ackRef),
        Number(command.count),
        Number(command.window),
      );
    }
    case "plainAsk": {
      const sink = system.actorSelection(`${command.address}/user/sink`);
      return askRun(
        (seq) => sink.ask(new Ping(seq, payloadText), Pong, 10_000),
        Number(command.count),
        Number(command.inFlight),
      );
    }
    case "rawTell": {
      // The exact bytes Movie writes for one plain Work tell from /user/acks to the target's sink.
      const sink = system.actorSelection(`${command.address}/user/sink`) as RemoteActorRef;
      const frame = envelopeFrame(MessageRegistry.default.lookupType(Work)!, new Work(123456, payloadText), {
        headerId: 1,
        recipient: sink.path.localPart,
        sender: ackRef.path.toString(),
        senderUid: self.uid,
      });
      return { rate: await rawTell(Number(command.port), frame, Number(command.count)), frameBytes: frame.length };
    }
    case "rawRtt": {
      // The raw round trip alone (the Effect side-by-side's ceiling).
      const frame = pingFrame(String(command.address));
      const latencies = await rawRoundTrips(Number(command.port), frame, Number(command.count));
      const rate = (latencies.length / latencies.reduce((s, x) => s + x, 0)) * 1000;
      return { rate, p50: pct(latencies, 50), p99: pct(latencies, 99) };
    }
    case "asksBesideRaw": {
      // Sequential asks, each right after one raw round trip to the same process: where the scheduler puts the two
      // processes decides a round trip's latency here (one CPU or two: docs/performance.md), and it changes within a
      // run, so asks and raw round trips taken in turn see the same placements.
      const sharded = command.name !== undefined;
      const refs = sharded
        ? (command.ids as string[]).map((id) => sharding.entityRefFor(typeNamed(command.name), id))
        : [system.actorSelection(`${command.address}/user/sink`)];
      const frame = pingFrame(String(command.address));
      const raw = await RawRoundTripper.open(Number(command.port));
      const asks: number[] = [];
      const rtts: number[] = [];
      for (let seq = 0; seq < Number(command.count); seq++) {
        rtts.push(await raw.roundTrip(frame));
        const t0 = clock.now();
        await refs[seq % refs.length]!.ask(new Ping(seq, payloadText), Pong, 10_000);
        asks.push(clock.now() - t0);
      }
      raw.close();
      asks.sort((a, b) => a - b);
      rtts.sort((a, b) => a - b);
      return { p50: pct(asks, 50), p99: pct(asks, 99), rttP50: pct(rtts, 50), rttP99: pct(rtts, 99) };
    }
    case "memory":
      return memoryRun(typeNamed(command.name), Number(command.count));
    case "watchHandoff": {
      // From now until this node's plan of `name` puts every shard on `owner`.
      const type = typeNamed(command.name);
      const owner = String(command.owner);
      const shards = Number(command.shards);
      const t0 = clock.now();
      const timeoutMs = Number(command.timeoutMs);
      for (;;) {
        const plan = sharding.allocations(type);
        let on = 0;
        for (const o of plan.values()) if (o.toString() === owner) on++;
        if (on === shards && sharding.handoffsInProgress === 0) break;
        if (clock.now() - t0 > timeoutMs) throw new Error(`${label}: plan not all on ${owner} after ${timeoutMs} ms`);
        await sleep(1);
      }
      return { ms: clock.now() - t0, handoffShards: sharding.stats.handoffShards };
    }
    case "leave": {
      const t0 = clock.now();
      await cluster.leave();
      return { ms: clock.now() - t0 };
    }
    case "shutdown": {
      const t0 = clock.now();
      await system.terminate();
      clock.scheduleOnce(0, () => process.exit(0));
      return { terminateMs: clock.now() - t0, entities: sharding.localEntityCount };
    }
    default:
      throw new Error(`${label}: unknown command ${command.type}`);
  }
}

process.on("message", (command: Command) => {
  handle(command).then(
    (reply) => process.send?.({ id: command.id, ...reply }),
    (error: unknown) => process.send?.({ id: command.id, error: String((error as Error).stack ?? error) }),
  );
});
process.on("disconnect", () => process.exit(0));

process.send?.({
  id: 0,
  node: self.toString(),
  hostPort: self.address.hostPort,
  address: self.address.toString(),
  rawSink,
  rawEcho,
});
