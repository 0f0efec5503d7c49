// The main job for now: a small local actor demo that prints what it does.
// (The cluster sharding demo replaces it once sharding lands.)
import { AbstractBehavior, type ActorContext, ActorSystem, DRAIN_AND_STOP } from "../src/index.ts";

class DeliverOrder {
  constructor(readonly parcel: string) {}
}
class GetOrder {}
class OrderReply {
  constructor(readonly parcels: string[]) {}
}
type OrderCommand = DeliverOrder | GetOrder;

class OrderBehavior extends AbstractBehavior<OrderCommand> {
  private readonly parcels: string[] = [];
  constructor(readonly orderId: string) {
    super();
  }
  async receive(message: OrderCommand, context: ActorContext<OrderCommand>): Promise<void> {
    if (message instanceof DeliverOrder) {
      await new Promise((resolve) => setTimeout(resolve, 1)); // pretend to call a courier
      this.parcels.push(message.parcel);
    } else {
      context.sender?.tell(new OrderReply([...this.parcels]));
    }
  }
}

const system = ActorSystem.create("shop");
console.log(`started ${system.address}`);
const orders = Array.from({ length: 3 }, (_, i) => system.spawn(() => new OrderBehavior(`order-${i}`), `order-${i}`));
for (const [i, order] of orders.entries()) {
  for (let p = 0; p < 4; p++) order.tell(new DeliverOrder(`parcel-${i}-${p}`));
  console.log(`told ${order.path} four deliveries`);
}
for (const order of orders) {
  const reply = await order.ask(new GetOrder(), OrderReply, 3_000);
  console.log(`${order.path.name}: ${reply.parcels.join(", ")}`);
}
orders[0]!.sendSystem(DRAIN_AND_STOP);
await system.terminate();
console.log(`terminated; dead letters: ${system.deadLetterCount}`);
