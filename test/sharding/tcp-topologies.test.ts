// Sharding over real loopback TCP with one, two, three and five systems.

import assert from "node:assert/strict";
import { type AddressInfo, createServer } from "node:net";
import { test } from "node:test";
import { STOP, UniqueAddress } from "../../src/actor/index.ts";
import { RemoteAskError } from "../../src/remote/index.ts";
import {
  ClusterShardingConfigurationError,
  LeastLoadedAllocation,
  NoShardOwnerError,
  RateLimitedRebalance,
  RendezvousAllocation,
  RoleAwareAllocation,
} from "../../src/sharding/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { findId } from "./fixtures/members.ts";
import {
  closeHolds,
  DeliverOrder,
  GatedSequenceBehavior,
  GetOrder,
  Hold,
  holding,
  OrderBehavior,
  OrderCommand,
  OrderReply,
  openHolds,
  Seq,
  sequenceSink,
  started,
} from "./fixtures/order.ts";
import {
  describeNodes,
  planSettled,
  type ShardingNode,
  settled,
  startShardingNode,
  startShardingNodes,
  terminateAll,
} from "./fixtures/tcp-nodes.ts";

test("RoleAwareAllocation keeps entities off the frontend node, which still routes", async () => {
  const nodes = await startShardingNodes(3, [["frontend"], ["backend"], ["backend"]]);
  try {
    const settings = { shardCount: 24, allocation: new RoleAwareAllocation(new RendezvousAllocation(), ["backend"]) };
    for (const n of nodes) n.sharding.init("Order", OrderCommand, settings, (id) => new OrderBehavior(id));
    await eventually(() => nodes.every((n) => settled(n, 3)) && planSettled(nodes, "Order", settings), {
      what: "plan over the two backends",
      describe: describeNodes(nodes, "Order"),
    });
    const frontend = nodes[0]!;
    for (let i = 0; i < 40; i++) {
      const ref = frontend.sharding.entityRefFor<OrderCommand>("Order", `o-${i}`);
      ref.tell(new DeliverOrder(`p-${i}`));
      const reply = await ref.ask(new GetOrder(), OrderReply, 3_000);
      assert.deepEqual(reply.parcels, [`p-${i}`]);
    }
    assert.equal(frontend.sharding.localEntityCount, 0);
    assert.equal(nodes[1]!.sharding.localEntityCount + nodes[2]!.sharding.localEntityCount, 40);
    for (const owner of frontend.sharding.allocations("Order").values()) {
      assert.ok(!owner.equals(frontend.cluster.selfAddress));
    }
  } finally {
    await terminateAll(nodes);
  }
});

test("five systems: every node routes, five owners share the shards", async () => {
  const nodes = await startShardingNodes(5);
  try {
    for (const n of nodes) n.sharding.init("Order", OrderCommand, { shardCount: 40 }, (id) => new OrderBehavior(id));
    await eventually(() => nodes.every((n) => settled(n, 5)) && planSettled(nodes, "Order", { shardCount: 40 }), {
      what: "a plan over five nodes",
      describe: describeNodes(nodes, "Order"),
      timeoutMs: 20_000,
    });
    const replies = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        nodes[i % 5]!.sharding.entityRefFor<OrderCommand>("Order", `five-${i}`).ask(new GetOrder(), OrderReply, 3_000),
      ),
    );
    assert.equal(new Set(replies.map((r) => r.host)).size, 5);
    assert.equal(
      nodes.reduce((sum, n) => sum + n.sharding.localEntityCount, 0),
      50,
    );
  } finally {
    await terminateAll(nodes);
  }
});

