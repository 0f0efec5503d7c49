// Cluster sharding over real loopback TCP: three systems in one process.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import {
  ActorSystem,
  AskCancelledError,
  AskTimeoutError,
  Behaviors,
  silentLogger,
  UniqueAddress,
} from "../../src/actor/index.ts";
import { RemoteAskError } from "../../src/remote/index.ts";
import {
  ClusterSharding,
  ClusterShardingConfigurationError,
  NoShardOwnerError,
  ShardingSettings,
} from "../../src/sharding/index.ts";
import {
  PassivateShard,
  PrepareShard,
  registerShardingWireTypes,
  ShardingControlAck,
  ShardingEnvelope,
} from "../../src/sharding/internal/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { findId } from "./fixtures/members.ts";
import {
  DeliverOrder,
  FailOrder,
  GetOrder,
  OrderBehavior,
  OrderCommand,
  OrderReply,
  SenderReply,
  SlowOrder,
  started,
  WhoSent,
} from "./fixtures/order.ts";
import {
  describeNodes,
  planSettled,
  type ShardingNode,
  settled,
  startShardingNodes,
  terminateAll,
} from "./fixtures/tcp-nodes.ts";

let nodes: ShardingNode[] = [];
before(async () => {
  nodes = await startShardingNodes(3);
  // A short wait for a coordinator (docs/protocol.md §8.6), so the unreachable-member test sees the wait end.
  const settings = { shardCount: 32, heldDeliveryTimeout: 400 };
  for (const n of nodes) n.sharding.init("Order", OrderCommand, settings, (id) => new OrderBehavior(id));
  await eventually(() => nodes.every((n) => settled(n, 3)), { what: "3 nodes Up and converged" });
  await eventually(() => planSettled(nodes, "Order", { shardCount: 32 }), {
    what: "a balanced plan everywhere",
    describe: describeNodes(nodes, "Order"),
  });
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
  const startedBefore = started.length;
  const hosted: string[] = [];
  for (const [i, id] of ids.entries())
    nodes[i % 3]!.sharding.entityRefFor<OrderCommand>("Order", id).tell(new DeliverOrder(`parcel-${i}`));
  for (const [i, id] of ids.entries()) {
    // Order holds per sender: the node that told asks first; once that reply is in, any node sees the parcel.
    const first = await nodes[i % 3]!.sharding.entityRefFor<OrderCommand>("Order", id).ask(
      new GetOrder(),
      OrderReply,
      3_000,
    );
    assert.deepEqual(first.parcels, [`parcel-${i}`], JSON.stringify(describeNodes(nodes, "Order")()));
    const reply = await nodes[(i + 1) % 3]!.sharding.entityRefFor<OrderCommand>("Order", id).ask(
      new GetOrder(),
      OrderReply,
      3_000,
    );
    assert.deepEqual(reply.parcels, [`parcel-${i}`]);
    const owner = nodes[0]!.sharding.ownerFor("Order", id)!;
    assert.equal(reply.host, nodes.find((n) => n.cluster.selfAddress.equals(owner))!.system.address.toString());
    hosted.push(reply.host);
  }
  // Live entity counts are not asserted: under load a failure-detector blip (suspendOwnership) or a late handoff may
  // legitimately stop entities after their asks were answered. What must hold is that each entity was activated
  // exactly once, on the node that answered for it, and that placement used all three nodes.
  const starts = started.slice(startedBefore);
  const hosts = new Set<string>();
  for (const [i, id] of ids.entries()) {
    const of = starts.filter((s) => s.endsWith(`:${id}`));
    assert.deepEqual(of, [`${hosted[i]}:${id}`], `${id} activated once, on its owner`);
    hosts.add(hosted[i]!);
  }
  assert.equal(hosts.size, 3, "LeastLoaded spreads shards over all nodes");
  const coordinator = [...nodes].sort((a, b) =>
    UniqueAddress.compare(a.cluster.selfAddress, b.cluster.selfAddress),
  )[0]!;
  assert.ok(coordinator.sharding.stats.forwards > 0);
  assert.ok(nodes.filter((n) => n !== coordinator).every((n) => n.sharding.stats.remoteRoutes > 0));
});

/** Coordinator, a caller that is not the coordinator, and an entity id owned by the third node. */
function threeNodeHop(prefix: string) {
  const sorted = [...nodes].sort((a, b) => UniqueAddress.compare(a.cluster.selfAddress, b.cluster.selfAddress));
  const [coordinator, caller, owner] = sorted as [ShardingNode, ShardingNode, ShardingNode];
  const id = findId(
    prefix,
    (x) => coordinator.sharding.ownerFor("Order", x)?.equals(owner.cluster.selfAddress) === true,
    describeNodes(nodes, "Order"),
  );
  return { coordinator, caller, owner, id };
}

