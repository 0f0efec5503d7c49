// One demo node, run as a child process by examples/sharding-demo.ts and driven over IPC.
// Usage: node --import tsx examples/sharding/node.ts <label> <role> <seedHostPort|self>
// with MOVIE_DEMO_PG_URL and MOVIE_DEMO_PG_SCHEMA set (the demo's database and its per-run schema).
// Every node runs an actor system named "shop": seed nodes are host:port of the same system name.
import { ActorSystem, ConsoleLogger, type Logger } from "../../src/index.ts";
import "../../src/cluster/index.ts";
import { startManagement } from "../../src/management/index.ts";
import { Database, deliverThroughSharding, EventSourcing, OutboxDispatcher } from "../../src/persistence/index.ts";
import {
  ClusterSharding,
  RateLimitedRebalance,
  RendezvousAllocation,
  RoleAwareAllocation,
} from "../../src/sharding/index.ts";
import "../../src/sharding/persistent/index.ts"; // adds sharding.initEventSourced
import {
  DeliverOrder,
  DeliveryAck,
  demoSkus,
  GetOrder,
  GetStock,
  OrderBehavior,
  OrderCommand,
  OrderReply,
  ParcelAdded,
  ReserveStock,
  StockBehavior,
  StockCommand,
  StockReply,
  StockReserved,
} from "./orders.ts";

/**
 * What the demo sends (examples/support/node-process.ts): a request carries an `id` that its one reply echoes. A
 * stream is told, without an id, and runs until stop-stream; shutdown is not answered, the node exits.
 */
type Command = { id?: number } & (
  | { type: "stop-stream" }
  | { type: "status" }
  | { type: "verify" }
  | { type: "leave" }
  | { type: "stream"; orders: number; pauseMs: number }
  | { type: "shutdown" }
);
type Reply = { type: string; [field: string]: unknown };

const [label = "node", role = "backend", seed = "self"] = process.argv.slice(2);
const reply = (command: Command, message: Reply): void => {
  process.send?.({ id: command.id, ...message });
};
// A node never outlives the demo that drives it (a crashed or interrupted demo closes the IPC channel).
process.on("disconnect", () => process.exit(1));

/**
 * The console logger, except that a handoff step that must be retried (waiting for a lease to free up, or sent while
 * the coordinator changed) is counted rather than printed: it is expected while shards move and is retried every few
 * hundred ms, so printing it would bury the demo's own lines.
 */
let handoffWaits = 0;
const console_ = new ConsoleLogger();
const logger: Logger = {
  debug: (context, message) => console_.debug(context, message),
  info: (context, message) => console_.info(context, message),
  warn: (context, message) => {
    if (message.startsWith("sharding handoff step failed") || message.startsWith("handoff could not complete"))
      handoffWaits++;
    else console_.warn(context, message);
  },
  error: (context, message) => console_.error(context, message),
};
const system = ActorSystem.create("shop", { logger });
// Every node (the frontend too) configures the same PostgreSQL: persistent sharding checks the backend on init.
const database = Database.get(system);
await database.configure({
  backend: "postgres",
  connectionUri: process.env.MOVIE_DEMO_PG_URL!,
  schema: process.env.MOVIE_DEMO_PG_SCHEMA!,
  poolSize: 4,
});
database.codec.register(ParcelAdded, { manifest: "demo.ParcelAdded" });
// The outbox stores ReserveStock with this codec; the dispatcher decodes it with the same one.
database.codec.register(StockReserved, { manifest: "demo.StockReserved" });
database.codec.register(ReserveStock, { manifest: "demo.ReserveStock" });
const remoting = await system.enableRemoting({ host: "127.0.0.1", port: 0 });
const self = remoting.selfAddress;
const cluster = await system.enableCluster({
  seedNodes: [seed === "self" ? self.address.hostPort : seed],
  roles: [role],
  gossipInterval: 200,
  failureDetector: { heartbeatInterval: 200, heartbeatTimeout: 3_000 },
});
const orderType = EventSourcing.get(system).registerEntity(OrderBehavior, OrderCommand, () => new OrderBehavior(), {
  name: "Order",
});
const sharding = ClusterSharding.get(system);
const orders = sharding.initEventSourced(orderType, {
  shardCount: 64,
  allocation: new RoleAwareAllocation(new RendezvousAllocation(), ["backend"]),
  rebalance: new RateLimitedRebalance({ threshold: 1, maxConcurrent: 4 }),
  idleTimeout: 120_000,
  // Shorter than the 10 s default so that a lease the leaving node lets expire frees up quickly in the demo.
  leaseDuration: 3_000,
  leaseRenewInterval: 1_000,
});

