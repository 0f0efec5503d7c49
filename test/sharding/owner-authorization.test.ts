// Owner-side authorization over the in-process fake cluster (authenticated origin per link): what an owner refuses
// even when the sender is the genuine coordinator, and that control traffic needs the same identity.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  ClusterShardingConfigurationError,
  LeastLoadedAllocation,
  NoRebalance,
  ShardingSettings,
} from "../../src/sharding/index.ts";
import {
  PassivateShard,
  PrepareShard,
  ShardingControlAck,
  ShardingEnvelope,
} from "../../src/sharding/internal/index.ts";
import { FakeCluster, type Node } from "./fixtures/fake-cluster.ts";
import { findId } from "./fixtures/members.ts";
import { OrderCommand, OrderReply, orderClasses, Seq, SequenceBehavior, sequenceSink } from "./fixtures/order.ts";
import { idOwnedBy, planOver } from "./fixtures/plans.ts";

const plain = { shardCount: 4, allocation: new LeastLoadedAllocation(), rebalance: new NoRebalance() };

test("an envelope from the genuine coordinator with a hop count other than 1 is refused by the owner", async () => {
  const cluster = new FakeCluster(orderClasses);
  try {
    const [a, b] = cluster.addNodesInAddressOrder("a-node", "b-node") as [Node, Node];
    for (const n of [a, b]) n.sharding.init("Hops", OrderCommand, plain, (id) => new SequenceBehavior(id));
    await planOver([a, b], "Hops", 2);
    const id = idOwnedBy(a, "Hops", b, "hops");
    const key = ShardingSettings.create(plain).key;
    const shard = b.sharding.shardOf("Hops", id);
    const daemonOfB = a.system.actorSelection(`${b.address.address}/system/sharding`);
    // From a (the coordinator, authenticated by the link) about a shard b owns: only the hop count is wrong.
    const envelope = (hopCount: number, askTimeoutMs: number | null, n: number) =>
      new ShardingEnvelope("User", "Hops", id, shard, key, hopCount, a.address.toString(), askTimeoutMs, false, {
        type: "Seq",
        payload: { n },
      });
    const before = b.sharding.stats;
    daemonOfB.tell(envelope(2, null, 1));
    await assert.rejects(daemonOfB.ask(envelope(5, 1_000, 2), OrderReply, 1_000), (e: unknown) => {
      assert.ok(e instanceof ClusterShardingConfigurationError, String(e));
      assert.match(e.message, /not authorized/);
      return true;
    });
    // The same link carries a genuine forward afterwards (FIFO), which is delivered.
    const reply = await a.sharding.entityRefFor<OrderCommand>("Hops", id).ask(new Seq(3), OrderReply, 1_000);
    assert.equal(reply.host, b.system.address.toString());
    assert.deepEqual(sequenceSink.get(id), [3], "neither multi-hop envelope reached the entity");
    assert.equal(b.sharding.stats.rejectedEnvelopes, before.rejectedEnvelopes + 2);
    assert.equal(b.sharding.stats.localDeliveries, before.localDeliveries + 1);
  } finally {
    await cluster.shutdown();
  }
});

test("PassivateShard and PrepareShard naming the coordinator but sent by another member are refused", async () => {
  const cluster = new FakeCluster(orderClasses);
  try {
    const [a, b, c] = cluster.addNodesInAddressOrder("a-node", "b-node", "c-node") as [Node, Node, Node];
    for (const n of [a, b, c]) n.sharding.init("Ctl", OrderCommand, plain, (id) => new SequenceBehavior(id));
    await planOver([a, b, c], "Ctl", 3);
    const onC = idOwnedBy(a, "Ctl", c, "ctl");
    const onA = idOwnedBy(a, "Ctl", a, "ctl");
    const ref = b.sharding.entityRefFor<OrderCommand>("Ctl", onC);
    assert.equal((await ref.ask(new Seq(1), OrderReply, 1_000)).host, c.system.address.toString());
    const key = ShardingSettings.create(plain).key;
    const coordinator = a.address.toString();
    const daemonOfC = b.system.actorSelection(`${c.address.address}/system/sharding`);
    const before = c.sharding.stats;
    const refused = (e: unknown) => {
      assert.ok(e instanceof ClusterShardingConfigurationError, String(e));
      assert.match(e.message, /not authorized by the current coordinator/);
      return true;
    };
    // b is a member, but not the coordinator: the transport's authenticated origin decides, not the claimed name.
    await assert.rejects(
      daemonOfC.ask(
        new PassivateShard("Ctl", key, c.sharding.shardOf("Ctl", onC), coordinator, null),
        ShardingControlAck,
        1_000,
      ),
      refused,
    );
    await assert.rejects(
      daemonOfC.ask(
        new PrepareShard("Ctl", key, c.sharding.shardOf("Ctl", onA), coordinator),
        ShardingControlAck,
        1_000,
      ),
      refused,
    );
    assert.equal(c.sharding.stats.rejectedEnvelopes, before.rejectedEnvelopes + 2);
    assert.equal(c.sharding.localEntityCount, 1, "c's entity was not drained");
    // The entity keeps its actor (no new activation) and its shard keeps taking traffic on c.
    assert.equal((await ref.ask(new Seq(2), OrderReply, 1_000)).host, c.system.address.toString());
    assert.equal(c.sharding.stats.activations, before.activations);
    assert.deepEqual(sequenceSink.get(onC), [1, 2]);
    // The shard c was asked to prepare stays a's: a forwarded envelope for it from a is still refused at c.
    const forged = new ShardingEnvelope(
      "User",
      "Ctl",
      onA,
      c.sharding.shardOf("Ctl", onA),
      key,
      1,
      coordinator,
      null,
      false,
      {
        type: "Seq",
        payload: { n: 9 },
      },
    );
    a.system.actorSelection(`${c.address.address}/system/sharding`).tell(forged);
    await a.sharding.entityRefFor<OrderCommand>("Ctl", onC).ask(new Seq(3), OrderReply, 1_000); // same a→c link, after it
    assert.equal(c.sharding.stats.rejectedEnvelopes, before.rejectedEnvelopes + 3);
    assert.equal(sequenceSink.get(onA), undefined);
  } finally {
    await cluster.shutdown();
  }
});

