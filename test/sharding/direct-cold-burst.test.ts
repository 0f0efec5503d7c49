// A caller that starts with a burst of tells larger than the held bound, with direct routing and no grant taken
// first (docs/protocol.md §8.8 "Caller"), over real loopback TCP: a shard's first tell goes through the coordinator
// with a probe behind it, and while the probe is out the next ones wait (at most `heldDeliveriesPerShard`); a burst
// past that bound sends the waiting ones through the coordinator and probes again behind them. Every tell is
// delivered once, in order, none refused, and the route opens once the burst pauses: the next burst goes straight to
// the owner. Before, the shard cooled instead (a caller whose bursts outgrew the bound never went direct), and the
// held pass took and put back every waiting delivery on every step, so a long burst stalled the caller past the
// failure detector's pause and the coordinator refused its tells.
import assert from "node:assert/strict";
import { test } from "node:test";
import { LeastLoadedAllocation, NoRebalance } from "../../src/sharding/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { type OrderCommand, Seq, sequenceSink } from "./fixtures/order.ts";
import { describeNodes, idOwnedBy, type ShardingNode, startWithType, terminateAll } from "./fixtures/tcp-nodes.ts";

const type = "ColdBurst";
const settings = {
  shardCount: 16,
  allocation: new LeastLoadedAllocation(),
  rebalance: new NoRebalance(),
  routing: "direct" as const,
};
/** Per burst: five times the default held bound (1,024) per entity's shard. */
const perEntity = 5_000;

for (const callerIs of ["a third node", "the owner"] as const) {
  test(`a cold burst past the held bound from ${callerIs}: every tell delivered once and in order, none refused; the next burst goes direct`, async () => {
    const nodes = await startWithType(3, type, settings);
    try {
      const [coordinator, owner, third] = nodes as [ShardingNode, ShardingNode, ShardingNode];
      const caller = callerIs === "the owner" ? owner : third;
      const prefix = callerIs === "the owner" ? "own" : "third";
      const ids = Array.from({ length: 4 }, (_, i) => idOwnedBy(coordinator, type, owner, `${prefix}-${i}`));
      const refs = ids.map((id) => caller.sharding.entityRefFor<OrderCommand>(type, id));
      let next = 0;
      /** One synchronous burst of `perEntity` tells to every entity, round robin. */
      const burst = () => {
        for (let k = 0; k < perEntity; k++, next++) for (const ref of refs) ref.tell(new Seq(next), null);
      };
      const delivered = (upTo: number) => ids.every((id) => (sequenceSink.get(id) ?? []).length === upTo);
      const state = () => ({
        delivered: ids.map((id) => (sequenceSink.get(id) ?? []).length),
        caller: caller.sharding.stats,
        coordinator: coordinator.sharding.stats,
        nodes: describeNodes(nodes)(),
      });
      burst();
      await eventually(() => delivered(perEntity), { what: "the first burst delivered", describe: state });
      const expected = Array.from({ length: perEntity }, (_, k) => k);
      for (const id of ids) assert.deepEqual(sequenceSink.get(id), expected, `${id}: once each, in order`);
      assert.equal(coordinator.sharding.stats.heldRefused, 0, "nothing refused at the coordinator");
      assert.equal(caller.sharding.stats.heldRefused, 0, "nothing refused at the caller");
      // The last probe of the burst was answered once the burst ended: what waited for it went straight to the owner.
      await eventually(() => caller.sharding.stats.directRoutes > 0, { what: "the route opened", describe: state });
      const forwardsBefore = coordinator.sharding.stats.forwards;
      const directBefore = caller.sharding.stats.directRoutes;
      burst();
      await eventually(() => delivered(2 * perEntity), { what: "the second burst delivered", describe: state });
      for (const id of ids) {
        assert.deepEqual(
          sequenceSink.get(id),
          Array.from({ length: 2 * perEntity }, (_, k) => k),
          `${id}: both bursts once each, in order`,
        );
      }
      assert.equal(caller.sharding.stats.directRoutes - directBefore, 4 * perEntity, "the second burst went direct");
      assert.equal(coordinator.sharding.stats.forwards, forwardsBefore, "none of it through the coordinator");
    } finally {
      await terminateAll(nodes);
      sequenceSink.clear();
    }
  });
}