const stockType = EventSourcing.get(system).registerEntity(StockBehavior, StockCommand, () => new StockBehavior(), {
  name: "Stock",
});
const stock = sharding.initEventSourced(stockType, {
  shardCount: 16,
  allocation: new RoleAwareAllocation(new RendezvousAllocation(), ["backend"]),
  rebalance: new RateLimitedRebalance({ threshold: 1, maxConcurrent: 4 }),
  idleTimeout: 120_000,
  leaseDuration: 3_000,
  leaseRenewInterval: 1_000,
});

/**
 * This node's outbox dispatcher: claims the undelivered ReserveStock messages written by the Order shards this node
 * holds (under their shard leases: after a handoff the new owner's dispatcher takes them over), asks the Stock entity
 * through sharding, and marks a message delivered once Stock answered; a failure (routing refused while the Stock
 * shard hands off, an ask timed out) is retried with backoff.
 */
const dispatcher = new OutboxDispatcher({
  store: database.store,
  codec: database.codec,
  deliverToEntity: deliverThroughSharding(sharding, StockReply, 3_000),
  leases: () => sharding.heldShardLeases(),
  owner: label,
  leaseMs: 6_000,
  deliveryTimeoutMs: 4_000,
  pollIntervalMs: 100,
  retry: { firstBackoffMs: 100, maxBackoffMs: 1_000, maxAttempts: 30 },
});
dispatcher.start();

/**
 * The frontend's order stream: one sender loop per order, each waiting for the acknowledgement of parcel n before it
 * sends n + 1. A delivery that fails (routing fails closed while membership converges, or an ask times out) is
 * retried with the same number — delivery is at-most-once, so the caller retries and the entity deduplicates.
 */
let streaming: {
  active: boolean;
  acked: Map<string, number>;
  /** Orders whose last attempt failed and was not retried successfully: that parcel may or may not be committed. */
  unresolved: Set<string>;
  delivered: number;
  retries: number;
  loops: Promise<void>[];
} | null = null;

/** Asks per order when reading every order back at the end. */
const verifyAttempts = 5;

async function orderLoop(orderId: string, pauseMs: number): Promise<void> {
  const ref = sharding.entityRefFor(orders, orderId);
  let finalRetries = 0;
  // After the stop, a failed parcel is still retried a few times so that "acknowledged" and "persisted" match.
  while (streaming !== null && (streaming.active || (streaming.unresolved.has(orderId) && finalRetries++ < 5))) {
    const seq = (streaming.acked.get(orderId) ?? 0) + 1;
    try {
      await ref.ask(new DeliverOrder(`parcel-${seq}`, seq), DeliveryAck, 3_000);
      streaming.acked.set(orderId, seq);
      streaming.unresolved.delete(orderId);
      streaming.delivered++;
    } catch {
      streaming.unresolved.add(orderId);
      streaming.retries++;
    }
    await new Promise((resolve) => setTimeout(resolve, pauseMs));
  }
}

/** The sharding coordinator as every node computes it: the lowest Up address once membership converged. */
function coordinatorOf(snapshot: ReturnType<typeof cluster.snapshot>): string | null {
  if (!snapshot.converged || snapshot.unreachable.length > 0) return null;
  const up = snapshot.members.filter((m) => m.status === "Up").map((m) => m.uniqueAddress.toString());
  return up.sort()[0] ?? null;
}

function status(): Reply {
  const shardsPerNode: Record<string, number> = {};
  for (const owner of sharding.allocations(orders).values()) {
    shardsPerNode[owner.toString()] = (shardsPerNode[owner.toString()] ?? 0) + 1;
  }
  const snapshot = cluster.snapshot();
  return {
    type: "status",
    node: self.toString(),
    label,
    role,
    coordinator: coordinatorOf(snapshot),
    members: snapshot.members.map((m) => `${m.uniqueAddress.address.system}:${m.status}`),
    converged: snapshot.converged,
    shardsPerNode,
    entities: sharding.localEntityCount,
    stats: sharding.stats,
    handoffWaits,
    stream: streaming === null ? null : { delivered: streaming.delivered, retries: streaming.retries },
  };
}

