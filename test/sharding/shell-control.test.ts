// Routing edge cases over the in-process fake cluster: a hop-0 envelope at a node that is not the coordinator,
// routes issued from a Leaving node, the last role-eligible owner leaving, and Activate/Passivate arriving while
// their shard is being handed off.
import assert from "node:assert/strict";
import { test } from "node:test";
import { STOP } from "../../src/actor/index.ts";
import {
  LeastLoadedAllocation,
  NoRebalance,
  NoShardOwnerError,
  RoleAwareAllocation,
  ShardingSettings,
  type ShardingStats,
} from "../../src/sharding/index.ts";
import { PassivateShard, ShardingEnvelope } from "../../src/sharding/internal/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { FakeCluster, type Node } from "./fixtures/fake-cluster.ts";
import {
  closeHolds,
  GatedSequenceBehavior,
  GetOrder,
  Hold,
  holding,
  OrderCommand,
  OrderReply,
  openHolds,
  orderClasses,
  Seq,
  SequenceBehavior,
  sequenceSink,
} from "./fixtures/order.ts";
import { idOwnedBy, planOver } from "./fixtures/plans.ts";

const plain = { shardCount: 4, allocation: new LeastLoadedAllocation(), rebalance: new NoRebalance() };

// Since the coordinator-change flush (docs/protocol.md §8.7) a node that is not the coordinator holds such an envelope
// instead of rejecting it at once: it may be a caller's, sent just before that caller's view moved to another
// coordinator, and the caller's flush marker will come behind it and have it relayed. No marker comes here (a is the
// coordinator and never changed), so it stays held until its deadline and is then rejected; it is never routed.
test("a hop-0 envelope at a node that is not the coordinator is held, never routed, and rejected at its deadline", async () => {
  const cluster = new FakeCluster(orderClasses);
  try {
    const [a, b] = cluster.addNodesInAddressOrder("a-node", "b-node") as [Node, Node];
    // A short wait (a local setting, not in the settings key): the rejection comes after 300 ms.
    for (const n of [a, b]) {
      n.sharding.init("Hop", OrderCommand, { ...plain, heldDeliveryTimeout: 300 }, (id) => new SequenceBehavior(id));
    }
    await planOver([a, b], "Hop", 2);
    const id = idOwnedBy(a, "Hop", b, "hop");
    const key = ShardingSettings.create(plain).key;
    const shard = b.sharding.shardOf("Hop", id);
    const daemonOfB = a.system.actorSelection(`${b.address.address}/system/sharding`);
    const envelope = (askTimeoutMs: number | null, n: number) =>
      new ShardingEnvelope("User", "Hop", id, shard, key, 0, null, askTimeoutMs, false, {
        type: "Seq",
        payload: { n },
      });
    const before = b.sharding.stats;
    daemonOfB.tell(envelope(null, 1)); // b owns the shard, but only the coordinator may route hop-0 traffic
    await eventually(() => b.sharding.stats.heldDeliveries === before.heldDeliveries + 1, {
      what: "b holding the tell",
      describe: () => b.sharding.stats,
    });
    await eventually(() => b.sharding.stats.rejectedEnvelopes === before.rejectedEnvelopes + 1, {
      what: "b's rejection of the tell at its deadline",
      describe: () => b.sharding.stats,
    });
    assert.equal(b.sharding.stats.heldExpired, before.heldExpired + 1);
    await assert.rejects(daemonOfB.ask(envelope(1_000, 2), OrderReply, 1_000), (e: unknown) => {
      assert.ok(e instanceof NoShardOwnerError, String(e));
      assert.equal(e.entityType, "Hop");
      assert.equal(e.shardId, shard);
      return true;
    });
    assert.equal(b.sharding.stats.rejectedEnvelopes, before.rejectedEnvelopes + 2);
    assert.equal(b.sharding.stats.heldExpired, before.heldExpired + 2);
    assert.equal(b.sharding.stats.localDeliveries, before.localDeliveries, "nothing delivered");
    assert.equal(b.sharding.stats.forwards, before.forwards, "nothing forwarded");
    assert.equal(b.sharding.localEntityCount, 0);
    assert.equal(sequenceSink.get(id), undefined);
    // The same entity through the coordinator works.
    const reply = await b.sharding.entityRefFor<OrderCommand>("Hop", id).ask(new Seq(3), OrderReply, 1_000);
    assert.equal(reply.host, b.system.address.toString());
    assert.deepEqual(sequenceSink.get(id), [3]);
  } finally {
    await cluster.shutdown();
  }
});

