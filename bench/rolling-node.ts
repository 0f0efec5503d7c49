// One node of the rolling-restart benchmark (bench/rolling.ts starts it as a child process and drives it over IPC).
// Usage: node --import tsx bench/rolling-node.ts <label> <frontend|backend> <port> <seedHostPort|self>
// Backends host the entities (RoleAwareAllocation); the frontend hosts none and runs the load: asks and numbered
// tells to a few hundred entities, and a timeline of what it sees (membership, coordinator, plan) every few ms.
import { AbstractBehavior, type ActorContext, ActorSystem } from "../src/actor/index.ts";
import "../src/cluster/index.ts";
import { MessageRegistry } from "../src/remote/index.ts";
import {
  ClusterSharding,
  electCoordinator,
  LeastLoadedAllocation,
  NewestVersionAllocation,
  RateLimitedRebalance,
  RoleAwareAllocation,
  type ShardedEntityType,
  type ShardingSettingsOptions,
  VersionAwareRebalance,
} from "../src/sharding/index.ts";
import { clock } from "./support/raw-frames.ts";

abstract class RollCommand {}
/** An ask: the entity answers `Pong(seq)`. */
class Ping extends RollCommand {
  constructor(readonly seq: number) {
    super();
  }
}
/** A numbered tell from the frontend; the entity acknowledges it to the sender with `TellAck`. */
class Numbered extends RollCommand {
  constructor(
    readonly entity: number,
    readonly seq: number,
  ) {
    super();
  }
}
class Pong {
  constructor(readonly seq: number) {}
}
class TellAck {
  constructor(
    readonly entity: number,
    readonly seq: number,
  ) {}
}
MessageRegistry.register(Ping, { name: "bench.rolling.ping", fields: { seq: "number" } });
MessageRegistry.register(Numbered, { name: "bench.rolling.numbered", fields: { entity: "number", seq: "number" } });
MessageRegistry.register(Pong, { name: "bench.rolling.pong", fields: { seq: "number" } });
MessageRegistry.register(TellAck, { name: "bench.rolling.tellack", fields: { entity: "number", seq: "number" } });

class RollEntity extends AbstractBehavior<RollCommand> {
  receive(message: RollCommand, ctx: ActorContext<RollCommand>): void {
    if (message instanceof Ping) ctx.sender?.tell(new Pong(message.seq));
    else if (message instanceof Numbered) ctx.sender?.tell(new TellAck(message.entity, message.seq));
  }
}

/** Numbered tells as the entities acknowledged them: per entity the highest seq seen, order breaks, duplicates. */
class TellLedger extends AbstractBehavior<unknown> {
  readonly highest: number[];
  readonly received: Set<number>[];
  outOfOrder = 0;
  duplicates = 0;
  constructor(entities: number) {
    super();
    this.highest = new Array<number>(entities).fill(0);
    this.received = Array.from({ length: entities }, () => new Set<number>());
  }
  receive(message: unknown): void {
    if (!(message instanceof TellAck)) return;
    const seen = this.received[message.entity];
    if (seen === undefined) return;
    if (seen.has(message.seq)) this.duplicates++;
    seen.add(message.seq);
    if (message.seq < this.highest[message.entity]!) this.outOfOrder++;
    else this.highest[message.entity] = message.seq;
  }
}

type Command = { id: number; type: string; [field: string]: unknown };

const [label = "node", role = "backend", portText = "0", seed = "self"] = process.argv.slice(2);
const system = ActorSystem.create("roll");
const remoting = await system.enableRemoting({ host: "127.0.0.1", port: Number(portText) });
const self = remoting.selfAddress;
const cluster = await system.enableCluster({
  seedNodes: [seed === "self" ? self.address.hostPort : seed],
  roles: [role],
  // ROLL_APP_VERSION: the old backends run "1", their replacements "2" (and the frontend "1") when versions are on.
  ...(process.env.ROLL_APP_VERSION === undefined ? {} : { appVersion: process.env.ROLL_APP_VERSION }),
  gossipInterval: 200,
  failureDetector: { heartbeatInterval: 200, heartbeatTimeout: 3_000 },
});
const sharding = ClusterSharding.get(system);
const shardCount = Number(process.env.ROLL_SHARDS ?? 64);
const backendsOnly = new RoleAwareAllocation(new LeastLoadedAllocation(), ["backend"]);
const versions = process.env.ROLL_VERSIONS === "1";
const settings: ShardingSettingsOptions = {
  shardCount,
  // ROLL_VERSIONS=1: rolling-update aware placement (each shard moves once, onto the replacement of its owner).
  allocation: versions ? new NewestVersionAllocation(backendsOnly) : backendsOnly,
  rebalance: versions ? new VersionAwareRebalance(new RateLimitedRebalance()) : new RateLimitedRebalance(),
  // ROLL_WAIT=fail measures the immediate failure (the earlier behaviour) beside the wait.
  awaitCoordinator: process.env.ROLL_WAIT !== "fail",
};
const rollType: ShardedEntityType<RollCommand> = sharding.init("Roll", RollCommand, settings, () => new RollEntity());

