// Multi-node behaviour over the in-process fake cluster (membership driven by the test, network simulated).
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  ClusterShardingConfigurationError,
  LeastLoadedAllocation,
  NoRebalance,
  ShardingSettings,
  WeightedLeastLoadedAllocation,
} from "../../src/sharding/index.ts";
import {
  PlanRequest,
  PlanSnapshot,
  PlanUpdate,
  ShardingControlAck,
  ShardingEnvelope,
} from "../../src/sharding/internal/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { FakeCluster, type Node } from "./fixtures/fake-cluster.ts";
import { findId } from "./fixtures/members.ts";
import {
  GetOrder,
  OrderCommand,
  OrderReply,
  orderClasses,
  Seq,
  SequenceBehavior,
  sequenceSink,
} from "./fixtures/order.ts";
import { recordingLogger } from "./fixtures/tcp-nodes.ts";

test("handoff buffer: 1,024 deliveries wait while the old owner cannot drain, the next is rejected, then FIFO flush", async () => {
  const cluster = new FakeCluster(orderClasses);
  try {
    const [a, b] = cluster.addNodesInAddressOrder("a-node", "b-node") as [Node, Node];
    const settings = { shardCount: 4, allocation: new LeastLoadedAllocation(), rebalance: new NoRebalance() };
    for (const n of [a, b]) n.sharding.init("Buf", OrderCommand, settings, (id) => new SequenceBehavior(id));
    await eventually(
      () => [a, b].every((n) => new Set([...n.sharding.allocations("Buf").values()].map(String)).size === 2),
      {
        what: "a plan over both nodes",
        describe: () =>
          [a, b].map((n) => [...n.sharding.allocations("Buf")].map(([s, o]) => `${s}:${o.address.system}`)),
      },
    );
    const id = findId("buf", (x) => a.sharding.ownerFor("Buf", x)?.equals(b.address) === true);
    const shard = a.sharding.shardOf("Buf", id);
    cluster.blackhole(a, b);
    b.setStatus("Leaving");
    await eventually(() => a.sharding.handoffInProgress("Buf", shard), { what: "the handoff of b's shard" });
    const ref = a.sharding.entityRefFor<OrderCommand>("Buf", id);
    for (let n = 0; n < 1024; n++) ref.tell(new Seq(n));
    const rejected = a.sharding.stats.rejectedEnvelopes;
    await assert.rejects(ref.ask(new GetOrder(), OrderReply, 1_000), (e: unknown) => {
      assert.ok(e instanceof ClusterShardingConfigurationError, String(e));
      assert.match(e.message, new RegExp(`^Shard handoff buffer is full for Buf/${shard}`));
      return true;
    });
    ref.tell(new Seq(99_999)); // also over the limit: rejected and counted
    assert.equal(a.sharding.stats.rejectedEnvelopes, rejected + 2);
    assert.equal(a.sharding.handoffsInProgress, 2, "both of b's shards are moving");
    assert.ok(!a.guardsAllow(b), "the departure guard holds b while its shards are still on it");
    cluster.unblackhole(a, b);
    await eventually(() => (sequenceSink.get(id)?.length ?? 0) === 1024, {
      what: "the buffered messages delivered to the new owner",
      timeoutMs: 15_000,
      describe: () => ({
        got: sequenceSink.get(id)?.length,
        handoffs: a.sharding.handoffsInProgress,
        stats: a.sharding.stats,
      }),
    });
    assert.deepEqual(
      sequenceSink.get(id),
      Array.from({ length: 1024 }, (_, i) => i),
      "FIFO",
    );
    assert.ok(a.sharding.ownerFor("Buf", id)!.equals(a.address));
    assert.equal(a.sharding.handoffInProgress("Buf", shard), false);
    // b's other shard may still be in flight: wait for both handoffs before the guard may let b go
    await eventually(() => a.guardsAllow(b), {
      what: "the departure guard letting b go once no shard is left on it",
      describe: () => ({
        handoffs: a.sharding.handoffsInProgress,
        plan: [...a.sharding.allocations("Buf")].map(String),
      }),
    });
    assert.equal(a.sharding.handoffsInProgress, 0);
  } finally {
    await cluster.shutdown();
  }
});

