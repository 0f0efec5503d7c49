// Sends that refuse synchronously (a message over the remoting frame limit) must never crash a node or wedge a
// handoff, and a shard count whose plan cannot fit in one frame is refused at init.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { AbstractBehavior, ActorSystem, silentLogger, UniqueAddress } from "../../src/actor/index.ts";
import "../../src/cluster/index.ts";
import { MessageRegistry } from "../../src/remote/index.ts";
import {
  ClusterSharding,
  ClusterShardingConfigurationError,
  desiredAllocations,
  LeastLoadedAllocation,
  RateLimitedRebalance,
} from "../../src/sharding/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { fastCluster, type ShardingNode, settled, terminateAll } from "./fixtures/tcp-nodes.ts";

abstract class Cmd {}
class Hold extends Cmd {}
class Big extends Cmd {
  constructor(readonly text: string) {
    super();
  }
}
class Small extends Cmd {
  constructor(readonly n: number) {
    super();
  }
}
MessageRegistry.register(Hold, { name: "test.oversize.Hold" });
MessageRegistry.register(Big, { name: "test.oversize.Big" });
MessageRegistry.register(Small, { name: "test.oversize.Small" });

let releaseHold: () => void = () => {};
const held = new Promise<void>((resolve) => {
  releaseHold = resolve;
});
const received: number[] = [];

class HoldingBehavior extends AbstractBehavior<Cmd> {
  async receive(message: Cmd): Promise<void> {
    if (message instanceof Hold) await held;
    else if (message instanceof Small) received.push(message.n);
  }
}

const maxFrameBytes = 65_536;
const unhandled: unknown[] = [];
const onUnhandled = (reason: unknown): void => {
  unhandled.push(reason);
};

async function node(seedPort: number | null): Promise<ShardingNode> {
  const system = ActorSystem.create("movie", { logger: silentLogger });
  const remoting = await system.enableRemoting({ host: "127.0.0.1", port: 0, maxFrameBytes });
  const port = remoting.selfAddress.address.port!;
  const cluster = await system.enableCluster({ ...fastCluster, seedNodes: [`127.0.0.1:${seedPort ?? port}`] });
  const sharding = ClusterSharding.get(system);
  sharding.init(
    "T",
    Cmd,
    {
      shardCount: 16,
      allocation: new LeastLoadedAllocation(),
      rebalance: new RateLimitedRebalance({ threshold: 0, maxConcurrent: 16 }),
    },
    () => new HoldingBehavior(),
  );
  return { system, remoting, cluster, sharding, port, name: `n${port}` };
}

let nodes: ShardingNode[] = [];

/** The final plan over three nodes: 6/5/5, so the rebalance has nothing left to move. */
function balanced(plan: ReadonlyMap<number, UniqueAddress>): boolean {
  const counts = new Map<string, number>();
  for (const owner of plan.values()) counts.set(owner.toString(), (counts.get(owner.toString()) ?? 0) + 1);
  const values = [...counts.values()];
  return plan.size === 16 && values.length === 3 && Math.max(...values) - Math.min(...values) <= 1;
}
before(async () => {
  process.on("unhandledRejection", onUnhandled);
  const first = await node(null);
  nodes = [first, ...(await Promise.all([node(first.port), node(first.port)]))].sort((x, y) =>
    UniqueAddress.compare(x.cluster.selfAddress, y.cluster.selfAddress),
  );
  await eventually(
    () =>
      nodes.every(
        (n) =>
          settled(n, 3) &&
          n.sharding.handoffsInProgress === 0 &&
          n.sharding.planGeneration("T") === nodes[0]!.sharding.planGeneration("T"),
      ) && balanced(nodes[0]!.sharding.allocations("T")),
    { what: "three nodes and a plan over all of them" },
  );
});
after(async () => {
  process.off("unhandledRejection", onUnhandled);
  releaseHold();
  await terminateAll(nodes);
});

test("an oversize tell buffered during a handoff is rejected and counted; the rest flushes and the handoff ends", async () => {
  const [coordinator, middle, leaver] = nodes as [ShardingNode, ShardingNode, ShardingNode];
  // An entity on the leaving node whose shard moves to the middle node, so the flush crosses the network.
  const after = desiredAllocations(
    new LeastLoadedAllocation(),
    16,
    [coordinator, middle].map((n) => ({ uniqueAddress: n.cluster.selfAddress, status: "Up", roles: [] })),
  );
  let id = "";
  for (let i = 0; id === ""; i++) {
    const candidate = `e-${i}`;
    const shardOfCandidate = coordinator.sharding.shardOf("T", candidate);
    if (
      coordinator.sharding.ownerFor("T", candidate)?.equals(leaver.cluster.selfAddress) &&
      after.get(shardOfCandidate)?.equals(middle.cluster.selfAddress)
    ) {
      id = candidate;
    }
  }
  const shard = coordinator.sharding.shardOf("T", id);
  const ref = coordinator.sharding.entityRefFor<Cmd>("T", id);
  ref.tell(new Hold()); // keeps the old owner's drain waiting, so what follows is buffered at the coordinator
  await eventually(() => leaver.sharding.localEntityCount === 1, { what: "the held entity on the leaving node" });
  const leaving = leaver.cluster.leave();
  await eventually(() => coordinator.sharding.handoffInProgress("T", shard), { what: "the handoff of its shard" });
  const rejectedBefore = coordinator.sharding.stats.rejectedEnvelopes;
  ref.tell(new Small(1));
  ref.tell(new Big("x".repeat(2 * maxFrameBytes))); // over the frame limit of the hop to the new owner
  ref.tell(new Small(2));
  releaseHold();
  await eventually(() => !coordinator.sharding.handoffInProgress("T", shard) && received.length === 2, {
    what: "the handoff to finish and the small messages to arrive",
    describe: () => ({ received, stats: coordinator.sharding.stats }),
  });
  assert.deepEqual(received, [1, 2], "FIFO for the deliveries that could be sent");
  assert.equal(coordinator.sharding.stats.rejectedEnvelopes, rejectedBefore + 1, "the oversize one is counted");
  await eventually(() => coordinator.sharding.ownerFor("T", id)?.equals(middle.cluster.selfAddress) === true, {
    what: "the shard planned on the middle node",
  });
  await leaving;
  assert.deepEqual(unhandled, [], "no unhandled rejection");
});

test("a shard count whose plan cannot fit in one remoting frame is refused at init, naming shardCount", () => {
  assert.throws(
    () => nodes[0]!.sharding.init("Huge", Cmd, { shardCount: 100_000 }, () => new HoldingBehavior()),
    (error: unknown) =>
      error instanceof ClusterShardingConfigurationError &&
      error.field === "shardCount" &&
      /lower shardCount or raise the remoting maxFrameBytes/.test(error.message),
  );
});
