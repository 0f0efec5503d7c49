// Orders reserving stock through the fenced outbox: an event-sourced Order sends a Reserve message to the Stock
// entity of its SKU with thenSend, written in the same SQLite transaction as the OrderPlaced event; an
// OutboxDispatcher delivers it (here to local entity refs; in a cluster, deliverThroughSharding), and Stock persists
// with the outbox message id as its OperationId, so a redelivery changes nothing.
// Run: npx tsx examples/orders-outbox.ts
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ActorSystem } from "movie";
import {
  Database,
  type EntityContext,
  EventSourcedBehavior,
  EventSourcedEffect,
  EventSourcing,
  type OutboxDeliverer,
  OutboxDispatcher,
  outboxMessageId,
} from "movie/persistence";

class PlaceOrder {
  constructor(
    readonly sku: string,
    readonly quantity: number,
    readonly requestId: string,
  ) {}
}
class OrderPlaced {
  constructor(
    readonly sku: string,
    readonly quantity: number,
  ) {}
}
class Placed {}
/** The message to Stock: it carries its outbox message id, the OperationId of the reservation. */
class Reserve {
  constructor(
    readonly order: string,
    readonly quantity: number,
    readonly messageId: string,
  ) {}
}
class StockReserved {
  constructor(
    readonly order: string,
    readonly quantity: number,
  ) {}
}
class Reserved {
  constructor(readonly total: number) {}
}

class Order extends EventSourcedBehavior<PlaceOrder, OrderPlaced, { placed: number }> {
  emptyState() {
    return { placed: 0 };
  }
  applyEvent(state: { placed: number }) {
    return { placed: state.placed + 1 };
  }
  handleCommand(_state: { placed: number }, command: PlaceOrder, ctx: EntityContext<PlaceOrder>) {
    return EventSourcedEffect.persist<OrderPlaced, { placed: number }>(
      new OrderPlaced(command.sku, command.quantity),
      command.requestId,
    )
      .thenSend("Stock", command.sku, (messageId) => new Reserve(ctx.entityId.id, command.quantity, messageId))
      .thenRun(() => ctx.sender?.tell(new Placed()));
  }
}

class Stock extends EventSourcedBehavior<Reserve, StockReserved, { reserved: number }> {
  emptyState() {
    return { reserved: 0 };
  }
  applyEvent(state: { reserved: number }, event: StockReserved) {
    return { reserved: state.reserved + event.quantity };
  }
  handleCommand(_state: { reserved: number }, command: Reserve, ctx: EntityContext<Reserve>) {
    // An event made from the message alone, under the message id: a redelivery is a recognised duplicate.
    return EventSourcedEffect.persist<StockReserved, { reserved: number }>(
      new StockReserved(command.order, command.quantity),
      command.messageId,
    ).thenRun((state) => ctx.sender?.tell(new Reserved(state.reserved)));
  }
}

const dir = mkdtempSync(join(tmpdir(), "orders-outbox-"));
const system = ActorSystem.create("orders");
try {
  const database = Database.get(system);
  await database.configure({ backend: "sqlite", dbPath: join(dir, "orders.sqlite3") });
  database.codec.register(OrderPlaced).register(Reserve).register(StockReserved);
  const entities = EventSourcing.get(system);
  const orders = entities.registerEntity(Order, PlaceOrder, () => new Order(), { name: "Order" });
  const stock = entities.registerEntity(Stock, Reserve, () => new Stock(), { name: "Stock" });

  for (const [order, sku, quantity] of [
    ["o-1", "apple", 3],
    ["o-2", "apple", 2],
    ["o-3", "pear", 1],
  ] as const) {
    await entities
      .getEntityRef<PlaceOrder>(orders.id(order))
      .ask(new PlaceOrder(sku, quantity, `place-${order}`), Placed, 3_000);
  }
  console.log("outbox", await database.store.outboxCounts()); // pending 3, parked 0, delivered 0, …

  // One process here, so entity refs deliver; a cluster passes deliverThroughSharding(sharding, Reserved).
  const deliverLocally: OutboxDeliverer = async ({ destination, message }) => {
    if (destination.kind !== "entity") throw new Error(`no entity destination: ${destination.handler}`);
    await entities.getEntityRef<Reserve>(stock.id(destination.entityId)).ask(message as Reserve, Reserved, 3_000);
  };
  const dispatcher = new OutboxDispatcher({
    store: database.store,
    codec: database.codec,
    deliverToEntity: deliverLocally,
  });
  console.log("batch", await dispatcher.runOnce()); // { claimed: 3, delivered: 3, retried: 0, parked: 0, stale: 0 }

  // Redeliver one message by hand, as a dispatcher that died before marking it delivered would. Its id is derived
  // from the sender's persistence id, OperationId and position: the same on every delivery. No second effect.
  const id = outboxMessageId("Order:o-1", "place-o-1", 0);
  const again = await entities.getEntityRef<Reserve>(stock.id("apple")).ask(new Reserve("o-1", 3, id), Reserved, 3_000);
  console.log("apple reserved", again.total); // 5, not 8
  console.log("outbox", await database.store.outboxCounts()); // pending 0, parked 0, delivered 3, …
  console.log("purged", await database.store.purgeOutbox(0)); // 3 (a running dispatcher purges after a retention)
} finally {
  await system.terminate();
  rmSync(dir, { recursive: true, force: true });
}
