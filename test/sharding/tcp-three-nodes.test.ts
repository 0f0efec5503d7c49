// Cluster sharding over real loopback TCP: three systems in one process.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { ActorSystem, UniqueAddress } from "../../src/actor/index.ts";
import { ClusterSharding, ClusterShardingConfigurationError } from "../../src/sharding/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { DeliverOrder, GetOrder, OrderBehavior, OrderCommand, OrderReply } from "./fixtures/order.ts";
import { describeNodes, type ShardingNode, settled, startShardingNodes, terminateAll } from "./fixtures/tcp-nodes.ts";

let nodes: ShardingNode[] = [];
before(async () => {
  nodes = await startShardingNodes(3);
  for (const n of nodes) n.sharding.init("Order", OrderCommand, { shardCount: 32 }, (id) => new OrderBehavior(id));
  await eventually(() => nodes.every((n) => settled(n, 3)), { what: "3 nodes Up and converged" });
  await eventually(
    () =>
      nodes.every(
        (n) =>
          n.sharding.allocations("Order").size === 32 &&
          n.sharding.planGeneration("Order") === nodes[0]!.sharding.planGeneration("Order"),
      ),
    { what: "everyone has the plan", describe: describeNodes(nodes, "Order") },
  );
});
after(() => terminateAll(nodes));

test("ClusterSharding.get requires remoting and cluster membership", async () => {
  const plain = ActorSystem.create("plain");
  try {
    assert.throws(
      () => ClusterSharding.get(plain),
      (e: unknown) => e instanceof ClusterShardingConfigurationError && /requires remoting/.test(e.message),
    );
    await plain.enableRemoting({ host: "127.0.0.1", port: 0 });
    assert.throws(() => ClusterSharding.get(plain), /requires cluster membership/);
  } finally {
    await plain.terminate();
  }
});

test("the seed's Order example end to end from every node, with placement spread over all three", async () => {
  const ids = Array.from({ length: 30 }, (_, i) => `order-${i}`);
  for (const [i, id] of ids.entries())
    nodes[i % 3]!.sharding.entityRefFor<OrderCommand>("Order", id).tell(new DeliverOrder(`parcel-${i}`));
  for (const [i, id] of ids.entries()) {
    // Order holds per sender: the node that told asks first; once that reply is in, any node sees the parcel.
    const first = await nodes[i % 3]!.sharding.entityRefFor<OrderCommand>("Order", id).ask(
      new GetOrder(),
      OrderReply,
      3_000,
    );
    assert.deepEqual(first.parcels, [`parcel-${i}`]);
    const reply = await nodes[(i + 1) % 3]!.sharding.entityRefFor<OrderCommand>("Order", id).ask(
      new GetOrder(),
      OrderReply,
      3_000,
    );
    assert.deepEqual(reply.parcels, [`parcel-${i}`]);
    const owner = nodes[0]!.sharding.ownerFor("Order", id)!;
    assert.equal(reply.host, nodes.find((n) => n.cluster.selfAddress.equals(owner))!.system.name);
  }
  const total = nodes.reduce((sum, n) => sum + n.sharding.localEntityCount, 0);
  assert.equal(total, 30);
  assert.ok(
    nodes.every((n) => n.sharding.localEntityCount > 0),
    "LeastLoaded spreads shards over all nodes",
  );
  const coordinator = [...nodes].sort((a, b) =>
    UniqueAddress.compare(a.cluster.selfAddress, b.cluster.selfAddress),
  )[0]!;
  assert.ok(coordinator.sharding.stats.forwards > 0);
  assert.ok(nodes.filter((n) => n !== coordinator).every((n) => n.sharding.stats.remoteRoutes > 0));
});
