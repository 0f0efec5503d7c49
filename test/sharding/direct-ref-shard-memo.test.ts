// A ShardedEntityRef keeps its entity's shard across its tells (entity-ref.ts EntityRouteMemo): a partitioner is pure,
// so the shard of a ref's id holds while its type's registration does, and a direct tell does not hash the id again.
// A ref of another id has its own shard.
import assert from "node:assert/strict";
import { test } from "node:test";
import { InvalidArgumentError } from "../../src/actor/index.ts";
import {
  type EntityPartitioner,
  LeastLoadedAllocation,
  NoRebalance,
  StableHashPartitioner,
} from "../../src/sharding/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { OrderCommand, OrderReply, Seq, SequenceBehavior, sequenceSink } from "./fixtures/order.ts";
import { startShardingNodes, terminateAll } from "./fixtures/tcp-nodes.ts";

/** The stable hash partitioner, counting the calls per entity id. */
class CountingPartitioner implements EntityPartitioner {
  readonly configurationKey = "CountingStableHash";
  readonly calls = new Map<string, number>();
  private readonly inner = new StableHashPartitioner();

  shardFor(entityType: string, entityId: string, shardCount: number): number {
    this.calls.set(entityId, (this.calls.get(entityId) ?? 0) + 1);
    return this.inner.shardFor(entityType, entityId, shardCount);
  }
}

test("a ref's direct tells hash its entity id once per registration of its type", async () => {
  const [node] = await startShardingNodes(1);
  try {
    const partitioner = new CountingPartitioner();
    const type = "RefShardMemo";
    node!.sharding.init(
      type,
      OrderCommand,
      {
        shardCount: 16,
        allocation: new LeastLoadedAllocation(),
        rebalance: new NoRebalance(),
        routing: "direct",
        partitioner,
      },
      (id) => new SequenceBehavior(id),
    );
    const id = "ref-memo-1";
    const ref = node!.sharding.entityRefFor<OrderCommand>(type, id);
    // One node: caller, coordinator and owner. The ask activates the entity; tells of a direct type take the direct
    // tell's route (CallerRouter.tellDirect), which delivers here.
    await ref.ask(new Seq(0), OrderReply, 5_000);
    ref.tell(new Seq(1));
    const hashed = partitioner.calls.get(id) ?? 0;
    for (let n = 2; n <= 50; n++) ref.tell(new Seq(n));
    await eventually(() => (sequenceSink.get(id) ?? []).includes(50), {
      what: "50 tells processed",
      describe: () => ({ processed: sequenceSink.get(id), stats: node!.sharding.stats }),
    });
    assert.deepEqual(
      (sequenceSink.get(id) ?? []).filter((n) => n > 0),
      Array.from({ length: 50 }, (_, k) => k + 1),
    );
    assert.equal(partitioner.calls.get(id), hashed, "49 more direct tells through the ref, the id not hashed again");
    // Another ref of another id has its own shard: its first tell hashes its own id.
    const other = "ref-memo-2";
    node!.sharding.entityRefFor<OrderCommand>(type, other).tell(new Seq(7));
    await eventually(() => (sequenceSink.get(other) ?? []).includes(7), { what: "the other ref's tell" });
    assert.ok((partitioner.calls.get(other) ?? 0) >= 1);
    // A ref whose id JavaScript changed (readonly to TypeScript only) is routed by its new id, not the kept shard.
    const changed = "ref-memo-3";
    (ref as unknown as { entityId: string }).entityId = changed;
    ref.tell(new Seq(9));
    await eventually(() => (sequenceSink.get(changed) ?? []).includes(9), { what: "the changed ref's tell" });
    assert.ok((partitioner.calls.get(changed) ?? 0) >= 1, "the new id hashed");
    // The id is checked where the ref is made (and by the router before it keeps a shard for it).
    assert.throws(() => node!.sharding.entityRefFor<OrderCommand>(type, ""), InvalidArgumentError);
  } finally {
    await terminateAll([node!]);
  }
});
