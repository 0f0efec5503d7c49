// One node of the persistent sharding benchmark (bench/persistent-sharding.ts starts three of them as child
// processes and drives them over IPC). Usage: node --import tsx bench/persistent-sharding-node.ts <label> <seed|self>
// with MOVIE_BENCH_PG_URL and MOVIE_BENCH_PG_SCHEMA set. Each command carries an `id` and gets exactly one reply with
// the same `id` (or `error`).
import { AbstractBehavior, type ActorContext, ActorSystem, silentLogger } from "../src/actor/index.ts";
import "../src/cluster/index.ts";
import {
  Database,
  DurableState,
  DurableStateBehavior,
  DurableStateEffect,
  type EntityContext,
  EventSourcedBehavior,
  EventSourcedEffect,
  EventSourcing,
} from "../src/persistence/index.ts";
import { PostgresStore } from "../src/persistence/postgres/index.ts";
import { MessageRegistry } from "../src/remote/index.ts";
import { ClusterSharding, NoRebalance, type ShardedEntityType } from "../src/sharding/index.ts";
import { electCoordinator } from "../src/sharding/internal/index.ts";
import "../src/sharding/persistent/index.ts"; // adds sharding.initEventSourced and sharding.initDurableState
import { ownedIds } from "./support/owned-ids.ts";
import { clock, pct } from "./support/raw-frames.ts";

abstract class BenchCommand {}
class Bump extends BenchCommand {
  constructor(readonly op: string) {
    super();
  }
}
class BumpReply {
  constructor(
    readonly n: number,
    readonly epoch: number,
  ) {}
}
class Bumped {
  constructor(readonly at: number) {}
}
MessageRegistry.register(Bump, { name: "bench.ps.bump" });
MessageRegistry.register(BumpReply, { name: "bench.ps.reply" });

class PersistentCounter extends EventSourcedBehavior<BenchCommand, Bumped, { n: number }> {
  emptyState() {
    return { n: 0 };
  }
  applyEvent(state: { n: number }) {
    return { n: state.n + 1 };
  }
  handleCommand(_state: { n: number }, command: BenchCommand, ctx: EntityContext<BenchCommand>) {
    const op = command instanceof Bump ? command.op : "none";
    return EventSourcedEffect.persist<Bumped, { n: number }>(new Bumped(1), op).thenRun((s) =>
      ctx.sender?.tell(new BumpReply(s.n, ctx.fence?.epoch ?? 0)),
    );
  }
}

/** The durable-state twin of PersistentCounter: each command saves the whole state (one fenced row write). */
class DurableCounter extends DurableStateBehavior<BenchCommand, { n: number }> {
  emptyState() {
    return { n: 0 };
  }
  handleCommand(state: { n: number }, command: BenchCommand, ctx: EntityContext<BenchCommand>) {
    const op = command instanceof Bump ? command.op : "none";
    return DurableStateEffect.persist({ n: state.n + 1 }, op).thenRun((s) =>
      ctx.sender?.tell(new BumpReply(s.n, ctx.fence?.epoch ?? 0)),
    );
  }
}

class MemoryCounter extends AbstractBehavior<BenchCommand> {
  private n = 0;
  receive(_message: BenchCommand, ctx: ActorContext<BenchCommand>): void {
    ctx.sender?.tell(new BumpReply(++this.n, 0));
  }
}

type Command = { id: number; type: string; [field: string]: unknown };

