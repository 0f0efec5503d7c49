import assert from "node:assert/strict";
import { after, test } from "node:test";
import {
  AskCancelledError,
  AskTimeoutError,
  DRAIN_AND_STOP,
  InvalidArgumentError,
  STOP,
} from "../../src/actor/index.ts";
import {
  ClusterShardingConfigurationError,
  NoRebalance,
  NoShardOwnerError,
  RendezvousAllocation,
  ShardingSettings,
  UnsupportedSystemMessageError,
} from "../../src/sharding/index.ts";
import { shardingHostOf } from "../../src/sharding/internal/host.ts";
import { EntityProvider } from "../../src/sharding/internal/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { FakeCluster } from "./fixtures/fake-cluster.ts";
import {
  DeliverOrder,
  GetOrder,
  OrderBehavior,
  OrderCommand,
  OrderReply,
  orderClasses,
  SlowOrder,
  started,
} from "./fixtures/order.ts";

const cluster = new FakeCluster(orderClasses);
after(() => cluster.shutdown());
const node = cluster.addNode("solo");
const sharding = node.sharding;
// No idle timeout here: an idle sweep must not passivate the entities the other tests count and re-activate.
const orders = sharding.init("Order", OrderCommand, { shardCount: 16 }, (id) => new OrderBehavior(id));
// Only the test of the immediate failure without a coordinator uses this type (the default waits for one).
const impatientOrders = sharding.init(
  "ImpatientOrder",
  OrderCommand,
  { shardCount: 16, awaitCoordinator: false },
  (id) => new OrderBehavior(id),
);
// Only the idle-passivation test uses this type.
const idleOrders = sharding.init(
  "IdleOrder",
  OrderCommand,
  { shardCount: 16, idleTimeout: 200 },
  (id) => new OrderBehavior(id),
);

test("one node: first message activates, ask gets the reply, stats count it", async () => {
  await eventually(() => sharding.allocations(orders).size === 16, { what: "a plan" });
  const order = sharding.entityRefFor(orders, "order-42");
  assert.equal(sharding.localEntityCount, 0, "nothing before the first message");
  order.tell(new DeliverOrder("parcel-7"));
  const reply = await order.ask(new GetOrder(), OrderReply, 3_000);
  assert.deepEqual(reply.parcels, ["parcel-7"]);
  assert.equal(sharding.localEntityCount, 1);
  assert.equal(started.filter((s) => s.endsWith(":order-42")).length, 1);
  const stats = sharding.stats;
  assert.equal(stats.routes, 2);
  assert.equal(stats.localDeliveries, 2);
  assert.equal(stats.activations, 1);
  assert.equal(stats.remoteRoutes, 0);
  assert.ok(sharding.ownerFor(orders, "order-42")!.equals(node.address));
  assert.equal(sharding.shardOf(orders, "order-42"), 68 % 16, "the published vector, modulo 16");
});

test("STOP passivates; the next message re-activates through the same ref", async () => {
  const order = sharding.entityRefFor(orders, "order-stop");
  order.tell(new DeliverOrder("a"));
  await order.ask(new GetOrder(), OrderReply, 3_000);
  const before = sharding.stats;
  order.sendSystem(STOP);
  await eventually(() => sharding.stats.explicitPassivations === before.explicitPassivations + 1, {
    what: "passivation",
  });
  assert.equal(sharding.stats.passivationRequests, before.passivationRequests + 1);
  const reply = await order.ask(new GetOrder(), OrderReply, 3_000);
  assert.deepEqual(reply.parcels, [], "a fresh actor");
  assert.equal(started.filter((s) => s.endsWith(":order-stop")).length, 2);
  assert.throws(() => order.sendSystem(DRAIN_AND_STOP), UnsupportedSystemMessageError);
});

