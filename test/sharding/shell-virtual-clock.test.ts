// The sharding shell on a virtual clock (ManualScheduler): idle passivation, the bound on a handoff waiting for
// membership to re-converge, and the retry barrier inside a running node. Time moves only when a test advances it;
// the fake network still hops by macrotask, so tests wait for messages with `eventually` and never for time.
import assert from "node:assert/strict";
import { test } from "node:test";
import { type ActorRef, ManualScheduler } from "../../src/actor/index.ts";
import {
  LeastLoadedAllocation,
  NoRebalance,
  NoShardOwnerError,
  ShardingSettings,
  ShardLeaseUnavailableError,
} from "../../src/sharding/index.ts";
import { shardingHostOf } from "../../src/sharding/internal/host.ts";
import { EntityProvider } from "../../src/sharding/internal/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { FakeCluster, type Node } from "./fixtures/fake-cluster.ts";
import { findId } from "./fixtures/members.ts";
import { OrderCommand, OrderReply, orderClasses, Seq, SequenceBehavior, sequenceSink } from "./fixtures/order.ts";
import { recordingLogger } from "./fixtures/tcp-nodes.ts";

test("idle passivation on a virtual clock: after idleTimeout, activity postpones it, the next message re-activates", async () => {
  const clock = new ManualScheduler();
  const cluster = new FakeCluster(orderClasses, { scheduler: clock });
  try {
    const node = cluster.addNode("idle-node");
    const sharding = node.sharding;
    // idleTimeout 1,000 ms: the sweep runs every 500 ms (docs/protocol.md §8.4), at 500, 1,000, 1,500, 2,000 …
    sharding.init("Idle", OrderCommand, { shardCount: 4, idleTimeout: 1_000 }, (id) => new SequenceBehavior(id));
    const ref = sharding.entityRefFor<OrderCommand>("Idle", "idle-1");
    // The entity processes each message before virtual time moves on (passivation is STOP, which drops a mailbox).
    const processed = (n: number) =>
      eventually(() => sequenceSink.get("idle-1")?.length === n, {
        what: `${n} messages processed`,
        describe: () => sequenceSink.get("idle-1"),
      });
    ref.tell(new Seq(1)); // t = 0: activation, last activity 0
    await processed(1);
    assert.equal(sharding.localEntityCount, 1);
    assert.equal(sharding.stats.activations, 1);
    clock.advance(999); // the sweep at 500 sees 500 ms of idleness: kept
    assert.equal(sharding.localEntityCount, 1, "not passivated before idleTimeout");
    assert.equal(sharding.stats.idlePassivations, 0);
    ref.tell(new Seq(2)); // t = 999: activity
    await processed(2);
    clock.advance(1); // the sweep at 1,000 would passivate an entity last active at 0
    assert.equal(sharding.localEntityCount, 1, "activity at 999 postponed the passivation due at 1,000");
    clock.advance(500); // sweep at 1,500: idle 501 ms
    assert.equal(sharding.localEntityCount, 1);
    assert.equal(sharding.stats.idlePassivations, 0);
    clock.advance(499); // t = 1,999: no sweep in between
    assert.equal(sharding.localEntityCount, 1);
    clock.advance(1); // sweep at 2,000: idle 1,001 ms
    assert.equal(sharding.localEntityCount, 0, "passivated once idle for idleTimeout");
    assert.equal(sharding.stats.idlePassivations, 1);
    assert.equal(sharding.stats.explicitPassivations, 0);
    // The same logical ref re-activates a new actor on the next message.
    ref.tell(new Seq(3));
    assert.equal(sharding.localEntityCount, 1);
    assert.equal(sharding.stats.activations, 2);
    await processed(3);
    assert.deepEqual(sequenceSink.get("idle-1"), [1, 2, 3]);
    // Without more virtual time nothing else happens; the next sweeps passivate it again.
    clock.advance(1_500);
    assert.equal(sharding.localEntityCount, 0);
    assert.equal(sharding.stats.idlePassivations, 2);
  } finally {
    await cluster.shutdown();
  }
});

