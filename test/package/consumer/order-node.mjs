// The seed's Order example as a consumer of the packed tarball writes it: plain JavaScript run by plain `node` (no
// TypeScript loader), one cluster node per OS process. `node order-node.mjs backend` starts the seed node, which hosts
// the orders, and prints {"ready":true,"port":...}; `node order-node.mjs frontend <seedPort>` joins it with role
// frontend (hosting nothing), delivers a parcel to order-42 through the sharded ref, asks for the order until the
// parcel is there, prints {"reply":...} and exits. The backend exits when its stdin closes.
import { AbstractBehavior, ActorSystem, AskTimeoutError } from "movie";
import { MessageRegistry } from "movie/remote";
import "movie/cluster";
import { ClusterSharding, NoShardOwnerError, RendezvousAllocation, RoleAwareAllocation } from "movie/sharding";

class OrderCommand {}
class DeliverOrder extends OrderCommand {
  constructor(parcel) {
    super();
    this.parcel = parcel;
  }
}
class GetOrder extends OrderCommand {}
class OrderReply {
  constructor(parcels, hostPid) {
    this.parcels = parcels;
    this.hostPid = hostPid;
  }
}
for (const c of [DeliverOrder, GetOrder, OrderReply]) MessageRegistry.register(c); // on every node

class OrderBehavior extends AbstractBehavior {
  parcels = [];
  receive(message, context) {
    if (message instanceof DeliverOrder) this.parcels.push(message.parcel);
    else if (message instanceof GetOrder) context.sender?.tell(new OrderReply([...this.parcels], process.pid));
  }
}

const [role, seedPortArgument] = process.argv.slice(2);
const system = ActorSystem.create("shop");
const remoting = await system.enableRemoting({ host: "127.0.0.1", port: 0 });
const port = remoting.selfAddress.address.port;
await system.enableCluster({
  seedNodes: [`127.0.0.1:${role === "backend" ? port : seedPortArgument}`],
  roles: [role],
});
const sharding = ClusterSharding.get(system);
const orders = sharding.init(
  "Order",
  OrderCommand,
  { shardCount: 64, allocation: new RoleAwareAllocation(new RendezvousAllocation(), ["backend"]) },
  () => new OrderBehavior(),
);

if (role === "backend") {
  process.stdout.write(`${JSON.stringify({ ready: true, port, pid: process.pid })}\n`);
  process.stdin.on("end", () => void system.terminate().then(() => process.exit(0)));
  process.stdin.resume();
} else {
  const order = sharding.entityRefFor(orders, "order-42");
  const deadline = Date.now() + 30_000;
  const pause = () => new Promise((resolve) => setTimeout(resolve, 100));
  // Until membership converged and the coordinator placed the shard, an ask waits for a coordinator and may time out
  // (or fail with NoShardOwnerError past the wait), and a tell is at most once: ask until the order answers, then
  // deliver the parcel and ask again.
  const askOrder = async () => {
    for (;;) {
      if (Date.now() > deadline) throw new Error("order-42 did not answer in 30 s");
      try {
        return await order.ask(new GetOrder(), OrderReply, 3_000);
      } catch (error) {
        if (!(error instanceof NoShardOwnerError) && !(error instanceof AskTimeoutError)) throw error;
        await pause();
      }
    }
  };
  await askOrder();
  order.tell(new DeliverOrder("parcel-7"));
  const reply = await askOrder();
  process.stdout.write(`${JSON.stringify({ reply, frontendPid: process.pid })}\n`);
  await system.terminate();
  process.exit(0);
}
