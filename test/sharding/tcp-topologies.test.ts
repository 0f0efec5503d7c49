// Sharding over real loopback TCP with two, three (roles) and five systems.

import assert from "node:assert/strict";
import { type AddressInfo, createServer } from "node:net";
import { test } from "node:test";
import { STOP } from "../../src/actor/index.ts";
import { NoShardOwnerError, RendezvousAllocation, RoleAwareAllocation } from "../../src/sharding/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { DeliverOrder, GetOrder, OrderBehavior, OrderCommand, OrderReply, started } from "./fixtures/order.ts";
import {
  describeNodes,
  planSettled,
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
    let id = "two-0";
    for (let i = 0; !a.sharding.ownerFor("Order", id)?.equals(b.cluster.selfAddress); i++) id = `two-${i}`;
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

test("before membership converges (a node still Joining), routes fail closed", async () => {
  // The seed is a socket that accepts and never answers the handshake: the node never gets in, so it never sees a
  // converged coordinator. (A freed port would not do: the kernel may hand it to the node itself, making it a seed.)
  const silentSeed = createServer(() => {});
  await new Promise<void>((resolve) => silentSeed.listen(0, "127.0.0.1", resolve));
  const seedPort = (silentSeed.address() as AddressInfo).port;
  const lonely = await startShardingNode(seedPort);
  try {
    lonely.sharding.init("Order", OrderCommand, { shardCount: 8 }, (id) => new OrderBehavior(id));
    assert.equal(lonely.cluster.snapshot().selfStatus, "Joining");
    const ref = lonely.sharding.entityRefFor<OrderCommand>("Order", "early");
    assert.throws(
      () => ref.tell(new DeliverOrder("p")),
      (e: unknown) => e instanceof NoShardOwnerError && e.shardId === -1,
    );
    await assert.rejects(ref.ask(new GetOrder(), OrderReply, 500), NoShardOwnerError);
    assert.equal(lonely.sharding.allocations("Order").size, 0);
    assert.equal(lonely.sharding.ownerFor("Order", "early"), null);
    assert.equal(lonely.sharding.localEntityCount, 0);
  } finally {
    await lonely.system.terminate();
    silentSeed.close();
  }
});