// ---------------------------------------------------------------------------------------------------------------
// The timeline: every change this node sees, stamped with this node's clock (the driver's marks use it too).

interface TimelineEvent {
  t: number;
  what: string;
  detail?: string;
}
const timeline: TimelineEvent[] = [];
const note = (what: string, detail?: string): void => {
  timeline.push({ t: clock.now(), what, ...(detail === undefined ? {} : { detail }) });
};
let lastMembers = "";
let lastConverged: boolean | null = null;
let lastCoordinator: string | null | undefined;
let lastAuthored: boolean | null = null;
let lastGeneration = 0;
let previousPlan = new Map<number, string>();
const movesPerShard = new Array<number>(shardCount).fill(0);
let probeId = "probe";

function observe(): void {
  const snap = cluster.snapshot();
  const members = snap.members
    .map((m) => `${m.uniqueAddress.address.port}:${m.status}`)
    .sort()
    .join(" ");
  if (members !== lastMembers) note("members", members);
  lastMembers = members;
  if (snap.converged !== lastConverged) note(snap.converged ? "converged" : "diverged", `${snap.unreachable.length}`);
  lastConverged = snap.converged;
  const coordinator = electCoordinator(snap)?.toString() ?? null;
  if (coordinator !== lastCoordinator) note("coordinator", coordinator ?? "none");
  lastCoordinator = coordinator;
  // ownerFor is null while the plan this node holds is not the current coordinator's (the new coordinator is
  // collecting snapshots, or its first plan has not reached us).
  const authored = sharding.ownerFor(rollType, probeId) !== null;
  if (authored !== lastAuthored) note(authored ? "plan" : "no-plan");
  lastAuthored = authored;
  const generation = sharding.planGeneration(rollType);
  if (generation !== lastGeneration) {
    const plan = sharding.allocations(rollType);
    let moved = 0;
    for (const [shard, owner] of plan) {
      const text = owner.toString();
      const before = previousPlan.get(shard);
      if (before !== undefined && before !== text) {
        movesPerShard[shard]!++;
        moved++;
      }
    }
    const next = new Map<number, string>();
    for (const [shard, owner] of plan) next.set(shard, owner.toString());
    previousPlan = next;
    note("generation", `${generation} moved=${moved} planned=${plan.size}`);
    lastGeneration = generation;
  }
}
const observer = setInterval(observe, 5);
cluster.subscribe(() => observe());

// ---------------------------------------------------------------------------------------------------------------
// The load (frontend): askers and a numbered-tell loop.

interface AskRecord {
  t: number;
  ms: number;
  error: string | null;
}
let load: {
  active: boolean;
  asks: AskRecord[];
  tellsAccepted: number;
  tellsRefused: Map<string, number>;
  sentPerEntity: number[];
  ledger: TellLedger;
  loops: Promise<void>[];
} | null = null;

function errorName(error: unknown): string {
  if (!(error instanceof Error)) return "non-Error";
  const remote = (error as { remoteClass?: unknown }).remoteClass;
  return typeof remote === "string" ? `${error.name}(${remote})` : error.name;
}

async function askLoop(entities: number, timeoutMs: number): Promise<void> {
  let seq = 0;
  while (load?.active === true) {
    const entity = Math.floor(Math.random() * entities);
    const t0 = clock.now();
    try {
      await sharding.entityRefFor(rollType, `e-${entity}`).ask(new Ping(seq++), Pong, timeoutMs);
      load.asks.push({ t: t0, ms: clock.now() - t0, error: null });
    } catch (error) {
      load?.asks.push({ t: t0, ms: clock.now() - t0, error: errorName(error) });
      // A failed ask is not retried (that is what the benchmark counts); pause so a fail-fast loop does not spin.
      await new Promise<void>((r) => clock.scheduleOnce(5, r));
    }
  }
}