test("two systems: activation only on the first message, STOP from the other node, re-activation, activate()", async () => {
  const nodes = await startShardingNodes(2);
  try {
    for (const n of nodes) n.sharding.init("Order", OrderCommand, { shardCount: 8 }, (id) => new OrderBehavior(id));
    await eventually(() => nodes.every((n) => settled(n, 2)) && planSettled(nodes, "Order", { shardCount: 8 }), {
      what: "a plan over two nodes",
      describe: describeNodes(nodes, "Order"),
    });
    const [a, b] = nodes as [(typeof nodes)[0], (typeof nodes)[0]];
    // pick an entity owned by b, driven from a
    const id = findId("two", (x) => a.sharding.ownerFor("Order", x)?.equals(b.cluster.selfAddress) === true);
    const ref = a.sharding.entityRefFor<OrderCommand>("Order", id);
    const activationsBefore = b.sharding.stats.activations;
    assert.equal(b.sharding.localEntityCount, 0);
    ref.tell(new DeliverOrder("x"));
    assert.deepEqual((await ref.ask(new GetOrder(), OrderReply, 3_000)).parcels, ["x"]);
    assert.equal(b.sharding.stats.activations, activationsBefore + 1);
    ref.sendSystem(STOP);
    await eventually(() => b.sharding.stats.explicitPassivations === 1 && b.sharding.localEntityCount === 0, {
      what: "passivated on the owner",
    });
    assert.equal(a.sharding.stats.passivationRequests, 1);
    assert.deepEqual((await ref.ask(new GetOrder(), OrderReply, 3_000)).parcels, [], "a fresh actor");
    assert.equal(started.filter((s) => s.endsWith(`:${id}`)).length, 2);
    const eager = await a.sharding.activate("Order", "two-eager");
    assert.equal(eager.accepted, true);
    assert.equal((await b.sharding.activate("Order", "two-eager")).accepted, false);
  } finally {
    await terminateAll(nodes);
  }
});

test("before membership converges (a node still Joining), routes wait for a coordinator and fail closed at the deadline", async () => {
  // The seed is a socket that accepts and never answers the handshake: the node never gets in, so it never sees a
  // converged coordinator. (A freed port would not do: the kernel may hand it to the node itself, making it a seed.)
  const silentSeed = createServer(() => {});
  await new Promise<void>((resolve) => silentSeed.listen(0, "127.0.0.1", resolve));
  const seedPort = (silentSeed.address() as AddressInfo).port;
  const lonely = await startShardingNode(seedPort);
  try {
    lonely.sharding.init(
      "Order",
      OrderCommand,
      { shardCount: 8, heldDeliveryTimeout: 300 },
      (id) => new OrderBehavior(id),
    );
    lonely.sharding.init(
      "Impatient",
      OrderCommand,
      { shardCount: 8, awaitCoordinator: false },
      (id) => new OrderBehavior(id),
    );
    assert.equal(lonely.cluster.snapshot().selfStatus, "Joining");
    const noCoordinator = (e: unknown) => e instanceof NoShardOwnerError && e.shardId === -1;
    // The default: the tell is held and the ask waits (docs/protocol.md §8.6), until heldDeliveryTimeout.
    const ref = lonely.sharding.entityRefFor<OrderCommand>("Order", "early");
    ref.tell(new DeliverOrder("p"));
    await assert.rejects(ref.ask(new GetOrder(), OrderReply, 2_000), noCoordinator);
    await eventually(() => lonely.sharding.stats.heldExpired === 2, {
      what: "the held tell and ask expired",
      describe: () => lonely.sharding.stats,
    });
    // awaitCoordinator false: they fail at once.
    const impatient = lonely.sharding.entityRefFor<OrderCommand>("Impatient", "early");
    assert.throws(() => impatient.tell(new DeliverOrder("p")), noCoordinator);
    await assert.rejects(impatient.ask(new GetOrder(), OrderReply, 500), noCoordinator);
    assert.equal(lonely.sharding.stats.heldDeliveries, 2, "only the waiting type held anything");
    assert.equal(lonely.sharding.allocations("Order").size, 0);
    assert.equal(lonely.sharding.ownerFor("Order", "early"), null);
    assert.equal(lonely.sharding.localEntityCount, 0);
  } finally {
    await lonely.system.terminate();
    silentSeed.close();
  }
});

