// One demo node, run as a child process by examples/demo.ts and driven over IPC.
// Usage: node --import tsx examples/sharding/node.ts <label> <role> <seedHostPort|self>
// Every node runs an actor system named "shop": seed nodes are host:port of the same system name.
import { ActorSystem } from "../../src/index.ts";
import "../../src/cluster/index.ts";
import {
  ClusterSharding,
  RateLimitedRebalance,
  RendezvousAllocation,
  RoleAwareAllocation,
} from "../../src/sharding/index.ts";
import {
  DeliverOrder,
  DeliveryAck,
  DeliveryLedger,
  GetOrder,
  OrderBehavior,
  OrderCommand,
  OrderReply,
} from "./orders.ts";

type Command =
  | { type: "stream"; orders: number; pauseMs: number }
  | { type: "stop-stream" }
  | { type: "status" }
  | { type: "ledger" }
  | { type: "verify" }
  | { type: "leave" }
  | { type: "shutdown" };

const [label = "node", role = "backend", seed = "self"] = process.argv.slice(2);
const send = (message: object): void => {
  process.send?.(message);
};

const system = ActorSystem.create("shop");
const remoting = await system.enableRemoting({ host: "127.0.0.1", port: 0 });
const self = remoting.selfAddress;
const cluster = await system.enableCluster({
  seedNodes: [seed === "self" ? self.address.hostPort : seed],
  roles: [role],
  gossipInterval: 200,
  failureDetector: { heartbeatInterval: 200, heartbeatTimeout: 3_000 },
});
const ledger = new DeliveryLedger();
const sharding = ClusterSharding.get(system);
const orders = sharding.init(
  "Order",
  OrderCommand,
  {
    shardCount: 64,
    allocation: new RoleAwareAllocation(new RendezvousAllocation(), ["backend"]),
    rebalance: new RateLimitedRebalance({ threshold: 1, maxConcurrent: 4 }),
    idleTimeout: 120_000,
  },
  (entityId) => new OrderBehavior(entityId, ledger),
);

/**
 * The frontend's order stream: one sender loop per order, each waiting for the acknowledgement of parcel n before it
 * sends n + 1. A delivery that fails (routing fails closed while membership converges, or an ask times out) is
 * retried with the same number — delivery is at-most-once, so the caller retries and the entity deduplicates.
 */
let streaming: {
  active: boolean;
  acked: Map<string, number>;
  delivered: number;
  retries: number;
  loops: Promise<void>[];
} | null = null;

async function orderLoop(orderId: string, pauseMs: number): Promise<void> {
  const ref = sharding.entityRefFor(orders, orderId);
  while (streaming?.active === true) {
    const seq = (streaming.acked.get(orderId) ?? 0) + 1;
    try {
      await ref.ask(new DeliverOrder(`parcel-${seq}`, seq), DeliveryAck, 2_000);
      streaming.acked.set(orderId, seq);
      streaming.delivered++;
    } catch {
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

function status(): object {
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
    delivered: ledger.delivered,
    stream: streaming === null ? null : { delivered: streaming.delivered, retries: streaming.retries },
  };
}

process.on("message", async (command: Command) => {
  switch (command.type) {
    case "stream":
      streaming = { active: true, acked: new Map(), delivered: 0, retries: 0, loops: [] };
      for (let i = 0; i < command.orders; i++) streaming.loops.push(orderLoop(`order-${i}`, command.pauseMs));
      break;
    case "stop-stream":
      if (streaming !== null) {
        streaming.active = false;
        await Promise.all(streaming.loops);
      }
      send({
        type: "stream-stopped",
        delivered: streaming?.delivered ?? 0,
        retries: streaming?.retries ?? 0,
        acked: Object.fromEntries(streaming?.acked ?? []),
      });
      break;
    case "status":
      send(status());
      break;
    case "ledger":
      send({ type: "ledger", ledger: ledger.toJSON() });
      break;
    case "verify": {
      // Ask every order for its parcels through the sharded ref: the reply says which node hosts it now.
      let asked = 0;
      let failed = 0;
      const hosts: Record<string, number> = {};
      for (const orderId of streaming?.acked.keys() ?? []) {
        try {
          const reply = await sharding.entityRefFor(orders, orderId).ask(new GetOrder(), OrderReply, 3_000);
          hosts[reply.host] = (hosts[reply.host] ?? 0) + 1;
          asked++;
        } catch {
          failed++;
        }
      }
      send({ type: "verified", asked, failed, hosts });
      break;
    }
    case "leave":
      await cluster.leave();
      send({ type: "left", delivered: ledger.delivered, ledger: ledger.toJSON() });
      break;
    case "shutdown":
      await system.terminate();
      process.exit(0);
  }
});

send({ type: "ready", node: self.toString(), hostPort: self.address.hostPort });
