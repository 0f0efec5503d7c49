// The outbox end to end while both the senders' and the receivers' shards move (fake cluster, real PostgreSQL):
// orders (durable state) placed without pause from node b send Reserve messages to stock entities (event-sourced);
// each node runs a dispatcher that claims the rows of the Order shards it holds (claims follow shard ownership), and
// node a, which owns every Order and Stock shard, leaves, so every shard of both types is handed off to b under
// traffic and deliveries in flight: a's dispatcher's claims are overtaken by b's, under the newer epoch. Afterwards
// every placed order has exactly one reservation in the stock journal: a delivery lost or refused during a handoff
// is retried by the new owner's dispatcher, which the receiver recognises by its message id; no message is parked.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import {
  Database,
  deliverThroughSharding,
  type OutboxDeliverer,
  OutboxDispatcher,
} from "../../../src/persistence/index.ts";
import { eventually } from "../../fixtures/eventually.ts";
import { freshPostgresStore, rawClient } from "../../persistence/pg-fixture.ts";
import { FakeCluster, type Node } from "../fixtures/fake-cluster.ts";
import {
  assertOneReservationPerOrder,
  OrderAck,
  outboxOrderMessages,
  PlaceOrder,
  Reserved,
  startOutboxOrderNode,
} from "./fixtures/outbox-orders.ts";

const cluster = new FakeCluster(outboxOrderMessages);
const pg = await freshPostgresStore("outbox_handoff");
after(async () => {
  await cluster.shutdown();
  await pg.dispose();
});

const settings = { shardCount: 4, leaseDuration: 2_000, leaseRenewInterval: 500 };
const start = (name: string): Promise<Node> => startOutboxOrderNode(cluster, name, pg.store, settings);
const skus = ["sku-0", "sku-1", "sku-2", "sku-3", "sku-4", "sku-5", "sku-6", "sku-7"];

/** Owner (a or b) and epoch of every lease row of Order and Stock, as "Type/shard". */
async function leases(a: Node): Promise<Map<string, { owner: string; epoch: number }>> {
  const raw = await rawClient(pg.url, pg.schema);
  try {
    const rows = await raw.query("SELECT entity_type, shard_id, owner, epoch FROM shard_lease ORDER BY 1, 2");
    return new Map(
      rows.rows.map((r) => [
        `${r.entity_type}/${r.shard_id}`,
        { owner: r.owner === a.address.toString() ? "a" : "b", epoch: Number(r.epoch) },
      ]),
    );
  } finally {
    await raw.end();
  }
}