/** Advances `clock` in `stepMs` steps (letting the fake network run between them) until `condition` holds. */
async function pump(clock: ManualScheduler, condition: () => boolean, what: string, describe?: () => unknown) {
  await eventually(
    () => {
      if (condition()) return true;
      clock.advance(50);
      return false;
    },
    { what, ...(describe === undefined ? {} : { describe }) },
  );
}

test("a handoff waiting for re-convergence aborts after 2 s of virtual time, rejecting its buffer with NoShardOwnerError", async () => {
  const clock = new ManualScheduler();
  const logger = recordingLogger();
  const cluster = new FakeCluster(orderClasses, { scheduler: clock, logger });
  try {
    const [a, b] = cluster.addNodesInAddressOrder("a-node", "b-node") as [Node, Node];
    const settings = { shardCount: 4, allocation: new LeastLoadedAllocation(), rebalance: new NoRebalance() };
    for (const n of [a, b]) n.sharding.init("Settle", OrderCommand, settings, (id) => new SequenceBehavior(id));
    await pump(
      clock,
      () =>
        b.sharding.planGeneration("Settle") > 0 &&
        b.sharding.planGeneration("Settle") === a.sharding.planGeneration("Settle") &&
        new Set([...a.sharding.allocations("Settle").values()].map(String)).size === 2,
      "b follows a plan over both nodes",
    );
    const id = findId("settle", (x) => a.sharding.ownerFor("Settle", x)?.equals(b.address) === true);
    const shard = a.sharding.shardOf("Settle", id);
    const ref = a.sharding.entityRefFor<OrderCommand>("Settle", id);
    await ref.ask(new Seq(0), OrderReply, 60_000); // an entity on b, so the drain has work
    const rejectedBefore = a.sharding.stats.rejectedEnvelopes;

    b.setStatus("Leaving"); // a starts the forced handoffs of b's shards at once
    assert.ok(a.sharding.handoffInProgress("Settle", shard));
    let outcome: unknown = "pending";
    const buffered = ref.ask(new Seq(1), OrderReply, 60_000).then(
      (reply) => {
        outcome = reply;
      },
      (error: unknown) => {
        outcome = error;
      },
    );
    // Convergence is lost for good, with nobody unreachable: the handoff drains b, prepares a, then waits.
    a.setConverged(false);
    const waits = () =>
      logger.infos.filter((i) => i.message === "sharding handoff waits for membership to re-converge");
    await eventually(() => waits().some((w) => (w.context as { shard: number }).shard === shard), {
      what: "the handoff waiting for convergence",
      describe: () => ({ infos: logger.infos.map((i) => i.message), entitiesOnB: b.sharding.localEntityCount }),
    });
    assert.equal(b.sharding.localEntityCount, 0, "b drained before a tried to complete");
    clock.advance(1_999);
    assert.ok(a.sharding.handoffInProgress("Settle", shard), "still waiting after 1,999 ms");
    assert.equal(a.sharding.stats.rejectedEnvelopes, rejectedBefore, "nothing rejected yet");
    clock.advance(1);
    assert.equal(a.sharding.handoffInProgress("Settle", shard), false, "aborted after 2,000 ms");
    await buffered;
    assert.ok(outcome instanceof NoShardOwnerError, `the buffered ask failed with ${String(outcome)}`);
    assert.equal(outcome.shardId, shard);
    assert.ok(a.sharding.stats.rejectedEnvelopes >= rejectedBefore + 1);
    const aborted = logger.warnings.find(
      (w) => w.message === "sharding handoff aborted" && (w.context as { shard: number }).shard === shard,
    );
    assert.deepEqual(aborted?.context, { shard, type: "Settle", rejected: 1 });
    // b's other shards aborted too, with nothing buffered: an abort that rejected nothing is logged at info only.
    const abortLines = (lines: typeof logger.infos) => lines.filter((l) => l.message === "sharding handoff aborted");
    const rejectedOf = (l: (typeof logger.infos)[number]) => (l.context as { rejected: number }).rejected;
    assert.ok(abortLines(logger.infos).length > 0, "b's idle shards aborted at info");
    assert.deepEqual(
      abortLines(logger.infos).filter((l) => rejectedOf(l) !== 0),
      [],
      "info: nothing rejected",
    );
    assert.deepEqual(
      abortLines(logger.warnings).filter((l) => rejectedOf(l) === 0),
      [],
      "warn: something rejected",
    );
    assert.equal(sequenceSink.get(id)?.includes(1), false, "the rejected delivery reached no entity");

    // Convergence returns: the next reconcile moves the shard, and traffic reaches the new owner.
    a.setConverged(true);
    await pump(
      clock,
      () => a.sharding.handoffsInProgress === 0 && a.sharding.ownerFor("Settle", id)?.equals(a.address) === true,
      "the shard moved to a once converged",
      () => ({ handoffs: a.sharding.handoffsInProgress, stats: a.sharding.stats }),
    );
    const reply = await ref.ask(new Seq(2), OrderReply, 60_000);
    assert.equal(reply.host, a.system.address.toString());
  } finally {
    await cluster.shutdown();
  }
});