test("after the coordinator changes, an owner refuses the new coordinator's forwards for shards only the old coordinator gave it", async () => {
  const cluster = new FakeCluster(orderClasses);
  try {
    const [b, c] = cluster.addNodesInAddressOrder("b-node", "c-node") as [Node, Node];
    for (const n of [b, c]) n.sharding.init("Old", OrderCommand, plain, (id) => new SequenceBehavior(id));
    await planOver([b, c], "Old", 2);
    const key = ShardingSettings.create(plain).key;
    const ownedByC = idOwnedBy(b, "Old", c, "old");
    const ownedByB = idOwnedBy(b, "Old", b, "old");
    // b, the coordinator, prepares one of its own shards on c (as a handoff to c would).
    await b.system
      .actorSelection(`${c.address.address}/system/sharding`)
      .ask(
        new PrepareShard("Old", key, c.sharding.shardOf("Old", ownedByB), b.address.toString()),
        ShardingControlAck,
        1_000,
      );
    // A lower address joins while c's view has not converged: c accepts a0 as coordinator but still holds b's plan
    // and b's preparation, neither of which a0 authored.
    c.setConverged(false);
    const a0 = cluster.addNode("a0-node");
    const daemonOfC = a0.system.actorSelection(`${c.address.address}/system/sharding`);
    const before = c.sharding.stats;
    const forward = (id: string) =>
      daemonOfC.ask(
        new ShardingEnvelope(
          "User",
          "Old",
          id,
          c.sharding.shardOf("Old", id),
          key,
          1,
          a0.address.toString(),
          1_000,
          false,
          {
            type: "Seq",
            payload: { n: 1 },
          },
        ),
        OrderReply,
        1_000,
      );
    const refused = (e: unknown) => {
      assert.ok(e instanceof ClusterShardingConfigurationError, String(e));
      assert.match(e.message, /not authorized/);
      return true;
    };
    await assert.rejects(forward(ownedByC), refused, "owned only under the old coordinator's plan");
    await assert.rejects(forward(ownedByB), refused, "prepared only by the old coordinator");
    assert.equal(c.sharding.stats.rejectedEnvelopes, before.rejectedEnvelopes + 2);
    assert.equal(c.sharding.stats.localDeliveries, before.localDeliveries);
    assert.equal(sequenceSink.get(ownedByC), undefined);
    assert.equal(sequenceSink.get(ownedByB), undefined);
  } finally {
    await cluster.shutdown();
  }
});

// Until 2026-12-06 a drained shard stayed refused until the next plan, whoever forwarded. A coordinator sends the old
// owner nothing for a shard while its handoff runs (it buffers), so a forward that reaches the drained owner from
// the coordinator whose plan still places the shard there means that handoff was given up; refusing it stranded the
// shard until a plan that never came (operator-move seed 2490; docs/protocol.md §9.4 "Re-own after an aborted
// handoff"). The owner now serves it again, under the usual owner check.
test("a previous owner that drained a shard serves it again at the coordinator's next forward (the handoff was given up)", async () => {
  const cluster = new FakeCluster(orderClasses);
  try {
    const [a, b] = cluster.addNodesInAddressOrder("a-node", "b-node") as [Node, Node];
    for (const n of [a, b]) n.sharding.init("Drained", OrderCommand, plain, (id) => new SequenceBehavior(id));
    await planOver([a, b], "Drained", 2);
    const key = ShardingSettings.create(plain).key;
    const moving = idOwnedBy(a, "Drained", b, "drained");
    const shard = b.sharding.shardOf("Drained", moving);
    const staying = findId(
      "staying",
      (id) =>
        a.sharding.ownerFor("Drained", id)?.equals(b.address) === true && b.sharding.shardOf("Drained", id) !== shard,
    );
    const daemonOfB = a.system.actorSelection(`${b.address.address}/system/sharding`);
    // The coordinator's first handoff step: b drains the shard (nothing lives there yet) and acknowledges.
    await daemonOfB.ask(
      new PassivateShard("Drained", key, shard, a.address.toString(), null),
      ShardingControlAck,
      1_000,
    );
    // A forward for the drained shard from the coordinator whose plan still places it on b: the handoff was given up.
    daemonOfB.tell(
      new ShardingEnvelope("User", "Drained", moving, shard, key, 1, a.address.toString(), null, false, {
        type: "Seq",
        payload: { n: 1 },
      }),
    );
    // A later message on the same link, for another shard of b, is delivered: the forward has been handled.
    await a.sharding.entityRefFor<OrderCommand>("Drained", staying).ask(new Seq(1), OrderReply, 1_000);
    assert.equal(b.sharding.localEntityCount, 2, "the drained shard's entity lives on b again, beside the other's");
    assert.deepEqual(sequenceSink.get(moving), [1], "the forward was delivered");
  } finally {
    await cluster.shutdown();
  }
});