async function tellLoop(entities: number, everyMs: number, ledgerRef: ReturnType<typeof system.spawn>): Promise<void> {
  let next = 0;
  while (load?.active === true) {
    const entity = next++ % entities;
    const seq = load.sentPerEntity[entity]! + 1;
    try {
      sharding.entityRefFor(rollType, `e-${entity}`).tell(new Numbered(entity, seq), ledgerRef);
      load.sentPerEntity[entity] = seq;
      load.tellsAccepted++;
    } catch (error) {
      const name = errorName(error);
      load.tellsRefused.set(name, (load.tellsRefused.get(name) ?? 0) + 1);
    }
    await new Promise<void>((r) => clock.scheduleOnce(everyMs, r));
  }
}

function status(): object {
  const snap = cluster.snapshot();
  const owners: Record<string, number> = {};
  for (const owner of sharding.allocations(rollType).values()) {
    owners[owner.toString()] = (owners[owner.toString()] ?? 0) + 1;
  }
  return {
    node: self.toString(),
    coordinator: electCoordinator(snap)?.toString() ?? null,
    converged: snap.converged,
    members: snap.members.map((m) => ({ node: m.uniqueAddress.toString(), status: m.status })),
    owners,
    planned: Object.values(owners).reduce((a, b) => a + b, 0),
    authored: sharding.ownerFor(rollType, probeId) !== null,
    handoffs: sharding.handoffsInProgress,
    stats: sharding.stats,
  };
}

async function handle(command: Command): Promise<object> {
  switch (command.type) {
    case "status":
      return status();
    case "mark":
      note("mark", String(command.label));
      // Shard moves are counted from the start of the roll (the cluster's own start moves shards too).
      if (command.label === "roll") movesPerShard.fill(0);
      return { t: clock.now() };
    case "startLoad": {
      const entities = Number(command.entities);
      probeId = "e-0";
      const ledger = new TellLedger(entities);
      const ledgerRef = system.spawn(ledger, "ledger");
      load = {
        active: true,
        asks: [],
        tellsAccepted: 0,
        tellsRefused: new Map(),
        sentPerEntity: new Array<number>(entities).fill(0),
        ledger,
        loops: [],
      };
      for (let i = 0; i < Number(command.askers); i++) {
        load.loops.push(askLoop(entities, Number(command.askTimeoutMs)));
      }
      load.loops.push(tellLoop(entities, Number(command.tellEveryMs), ledgerRef));
      return {};
    }
    case "stopLoad": {
      if (load === null) throw new Error("no load running");
      load.active = false;
      await Promise.all(load.loops);
      // Tells still travelling: wait until every accepted one is acknowledged or the drain time passes.
      const deadline = clock.now() + Number(command.drainMs);
      const acknowledged = (): number => load!.ledger.received.reduce((sum, s) => sum + s.size, 0);
      while (acknowledged() < load.tellsAccepted && clock.now() < deadline) {
        await new Promise<void>((r) => clock.scheduleOnce(20, r));
      }
      let lost = 0;
      for (let e = 0; e < load.sentPerEntity.length; e++) {
        const seen = load.ledger.received[e]!;
        for (let s = 1; s <= load.sentPerEntity[e]!; s++) if (!seen.has(s)) lost++;
      }
      return {
        asks: load.asks,
        tellsAccepted: load.tellsAccepted,
        tellsRefused: Object.fromEntries(load.tellsRefused),
        tellsLost: lost,
        tellsOutOfOrder: load.ledger.outOfOrder,
        tellsDuplicated: load.ledger.duplicates,
      };
    }
    case "timeline":
      return { timeline, movesPerShard };
    case "leave": {
      const t0 = clock.now();
      await cluster.leave();
      return { ms: clock.now() - t0 };
    }
    case "shutdown": {
      clearInterval(observer);
      await system.terminate();
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

process.send?.({ id: 0, node: self.toString(), hostPort: self.address.hostPort } satisfies {
  id: number;
  node: string;
  hostPort: string;
});
