// One node of the rolling-update benchmark (bench/rolling.ts starts it as a child process and drives it over IPC).
// Usage: node --import tsx bench/rolling-node.ts <label> <frontend|backend> <seedHostPort|self> <appVersion|->
// MOVIE_ROLLING_IMMEDIATE=1 turns the caller-side wait off (awaitCoordinator: false), for the comparison run.
// Every node runs an actor system named "shop" on loopback; the frontend registers the type without hosting it and
// runs the load: asks in flight to the entities, numbered tells whose receipt each entity reports back, and a monitor
// that counts, from the frontend's own plan, how often each shard changed owner and how often the coordinator changed.
import {
  AbstractBehavior,
  type ActorContext,
  ActorSystem,
  silentLogger,
  type UniqueAddress,
} from "../src/actor/index.ts";
import "../src/cluster/index.ts";
import { MessageRegistry, RemoteAskError } from "../src/remote/index.ts";
import {
  ClusterSharding,
  LeastLoadedAllocation,
  RateLimitedRebalance,
  RoleAwareAllocation,
} from "../src/sharding/index.ts";

abstract class RollCommand {}
/** An ask: answered with `Pong(seq)`. */
class Ping extends RollCommand {
  constructor(readonly seq: number) {
    super();
  }
}
/** A numbered tell; the entity reports `Seen(entity, seq)` to the tell's sender. */
class Work extends RollCommand {
  constructor(
    readonly entity: string,
    readonly seq: number,
  ) {
    super();
  }
}
class Pong {
  constructor(readonly seq: number) {}
}
class Seen {
  constructor(
    readonly entity: string,
    readonly seq: number,
  ) {}
}
MessageRegistry.register(Ping, { name: "bench.rolling.ping", fields: { seq: "number" } });
MessageRegistry.register(Work, { name: "bench.rolling.work", fields: { entity: "string", seq: "number" } });
MessageRegistry.register(Pong, { name: "bench.rolling.pong", fields: { seq: "number" } });
MessageRegistry.register(Seen, { name: "bench.rolling.seen", fields: { entity: "string", seq: "number" } });

class RollEntity extends AbstractBehavior<RollCommand> {
  receive(message: RollCommand, ctx: ActorContext<RollCommand>): void {
    if (message instanceof Ping) ctx.sender?.tell(new Pong(message.seq));
    else if (message instanceof Work) ctx.sender?.tell(new Seen(message.entity, message.seq));
  }
}

/** Receipts of the numbered tells, per entity: how many, out of order, duplicated. */
class SeenCollector extends AbstractBehavior<unknown> {
  readonly last = new Map<string, number>();
  received = 0;
  outOfOrder = 0;
  duplicates = 0;
  receive(message: unknown): void {
    if (!(message instanceof Seen)) return;
    this.received++;
    const last = this.last.get(message.entity) ?? 0;
    if (message.seq === last) this.duplicates++;
    else if (message.seq < last) this.outOfOrder++;
    else this.last.set(message.entity, message.seq);
  }
}

type Command = { id?: number } & (
  | { type: "status" }
  | { type: "start-load"; inFlight: number; entities: number; tellsPerSecond: number }
  | { type: "phase"; name: string }
  | { type: "stop-load" }
  | { type: "leave" }
  | { type: "shutdown" }
);

const [label = "node", role = "backend", seed = "self", version = "-"] = process.argv.slice(2);
const reply = (command: Command, message: Record<string, unknown>): void => {
  process.send?.({ id: command.id, ...message });
};
process.on("disconnect", () => process.exit(1));