test("routes issued from a Leaving node fail closed with NoShardOwnerError and are counted; others keep routing", async () => {
  const cluster = new FakeCluster(orderClasses);
  try {
    const [a, b, c] = cluster.addNodesInAddressOrder("a-node", "b-node", "c-node") as [Node, Node, Node];
    for (const n of [a, b, c]) n.sharding.init("FromLeaving", OrderCommand, plain, (id) => new SequenceBehavior(id));
    await planOver([a, b, c], "FromLeaving", 3);
    const onC = idOwnedBy(a, "FromLeaving", c, "fl");
    await c.sharding.entityRefFor<OrderCommand>("FromLeaving", onC).ask(new Seq(1), OrderReply, 1_000);
    c.setStatus("Leaving");
    const ref = c.sharding.entityRefFor<OrderCommand>("FromLeaving", onC);
    const before = c.sharding.stats;
    const noCoordinator = (e: unknown) =>
      e instanceof NoShardOwnerError && e.entityType === "cluster" && e.shardId === -1;
    assert.throws(() => ref.tell(new Seq(2)), noCoordinator);
    await assert.rejects(ref.ask(new Seq(3), OrderReply, 1_000), noCoordinator);
    await assert.rejects(c.sharding.activate("FromLeaving", "other"), noCoordinator);
    assert.throws(() => ref.sendSystem(STOP), noCoordinator);
    assert.equal(c.sharding.stats.rejectedEnvelopes, before.rejectedEnvelopes + 4);
    assert.equal(c.sharding.stats.routes, before.routes + 2, "tell and ask count as routes");
    assert.equal(c.sharding.stats.passivationRequests, before.passivationRequests + 1);
    assert.equal(c.sharding.stats.remoteRoutes, before.remoteRoutes, "nothing was sent to the coordinator");
    assert.equal(c.sharding.ownerFor("FromLeaving", onC), null, "a Leaving node reports no owner");
    // The other nodes still reach the entity, on its new owner once c's shards have moved.
    const reply = await b.sharding.entityRefFor<OrderCommand>("FromLeaving", onC).ask(new Seq(4), OrderReply, 3_000);
    assert.notEqual(reply.host, c.system.address.toString());
    assert.deepEqual(sequenceSink.get(onC), [1, 4], "the refused messages never reached the entity");
  } finally {
    await cluster.shutdown();
  }
});