const [label = "node", seed = "self"] = process.argv.slice(2);
const poolSize = 16;
const system = ActorSystem.create("bank", { logger: silentLogger });
// Manual downing forwarded to the leader needs the shared secret.
const remoting = await system.enableRemoting({ host: "127.0.0.1", port: 0, secret: "persistent-sharding-bench" });
const self = remoting.selfAddress;
const cluster = await system.enableCluster({
  seedNodes: [seed === "self" ? self.address.hostPort : seed],
  gossipInterval: 100,
  failureDetector: { heartbeatInterval: 100, heartbeatTimeout: 1_000 },
});
const store = await PostgresStore.connect({
  connectionUri: process.env.MOVIE_BENCH_PG_URL!,
  schema: process.env.MOVIE_BENCH_PG_SCHEMA!,
  poolSize,
});
await Database.get(system).use(store);
Database.get(system).codec.register(Bumped);
const counters = EventSourcing.get(system).registerEntity(
  PersistentCounter,
  BenchCommand,
  () => new PersistentCounter(),
  {
    name: "BenchCounter",
  },
);
const durableCounters = DurableState.get(system).registerEntity(
  DurableCounter,
  BenchCommand,
  () => new DurableCounter(),
  { name: "BenchDurableCounter" },
);
const sharding = ClusterSharding.get(system);
const types = new Map<string, ShardedEntityType<BenchCommand>>();
const payload = JSON.stringify(new Bumped(1));

function initType(name: string, kind: string, leaseDuration: number, rebalance: boolean): void {
  if (types.has(name)) return;
  // Without rebalance a shard moves only when its owner leaves or is downed (the throughput runs); the failover runs
  // rebalance, so that the freshly joined victim gets shards to lose.
  const settings = { shardCount: 64, ...(rebalance ? {} : { rebalance: new NoRebalance() }) };
  const persistent = {
    ...settings,
    routingName: name,
    leaseDuration,
    leaseRenewInterval: Math.max(100, Math.floor(leaseDuration / 3)),
  };
  types.set(
    name,
    kind === "persistent"
      ? sharding.initEventSourced(counters, persistent)
      : kind === "durable"
        ? sharding.initDurableState(durableCounters, persistent)
        : sharding.init(name, BenchCommand, settings, () => new MemoryCounter()),
  );
}

function typeNamed(name: unknown): ShardedEntityType<BenchCommand> {
  const t = types.get(String(name));
  if (t === undefined) throw new Error(`${label}: type ${String(name)} is not initialised`);
  return t;
}

function status(name: string): object {
  const snapshot = cluster.snapshot();
  const type = types.get(name);
  return {
    node: self.toString(),
    coordinator: electCoordinator(snapshot)?.toString() ?? null,
    converged: snapshot.converged && snapshot.unreachable.length === 0,
    up: snapshot.members.filter((m) => m.status === "Up").length,
    planned: type === undefined ? 0 : sharding.allocations(type).size,
    handoffs: sharding.handoffsInProgress,
    stats: sharding.stats,
  };
}

/** Entity ids `${prefix}-i` whose shard this node's plan puts on `owner`. */
function pick(type: ShardedEntityType<BenchCommand>, owner: string, prefix: string, count: number): string[] {
  return ownedIds(sharding, type, owner, prefix, count);
}

/** `workers` closed loops of `op(worker, i)`, a warm-up then `ms` measured; rate and latency percentiles. */
async function closedLoops(
  workers: number,
  warmupMs: number,
  ms: number,
  op: (w: number, i: number) => Promise<unknown>,
) {
  const latencies: number[] = [];
  const next = new Array<number>(workers).fill(0);
  let end = clock.now() + warmupMs;
  let recording = false;
  const loop = async (w: number) => {
    while (clock.now() < end) {
      const t0 = clock.now();
      await op(w, next[w]!++);
      if (recording) latencies.push(clock.now() - t0);
    }
  };
  await Promise.all(next.map((_, w) => loop(w)));
  recording = true;
  const started = clock.now();
  end = started + ms;
  await Promise.all(next.map((_, w) => loop(w)));
  const elapsed = clock.now() - started;
  latencies.sort((a, b) => a - b);
  return {
    rate: (latencies.length * 1000) / elapsed,
    p50: pct(latencies, 50),
    p99: pct(latencies, 99),
    ops: latencies.length,
  };
}

let ceilingTable = false;

