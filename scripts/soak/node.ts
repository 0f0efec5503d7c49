// One soak node, forked by the harness (scripts/soak/harness.ts) and driven over IPC.
// Usage: node --import tsx scripts/soak/node.ts <slot> <incarnation> <role> <port> <seeds: host:port,... | self>
// Environment: MOVIE_SOAK_DIR (run directory), MOVIE_SOAK_PG_URL, MOVIE_SOAK_SCHEMA, MOVIE_SOAK_T0 (time origin),
// MOVIE_SOAK_DIAL_MAP (see dial-hook.ts). It runs the three soak entity types and, when told, client workers.
import "./dial-hook.ts";
import { join } from "node:path";
import { type Cluster, handleSigterm } from "../../src/cluster/index.ts";
import { ActorSystem, type Logger } from "../../src/index.ts";
import {
  Database,
  DurableState,
  deliverThroughSharding,
  EventSourcing,
  OutboxDispatcher,
} from "../../src/persistence/index.ts";
import {
  ClusterSharding,
  RateLimitedRebalance,
  RendezvousAllocation,
  RoleAwareAllocation,
} from "../../src/sharding/index.ts";
import { initDurableState, initEventSourced, initProjection } from "../../src/sharding/persistent/index.ts";
import { sinceMs } from "./clock.ts";
import {
  Appended,
  CounterBehavior,
  CounterCommand,
  CounterReply,
  ListBehavior,
  ListCommand,
  ListReply,
  MailboxBehavior,
  MailboxMessage,
  ReadCounter,
  ReadList,
  soakTallyType,
  Tallied,
  Tally,
  TallyAck,
  TallyBehavior,
} from "./entities.ts";
import { JsonlWriter } from "./jsonl.ts";
import { soakListProjection, soakProjectionSlices } from "./projection.ts";
import {
  soakCounterType,
  soakKeySpace,
  soakLeaseDurationMs,
  soakLeaseRenewIntervalMs,
  soakListType,
  soakShardCount,
} from "./settings.ts";
import { type KeySpace, runWorker } from "./workload.ts";

const [slot = "n0", incarnation = "0", role = "backend", portText = "0", seedsText = "self"] = process.argv.slice(2);
const dir = process.env.MOVIE_SOAK_DIR!;
const origin = BigInt(process.env.MOVIE_SOAK_T0!);
const now = () => sinceMs(origin);
const name = `${slot}.${incarnation}`;
const history = new JsonlWriter(join(dir, "nodes", `${name}.history.jsonl`));
const deliveries = new JsonlWriter(join(dir, "nodes", `${name}.deliveries.jsonl`));
const log = new JsonlWriter(join(dir, "nodes", `${name}.log.jsonl`));
process.on("disconnect", () => process.exit(1));

const line = (level: string) => (context: object, message: string) => {
  let text: string;
  try {
    text = JSON.stringify(context, (_k, v) => (v instanceof Error ? `${v.name}: ${v.message}` : v));
  } catch {
    text = "{}";
  }
  log.write({ time: now(), level, message, context: text.length > 2_000 ? text.slice(0, 2_000) : text });
};
const logger: Logger = { debug: () => undefined, info: line("info"), warn: line("warn"), error: line("error") };

const system = ActorSystem.create("soak", { logger });
const database = Database.get(system);
await database.configure({
  backend: "postgres",
  connectionUri: process.env.MOVIE_SOAK_PG_URL!,
  schema: process.env.MOVIE_SOAK_SCHEMA!,
  poolSize: 4,
});
database.codec.register(Appended, { manifest: "soak.Appended" });
database.codec.register(Tallied, { manifest: "soak.Tallied" });
database.codec.register(Tally, { manifest: "soak.Tally" });
const remoting = await system.enableRemoting({ host: "127.0.0.1", port: Number(portText) });
const self = remoting.selfAddress;
const seeds = seedsText === "self" ? [self.address.hostPort] : seedsText.split(",");
const cluster: Cluster = await system.enableCluster({
  seedNodes: seeds,
  roles: [role],
  gossipInterval: 200,
  failureDetector: { heartbeatInterval: 200, heartbeatTimeout: 3_000 },
});
// The leave fault sends SIGTERM: coordinated shutdown (leave, hand off, leases released, wait until removed, then
// terminate), what a pod gets from Kubernetes; the handler exits 0 when the node was removed in time, else 1.
let sigterm = false;
process.on("SIGTERM", () => {
  sigterm = true;
});
handleSigterm(system, { deadline: 30_000 });
// A node downed by its leader terminates its actor system (onDowned "terminate"); the process goes with it.
void system.whenTerminated.then(() => {
  if (sigterm) return;
  log.write({ time: now(), level: "info", message: "actor system terminated; exiting" });
  process.exit(0);
});