test("nodes with different settings for a type reject each other's envelopes", async () => {
  const cluster = new FakeCluster(orderClasses);
  try {
    const [a, b] = cluster.addNodesInAddressOrder("a-node", "b-node") as [Node, Node];
    a.sharding.init("Mixed", OrderCommand, { shardCount: 8 }, (id) => new SequenceBehavior(id));
    b.sharding.init("Mixed", OrderCommand, { shardCount: 8, idleTimeout: 60_000 }, (id) => new SequenceBehavior(id));
    await eventually(() => a.sharding.allocations("Mixed").size === 8, { what: "a's plan" });
    const before = a.sharding.stats.rejectedEnvelopes;
    await assert.rejects(
      b.sharding.entityRefFor<OrderCommand>("Mixed", "x").ask(new GetOrder(), OrderReply, 1_000),
      (e: unknown) => {
        // The fake network hands the asker's own ref across, so the error arrives unwrapped (TCP wraps it).
        assert.ok(e instanceof ClusterShardingConfigurationError, String(e));
        assert.match((e as Error).message, /received incompatible sharding settings/);
        return true;
      },
    );
    assert.ok(a.sharding.stats.rejectedEnvelopes > before);
    // b never registered a's settings, so the coordinator never places shards on it
    for (const owner of a.sharding.allocations("Mixed").values()) assert.ok(owner.equals(a.address));
  } finally {
    await cluster.shutdown();
  }
});

test("a node that has not registered the type is not eligible and rejects envelopes for it", async () => {
  const cluster = new FakeCluster(orderClasses);
  try {
    const [a, b] = cluster.addNodesInAddressOrder("a-node", "b-node") as [Node, Node];
    a.sharding.init("OnlyA", OrderCommand, { shardCount: 8 }, (id) => new SequenceBehavior(id));
    await eventually(() => a.sharding.allocations("OnlyA").size === 8, { what: "a's plan" });
    for (const owner of a.sharding.allocations("OnlyA").values()) assert.ok(owner.equals(a.address));
    const reply = await a.sharding.entityRefFor<OrderCommand>("OnlyA", "x").ask(new GetOrder(), OrderReply, 1_000);
    assert.equal(reply.host, a.system.address.toString());
    assert.throws(() => b.sharding.entityRefFor("OnlyA", "x"), /not registered on this node/);
  } finally {
    await cluster.shutdown();
  }
});

test("a coordinator change bootstraps from the members' snapshots and publishes a higher generation", async () => {
  const cluster = new FakeCluster(orderClasses);
  try {
    const [a, b, c] = cluster.addNodesInAddressOrder("a-node", "b-node", "c-node") as [Node, Node, Node];
    for (const n of [a, b, c])
      n.sharding.init("Boot", OrderCommand, { shardCount: 12 }, (id) => new SequenceBehavior(id));
    await eventually(
      () =>
        [b, c].every(
          (n) =>
            n.sharding.allocations("Boot").size === 12 &&
            n.sharding.planGeneration("Boot") === a.sharding.planGeneration("Boot"),
        ) && a.sharding.handoffsInProgress === 0,
      {
        what: "everyone follows a's plan",
      },
    );
    const generation = a.sharding.planGeneration("Boot");
    a.setStatus("Down");
    await eventually(
      () =>
        [b, c].every(
          (n) =>
            n.sharding.planGeneration("Boot") > generation &&
            n.sharding.allocations("Boot").size === 12 &&
            [...n.sharding.allocations("Boot").values()].every((o) => !o.equals(a.address)),
        ),
      {
        what: "b publishes a higher generation without a",
        timeoutMs: 5_000,
        describe: () => [b, c].map((n) => n.sharding.planGeneration("Boot")),
      },
    );
    const reply = await c.sharding.entityRefFor<OrderCommand>("Boot", "y").ask(new GetOrder(), OrderReply, 1_000);
    assert.notEqual(reply.host, a.system.address.toString());
  } finally {
    await cluster.shutdown();
  }
});