test("the last role-eligible owner leaving: its shards are drained and unallocated, routes fail closed, nothing guessed", async () => {
  const cluster = new FakeCluster(orderClasses);
  try {
    // a (frontend) is the coordinator; b is the only backend.
    const a = cluster.addNode("a-front", { roles: ["frontend"] });
    const b = cluster.addNode("b-back", { roles: ["backend"] });
    const settings = {
      shardCount: 4,
      allocation: new RoleAwareAllocation(new LeastLoadedAllocation(), ["backend"]),
      rebalance: new NoRebalance(),
    };
    for (const n of [a, b]) n.sharding.init("Last", OrderCommand, settings, (id) => new SequenceBehavior(id));
    await planOver([a, b], "Last", 1);
    assert.equal(a.sharding.allocations("Last").size, 4);
    const ref = a.sharding.entityRefFor<OrderCommand>("Last", "last-1");
    assert.equal((await ref.ask(new Seq(1), OrderReply, 1_000)).host, b.system.address.toString());
    assert.equal(b.sharding.localEntityCount, 1);

    b.setStatus("Leaving");
    await eventually(
      () => a.sharding.handoffsInProgress === 0 && a.sharding.allocations("Last").size === 0 && a.guardsAllow(b),
      {
        what: "every shard unallocated and b free to leave",
        describe: () => ({ handoffs: a.sharding.handoffsInProgress, plan: [...a.sharding.allocations("Last")] }),
      },
    );
    assert.equal(b.sharding.localEntityCount, 0, "b passivated its entities");
    const shard = a.sharding.shardOf("Last", "last-1");
    const rejected = a.sharding.stats.rejectedEnvelopes;
    await assert.rejects(ref.ask(new Seq(2), OrderReply, 1_000), (e: unknown) => {
      assert.ok(e instanceof NoShardOwnerError, String(e));
      assert.equal(e.entityType, "Last", "a shard without an owner, not a missing coordinator");
      assert.equal(e.shardId, shard);
      return true;
    });
    ref.tell(new Seq(3)); // the coordinator itself routes: the tell is refused and counted, not thrown
    await assert.rejects(a.sharding.activate("Last", "last-2"), NoShardOwnerError);
    assert.equal(a.sharding.stats.rejectedEnvelopes, rejected + 3);
    assert.equal(a.sharding.ownerFor("Last", "last-1"), null);
    assert.equal(a.sharding.localEntityCount, 0, "the frontend did not host the entity in b's place");
    assert.equal(a.sharding.stats.activations, 0);
    assert.deepEqual(sequenceSink.get("last-1"), [1]);

    // A new backend makes the shards routable again.
    b.setStatus("Removed");
    const c = cluster.addNode("c-back", { roles: ["backend"] });
    c.sharding.init("Last", OrderCommand, settings, (id) => new SequenceBehavior(id));
    await planOver([a, c], "Last", 1);
    assert.equal((await ref.ask(new Seq(4), OrderReply, 1_000)).host, c.system.address.toString());
  } finally {
    await cluster.shutdown();
  }
});

test("Activate and Passivate arriving during a handoff are buffered with the shard's traffic and flushed in order", async () => {
  const cluster = new FakeCluster(orderClasses);
  try {
    const [a, b, c] = cluster.addNodesInAddressOrder("a-node", "b-node", "c-node") as [Node, Node, Node];
    for (const n of [a, b, c]) n.sharding.init("Ctl", OrderCommand, plain, (id) => new GatedSequenceBehavior(id));
    await planOver([a, b, c], "Ctl", 3);
    // Three entities of one shard that b owns: one blocks b's drain, one is activated, one passivated, during the move.
    const gateId = idOwnedBy(a, "Ctl", b, "ctl");
    const shard = a.sharding.shardOf("Ctl", gateId);
    const sameShard: string[] = [];
    for (let i = 0; sameShard.length < 2; i++) {
      const id = `ctl-same-${i}`;
      if (a.sharding.shardOf("Ctl", id) === shard) sameShard.push(id);
    }
    const [activated, passivated] = sameShard as [string, string];
    // The kinds of hop-0 envelopes for the shard that reach the coordinator while its handoff runs.
    const arrivedDuringHandoff: string[] = [];
    cluster.onDeliver = ({ to, message }) => {
      if (message instanceof ShardingEnvelope && message.hopCount === 0 && message.shardId === shard) {
        if (to.equals(a.address) && a.sharding.handoffInProgress("Ctl", shard)) arrivedDuringHandoff.push(message.kind);
      }
    };
    let before = new Map<Node, ShardingStats>();
    closeHolds();
    let ack: Promise<{ accepted: boolean }>;
    let last: Promise<OrderReply>;
    try {
      c.sharding.entityRefFor<OrderCommand>("Ctl", gateId).tell(new Hold());
      await eventually(() => holding.has(gateId), { what: "the entity on b holding" });
      before = new Map([a, b, c].map((n) => [n, n.sharding.stats]));
      b.setStatus("Leaving");
      assert.ok(a.sharding.handoffInProgress("Ctl", shard), "the move of b's shard started");
      // From c, through the coordinator: everything waits in the handoff buffer while b's drain is held.
      ack = c.sharding.activate("Ctl", activated, 5_000);
      const ref = c.sharding.entityRefFor<OrderCommand>("Ctl", passivated);
      ref.tell(new Seq(1));
      ref.sendSystem(STOP);
      ref.tell(new Seq(2));
      last = ref.ask(new GetOrder(), OrderReply, 5_000);
      await eventually(() => arrivedDuringHandoff.length === 5, {
        what: "all five envelopes at the coordinator during the handoff",
        describe: () => arrivedDuringHandoff,
      });
      assert.deepEqual(arrivedDuringHandoff, ["Activate", "User", "Passivate", "User", "User"]);
      assert.ok(a.sharding.handoffInProgress("Ctl", shard), "still moving while b's drain is held");
      assert.equal(sequenceSink.get(passivated), undefined, "nothing delivered yet");
    } finally {
      openHolds();
    }
    assert.equal((await ack).accepted, true, "the buffered Activate created the entity on the new owner");
    const reply = await last;
    const newOwner = [a, c].find((n) => n.system.address.toString() === reply.host);
    assert.ok(newOwner !== undefined, `answered by ${reply.host}`);
    assert.ok(a.sharding.ownerFor("Ctl", passivated)?.equals(newOwner.address));
    const was = before.get(newOwner)!;
    // Activate, then Seq(1) activates `passivated`, STOP passivates it, Seq(2) activates it again: only that order
    // gives three activations and one passivation (STOP before Seq(1) would find no entity to stop).
    assert.equal(newOwner.sharding.stats.activations, was.activations + 3);
    assert.equal(newOwner.sharding.stats.explicitPassivations, was.explicitPassivations + 1);
    // Passivation is STOP (docs/protocol.md §8.4), which does not drain: the flush hands Seq(1) and the STOP over together,
    // so the first actor may stop before it processed Seq(1) (at-most-once). The second actor got Seq(2).
    assert.equal(sequenceSink.get(passivated)?.at(-1), 2);
    assert.equal(b.sharding.stats.activations, before.get(b)!.activations, "nothing activated on the old owner");
    assert.equal(b.sharding.stats.explicitPassivations, before.get(b)!.explicitPassivations);
    assert.equal(c.sharding.stats.passivationRequests, before.get(c)!.passivationRequests + 1);
  } finally {
    await cluster.shutdown();
  }
});

