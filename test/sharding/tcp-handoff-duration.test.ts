// The handoff duration histogram over real loopback TCP: a join rebalances shards; every completed handoff a node
// drove as coordinator is one observation of movie_sharding_handoff_duration_seconds{type}, each no longer than the
// wall-clock window of the rebalance, and the exposition carries the same count.
import assert from "node:assert/strict";
import { test } from "node:test";
import { renderMetrics } from "../../src/management/index.ts";
import { LeastLoadedAllocation, RateLimitedRebalance } from "../../src/sharding/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { OrderCommand, SequenceBehavior } from "./fixtures/order.ts";
import {
  describeNodes,
  planSettled,
  type ShardingNode,
  settled,
  startShardingNode,
  terminateAll,
} from "./fixtures/tcp-nodes.ts";

const settings = {
  shardCount: 8,
  allocation: new LeastLoadedAllocation(),
  rebalance: new RateLimitedRebalance({ threshold: 1, maxConcurrent: 2 }),
};

test("each completed handoff is one observation of its type's duration histogram, bounded by the rebalance window", async () => {
  const first = await startShardingNode(null);
  const nodes: ShardingNode[] = [first];
  try {
    first.sharding.init("Moving", OrderCommand, settings, (id) => new SequenceBehavior(id));
    first.sharding.init("Still", OrderCommand, { shardCount: 4 }, (id) => new SequenceBehavior(id));
    await eventually(() => settled(first, 1) && planSettled(nodes, "Moving", settings), { what: "one node's plan" });
    const startedMs = Date.now();
    const second = await startShardingNode(first.port);
    nodes.push(second);
    second.sharding.init("Moving", OrderCommand, settings, (id) => new SequenceBehavior(id));
    await eventually(() => nodes.every((n) => settled(n, 2)) && planSettled(nodes, "Moving", settings), {
      what: "two nodes with a balanced plan",
      describe: describeNodes(nodes, "Moving"),
      timeoutMs: 15_000,
    });
    const windowSeconds = (Date.now() - startedMs) / 1000;
    const handoffs = nodes.reduce((sum, n) => sum + n.sharding.stats.handoffShards, 0);
    assert.ok(handoffs >= 4, `the second node takes at least 4 of 8 shards; ${handoffs} handoffs`);
    let observed = 0;
    for (const n of nodes) {
      const h = n.sharding.handoffDuration("Moving").snapshot();
      assert.equal(h.count, n.sharding.stats.handoffShards, "one observation per completed handoff on its node");
      assert.ok(
        h.sum >= 0 && h.sum <= windowSeconds * h.count,
        `sum ${h.sum} s within ${h.count} × ${windowSeconds} s`,
      );
      // Buckets above the window stay empty: no handoff can have taken longer than the test waited for it.
      h.bounds.forEach((bound, i) => {
        if (i > 0 && h.bounds[i - 1]! > windowSeconds) assert.equal(h.counts[i], 0, `bucket le=${bound}`);
      });
      observed += h.count;
      const text = renderMetrics(n.system, null);
      assert.match(
        text,
        new RegExp(`^movie_sharding_handoff_duration_seconds_count\\{type="Moving"\\} ${h.count}$`, "m"),
      );
      if (n === first) assert.match(text, /^movie_sharding_handoff_duration_seconds_count\{type="Still"\} 0$/m);
    }
    assert.equal(observed, handoffs);
    assert.equal(first.sharding.handoffDuration("Still").count, 0, "a type with no handoff has no observation");
  } finally {
    await terminateAll(nodes);
  }
});