test("idle entities are passivated by the sweep", async () => {
  const order = sharding.entityRefFor(idleOrders, "order-idle");
  const entities = sharding.localEntityCount; // the other type's entities never idle out
  const idle = sharding.stats.idlePassivations;
  order.tell(new DeliverOrder("x"));
  assert.equal(sharding.localEntityCount, entities + 1);
  await eventually(() => sharding.stats.idlePassivations === idle + 1 && sharding.localEntityCount === entities, {
    what: "idle passivation",
    describe: () => sharding.stats,
  });
});

test("activate resolves accepted only when it created the actor", async () => {
  const first = await sharding.activate(orders, "order-eager");
  const second = await sharding.activate(orders, "order-eager");
  assert.equal(first.accepted, true);
  assert.equal(second.accepted, false);
});

test("ask timeout and cancellation reach the caller", async () => {
  const order = sharding.entityRefFor(orders, "order-slow");
  await assert.rejects(order.ask(new SlowOrder(), OrderReply, 30), AskTimeoutError);
  const controller = new AbortController();
  const pending = order.ask(new SlowOrder(), OrderReply, 5_000, { signal: controller.signal });
  controller.abort();
  await assert.rejects(pending, AskCancelledError);
});

test("init is idempotent for equal settings and names the mismatching field otherwise", () => {
  const again = sharding.init("Order", OrderCommand, { shardCount: 16 }, (id) => new OrderBehavior(id));
  assert.equal(again.name, "Order");
  const mismatch = (options: object, field: string, type = "Order") =>
    assert.throws(
      () => sharding.init(type, OrderCommand, options, (id) => new OrderBehavior(id)),
      (e: unknown) =>
        e instanceof ClusterShardingConfigurationError &&
        e.field === field &&
        /already registered with incompatible settings/.test(e.message),
    );
  mismatch({ shardCount: 32 }, "shardCount");
  mismatch({ shardCount: 16, idleTimeout: 300 }, "idleTimeout");
  mismatch({ shardCount: 16, allocation: new RendezvousAllocation() }, "allocation");
  const otherPartitioner = {
    configurationKey: "ModuloLength",
    shardFor: (_type: string, id: string, count: number) => id.length % count,
  };
  mismatch({ shardCount: 16, partitioner: otherPartitioner }, "partitioner");
  mismatch({ shardCount: 16, rebalance: new NoRebalance() }, "rebalance");
  mismatch({ shardCount: 16, leaseDuration: 20_000 }, "leaseDuration");
  mismatch({ shardCount: 16, leaseRenewInterval: 2_000 }, "leaseRenewInterval");
  mismatch({ shardCount: 16 }, "idleTimeout", "IdleOrder");
  mismatch({ shardCount: 16, idleTimeout: 300 }, "idleTimeout", "IdleOrder");
  assert.throws(
    () => sharding.init("Order", OrderReply as never, { shardCount: 16 }, (id) => new OrderBehavior(id)),
    /messageType differs/,
  );
  // another class that merely shares the name is another type
  const SameName = (() => {
    abstract class OrderCommand {}
    return OrderCommand;
  })();
  assert.equal(SameName.name, OrderCommand.name);
  assert.throws(
    () => sharding.init("Order", SameName as never, { shardCount: 16 }, (id) => new OrderBehavior(id)),
    (e: unknown) => e instanceof ClusterShardingConfigurationError && e.field === "messageType",
  );
  assert.throws(
    () => sharding.init("Bad", OrderCommand, { shardCount: 0 }, (id) => new OrderBehavior(id)),
    /shard count must be positive/,
  );
  assert.throws(
    () => sharding.init("", OrderCommand, {}, (id) => new OrderBehavior(id)),
    /entity type name must not be empty/,
  );
  assert.throws(() => sharding.entityRefFor("Nope", "x"), /not registered on this node/);
  assert.throws(() => sharding.entityRefFor(orders, ""), /entity id must not be empty/);
});