test("bad control input is rejected, counted, and never breaks the node", async () => {
  const cluster = new FakeCluster(orderClasses);
  try {
    const [a, b] = cluster.addNodesInAddressOrder("a-node", "b-node") as [Node, Node];
    for (const n of [a, b]) n.sharding.init("Bad", OrderCommand, { shardCount: 4 }, (id) => new SequenceBehavior(id));
    await eventually(
      () =>
        b.sharding.planGeneration("Bad") > 0 && b.sharding.planGeneration("Bad") === a.sharding.planGeneration("Bad"),
      {
        what: "b follows a",
      },
    );
    const key = ShardingSettings.create({ shardCount: 4 }).key;
    const daemonOfA = b.system.actorSelection(`${a.address.address}/system/sharding`);
    const daemonOfB = a.system.actorSelection(`${b.address.address}/system/sharding`);
    // Each bad input on its own: exactly one rejection on the receiving node, counted before the next is sent.
    const rejectedOnce = async (node: Node, what: string, send: () => void) => {
      const before = node.sharding.stats.rejectedEnvelopes;
      send();
      await eventually(() => node.sharding.stats.rejectedEnvelopes >= before + 1, { what });
      assert.equal(node.sharding.stats.rejectedEnvelopes, before + 1, what);
    };
    const seq = { type: "Seq", payload: { n: 1 } };
    await rejectedOnce(a, "a plan request whose requester is not the sender's authenticated identity", () =>
      daemonOfA.tell(new PlanRequest("Bad", key, a.address.toString())),
    );
    await rejectedOnce(a, "a message of an unknown kind", () => daemonOfA.tell(new ShardingControlAck(true)));
    const generation = b.sharding.planGeneration("Bad");
    await rejectedOnce(a, "a plan update from a node that is not the coordinator", () =>
      daemonOfA.tell(
        new PlanUpdate("Bad", key, b.address.toString(), generation + 5, [{ shardId: 0, owner: b.address.toString() }]),
      ),
    );
    await rejectedOnce(b, "a stale plan update from the coordinator", () =>
      daemonOfB.tell(
        new PlanUpdate("Bad", key, a.address.toString(), 1, [{ shardId: 0, owner: b.address.toString() }]),
      ),
    );
    await rejectedOnce(a, "an envelope for a type the node does not know", () =>
      daemonOfA.tell(new ShardingEnvelope("User", "Nope", "x", 0, key, 0, null, null, false, seq)),
    );
    await rejectedOnce(a, "an envelope with another settings key", () =>
      daemonOfA.tell(new ShardingEnvelope("User", "Bad", "x", 0, "other-key", 0, null, null, false, seq)),
    );
    await rejectedOnce(a, "a hop-0 envelope whose shard does not match the partitioner", () =>
      daemonOfA.tell(new ShardingEnvelope("User", "Bad", "x", 3, key, 0, null, null, false, seq)),
    );
    await rejectedOnce(a, "a forwarded envelope from b, which is not the coordinator", () =>
      daemonOfA.tell(
        new ShardingEnvelope(
          "User",
          "Bad",
          "x",
          a.sharding.shardOf("Bad", "x"),
          key,
          1,
          a.address.toString(),
          null,
          false,
          seq,
        ),
      ),
    );
    assert.equal(b.sharding.planGeneration("Bad"), generation, "the stale update changed nothing");
    assert.equal(sequenceSink.get("x"), undefined, "no bad envelope reached an entity");
    const reply = await b.sharding.entityRefFor<OrderCommand>("Bad", "y").ask(new GetOrder(), OrderReply, 1_000);
    assert.ok(reply.host.length > 0, "both nodes still route");
  } finally {
    await cluster.shutdown();
  }
});

test("the genuine coordinator forwarding a shard the receiver neither owns nor has prepared is rejected and counted", async () => {
  const cluster = new FakeCluster(orderClasses);
  try {
    const [a, b] = cluster.addNodesInAddressOrder("a-node", "b-node") as [Node, Node];
    const settings = { shardCount: 8, allocation: new LeastLoadedAllocation(), rebalance: new NoRebalance() };
    for (const n of [a, b]) n.sharding.init("Auth", OrderCommand, settings, (id) => new SequenceBehavior(id));
    await eventually(
      () =>
        b.sharding.planGeneration("Auth") > 0 &&
        b.sharding.planGeneration("Auth") === a.sharding.planGeneration("Auth") &&
        new Set([...b.sharding.allocations("Auth").values()].map(String)).size === 2,
      { what: "b follows a's plan over both nodes" },
    );
    // an entity whose shard a (the coordinator) owns, so b has neither ownership nor a preparation for it
    const id = findId("auth", (x) => b.sharding.ownerFor("Auth", x)?.equals(a.address) === true);
    const key = ShardingSettings.create(settings).key;
    const rejected = b.sharding.stats.rejectedEnvelopes;
    const deliveries = b.sharding.stats.localDeliveries;
    a.system.actorSelection(`${b.address.address}/system/sharding`).tell(
      new ShardingEnvelope(
        "User",
        "Auth",
        id,
        b.sharding.shardOf("Auth", id),
        key,
        1,
        a.address.toString(),
        null,
        false,
        {
          type: "Seq",
          payload: { n: 1 },
        },
      ),
    );
    await eventually(() => b.sharding.stats.rejectedEnvelopes === rejected + 1, {
      what: "b's rejection",
      describe: () => b.sharding.stats,
    });
    assert.equal(b.sharding.stats.localDeliveries, deliveries);
    assert.equal(b.sharding.localEntityCount, 0, "no entity activated on b");
    assert.equal(sequenceSink.get(id), undefined, "the envelope reached no entity");
  } finally {
    await cluster.shutdown();
  }
});