test("one system over loopback: the seed's Order example, first-message activation, STOP, idle passivation, init checks", async () => {
  const [solo] = await startShardingNodes(1, [["backend"]]);
  const node = solo!;
  try {
    // The seed's settings (with no idle timeout on this type, so nothing but STOP passivates its entities here).
    const seedSettings = {
      shardCount: 256,
      allocation: new RoleAwareAllocation(new RendezvousAllocation(), ["backend"]),
      rebalance: new RateLimitedRebalance({ threshold: 1, maxConcurrent: 4 }),
    };
    const orders = node.sharding.init("Order", OrderCommand, seedSettings, (id) => new OrderBehavior(id));
    const idle = node.sharding.init(
      "IdleOrder",
      OrderCommand,
      { shardCount: 8, idleTimeout: 200 },
      (id) => new OrderBehavior(id),
    );
    await eventually(() => settled(node, 1) && node.sharding.allocations(orders).size === 256, {
      what: "a one-node plan",
      describe: describeNodes([node], "Order"),
    });
    const order = node.sharding.entityRefFor(orders, "order-42");
    assert.equal(node.sharding.shardOf(orders, "order-42"), 68, "the published vector");
    assert.equal(node.sharding.localEntityCount, 0, "nothing before the first message");
    order.tell(new DeliverOrder("parcel-7"));
    assert.deepEqual((await order.ask(new GetOrder(), OrderReply, 3_000)).parcels, ["parcel-7"]);
    assert.equal(node.sharding.stats.activations, 1);
    assert.equal(node.sharding.localEntityCount, 1);
    assert.ok(node.sharding.ownerFor(orders, "order-42")!.equals(node.cluster.selfAddress));
    // allocations() is a defensive copy
    const plan = node.sharding.allocations(orders);
    plan.clear();
    assert.equal(node.sharding.allocations(orders).size, 256);

    order.sendSystem(STOP);
    await eventually(() => node.sharding.stats.explicitPassivations === 1 && node.sharding.localEntityCount === 0, {
      what: "the STOP passivation",
      describe: () => node.sharding.stats,
    });
    assert.deepEqual((await order.ask(new GetOrder(), OrderReply, 3_000)).parcels, [], "a fresh actor, same ref");
    assert.equal(node.sharding.stats.activations, 2);

    // Idle passivation with a short timeout: the entity goes, the next message brings it back.
    const sleepy = node.sharding.entityRefFor(idle, "sleepy");
    sleepy.tell(new DeliverOrder("z"));
    await eventually(() => node.sharding.stats.idlePassivations === 1 && node.sharding.localEntityCount === 1, {
      what: "the idle entity passivated (the Order entity stays)",
      describe: () => ({ stats: node.sharding.stats, entities: node.sharding.localEntityCount }),
    });
    assert.deepEqual((await sleepy.ask(new GetOrder(), OrderReply, 3_000)).parcels, [], "re-activated");
    assert.equal(node.sharding.stats.activations, 4);

    // init: idempotent for the same settings, a mismatch names the field.
    assert.equal(node.sharding.init("Order", OrderCommand, seedSettings, (id) => new OrderBehavior(id)).name, "Order");
    assert.throws(
      () =>
        node.sharding.init("Order", OrderCommand, { ...seedSettings, shardCount: 128 }, (id) => new OrderBehavior(id)),
      (e: unknown) => e instanceof ClusterShardingConfigurationError && e.field === "shardCount",
    );
    assert.throws(
      () =>
        node.sharding.init(
          "Order",
          OrderCommand,
          { ...seedSettings, allocation: new RoleAwareAllocation(new RendezvousAllocation(), ["other"]) },
          (id) => new OrderBehavior(id),
        ),
      (e: unknown) => e instanceof ClusterShardingConfigurationError && e.field === "allocation",
    );
  } finally {
    await node.system.terminate();
  }
});