test("an entity id with a lone surrogate is refused at the API with InvalidArgumentError, before any routing", async () => {
  const routesBefore = sharding.stats.routes;
  for (const id of ["order-\ud800", "\udc00", "a\udbff"]) {
    assert.throws(
      () => sharding.entityRefFor(orders, id),
      (e: unknown) => e instanceof InvalidArgumentError && /well-formed Unicode/.test(e.message),
      JSON.stringify(id),
    );
    await assert.rejects(sharding.activate(orders, id), InvalidArgumentError);
  }
  // A surrogate pair is a whole character: fine.
  assert.equal(sharding.entityRefFor(orders, "order-\ud83d\ude80").entityId, "order-\ud83d\ude80");
  assert.equal(sharding.stats.routes, routesBefore, "nothing was routed");
});

test("an unregistered message class fails at the caller", () => {
  class Unregistered extends OrderCommand {}
  assert.throws(() => sharding.entityRefFor(orders, "x").tell(new Unregistered()), /not registered/);
});

test("awaitCoordinator false: without a converged coordinator, tells throw and asks reject with NoShardOwnerError at once", async () => {
  node.setConverged(false);
  try {
    const order = sharding.entityRefFor(impatientOrders, "order-42");
    const rejected = sharding.stats.rejectedEnvelopes;
    assert.throws(
      () => order.tell(new DeliverOrder("p")),
      (e: unknown) => e instanceof NoShardOwnerError && e.entityType === "cluster" && e.shardId === -1,
    );
    await assert.rejects(order.ask(new GetOrder(), OrderReply, 1000), NoShardOwnerError);
    await assert.rejects(sharding.activate(impatientOrders, "x"), NoShardOwnerError);
    assert.equal(sharding.stats.rejectedEnvelopes, rejected + 3);
    assert.equal(sharding.stats.heldDeliveries, 0, "nothing held");
    assert.equal(sharding.ownerFor(impatientOrders, "order-42"), null);
  } finally {
    node.setConverged(true);
  }
});

test("host.registerProvider (the persistent facade's path) is idempotent and checks compatibility", () => {
  const make = (idleTimeout: number | null) =>
    new EntityProvider<OrderCommand>(
      "Facade",
      OrderCommand.name,
      ShardingSettings.create({ shardCount: 4, idleTimeout }),
      (id) => () => new OrderBehavior(id),
      shardingHostOf(sharding).entityParent,
      node.system.scheduler,
      shardingHostOf(sharding).stats,
    );
  assert.equal(shardingHostOf(sharding).registerProvider(make(null)).name, "Facade");
  assert.equal(shardingHostOf(sharding).registerProvider(make(null)).name, "Facade");
  assert.throws(
    () => shardingHostOf(sharding).registerProvider(make(1_000)),
    (e: unknown) => e instanceof ClusterShardingConfigurationError && e.field === "idleTimeout",
  );
});

test("stats: the 15 counters of docs/protocol.md §16.2 in its order, then the malformed breakdown, shard-bound refusals held deliveries and malformed trace contexts, as a frozen snapshot", () => {
  const snapshot = sharding.stats;
  assert.deepEqual(Object.keys(snapshot), [
    "routes",
    "localDeliveries",
    "remoteRoutes",
    "forwards",
    "activations",
    "passivationRequests",
    "explicitPassivations",
    "idlePassivations",
    "handoffShards",
    "rebalanceMoves",
    "leaseAcquisitions",
    "leaseRenewals",
    "leaseLosses",
    "leaseRetries",
    "rejectedEnvelopes",
    "malformedEnvelopes",
    "shardMailboxOverflows",
    "heldDeliveries",
    "heldRefused",
    "heldExpired",
    "malformedTraceContexts",
    "directRoutes",
    "directRefusals",
    "directProbesDropped",
    "directFallbacks",
    "directBurstProbes",
    "directBatches",
  ]);
  assert.deepEqual(Object.keys(snapshot.malformedEnvelopes), ["undecodable", "schemaInvalid", "payload"]);
  assert.ok(Object.isFrozen(snapshot) && Object.isFrozen(snapshot.malformedEnvelopes));
  const routes = snapshot.routes;
  sharding.entityRefFor(orders, "stats-probe").tell(new DeliverOrder("s"));
  assert.equal(snapshot.routes, routes, "a snapshot does not move");
  assert.equal(sharding.stats.routes, routes + 1);
});