const sharding = ClusterSharding.get(system);
const common = {
  shardCount: soakShardCount,
  allocation: new RoleAwareAllocation(new RendezvousAllocation(), ["backend"]),
  rebalance: new RateLimitedRebalance({ threshold: 1, maxConcurrent: 4 }),
  idleTimeout: 60_000,
};
const persistent = { ...common, leaseDuration: soakLeaseDurationMs, leaseRenewInterval: soakLeaseRenewIntervalMs };
const listType = EventSourcing.get(system).registerEntity(ListBehavior, ListCommand, () => new ListBehavior(), {
  name: soakListType,
});
const counterType = DurableState.get(system).registerEntity(
  CounterBehavior,
  CounterCommand,
  () => new CounterBehavior(),
  { name: soakCounterType },
);
const lists = initEventSourced(sharding, listType, persistent);
const counters = initDurableState(sharding, counterType, persistent);
const tallyType = EventSourcing.get(system).registerEntity(TallyBehavior, Tally, () => new TallyBehavior(), {
  name: soakTallyType,
});
initEventSourced(sharding, tallyType, persistent);
// The projection workload: each slice owned by one backend at a time under its shard lease (scripts/soak/projection.ts).
initProjection(sharding, soakListProjection, {
  slices: soakProjectionSlices,
  allocation: common.allocation,
  rebalance: common.rebalance,
  leaseDuration: soakLeaseDurationMs,
  leaseRenewInterval: soakLeaseRenewIntervalMs,
  keepAliveInterval: 500,
});
// Every node dispatches the outbox rows of the shards it holds (claims follow shard ownership): claims never share a
// row, and the rows of a killed node's shards are claimed by their next owner under its newer lease epoch.
const dispatcher = new OutboxDispatcher({
  store: database.store,
  codec: database.codec,
  deliverToEntity: deliverThroughSharding(sharding, TallyAck, 3_000),
  leases: () => sharding.heldShardLeases(),
  owner: name,
  batchSize: 32,
  leaseMs: 6_000,
  retry: { maxAttempts: 1_000, firstBackoffMs: 100, maxBackoffMs: 2_000 },
  purge: false,
});
dispatcher.start();
void system.whenTerminated.then(() => dispatcher.stop());
const mailboxes = sharding.init("SoakMailbox", MailboxMessage, common, (entity) => {
  return new MailboxBehavior(entity, (d) => deliveries.write({ ...d, node: name, time: now() }));
});

type Command = { id?: number } & (
  | { type: "start-load"; workers: number; seed: number; thinkMs: number; retryBudgetMs: number; keys?: KeySpace }
  | { type: "stop-load" }
  | { type: "status" }
  | { type: "down"; address: string }
  | { type: "read-final"; keys: KeySpace }
  | { type: "shutdown" }
);

const reply = (command: Command, message: object): void => {
  process.send?.({ id: command.id, ...message });
};
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

let load: { active: boolean; workers: Promise<number>[] } | null = null;

function status(): object {
  const s = cluster.snapshot();
  return {
    self: s.self.toString(),
    selfStatus: s.selfStatus,
    members: s.members.map((m) => ({ address: m.uniqueAddress.toString(), status: m.status })),
    unreachable: s.unreachable.map((u) => u.toString()),
    leader: s.leader?.toString() ?? null,
    converged: s.converged,
  };
}

/** Reads every key through its sharded ref, repeating a refused or timed-out read a few times. */
async function readFinal(keys: KeySpace): Promise<object> {
  const out: { lists: Record<string, string[]>; counters: Record<string, { count: number; ops: string[] }> } = {
    lists: {},
    counters: {},
  };
  const failed: string[] = [];
  const attempt = async <T>(what: string, read: () => Promise<T>): Promise<T | null> => {
    for (let i = 0; i < 20; i++) {
      try {
        return await read();
      } catch {
        await sleep(500);
      }
    }
    failed.push(what);
    return null;
  };
  for (const key of keys.lists) {
    const r = await attempt(key, () => sharding.entityRefFor(lists, key).ask(new ReadList(), ListReply, 5_000));
    if (r !== null) out.lists[key] = r.values;
  }
  for (const key of keys.counters) {
    const r = await attempt(key, () =>
      sharding.entityRefFor(counters, key).ask(new ReadCounter(true), CounterReply, 5_000),
    );
    if (r !== null) out.counters[key] = { count: r.count, ops: r.ops };
  }
  return { ...out, failed };
}

process.on("message", async (command: Command) => {
  try {
    switch (command.type) {
      case "start-load": {
        const keys = command.keys ?? soakKeySpace();
        const current = { active: true, workers: [] as Promise<number>[] };
        load = current;
        for (let w = 0; w < command.workers; w++) {
          current.workers.push(
            runWorker(
              {
                list: (key) => sharding.entityRefFor(lists, key),
                counter: (key) => sharding.entityRefFor(counters, key),
                mailbox: (key) => sharding.entityRefFor(mailboxes, key),
                record: (r) => history.write(r),
                now,
                sleep,
              },
              {
                process: `${name}/w${w}`,
                seed: command.seed + w,
                keys,
                thinkMs: command.thinkMs,
                askTimeoutMs: 3_000,
                retryBudgetMs: command.retryBudgetMs,
                active: () => current.active,
              },
            ),
          );
        }
        reply(command, { type: "load-started" });
        break;
      }
      case "stop-load": {
        const current = load;
        load = null;
        if (current !== null) current.active = false;
        const ops = current === null ? [] : await Promise.all(current.workers);
        reply(command, { type: "load-stopped", ops: ops.reduce((a, b) => a + b, 0) });
        break;
      }
      case "status":
        reply(command, status());
        break;
      case "down":
        reply(command, { type: "downed", accepted: cluster.down(command.address) });
        break;
      case "read-final":
        reply(command, await readFinal(command.keys));
        break;
      case "shutdown":
        await system.terminate();
        process.exit(0);
    }
  } catch (error) {
    reply(command, { error: error instanceof Error ? `${error.name}: ${error.message}` : "unknown error" });
  }
});

process.send?.({ id: 0, type: "ready", node: self.toString(), hostPort: self.address.hostPort });
