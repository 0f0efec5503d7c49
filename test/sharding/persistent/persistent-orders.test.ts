// The seed's persistent example end to end on three nodes of the fake cluster and the real PostgreSQL: event-sourced
// orders spread over every node, commands with OperationIds sent from every node, passivation and recovery with
// identical state, and a routingName facade beside the default one over the same journal.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { STOP } from "../../../src/actor/index.ts";
import {
  Database,
  Effect,
  type EntityContext,
  EventSourcedBehavior,
  EventSourcing,
} from "../../../src/persistence/index.ts";
import { shardingHostOf } from "../../../src/sharding/internal/host.ts";
import { PersistentEntityProvider } from "../../../src/sharding/persistent/index.ts";
import { eventually } from "../../fixtures/eventually.ts";
import { freshPostgresStore, rawClient } from "../../persistence/pg-fixture.ts";
import { FakeCluster, type Node } from "../fixtures/fake-cluster.ts";

abstract class OrderCommand {}
class AddParcel extends OrderCommand {
  constructor(
    readonly parcel: string,
    readonly op: string,
  ) {
    super();
  }
}
class ShowOrder extends OrderCommand {}
class OrderView {
  constructor(
    readonly parcels: string[],
    readonly host: string,
    readonly epoch: number,
  ) {}
}
class ParcelAdded {
  constructor(readonly parcel: string) {}
}

class Order extends EventSourcedBehavior<OrderCommand, ParcelAdded, { parcels: string[] }> {
  emptyState() {
    return { parcels: [] as string[] };
  }
  applyEvent(state: { parcels: string[] }, event: ParcelAdded) {
    return { parcels: [...state.parcels, event.parcel] };
  }
  handleCommand(state: { parcels: string[] }, command: OrderCommand, ctx: EntityContext<OrderCommand>) {
    const reply = (s: { parcels: string[] }) =>
      ctx.sender?.tell(new OrderView(s.parcels, ctx.system.address.toString(), ctx.fence?.epoch ?? 0));
    if (command instanceof AddParcel) {
      return Effect.persist<ParcelAdded, { parcels: string[] }>(new ParcelAdded(command.parcel), command.op).thenRun(
        reply,
      );
    }
    return Effect.none<ParcelAdded, { parcels: string[] }>().thenRun(() => reply(state));
  }
}

const cluster = new FakeCluster([AddParcel, ShowOrder, OrderView]);
const pg = await freshPostgresStore("persistent_orders");
after(async () => {
  await cluster.shutdown();
  await pg.dispose();
});

const settings = { shardCount: 6, leaseDuration: 3_000, leaseRenewInterval: 1_000 };

async function start(name: string): Promise<Node> {
  const node = cluster.addNode(name);
  const database = Database.get(node.system);
  await database.use(pg.store);
  database.codec.register(ParcelAdded);
  const orders = EventSourcing.get(node.system).registerEntity(Order, OrderCommand, () => new Order(), {
    name: "Order",
  });
  node.sharding.initEventSourced(orders, settings);
  node.sharding.initEventSourced(orders, { ...settings, routingName: "Order-audit" });
  return node;
}

function localOrders(node: Node, name = "Order"): number {
  const provider = shardingHostOf(node.sharding).provider(name);
  assert.ok(provider instanceof PersistentEntityProvider);
  return provider.entityCount;
}

test("event-sourced orders on three nodes: commands from every node, passivation and recovery with identical state", async () => {
  const nodes = [await start("orders-a"), await start("orders-b"), await start("orders-c")];
  // Settled: two shards on each node (the rebalance target), the same plan everywhere, nothing moving, so that
  // no shard changes hands (and epoch) under the traffic below.
  const spread = (n: Node) => {
    const counts = new Map<string, number>();
    for (const owner of n.sharding.allocations("Order").values())
      counts.set(String(owner), (counts.get(String(owner)) ?? 0) + 1);
    return [...counts.values()];
  };
  await eventually(
    () =>
      nodes.every((n) => spread(n).length === 3 && spread(n).every((c) => c === 2)) &&
      nodes.every((n) => n.sharding.handoffsInProgress === 0),
    { what: "two shards on each node", describe: () => nodes.map(spread), timeoutMs: 20_000 },
  );
  const ids = Array.from({ length: 12 }, (_, i) => `order-${i}`);
  const views = new Map<string, OrderView>();
  for (const id of ids) {
    // One parcel from each node, in order; the second is sent twice (a retry after a lost reply) from another node.
    for (const [k, node] of nodes.entries()) {
      const ref = node.sharding.entityRefFor<OrderCommand>("Order", id);
      views.set(id, await ref.ask(new AddParcel(`${id}/${k}`, `${id}-op-${k}`), OrderView, 5_000));
    }
    const retried = await nodes[0]!.sharding
      .entityRefFor<OrderCommand>("Order", id)
      .ask(new AddParcel(`${id}/1`, `${id}-op-1`), OrderView, 5_000);
    assert.deepEqual(retried.parcels, [`${id}/0`, `${id}/1`, `${id}/2`], `${id}: the retry has no second effect`);
  }
  const hosts = new Set([...views.values()].map((v) => v.host));
  assert.equal(hosts.size, 3, `orders live on every node: ${[...hosts]}`);
  assert.ok(
    [...views.values()].every((v) => v.epoch === 1),
    "each shard under its first lease",
  );

  // Passivate every order from some node, then read each one back from another: recovered from the journal.
  for (const [i, id] of ids.entries()) nodes[i % 3]!.sharding.entityRefFor("Order", id).sendSystem(STOP);
  await eventually(() => nodes.every((n) => localOrders(n) === 0), {
    what: "every order passivated",
    describe: () => nodes.map((n) => localOrders(n)),
  });
  for (const [i, id] of ids.entries()) {
    const recovered = await nodes[(i + 1) % 3]!.sharding.entityRefFor<OrderCommand>("Order", id).ask(
      new ShowOrder(),
      OrderView,
      5_000,
    );
    assert.deepEqual(recovered, views.get(id), `${id}: identical state, same owner, same lease`);
  }

  // The facade beside the default one: same persistence ids, so the same state, under leases of its own.
  for (const id of ids.slice(0, 4)) {
    const viaFacade = await nodes[2]!.sharding
      .entityRefFor<OrderCommand>("Order-audit", id)
      .ask(new ShowOrder(), OrderView, 5_000);
    assert.deepEqual(viaFacade.parcels, views.get(id)!.parcels, `${id} through Order-audit`);
  }
  const client = await rawClient(pg.url, pg.schema);
  try {
    const leases = await client.query(
      "SELECT entity_type, count(DISTINCT owner)::int AS owners FROM shard_lease GROUP BY entity_type ORDER BY 1",
    );
    assert.deepEqual(
      leases.rows.map((r) => r.entity_type),
      ["Order", "Order-audit"],
    );
    assert.equal(leases.rows[0].owners, 3, "Order's leases are held by all three nodes");
    const journal = await client.query(
      "SELECT count(*)::int AS n, count(DISTINCT persistence_id)::int AS ids FROM event_journal WHERE persistence_id LIKE 'Order:%'",
    );
    assert.deepEqual(journal.rows[0], { n: 36, ids: 12 }, "three events per order, none twice");
  } finally {
    await client.end();
  }
});