process.on("message", async (command: Command) => {
  switch (command.type) {
    case "stream":
      streaming = { active: true, acked: new Map(), unresolved: new Set(), delivered: 0, retries: 0, loops: [] };
      for (let i = 0; i < command.orders; i++) streaming.loops.push(orderLoop(`order-${i}`, command.pauseMs));
      break;
    case "stop-stream":
      if (streaming !== null) {
        streaming.active = false;
        await Promise.all(streaming.loops);
      }
      reply(command, {
        type: "stream-stopped",
        delivered: streaming?.delivered ?? 0,
        retries: streaming?.retries ?? 0,
        acked: Object.fromEntries(streaming?.acked ?? []),
        unresolved: [...(streaming?.unresolved ?? [])],
      });
      break;
    case "status":
      reply(command, status());
      break;
    case "verify": {
      // Ask every order for its parcels through the sharded ref: the reply is its persisted state and its host.
      // A read is safe to repeat: an ask refused while routing fails closed (membership settling after the leave) or
      // timed out on a loaded machine is asked again, a few times, as any client of a fail-closed service would.
      const parcels: Record<string, string[]> = {};
      const failed: string[] = [];
      const errors: string[] = [];
      const hosts: Record<string, number> = {};
      let retried = 0;
      for (const orderId of streaming?.acked.keys() ?? []) {
        for (let attempt = 1; ; attempt++) {
          try {
            const reply = await sharding.entityRefFor(orders, orderId).ask(new GetOrder(), OrderReply, 5_000);
            hosts[reply.host] = (hosts[reply.host] ?? 0) + 1;
            parcels[orderId] = reply.parcels;
            break;
          } catch (error) {
            if (attempt === verifyAttempts) {
              failed.push(orderId);
              errors.push(`${orderId}: ${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}`);
              break;
            }
            retried++;
            await new Promise((resolve) => setTimeout(resolve, 200));
          }
        }
      }
      // Every parcel's ReserveStock committed with it; wait until the dispatchers delivered them all, then ask every
      // Stock for its reservations (each must hold each of its parcels once).
      const store = database.store;
      const drainDeadline = Date.now() + 30_000;
      let outbox = await store.outboxCounts();
      while (outbox.pending > 0 && Date.now() < drainDeadline) {
        await new Promise((resolve) => setTimeout(resolve, 200));
        outbox = await store.outboxCounts();
      }
      const reservations: Record<string, string[]> = {};
      for (let i = 0; i < demoSkus; i++) {
        const sku = `sku-${i}`;
        for (let attempt = 1; ; attempt++) {
          try {
            reservations[sku] = (
              await sharding.entityRefFor(stock, sku).ask(new GetStock(), StockReply, 5_000)
            ).reservations;
            break;
          } catch (error) {
            if (attempt === verifyAttempts) {
              failed.push(sku);
              errors.push(`${sku}: ${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}`);
              break;
            }
            retried++;
            await new Promise((resolve) => setTimeout(resolve, 200));
          }
        }
      }
      reply(command, {
        type: "verified",
        parcels,
        failed,
        errors,
        retried,
        hosts,
        reservations,
        outbox,
        dispatcher: dispatcher.stats,
      });
      break;
    }
    case "leave": {
      // Coordinated shutdown, as on SIGTERM in a pod: leave (the shards hand off and the leases are released), wait
      // until removed, terminate; then the process exits.
      const report = await system.shutdown({ deadline: 30_000, reason: "demo leave" });
      reply(command, { type: "left", stats: sharding.stats, removed: report.removed });
      await management.close();
      process.exit(report.removed ? 0 : 1);
      break;
    }
    case "shutdown":
      await dispatcher.stop();
      await management.close();
      await system.terminate();
      process.exit(0);
  }
});

// The management endpoint (dashboard, HTTP API, metrics) on a free loopback port; read-only (no token).
const management = await startManagement(system, { port: 0 });
process.send?.({
  id: 0,
  type: "ready",
  node: self.toString(),
  hostPort: self.address.hostPort,
  managementUrl: management.url,
});