async function handle(command: Command): Promise<object> {
  switch (command.type) {
    case "init":
      initType(
        String(command.name),
        String(command.kind),
        Number(command.leaseDuration ?? 10_000),
        command.rebalance === true,
      );
      return {};
    case "status":
      return status(String(command.name ?? ""));
    case "batching":
      // Before/after issue 23 in one run: durable-state writes (and lease batches) alone, or group-committed.
      store.batching = command.on === true;
      return {};
    case "pickOne": {
      // An id whose shard is on `owner`, or null while no shard is there yet.
      const type = typeNamed(command.name);
      const plan = sharding.allocations(type);
      for (let i = 0; i < 20_000; i++) {
        const id = `${String(command.prefix)}-${i}`;
        if (plan.get(sharding.shardOf(type, id))?.toString() === String(command.owner)) return { entityId: id };
      }
      return { entityId: null };
    }
    case "pick":
      return {
        ids: pick(typeNamed(command.name), String(command.owner), String(command.prefix), Number(command.count)),
      };
    case "ask": {
      // One entity per worker: concurrency N = N entities, each with one command in flight.
      const type = typeNamed(command.name);
      const refs = (command.ids as string[]).map((id) => sharding.entityRefFor(type, id));
      const run = String(command.run);
      return closedLoops(refs.length, Number(command.warmupMs), Number(command.ms), (w, i) =>
        refs[w]!.ask(new Bump(`${run}-${w}-${i}`), BumpReply, 30_000),
      );
    }
    case "rawInsert": {
      // The ceiling: one single-row INSERT per transaction (autocommit, one round trip) on this node's pool.
      if (!ceilingTable) {
        await store.pool.query(`CREATE TABLE IF NOT EXISTS bench_ceiling (persistence_id TEXT NOT NULL,
          sequence_nr BIGINT NOT NULL, manifest TEXT NOT NULL, payload TEXT NOT NULL,
          PRIMARY KEY (persistence_id, sequence_nr))`);
        ceilingTable = true;
      }
      const run = String(command.run);
      return closedLoops(Number(command.concurrency), Number(command.warmupMs), Number(command.ms), (w, i) =>
        store.pool.query({
          name: "bench_ceiling_insert",
          text: "INSERT INTO bench_ceiling VALUES ($1, $2, $3, $4)",
          values: [`${run}-${w}`, i, "bench.Bumped", payload],
        }),
      );
    }
    case "askUntilOk": {
      // Failover probe: asks `id` (same OperationId each time) until it succeeds; the time it took and the epoch.
      const ref = sharding.entityRefFor(typeNamed(command.name), String(command.entityId));
      const t0 = clock.now();
      const deadline = t0 + Number(command.timeoutMs);
      let failures = 0;
      for (;;) {
        try {
          const reply = await ref.ask(new Bump(String(command.op)), BumpReply, 2_000);
          return { ms: clock.now() - t0, epoch: reply.epoch, failures };
        } catch {
          failures++;
          if (clock.now() > deadline) throw new Error(`${label}: ${command.entityId} not answering after failover`);
          await new Promise<void>((r) => clock.scheduleOnce(10, r));
        }
      }
    }
    case "cpu": {
      // CPU time of this process and of the PostgreSQL backends serving its pool (Linux /proc; empty elsewhere), so
      // that the driver can split a case's cost per command by process. pg's pool keeps its clients in `_clients`
      // (not public API, hence the guard); `processID` is each connection's backend pid.
      const usage = process.cpuUsage();
      const clients = (store.pool as unknown as { _clients?: { processID?: number | null }[] })._clients ?? [];
      const backendPids = clients.map((c) => c.processID).filter((pid): pid is number => typeof pid === "number");
      return { cpuUs: usage.user + usage.system, backendPids };
    }
    case "down":
      await cluster.down(String(command.node));
      return {};
    case "leave": {
      const t0 = clock.now();
      await cluster.leave();
      return { ms: clock.now() - t0 };
    }
    case "shutdown": {
      await system.terminate();
      await store.close().catch(() => undefined);
      clock.scheduleOnce(0, () => process.exit(0));
      return {};
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
process.send?.({ id: 0, node: self.toString(), hostPort: self.address.hostPort });