const system = ActorSystem.create("shop", { logger: silentLogger });
const remoting = await system.enableRemoting({ host: "127.0.0.1", port: 0 });
const self = remoting.selfAddress;
const cluster = await system.enableCluster({
  seedNodes: [seed === "self" ? self.address.hostPort : seed],
  roles: [role],
  ...(version === "-" ? {} : { appVersion: version }),
  gossipInterval: 200,
  failureDetector: { heartbeatInterval: 200, heartbeatTimeout: 3_000 },
});
const sharding = ClusterSharding.get(system);
const immediate = process.env.MOVIE_ROLLING_IMMEDIATE === "1";
const counters = sharding.init(
  "Counter",
  RollCommand,
  {
    shardCount: 64,
    allocation: new RoleAwareAllocation(new LeastLoadedAllocation(), ["backend"]),
    rebalance: new RateLimitedRebalance({ threshold: 1, maxConcurrent: 4 }),
    ...(immediate ? ({ awaitCoordinator: false } as object) : {}),
  },
  () => new RollEntity(),
);

/** One finished ask: when it started (ms since the load began), how long it took, and its error's name if any. */
interface AskRecord {
  readonly phase: string;
  readonly latencyMs: number;
  readonly error: string | null;
}

let load: {
  active: boolean;
  phase: string;
  records: AskRecord[];
  loops: Promise<void>[];
  tellsSent: number;
  tellsRefused: number;
  tellSeq: Map<string, number>;
  collector: SeenCollector;
  moves: number[];
  lastOwners: (string | null)[];
  /** Each shard's owners in order (labels), for MOVIE_ROLLING_DEBUG. */
  history: string[][];
  coordinatorChanges: number;
  lastAuthor: string | null;
  timers: ReturnType<typeof setInterval>[];
} | null = null;
let collectorRef: ReturnType<typeof system.spawn<unknown>> | null = null;