test("a plan snapshot with an absurd generation is refused and counted, so the coordinator's generation stays usable", async () => {
  const cluster = new FakeCluster(orderClasses);
  try {
    const [a, b] = cluster.addNodesInAddressOrder("a-node", "b-node") as [Node, Node];
    for (const n of [a, b]) n.sharding.init("Gen", OrderCommand, { shardCount: 4 }, (id) => new SequenceBehavior(id));
    await eventually(
      () =>
        b.sharding.planGeneration("Gen") > 0 && b.sharding.planGeneration("Gen") === a.sharding.planGeneration("Gen"),
      { what: "b follows a" },
    );
    const generation = a.sharding.planGeneration("Gen");
    const key = ShardingSettings.create({ shardCount: 4 }).key;
    const rejected = a.sharding.stats.rejectedEnvelopes;
    const owners = [...a.sharding.allocations("Gen")].map(([shardId, o]) => ({ shardId, owner: o.toString() }));
    b.system
      .actorSelection(`${a.address.address}/system/sharding`)
      .tell(new PlanSnapshot("Gen", key, b.address.toString(), Number.MAX_SAFE_INTEGER, owners));
    await eventually(() => a.sharding.stats.rejectedEnvelopes === rejected + 1, { what: "the refusal" });
    assert.equal(a.sharding.planGeneration("Gen"), generation, "the generation did not jump");
    const reply = await b.sharding.entityRefFor<OrderCommand>("Gen", "y").ask(new GetOrder(), OrderReply, 1_000);
    assert.ok(reply.host.length > 0, "plans still flow");
  } finally {
    await cluster.shutdown();
  }
});

test("an allocation that refuses a member: init fails on that node and registers nothing; a coordinator refusing another member logs it and keeps routing", async () => {
  const logger = recordingLogger();
  const cluster = new FakeCluster(orderClasses, { logger });
  try {
    const [a, b] = cluster.addNodesInAddressOrder("a-node", "b-node") as [Node, Node];
    // A weight the strategy refuses for this very node fails init, naming the field, before anything is registered.
    assert.throws(
      () =>
        b.sharding.init(
          "Weigh",
          OrderCommand,
          { shardCount: 4, allocation: new WeightedLeastLoadedAllocation(() => 0) },
          (id) => new SequenceBehavior(id),
        ),
      (e: unknown) =>
        e instanceof ClusterShardingConfigurationError &&
        e.field === "allocation" &&
        /member allocation weight must be positive/.test(e.message),
    );
    assert.throws(() => b.sharding.entityRefFor("Weigh", "x"), /not registered on this node/);
    // Weight functions that disagree between nodes (same strategy id, so the same settings key): a's refuses b. Its
    // reconciles fail once b registers; that must not throw out of a timer, and the plan a has keeps working.
    const weigh = (refuseOthers: boolean) => ({
      shardCount: 4,
      allocation: new WeightedLeastLoadedAllocation((m) =>
        refuseOthers && !m.uniqueAddress.equals(a.address) ? 0 : 1,
      ),
    });
    a.sharding.init("Weigh", OrderCommand, weigh(true), (id) => new SequenceBehavior(id));
    await eventually(() => a.sharding.allocations("Weigh").size === 4, { what: "a's plan before b registers" });
    b.sharding.init("Weigh", OrderCommand, weigh(false), (id) => new SequenceBehavior(id));
    await eventually(
      () => logger.errors.some((e) => e.message === "sharding allocation failed; the plan is unchanged"),
      {
        what: "a's failed reconcile logged",
        describe: () => logger.errors,
      },
    );
    for (const owner of a.sharding.allocations("Weigh").values()) assert.ok(owner.equals(a.address));
    const reply = await b.sharding.entityRefFor<OrderCommand>("Weigh", "w").ask(new GetOrder(), OrderReply, 1_000);
    assert.equal(reply.host, a.system.address.toString());
  } finally {
    await cluster.shutdown();
  }
});