/** An ordinary provider whose shard lease can be made unavailable, as a persistent provider's is while another holds it. */
class LeaseGatedProvider extends EntityProvider<OrderCommand> {
  leaseAvailable = true;
  override deliver(
    shardId: number,
    entityId: string,
    message: unknown,
    sender: ActorRef<unknown> | null,
    nowMs: number,
  ): void {
    if (!this.leaseAvailable) throw new ShardLeaseUnavailableError(this.name, shardId);
    super.deliver(shardId, entityId, message, sender, nowMs);
  }
}

/** A node of `cluster` hosting `typeName` through a LeaseGatedProvider (8 shards, lease 1,000 ms, renew 300 ms). */
function leaseGatedNode(cluster: FakeCluster, clock: ManualScheduler, nodeName: string, typeName: string) {
  const node = cluster.addNode(nodeName);
  const sharding = node.sharding;
  const settings = ShardingSettings.create({ shardCount: 8, leaseDuration: 1_000, leaseRenewInterval: 300 });
  const provider = new LeaseGatedProvider(
    typeName,
    OrderCommand.name,
    settings,
    (id) => () => new SequenceBehavior(id),
    shardingHostOf(sharding).entityParent,
    clock,
    shardingHostOf(sharding).stats,
  );
  shardingHostOf(sharding).registerProvider(provider);
  return { node, sharding, provider };
}

