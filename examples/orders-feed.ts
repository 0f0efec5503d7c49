// Orders feeding a read model: an event-sourced Order entity tags its events by SKU, an exactly-once projection keeps
// per-SKU totals in the same SQLite database (its rows commit with its checkpoint), and a live stream follows one tag.
// Run: npx tsx examples/orders-feed.ts
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ActorSystem } from "movie";
import {
  Database,
  Effect,
  type EntityContext,
  EventSourcedBehavior,
  EventSourcing,
  OperationId,
  Projections,
} from "movie/persistence";

abstract class OrderCommand {}
class Place extends OrderCommand {
  constructor(
    readonly sku: string,
    readonly quantity: number,
    readonly requestId: string,
  ) {
    super();
  }
}
class Placed {
  constructor(
    readonly sku: string,
    readonly quantity: number,
  ) {}
}
class Ack {}
type Order = { lines: number };

class OrderBehavior extends EventSourcedBehavior<OrderCommand, Placed, Order> {
  emptyState(): Order {
    return { lines: 0 };
  }
  applyEvent(state: Order): Order {
    return { lines: state.lines + 1 };
  }
  // Tags go to the feed with the event: queries, streams and projections can select by tag.
  override tagsFor(event: Placed): readonly string[] {
    return [`sku:${event.sku}`];
  }
  handleCommand(_state: Order, command: OrderCommand, ctx: EntityContext<OrderCommand>) {
    const ack = () => ctx.sender?.tell(new Ack());
    if (command instanceof Place) {
      return Effect.persist<Placed, Order>(new Placed(command.sku, command.quantity), command.requestId).thenRun(ack);
    }
    return Effect.none<Placed, Order>().thenRun(ack);
  }
}

const dir = mkdtempSync(join(tmpdir(), "orders-feed-"));
const system = ActorSystem.create("orders");
try {
  const database = Database.get(system);
  await database.configure({ backend: "sqlite", dbPath: join(dir, "orders.sqlite3") });
  database.codec.register(Placed);
  const orders = EventSourcing.get(system).registerEntity(OrderBehavior, OrderCommand, () => new OrderBehavior(), {
    name: "Order",
  });

  // The read model lives in the same database; an exactly-once handler writes through the batch's transaction.
  await database.store.runProjectionBatch({ name: "setup", expectedOffset: 0, newOffset: 0 }, async (tx) => {
    await tx.query("CREATE TABLE IF NOT EXISTS sku_totals (sku TEXT PRIMARY KEY, quantity INTEGER NOT NULL)");
  });
  const totals = Projections.get(system).start({
    name: "sku-totals",
    mode: "exactly-once",
    source: { entityTypes: ["Order"] },
    handler: async (event, tx) => {
      const placed = JSON.parse(event.payload) as { sku: string; quantity: number };
      await tx.query(
        `INSERT INTO sku_totals (sku, quantity) VALUES (?, ?)
          ON CONFLICT (sku) DO UPDATE SET quantity = quantity + excluded.quantity`,
        [placed.sku, placed.quantity],
      );
    },
  });

  // A live stream of one tag, from the start of the feed (it pages through stored events, then follows commits).
  const apples: number[] = [];
  const following = (async () => {
    for await (const event of database.events.stream({ tag: "sku:apple" })) {
      apples.push((JSON.parse(event.payload) as { quantity: number }).quantity);
      if (apples.length === 2) break; // or pass { signal } and abort it
    }
  })();

  for (const [order, sku, quantity] of [
    ["o-1", "apple", 3],
    ["o-1", "pear", 1],
    ["o-2", "apple", 2],
  ] as const) {
    const ref = EventSourcing.get(system).getEntityRef<OrderCommand>(orders.id(order));
    await ref.ask(new Place(sku, quantity, OperationId.random().value), Ack, 3_000);
  }

  await totals.caughtUpTo(await database.events.latestOffset());
  const rows = await database.store.runProjectionBatch({ name: "read", expectedOffset: 0, newOffset: 0 }, (tx) =>
    tx.query("SELECT sku, quantity FROM sku_totals ORDER BY sku"),
  );
  console.log("totals", rows); // [ { sku: 'apple', quantity: 5 }, { sku: 'pear', quantity: 1 } ]
  const page = await database.events.query({ tag: "sku:pear" });
  console.log("pear events", page.events.length); // 1
  console.log("stats", totals.stats); // checkpoint 3, lag 0, processed 3, lastError null
  await following;
  console.log("apple quantities seen by the stream", apples); // [ 3, 2 ]
  await Projections.get(system).stop();
} finally {
  await system.terminate();
  rmSync(dir, { recursive: true, force: true });
}
