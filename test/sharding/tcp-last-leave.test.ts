// The last sharding node of a cluster can leave gracefully: no member can take its shards, so the departure guard
// must not wait for a handoff that cannot happen (it used to keep the node Leaving until leave() timed out).
import assert from "node:assert/strict";
import { test } from "node:test";
import { eventually } from "../fixtures/eventually.ts";
import { GetOrder, OrderCommand, OrderReply, SequenceBehavior } from "./fixtures/order.ts";
import { describeNodes, planSettled, settled, startShardingNode, terminateAll } from "./fixtures/tcp-nodes.ts";

test("the only sharding node leaves with live entities: Removed within the leave timeout, entities passivated", async () => {
  const node = await startShardingNode(null);
  try {
    node.sharding.init("Last", OrderCommand, { shardCount: 8 }, (id) => new SequenceBehavior(id));
    for (const id of ["a", "b", "c"]) {
      await node.sharding.entityRefFor<OrderCommand>("Last", id).ask(new GetOrder(), OrderReply, 3_000);
    }
    assert.equal(node.sharding.localEntityCount, 3);
    const started = performance.now();
    await node.cluster.leave(node.cluster.selfAddress, 5_000);
    const tookMs = Math.round(performance.now() - started);
    assert.equal(node.cluster.selfStatus, "Removed", `left in ${tookMs} ms`);
    assert.ok(tookMs < 5_000, `leave took ${tookMs} ms`);
    await eventually(() => node.sharding.localEntityCount === 0, {
      what: "the leaver's entities passivated",
      describe: () => ({ entities: node.sharding.localEntityCount }),
    });
  } finally {
    await terminateAll([node]);
  }
});

test("with a second member up, the leaver still waits for its shards to be handed off first", async () => {
  const first = await startShardingNode(null);
  const second = await startShardingNode(first.port);
  const nodes = [first, second];
  try {
    for (const n of nodes) n.sharding.init("Pair", OrderCommand, { shardCount: 8 }, (id) => new SequenceBehavior(id));
    // A settled plan on both (same generation, no handoff running, nothing left to rebalance): read before a
    // rebalance finished, the leaver's view could still hold shards whose handoffs were already counted (a fresh-clone
    // CI run: 8 shards on the leaver in its view, 4 handoffs after the leave).
    await eventually(() => nodes.every((n) => settled(n, 2)) && planSettled(nodes, "Pair", { shardCount: 8 }), {
      what: "two Up members and a settled plan",
      describe: describeNodes(nodes, "Pair"),
    });
    const leaverOwned = [...first.sharding.allocations("Pair").values()].filter((o) =>
      o.equals(first.cluster.selfAddress),
    ).length;
    assert.ok(leaverOwned > 0, "the leaver owns shards before it leaves");
    const movesBefore = second.sharding.stats.handoffShards + first.sharding.stats.handoffShards;
    await first.cluster.leave(first.cluster.selfAddress, 10_000);
    const plan = second.sharding.allocations("Pair");
    assert.equal(plan.size, 8);
    for (const [shard, owner] of plan) {
      assert.ok(owner.equals(second.cluster.selfAddress), `shard ${shard} still on ${owner} after the leave`);
    }
    const moves = second.sharding.stats.handoffShards + first.sharding.stats.handoffShards - movesBefore;
    assert.ok(moves >= leaverOwned, `${leaverOwned} shards were on the leaver, ${moves} handoffs before it left`);
  } finally {
    await terminateAll(nodes);
  }
});
