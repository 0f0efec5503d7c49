// The outbox end to end on two nodes of the fake cluster and the real PostgreSQL: a durable-state order reserves
// stock in an event-sourced entity of another type through DurableStateEffect.thenSend; the dispatcher delivers
// through sharding (deliverThroughSharding) and loses the first acknowledgement of every message, so each is delivered
// twice; the stock entity persists with the outbox message id as its OperationId and an event made from the message
// alone, so the redelivery is a duplicate and each order's quantity is reserved once. The stock entity sends an audit
// record through EventSourcedEffect.thenSendToHandler, once per reservation.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import {
  Database,
  deliverThroughSharding,
  type OutboxDeliverer,
  OutboxDispatcher,
} from "../../../src/persistence/index.ts";
import { eventually } from "../../fixtures/eventually.ts";
import { freshPostgresStore } from "../../persistence/pg-fixture.ts";
import { FakeCluster, type Node } from "../fixtures/fake-cluster.ts";
import {
  OrderAck,
  outboxOrderMessages,
  PlaceOrder,
  Reserved,
  ShowStock,
  startOutboxOrderNode,
} from "./fixtures/outbox-orders.ts";

const cluster = new FakeCluster(outboxOrderMessages);
const pg = await freshPostgresStore("outbox_orders");
after(async () => {
  await cluster.shutdown();
  await pg.dispose();
});

const settings = { shardCount: 4, leaseDuration: 3_000, leaseRenewInterval: 1_000 };

const start = (name: string): Promise<Node> => startOutboxOrderNode(cluster, name, pg.store, settings);

test("orders reserve stock through the outbox: every message delivered twice, every reservation made once", async () => {
  const [a, b] = [await start("outbox-a"), await start("outbox-b")];
  const orders = Array.from({ length: 8 }, (_, i) => ({ id: `order-${i}`, sku: `sku-${i % 3}`, quantity: i + 1 }));
  for (const [i, o] of orders.entries()) {
    const node = i % 2 === 0 ? a : b;
    await node.sharding
      .entityRefFor<PlaceOrder>("Order", o.id)
      .ask(new PlaceOrder(o.sku, o.quantity), OrderAck, 10_000);
  }
  const throughSharding = deliverThroughSharding(b.sharding, Reserved, 10_000);
  const deliveries = new Map<string, number>();
  // The first acknowledgement of every message is lost after the entity has handled it.
  const losingFirstAck: OutboxDeliverer = async (delivery) => {
    await throughSharding(delivery);
    const n = (deliveries.get(delivery.messageId) ?? 0) + 1;
    deliveries.set(delivery.messageId, n);
    if (n === 1) throw new Error("acknowledgement lost");
  };
  const audits: unknown[] = [];
  const dispatcher = new OutboxDispatcher({
    store: pg.store,
    codec: Database.get(a.system).codec,
    deliverToEntity: losingFirstAck,
    // One dispatcher for both nodes here: it claims under the shard leases either node holds.
    leases: () => [...a.sharding.heldShardLeases(), ...b.sharding.heldShardLeases()],
    handlers: { audit: async (d) => void audits.push(d.message) },
    retry: { firstBackoffMs: 10, maxBackoffMs: 10 },
    pollIntervalMs: 20,
  });
  dispatcher.start();
  try {
    await eventually(async () => (await pg.store.outboxCounts()).pending === 0 && audits.length === orders.length, {
      what: "every reservation and audit delivered",
      timeoutMs: 20_000,
      describe: () => ({ stats: dispatcher.stats, deliveries: [...deliveries.values()], audits: audits.length }),
    });
  } finally {
    await dispatcher.stop();
  }
  assert.deepEqual(await pg.store.parkedOutbox(10), []);
  assert.equal(deliveries.size, orders.length);
  assert.deepEqual(
    [...deliveries.values()],
    orders.map(() => 2),
    "each reservation delivered twice",
  );
  for (const sku of ["sku-0", "sku-1", "sku-2"]) {
    const expected = orders.filter((o) => o.sku === sku).reduce((sum, o) => sum + o.quantity, 0);
    const shown = await a.sharding.entityRefFor<ShowStock>("Stock", sku).ask(new ShowStock(), Reserved, 10_000);
    assert.equal(shown.total, expected, `${sku} reserved once per order`);
  }
  assert.equal(audits.length, orders.length, "one audit per reservation, none for the duplicates");
  assert.deepEqual(await pg.store.parkedOutbox(10), []);
});