test("an owner that becomes ineligible by being downed: its shards move without asking it to drain; traffic follows", async () => {
  const cluster = new FakeCluster(orderClasses);
  try {
    const [a, b, c] = cluster.addNodesInAddressOrder("a-node", "b-node", "c-node") as [Node, Node, Node];
    for (const n of [a, b, c]) n.sharding.init("Downed", OrderCommand, plain, (id) => new SequenceBehavior(id));
    await planOver([a, b, c], "Downed", 3);
    const id = idOwnedBy(a, "Downed", c, "down");
    const ref = b.sharding.entityRefFor<OrderCommand>("Downed", id);
    assert.equal((await ref.ask(new Seq(1), OrderReply, 1_000)).host, c.system.address.toString());
    const drainsAskedOfC: number[] = [];
    cluster.onDeliver = ({ to, message }) => {
      if (message instanceof PassivateShard && to.equals(c.address)) drainsAskedOfC.push(message.shardId);
    };
    const moves = a.sharding.stats.handoffShards;
    const shardsOfC = [...a.sharding.allocations("Downed")].filter(([, o]) => o.equals(c.address)).length;
    c.setStatus("Down");
    await eventually(
      () =>
        a.sharding.handoffsInProgress === 0 &&
        [...a.sharding.allocations("Downed").values()].every((o) => !o.equals(c.address)) &&
        a.sharding.allocations("Downed").size === 4,
      { what: "c's shards moved", describe: () => [...a.sharding.allocations("Downed")].map(String) },
    );
    assert.deepEqual(drainsAskedOfC, [], "a Down owner is not asked to drain (docs/protocol.md §9.2 step 2)");
    assert.equal(a.sharding.stats.handoffShards, moves + shardsOfC, "one completed handoff per shard of c");
    const reply = await ref.ask(new Seq(2), OrderReply, 1_000);
    assert.notEqual(reply.host, c.system.address.toString());
    assert.deepEqual(sequenceSink.get(id), [1, 2]);
  } finally {
    await cluster.shutdown();
  }
});