test("the retry barrier in a running node: per-shard FIFO while the lease is unavailable, 25 ms ticks, window rejects", async () => {
  const clock = new ManualScheduler();
  const cluster = new FakeCluster(orderClasses, { scheduler: clock });
  try {
    // window = leaseDuration + leaseRenewInterval = 1,300 ms
    const { sharding, provider } = leaseGatedNode(cluster, clock, "barrier-node", "Barrier");
    const [x, other] = ["barrier-x", "barrier-y", "barrier-z"]
      .map((id) => ({ id, shard: sharding.shardOf("Barrier", id) }))
      .filter((e, i, all) => all.findIndex((f) => f.shard === e.shard) === i)
      .map((e) => e.id) as [string, string];
    assert.ok(other !== undefined, "two entities on different shards");
    const refX = sharding.entityRefFor<OrderCommand>("Barrier", x);

    provider.leaseAvailable = false;
    refX.tell(new Seq(1)); // fails transiently: opens shard x's queue
    assert.equal(sharding.stats.leaseRetries, 1);
    provider.leaseAvailable = true;
    refX.tell(new Seq(2)); // would succeed, but must queue behind Seq(1) to keep the entity's order
    const asked = refX.ask(new Seq(3), OrderReply, 60_000);
    assert.equal(sharding.stats.localDeliveries, 0, "nothing overtook the queue head");
    assert.equal(sharding.localEntityCount, 0);
    // Another shard has no queue and is not held up.
    await sharding.entityRefFor<OrderCommand>("Barrier", other).ask(new Seq(1), OrderReply, 60_000);
    assert.equal(sharding.stats.localDeliveries, 1);

    provider.leaseAvailable = false;
    clock.advance(24);
    assert.equal(sharding.stats.leaseRetries, 1, "no retry before the 25 ms tick");
    clock.advance(1); // tick: the head fails again and stays at the head
    assert.equal(sharding.stats.leaseRetries, 2);
    provider.leaseAvailable = true;
    clock.advance(25); // tick: the whole queue drains in order
    assert.equal(sharding.stats.localDeliveries, 4);
    const reply = await asked;
    assert.equal(reply.entityId, x);
    assert.deepEqual(sequenceSink.get(x), [1, 2, 3], "per-entity FIFO through the barrier");

    // The lease stays unavailable past the window: what is still queued is rejected with ShardLeaseUnavailableError.
    provider.leaseAvailable = false;
    const rejected = sharding.stats.rejectedEnvelopes;
    refX.tell(new Seq(4));
    let outcome: unknown = "pending";
    const late = refX.ask(new Seq(5), OrderReply, 60_000).then(
      () => {
        outcome = "answered";
      },
      (error: unknown) => {
        outcome = error;
      },
    );
    clock.advance(1_250);
    assert.equal(sharding.stats.rejectedEnvelopes, rejected, "both still queued inside the window");
    clock.advance(50); // the window (1,300 ms) ends
    assert.equal(sharding.stats.rejectedEnvelopes, rejected + 2);
    await late;
    assert.ok(outcome instanceof ShardLeaseUnavailableError, `the queued ask failed with ${String(outcome)}`);
    // The queue is gone: once the lease is back, a new message is delivered at once and the rejected ones never were.
    provider.leaseAvailable = true;
    await refX.ask(new Seq(6), OrderReply, 60_000);
    assert.deepEqual(sequenceSink.get(x), [1, 2, 3, 6]);
  } finally {
    await cluster.shutdown();
  }
});

test("the retry barrier rejects its queue with NoShardOwnerError once the node is no longer the authorized owner", async () => {
  const clock = new ManualScheduler();
  const cluster = new FakeCluster(orderClasses, { scheduler: clock });
  try {
    const { node, sharding, provider } = leaseGatedNode(cluster, clock, "unauthorized-node", "Unauth");
    const ref = sharding.entityRefFor<OrderCommand>("Unauth", "unauth-1");
    provider.leaseAvailable = false;
    ref.tell(new Seq(1)); // opens the shard's queue
    let outcome: unknown = "pending";
    const queued = ref.ask(new Seq(2), OrderReply, 60_000).then(
      () => {
        outcome = "answered";
      },
      (error: unknown) => {
        outcome = error;
      },
    );
    const rejected = sharding.stats.rejectedEnvelopes;
    // The node stops being an Up member: no coordinator authorizes its shards any more. The lease coming back must
    // not let the queue through on a node that no longer owns the shard.
    node.setStatus("Leaving");
    provider.leaseAvailable = true;
    clock.advance(25);
    await queued;
    assert.ok(outcome instanceof NoShardOwnerError, `the queued ask failed with ${String(outcome)}`);
    assert.equal(outcome.shardId, sharding.shardOf("Unauth", "unauth-1"));
    assert.equal(sharding.stats.rejectedEnvelopes, rejected + 2);
    assert.equal(sharding.stats.localDeliveries, 0);
    assert.equal(sharding.localEntityCount, 0);
    assert.equal(sequenceSink.get("unauth-1"), undefined, "nothing queued reached the entity");
  } finally {
    await cluster.shutdown();
  }
});