test("one tell from a third node counts exactly once at each hop", async () => {
  const { coordinator, caller, owner, id } = threeNodeHop("count");
  const before = {
    caller: caller.sharding.stats,
    coordinator: coordinator.sharding.stats,
    owner: owner.sharding.stats,
  };
  caller.sharding.entityRefFor<OrderCommand>("Order", id).tell(new DeliverOrder("counted"));
  await eventually(() => owner.sharding.stats.localDeliveries === before.owner.localDeliveries + 1, {
    what: "the delivery on the owner",
    describe: describeNodes(nodes, "Order"),
  });
  assert.equal(caller.sharding.stats.routes, before.caller.routes + 1, "routes on the caller");
  assert.equal(caller.sharding.stats.remoteRoutes, before.caller.remoteRoutes + 1, "remoteRoutes on the caller");
  assert.equal(coordinator.sharding.stats.forwards, before.coordinator.forwards + 1, "forwards on the coordinator");
  assert.equal(owner.sharding.stats.activations, before.owner.activations + 1, "activations on the owner");
  assert.equal(
    coordinator.sharding.stats.localDeliveries,
    before.coordinator.localDeliveries,
    "nothing delivered there",
  );
});

test("asks across three nodes: reply, failure, timeout and cancellation reach the caller", async () => {
  const { caller, owner, id } = threeNodeHop("ask");
  const ref = caller.sharding.entityRefFor<OrderCommand>("Order", id);
  const reply = await ref.ask(new GetOrder(), OrderReply, 3_000);
  assert.equal(reply.host, owner.system.address.toString());
  const rejectedBefore = owner.sharding.stats.rejectedEnvelopes;
  await assert.rejects(ref.ask(new FailOrder(), OrderReply, 3_000), (e: unknown) => {
    assert.ok(e instanceof RemoteAskError, String(e));
    assert.match(e.message, /refused/);
    return true;
  });
  // The failed relayed ask is counted where it failed: at the owner, which answered the caller directly.
  assert.equal(owner.sharding.stats.rejectedEnvelopes, rejectedBefore + 1, "rejectedEnvelopes on the owner");
  await assert.rejects(ref.ask(new SlowOrder(), OrderReply, 50), AskTimeoutError);
  // A relayed ask the entity never answers is counted once, on the owner, when its timeout passes there too.
  await eventually(() => owner.sharding.stats.rejectedEnvelopes === rejectedBefore + 2, {
    what: "the timed-out relayed ask counted on the owner",
    describe: () => owner.sharding.stats,
  });
  const controller = new AbortController();
  const pending = ref.ask(new SlowOrder(), OrderReply, 300, { signal: controller.signal });
  controller.abort();
  await assert.rejects(pending, AskCancelledError);
  // The owner cannot see the cancellation; the entity never answers, so that ask counts at its timeout as well.
  await eventually(() => owner.sharding.stats.rejectedEnvelopes === rejectedBefore + 3, {
    what: "the unanswered cancelled ask counted on the owner",
    describe: () => owner.sharding.stats,
  });
  // The entity survived its failure (restarted) and still answers; an answered relayed ask counts nothing.
  assert.equal((await ref.ask(new GetOrder(), OrderReply, 3_000)).host, owner.system.address.toString());
  assert.equal(owner.sharding.stats.rejectedEnvelopes, rejectedBefore + 3, "answered asks are not rejections");
});

