// A node downed by the leader while it is alive and connected learns it from the leader's gossip: sharding stops its
// entities, and it stops its membership (onDowned: "leave") or terminates its actor system (the default), saying why
// in its counters and logs. Real loopback TCP, sharding on every node.
import assert from "node:assert/strict";
import { test } from "node:test";
import type { ClusterEvent } from "../../src/cluster/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { DeliverOrder, GetOrder, OrderBehavior, OrderCommand, OrderReply } from "../sharding/fixtures/order.ts";
import {
  describeNodes,
  planSettled,
  recordingLogger,
  type ShardingNode,
  settled,
  startShardingNode,
  terminateAll,
} from "../sharding/fixtures/tcp-nodes.ts";

test("a node downed while alive stops its entities and leaves or terminates, per onDowned", async () => {
  const logs = [recordingLogger(), recordingLogger(), recordingLogger(), recordingLogger()];
  const seed = await startShardingNode(null, { logger: logs[0]!, settings: { onDowned: "leave" } });
  const rest = await Promise.all(
    (["leave", "terminate", "terminate"] as const).map((onDowned, i) =>
      startShardingNode(seed.port, { logger: logs[i + 1]!, settings: { onDowned } }),
    ),
  );
  const nodes: ShardingNode[] = [seed, ...rest];
  const logOf = (n: ShardingNode) => logs[nodes.indexOf(n)]!;
  try {
    for (const n of nodes) n.sharding.init("Order", OrderCommand, { shardCount: 16 }, (id) => new OrderBehavior(id));
    await eventually(() => nodes.every((n) => settled(n, 4)), { what: "4 Up", describe: describeNodes(nodes) });
    await eventually(() => planSettled(nodes, "Order", { shardCount: 16 }), {
      what: "a settled plan",
      describe: describeNodes(nodes, "Order"),
    });
    const ids = Array.from({ length: 40 }, (_, i) => `o-${i}`);
    const leader = nodes.find((n) => n.cluster.isLeader)!;
    for (const id of ids) {
      const ref = leader.sharding.entityRefFor<OrderCommand>("Order", id);
      ref.tell(new DeliverOrder(id));
      await ref.ask(new GetOrder(), OrderReply, 3_000);
    }
    // At most one node leads, so each setting has a non-leader to down.
    const leaveVictim = nodes.find((n) => n !== leader && n.cluster.settings.onDowned === "leave")!;
    const terminateVictim = nodes.find((n) => n !== leader && n.cluster.settings.onDowned === "terminate")!;
    await eventually(() => leaveVictim.sharding.localEntityCount > 0 && terminateVictim.sharding.localEntityCount > 0, {
      what: "both victims host entities",
      describe: describeNodes(nodes, "Order"),
    });
    const events: ClusterEvent[] = [];
    leaveVictim.cluster.subscribe((e) => events.push(e));

    // 1. onDowned: "leave": entities stop, membership stops, the system keeps running.
    assert.equal(leader.cluster.down(leaveVictim.cluster.selfAddress), true);
    await eventually(() => leaveVictim.cluster.stats.selfDowned === 1 && leaveVictim.sharding.localEntityCount === 0, {
      what: "the leave victim learned it was downed and stopped its entities",
      describe: describeNodes([leaveVictim]),
    });
    assert.equal(leaveVictim.system.isTerminated, false, "onDowned leave keeps the actor system");
    const selfDowned = events.find((e) => e.type === "SelfDowned");
    assert.ok(selfDowned !== undefined && selfDowned.type === "SelfDowned" && selfDowned.action === "leave");
    assert.ok(
      !leaveVictim.cluster.isAuthorizedPeer(leader.cluster.selfAddress),
      "a downed node trusts no member's system messages any more",
    );
    const why = logOf(leaveVictim).warnings.map((w) => w.message);
    assert.ok(
      why.some((m) => /downed by the cluster leader.*onDowned: leave/.test(m)),
      why.join("\n"),
    );
    assert.ok(
      why.some((m) => /sharding stops every local entity/.test(m)),
      why.join("\n"),
    );

    // 2. The default, onDowned: "terminate": entities stop and the actor system terminates.
    assert.equal(leader.cluster.down(terminateVictim.cluster.selfAddress), true);
    await eventually(() => terminateVictim.system.isTerminated, {
      what: "the terminate victim terminated",
      describe: describeNodes([terminateVictim]),
    });
    assert.equal(terminateVictim.cluster.stats.selfDowned, 1);
    assert.equal(terminateVictim.sharding.localEntityCount, 0);
    assert.ok(logOf(terminateVictim).warnings.some((w) => /onDowned: terminate/.test(w.message)));

    // The survivors converge without both and every entity answers again, from its new owner.
    const survivors = nodes.filter((n) => n !== leaveVictim && n !== terminateVictim);
    await eventually(() => survivors.every((n) => settled(n, 2)), {
      what: "2 survivors",
      describe: describeNodes(survivors),
    });
    for (const id of ids.slice(0, 8)) {
      await eventually(
        async () => {
          try {
            await survivors[0]!.sharding.entityRefFor<OrderCommand>("Order", id).ask(new GetOrder(), OrderReply, 500);
            return true;
          } catch {
            return false;
          }
        },
        { what: `entity ${id} answers after the downs`, describe: describeNodes(survivors, "Order") },
      );
    }
  } finally {
    await terminateAll(nodes);
  }
});