test("three systems over loopback: a handoff held by a blocked drain buffers 1,024 deliveries, rejects more, flushes FIFO", async () => {
  const nodes = await startShardingNodes(3);
  try {
    // RateLimited (not NoRebalance) so the plan settles balanced whatever order the nodes registered in.
    const settings = { shardCount: 8, allocation: new LeastLoadedAllocation() };
    for (const n of nodes) n.sharding.init("Held", OrderCommand, settings, (id) => new GatedSequenceBehavior(id));
    await eventually(() => nodes.every((n) => settled(n, 3)) && planSettled(nodes, "Held", settings), {
      what: "a plan over three nodes",
      describe: describeNodes(nodes, "Held"),
    });
    const [coordinator, leaver, caller] = [...nodes].sort((x, y) =>
      UniqueAddress.compare(x.cluster.selfAddress, y.cluster.selfAddress),
    ) as [ShardingNode, ShardingNode, ShardingNode];
    const ownedByLeaver = (id: string) => coordinator.sharding.ownerFor("Held", id)?.equals(leaver.cluster.selfAddress);
    assert.ok(
      [...coordinator.sharding.allocations("Held").values()].some((o) => o.equals(leaver.cluster.selfAddress)),
      "the leaver owns shards",
    );
    const gateId = findId("held-gate", (x) => ownedByLeaver(x) === true, describeNodes(nodes, "Held"));
    const shard = coordinator.sharding.shardOf("Held", gateId);
    let id = "held-0";
    for (let i = 0; coordinator.sharding.shardOf("Held", id) !== shard; i++) id = `held-${i}`;
    let leaving: Promise<void> | null = null;
    closeHolds();
    try {
      caller.sharding.entityRefFor<OrderCommand>("Held", gateId).tell(new Hold());
      await eventually(() => holding.has(gateId), { what: "the entity on the leaver holding its shard's drain" });
      // leave() resolves once the leaver is Removed, which the held drain prevents for now: awaited after the gate.
      leaving = leaver.cluster.leave();
      // The leaver stays Leaving while its shards are on it (departure guard), so membership settles around it.
      await eventually(
        () =>
          coordinator.sharding.handoffInProgress("Held", shard) &&
          nodes.every((n) => {
            const s = n.cluster.snapshot();
            return s.converged && s.unreachable.length === 0 && s.members.some((m) => m.status === "Leaving");
          }),
        { what: "the leaver's shard moving, everyone converged", describe: describeNodes(nodes, "Held") },
      );
      const ref = caller.sharding.entityRefFor<OrderCommand>("Held", id);
      for (let n = 0; n < 1024; n++) ref.tell(new Seq(n));
      const rejected = coordinator.sharding.stats.rejectedEnvelopes;
      // Same connection, so it arrives after the 1,024 tells: the buffer is full.
      await assert.rejects(ref.ask(new GetOrder(), OrderReply, 3_000), (e: unknown) => {
        assert.ok(e instanceof RemoteAskError, String(e));
        assert.equal(e.remoteClass, "ClusterShardingConfigurationError");
        assert.match(e.message, new RegExp(`Shard handoff buffer is full for Held/${shard}`));
        return true;
      });
      ref.tell(new Seq(99_999));
      await eventually(() => coordinator.sharding.stats.rejectedEnvelopes === rejected + 2, {
        what: "both overflowing deliveries counted",
        describe: () => coordinator.sharding.stats,
      });
      assert.equal(sequenceSink.get(id), undefined, "nothing delivered while the drain is held");
    } finally {
      openHolds();
    }
    await eventually(() => (sequenceSink.get(id)?.length ?? 0) >= 1024, {
      what: "the buffer flushed to the new owner",
      describe: () => ({ got: sequenceSink.get(id)?.length, nodes: describeNodes(nodes, "Held")() }),
    });
    assert.deepEqual(
      sequenceSink.get(id),
      Array.from({ length: 1024 }, (_, i) => i),
      "FIFO, and the rejected ones never delivered",
    );
    assert.ok(!coordinator.sharding.ownerFor("Held", id)?.equals(leaver.cluster.selfAddress));
    await leaving;
    await eventually(() => coordinator.cluster.snapshot().members.length === 2, { what: "the leaver removed" });
    assert.equal(leaver.sharding.localEntityCount, 0);
  } finally {
    await terminateAll(nodes);
  }
});