test("malformed sharding envelopes over TCP are counted by reason in sharding stats; routing stays up", async () => {
  const { coordinator, caller, owner, id } = threeNodeHop("malformed");
  const daemon = caller.system.actorSelection(`${coordinator.cluster.selfAddress.address}/system/sharding`);
  const settingsKey = ShardingSettings.create({ shardCount: 32 }).key;
  const shardId = coordinator.sharding.shardOf("Order", id);
  const envelope = (overrides: Partial<Record<keyof ShardingEnvelope, unknown>>): ShardingEnvelope =>
    Object.assign(
      new ShardingEnvelope("User", "Order", id, shardId, settingsKey, 0, null, null, true, {
        type: "DeliverOrder",
        payload: { parcel: "never" },
      }),
      overrides,
    );
  const before = coordinator.sharding.stats;
  const ownerBefore = owner.sharding.stats;
  const remotingBefore = coordinator.remoting.stats;
  // A registered wire type whose fields fail its own validation: remoting drops it, sharding counts it.
  daemon.tell(envelope({ kind: "Teleport" }));
  await eventually(
    () => coordinator.sharding.stats.malformedEnvelopes.undecodable === before.malformedEnvelopes.undecodable + 1,
    {
      what: "the undecodable envelope counted by sharding",
      describe: () => coordinator.sharding.stats,
    },
  );
  // A well-formed envelope whose user payload names a type nobody registered: the coordinator forwards the payload
  // as it came, undecoded, and the owner, where it is decoded once, refuses and counts it.
  daemon.tell(envelope({ message: { type: "no.such.Type", payload: {} } }));
  await eventually(
    () =>
      owner.sharding.stats.malformedEnvelopes.payload === ownerBefore.malformedEnvelopes.payload + 1 &&
      owner.sharding.stats.rejectedEnvelopes === ownerBefore.rejectedEnvelopes + 1,
    {
      what: "the unknown payload type counted by sharding on the owner",
      describe: () => owner.sharding.stats,
    },
  );
  assert.equal(
    coordinator.sharding.stats.malformedEnvelopes.payload,
    before.malformedEnvelopes.payload,
    "not decoded on the way",
  );
  // A control message carrying another settings key is refused as incompatible, before anything runs.
  const wrongKey = ShardingSettings.create({ shardCount: 33 }).key;
  daemon.tell(envelope({ kind: "Activate", message: null, settingsKey: wrongKey }));
  await eventually(() => coordinator.sharding.stats.rejectedEnvelopes >= before.rejectedEnvelopes + 2, {
    what: "the coordinator's two rejections counted",
    describe: () => coordinator.sharding.stats,
  });
  assert.ok(coordinator.remoting.stats.rejected.undecodable > (remotingBefore.rejected.undecodable ?? 0));
  assert.equal(coordinator.sharding.stats.localDeliveries, before.localDeliveries, "nothing was delivered");
  assert.equal(owner.sharding.stats.localDeliveries, ownerBefore.localDeliveries, "nothing was delivered on the owner");
  assert.equal(
    coordinator.remoting.stats.handshakesOk,
    remotingBefore.handshakesOk,
    "no association was re-established",
  );
  // The same association and routing still work.
  const reply = await caller.sharding.entityRefFor<OrderCommand>("Order", id).ask(new GetOrder(), OrderReply, 3_000);
  assert.equal(reply.host, owner.system.address.toString());
  assert.ok(!reply.parcels.includes("never"));
});

test("a three-node hop keeps the original sender path", async () => {
  const { caller, owner, id } = threeNodeHop("sender");
  const seen: string[] = [];
  const probe = caller.system.spawn(
    Behaviors.receive<unknown>((message) => {
      if (message instanceof SenderReply) seen.push(message.senderPath ?? "none");
    }),
    "probe",
  );
  caller.sharding.entityRefFor<OrderCommand>("Order", id).tell(new WhoSent(), probe);
  await eventually(() => seen.length === 1, { what: "the entity's answer to the probe" });
  assert.equal(seen[0], probe.path.toString());
  assert.ok(owner.sharding.stats.localDeliveries > 0);
});