test("orders reserve stock exactly once while every Order and Stock shard is handed off under traffic", async () => {
  const a = await start("handoff-a");
  // Place an order for every SKU from a alone and deliver them from a, so that both types' shards live on a.
  const place = async (node: Node, order: string, sku: string, quantity: number) => {
    // Retried with the same order id until acknowledged: the order's OperationId is derived from it, so a retry of
    // a placement that committed is a duplicate and sends nothing again.
    for (;;) {
      try {
        return await node.sharding
          .entityRefFor<PlaceOrder>("Order", order)
          .ask(new PlaceOrder(sku, quantity), OrderAck, 3_000);
      } catch {}
    }
  };
  const placed = new Map<string, { sku: string; quantity: number }>();
  for (const [i, sku] of skus.entries()) {
    await place(a, `warm-${i}`, sku, 1);
    placed.set(`warm-${i}`, { sku, quantity: 1 });
  }
  const warmup = new OutboxDispatcher({
    store: pg.store,
    codec: Database.get(a.system).codec,
    deliverToEntity: deliverThroughSharding(a.sharding, Reserved, 3_000),
    handlers: { audit: async () => {} },
    owner: "warmup",
    leases: () => a.sharding.heldShardLeases(),
  });
  await eventually(
    async () => (await warmup.runOnce()).claimed === 0 && (await pg.store.outboxCounts()).pending === 0,
    {
      what: "the warm-up reservations delivered from a",
      describe: () => warmup.stats,
    },
  );
  // The leases a held before the handoff, as a node that still believed it owned the shards would present them.
  const leasesOfA = a.sharding.heldShardLeases();
  const before = await leases(a);
  const types = (m: Map<string, unknown>, t: string) => [...m.keys()].filter((k) => k.startsWith(`${t}/`)).length;
  assert.ok(types(before, "Order") > 0 && types(before, "Stock") > 0, `both types leased: ${[...before.keys()]}`);
  assert.equal(leasesOfA.length, before.size, "a presents every lease it holds");
  assert.ok(
    [...before.values()].every((l) => l.owner === "a" && l.epoch === 1),
    `every lease on a: ${JSON.stringify([...before])}`,
  );

  const b = await start("handoff-b");
  await eventually(() => b.sharding.allocations("Order").size === 4 && b.sharding.allocations("Stock").size === 4, {
    what: "both plans known on b",
    describe: () => [b.sharding.allocations("Order").size, b.sharding.allocations("Stock").size],
  });
  // Until every shard has moved, the acknowledgement of every delivery is lost after the receiver handled it, so
  // each message delivered before or during the handoff is delivered again after it, by the new owner's dispatcher,
  // and the receiver must recognise it by its message id.
  let phase: "before" | "leaving" | "moved" = "before";
  const firstPhase = new Map<string, string>();
  const crossed = new Set<string>();
  const losingAcksUntilMoved = (node: Node): OutboxDeliverer => {
    const throughSharding = deliverThroughSharding(node.sharding, Reserved, 2_000);
    return async (delivery) => {
      const at = phase;
      await throughSharding(delivery);
      if (!firstPhase.has(delivery.messageId)) firstPhase.set(delivery.messageId, at);
      if (at !== "moved") throw new Error("acknowledgement lost");
      if (firstPhase.get(delivery.messageId) === "before") crossed.add(delivery.messageId);
    };
  };
  const dispatcherOn = (node: Node, name: string) =>
    new OutboxDispatcher({
      store: pg.store,
      codec: Database.get(node.system).codec,
      deliverToEntity: losingAcksUntilMoved(node),
      handlers: { audit: async () => {} },
      owner: `dispatcher-${name}`,
      leases: () => node.sharding.heldShardLeases(),
      leaseMs: 5_000,
      retry: { maxAttempts: 1_000, firstBackoffMs: 50, maxBackoffMs: 200 },
      pollIntervalMs: 20,
    });
  const dispatcherA = dispatcherOn(a, "a");
  const dispatcher = dispatcherOn(b, "b");
  dispatcherA.start();
  dispatcher.start();
  let stop = false;
  let next = 0;
  const traffic = Promise.all(
    [0, 1, 2, 3].map(async () => {
      while (!stop) {
        const n = next++;
        const order = `order-${n}`;
        const sku = skus[n % skus.length]!;
        await place(b, order, sku, (n % 5) + 1);
        placed.set(order, { sku, quantity: (n % 5) + 1 });
      }
    }),
  );
  try {
    await eventually(() => placed.size >= skus.length + 20, { what: "traffic before the handoff", timeoutMs: 20_000 });
    const beforeMove = placed.size;
    phase = "leaving";
    a.setStatus("Leaving");
    await eventually(
      () =>
        [...a.sharding.allocations("Order").values(), ...a.sharding.allocations("Stock").values()].every((owner) =>
          owner.equals(b.address),
        ),
      { what: "every Order and Stock shard on b", timeoutMs: 30_000 },
    );
    phase = "moved";
    await eventually(() => placed.size >= beforeMove + 20, {
      what: "traffic after the handoff",
      timeoutMs: 20_000,
      describe: () => [beforeMove, placed.size],
    });
    stop = true;
    await traffic;
    await eventually(async () => (await pg.store.outboxCounts()).pending === 0, {
      what: "every reservation delivered",
      timeoutMs: 30_000,
      describe: () => ({ a: dispatcherA.stats, b: dispatcher.stats }),
    });
  } finally {
    stop = true;
    await traffic;
    await dispatcherA.stop();
    await dispatcher.stop();
  }

  // a's dispatcher claimed while a owned the Order shards, and now holds none of them: it can claim nothing more.
  assert.ok(
    dispatcherA.stats.claimed > 0,
    `a's dispatcher claimed before the handoff: ${JSON.stringify(dispatcherA.stats)}`,
  );
  assert.deepEqual(a.sharding.heldShardLeases(), [], "a holds no lease");
  await place(b, "after-stop", "sku-0", 1);
  placed.set("after-stop", { sku: "sku-0", quantity: 1 });
  // The reservation (an Order shard's row), then the audit record it causes (a Stock shard's row): each is left
  // alone by a's dispatcher and claimed by b's.
  for (const row of ["reservation", "audit record"]) {
    await eventually(async () => (await pg.store.outboxCounts()).pending === 1, { what: `the ${row} pending` });
    assert.equal((await dispatcherA.runOnce()).claimed, 0, `a's dispatcher leaves the ${row} alone`);
    // Presenting its old leases (epochs the shards have moved past) claims nothing either: each is refused as stale.
    const staleA = new OutboxDispatcher({
      store: pg.store,
      codec: Database.get(a.system).codec,
      deliverToEntity: async () => assert.fail(`the ${row} must not be delivered under a stale lease`),
      handlers: { audit: async () => assert.fail(`the ${row} must not be delivered under a stale lease`) },
      leases: () => leasesOfA,
    });
    assert.equal((await staleA.runOnce()).claimed, 0, `a's old leases claim nothing of the ${row}`);
    assert.equal(staleA.stats.staleLeases, leasesOfA.length);
    assert.deepEqual(await dispatcher.runOnce(), { claimed: 1, delivered: 1, retried: 0, parked: 0, stale: 0 }, row);
  }

  assert.ok(
    crossed.size > 0,
    `messages handled by a's owner before the handoff and acknowledged by b's after it: ${crossed.size}`,
  );
  const moved = await leases(a);
  for (const [key, lease] of moved) {
    assert.equal(lease.owner, "b", `${key} handed off to b`);
    assert.ok(lease.epoch >= 2, `${key} at a later epoch than a's: ${lease.epoch}`);
  }
  assert.deepEqual(await pg.store.parkedOutbox(10), [], "nothing parked");
  assert.deepEqual(await pg.store.outboxCounts(), {
    pending: 0,
    claimed: 0,
    retrying: 0,
    parked: 0,
    delivered: 2 * placed.size, // a reservation per order, and an audit record per reservation
    oldestPendingAgeMs: null,
  });
  await assertOneReservationPerOrder(pg, placed);
});