async function askLoop(entities: number): Promise<void> {
  let seq = 0;
  while (load?.active) {
    const id = `e-${Math.floor(Math.random() * entities)}`;
    const started = performance.now();
    const phase = load.phase;
    let error: string | null = null;
    try {
      await sharding.entityRefFor(counters, id).ask(new Ping(++seq), Pong, 3_000);
    } catch (e) {
      // A refusal on another node arrives as RemoteAskError; name the remote class too (NoShardOwnerError there).
      error = e instanceof RemoteAskError ? `${e.remoteClass} (remote)` : e instanceof Error ? e.name : "non-Error";
    }
    load.records.push({ phase, latencyMs: performance.now() - started, error });
    // A refused ask can settle without ever leaving the microtask queue; retrying at once would starve the event
    // loop (no socket, timer or IPC would run again). A caller retries after 10 ms, so each failure is one attempt.
    if (error !== null) await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Samples the frontend's plan: an owner change of a shard is one move; a new plan author one coordinator change. */
function sample(): void {
  if (load === null) return;
  const view = sharding.inspect(counters);
  for (let shard = 0; shard < 64; shard++) {
    const owner: UniqueAddress | undefined = view.allocations.get(shard);
    const key = owner?.toString() ?? null;
    const last = load.lastOwners[shard];
    if (last !== undefined && last !== null && key !== null && key !== last) load.moves[shard]!++;
    if (key !== null && key !== last) load.history[shard]!.push(`${key.slice(-6)}@${view.generation}`);
    if (key !== null) load.lastOwners[shard] = key;
  }
  const author = view.planAuthor?.toString() ?? null;
  if (author !== null && load.lastAuthor !== null && author !== load.lastAuthor) load.coordinatorChanges++;
  if (author !== null) load.lastAuthor = author;
}

function shardsPerOwner(allocations: ReadonlyMap<number, UniqueAddress>): number[] {
  const counts = new Map<string, number>();
  for (const owner of allocations.values()) counts.set(owner.toString(), (counts.get(owner.toString()) ?? 0) + 1);
  return [...counts.values()];
}

function status(): Record<string, unknown> {
  const snapshot = cluster.snapshot();
  const view = sharding.inspect(counters);
  return {
    type: "status",
    label,
    up: snapshot.members.filter((m) => m.status === "Up").length,
    members: snapshot.members.length,
    converged: snapshot.converged && snapshot.unreachable.length === 0,
    coordinator: view.coordinator?.toString() ?? null,
    allocated: view.allocations.size,
    // Shards per owner, to tell when the plan is balanced.
    shardsPerOwner: shardsPerOwner(view.allocations),
    handoffs: view.handoffs.length,
  };
}

process.on("message", async (command: Command) => {
  try {
    switch (command.type) {
      case "status":
        reply(command, status());
        break;
      case "start-load": {
        const collector = new SeenCollector();
        collectorRef = system.spawn<unknown>(() => collector, "seen");
        load = {
          active: true,
          phase: "steady",
          records: [],
          loops: [],
          tellsSent: 0,
          tellsRefused: 0,
          tellSeq: new Map(),
          collector,
          moves: new Array(64).fill(0),
          lastOwners: new Array(64).fill(null),
          history: Array.from({ length: 64 }, () => []),
          coordinatorChanges: 0,
          lastAuthor: null,
          timers: [],
        };
        for (let i = 0; i < command.inFlight; i++) load.loops.push(askLoop(command.entities));
        // Tells in rounds of 10 ms, each to the next entity in turn, numbered per entity.
        let next = 0;
        const perRound = Math.max(1, Math.round(command.tellsPerSecond / 100));
        load.timers.push(
          setInterval(() => {
            if (load === null || !load.active) return;
            for (let i = 0; i < perRound; i++) {
              const id = `e-${next++ % command.entities}`;
              const seq = (load.tellSeq.get(id) ?? 0) + 1;
              load.tellSeq.set(id, seq);
              // A tell the caller's node refuses at once (no converged coordinator and the wait turned off or full)
              // throws; it is counted as refused, not as lost: only an accepted tell must arrive.
              try {
                sharding.entityRefFor(counters, id).tell(new Work(id, seq), collectorRef);
                load.tellsSent++;
              } catch {
                load.tellsRefused++;
              }
            }
          }, 10),
          setInterval(sample, 20),
        );
        sample();
        reply(command, { type: "load-started" });
        break;
      }
      case "phase":
        if (load !== null) {
          load.phase = command.name;
          // Moves are counted from the roll on: placing shards before it (while backends joined) is not the roll's.
          if (command.name === "roll") {
            load.moves.fill(0);
            for (const h of load.history) h.splice(0, h.length - 1);
          }
        }
        reply(command, { type: "phase" });
        break;
      case "stop-load": {
        if (load === null) throw new Error("no load is running");
        load.active = false;
        for (const timer of load.timers) clearInterval(timer);
        await Promise.all(load.loops);
        // Receipts of the last tells are still on their way: wait until every one arrived or 5 s passed.
        const deadline = performance.now() + 5_000;
        while (load.collector.received < load.tellsSent && performance.now() < deadline) {
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
        sample();
        const phases: Record<string, { latencies: number[]; failed: Record<string, number> }> = {};
        for (const r of load.records) {
          const p = (phases[r.phase] ??= { latencies: [], failed: {} });
          if (r.error === null) p.latencies.push(r.latencyMs);
          else p.failed[r.error] = (p.failed[r.error] ?? 0) + 1;
        }
        reply(command, {
          type: "load-stopped",
          phases,
          tells: {
            sent: load.tellsSent,
            refused: load.tellsRefused,
            received: load.collector.received,
            outOfOrder: load.collector.outOfOrder,
            duplicates: load.collector.duplicates,
          },
          moves: load.moves,
          ...(process.env.MOVIE_ROLLING_DEBUG === "1" ? { history: load.history } : {}),
          coordinatorChanges: load.coordinatorChanges,
          stats: sharding.stats,
        });
        break;
      }
      case "leave":
        await cluster.leave();
        reply(command, { type: "left" });
        break;
      case "shutdown":
        await system.terminate();
        process.exit(0);
    }
  } catch (error) {
    reply(command, { error: error instanceof Error ? `${error.name}: ${error.message}` : "unknown failure" });
  }
});

process.send?.({ id: 0, type: "ready", node: self.toString(), hostPort: self.address.hostPort });