test("forwarded traffic from an impostor (not the coordinator) is rejected and counted", async () => {
  const { coordinator, owner, id } = threeNodeHop("impostor");
  const impostor = ActorSystem.create("movie", { logger: silentLogger });
  try {
    const remoting = await impostor.enableRemoting({ host: "127.0.0.1", port: 0 });
    registerShardingWireTypes(remoting.registry);
    const settingsKey = ShardingSettings.create({ shardCount: 32 }).key;
    const shardId = owner.sharding.shardOf("Order", id);
    const forged = new ShardingEnvelope(
      "User",
      "Order",
      id,
      shardId,
      settingsKey,
      1,
      coordinator.cluster.selfAddress.toString(),
      null,
      false,
      {
        type: "DeliverOrder",
        payload: { parcel: "forged" },
      },
    );
    const before = owner.sharding.stats;
    impostor.actorSelection(`${owner.cluster.selfAddress.address}/system/sharding`).tell(forged);
    await eventually(() => owner.sharding.stats.rejectedEnvelopes > before.rejectedEnvelopes, {
      what: "the rejection",
    });
    assert.equal(owner.sharding.stats.localDeliveries, before.localDeliveries);
    const reply = await owner.sharding.entityRefFor<OrderCommand>("Order", id).ask(new GetOrder(), OrderReply, 3_000);
    assert.ok(!reply.parcels.includes("forged"));
    // a forged ask is failed back to the impostor with the authorization error
    const ask = impostor.actorSelection(`${owner.cluster.selfAddress.address}/system/sharding`).ask(
      new ShardingEnvelope(
        "User",
        "Order",
        id,
        shardId,
        settingsKey,
        1,
        coordinator.cluster.selfAddress.toString(),
        1000,
        false,
        {
          type: "GetOrder",
          payload: {},
        },
      ),
      OrderReply,
      2_000,
    );
    await assert.rejects(
      ask,
      (e: unknown) => e instanceof RemoteAskError && e.remoteClass === "ClusterShardingConfigurationError",
    );
    // Forged shard control claiming the coordinator's identity: a PassivateShard would drain the shard, a
    // PrepareShard would let the owner accept it from anyone. Both are refused, counted, and the entity keeps its state.
    const ownerRef = owner.sharding.entityRefFor<OrderCommand>("Order", id);
    ownerRef.tell(new DeliverOrder("kept"));
    assert.ok((await ownerRef.ask(new GetOrder(), OrderReply, 3_000)).parcels.includes("kept"));
    const startsBefore = started.length;
    const entities = owner.sharding.localEntityCount;
    const daemon = impostor.actorSelection(`${owner.cluster.selfAddress.address}/system/sharding`);
    const coordinatorText = coordinator.cluster.selfAddress.toString();
    for (const control of [
      new PassivateShard("Order", settingsKey, shardId, coordinatorText, null),
      new PrepareShard("Order", settingsKey, shardId, coordinatorText),
    ]) {
      const rejected = owner.sharding.stats.rejectedEnvelopes;
      await assert.rejects(
        daemon.ask(control, ShardingControlAck, 2_000),
        (e: unknown) =>
          e instanceof RemoteAskError &&
          e.remoteClass === "ClusterShardingConfigurationError" &&
          /not authorized by the current coordinator/.test(e.message),
        control.constructor.name,
      );
      assert.equal(owner.sharding.stats.rejectedEnvelopes, rejected + 1, control.constructor.name);
    }
    assert.equal(owner.sharding.localEntityCount, entities, "no entity was drained");
    assert.ok((await ownerRef.ask(new GetOrder(), OrderReply, 3_000)).parcels.includes("kept"), "same actor");
    assert.equal(started.length, startsBefore, "nothing re-activated");
  } finally {
    await impostor.terminate();
  }
});

test("routing fails closed while a member is unreachable, and recovers when it is reachable again", async () => {
  const [a, b, c] = nodes as [ShardingNode, ShardingNode, ShardingNode];
  // The earlier tests left entities on every node; suspending ownership must stop them.
  assert.ok(a.sharding.localEntityCount > 0 && c.sharding.localEntityCount > 0);
  a.remoting.blackhole(c.remoting.selfAddress);
  try {
    await eventually(() => a.cluster.snapshot().unreachable.length > 0, {
      what: "c unreachable from a",
      timeoutMs: 5_000,
    });
    // Reachability alone never relocates, but a node that sees an unreachable member stops its local entities.
    await eventually(
      () => [a, c].every((n) => n.cluster.snapshot().unreachable.length > 0 && n.sharding.localEntityCount === 0),
      { what: "a and c stop their entities while the other is unreachable", describe: describeNodes(nodes, "Order") },
    );
    const ref = a.sharding.entityRefFor<OrderCommand>("Order", "order-1");
    // The calls wait for a coordinator (a tell is held, nothing thrown) until heldDeliveryTimeout, then fail closed
    // naming the unreachable member: nothing is routed and no owner guessed.
    const expired = a.sharding.stats.heldExpired;
    ref.tell(new DeliverOrder("lost"));
    const unreachable = c.cluster.selfAddress.toString();
    await assert.rejects(
      ref.ask(new GetOrder(), OrderReply, 3_000),
      (e: unknown) =>
        e instanceof NoShardOwnerError &&
        e.unreachableMember === unreachable &&
        e.message.includes(`member ${unreachable} is unreachable`),
    );
    await eventually(() => a.sharding.stats.heldExpired === expired + 2, {
      what: "the held tell and ask expired",
      describe: () => a.sharding.stats,
    });
    assert.equal(a.sharding.ownerFor("Order", "order-1"), null);
  } finally {
    a.remoting.unblackhole(c.remoting.selfAddress);
  }
  await eventually(() => nodes.every((n) => settled(n, 3)), { what: "reachable again", timeoutMs: 5_000 });
  await eventually(
    async () => {
      try {
        await a.sharding.entityRefFor<OrderCommand>("Order", "order-1").ask(new GetOrder(), OrderReply, 1_000);
        return true;
      } catch {
        return false;
      }
    },
    { what: "routing works again", describe: describeNodes(nodes, "Order") },
  );
  // b routes again too: one tell counts exactly one route on b.
  const routes = b.sharding.stats.routes;
  b.sharding.entityRefFor<OrderCommand>("Order", "order-1").tell(new DeliverOrder("after-recovery"));
  assert.equal(b.sharding.stats.routes, routes + 1);
});
