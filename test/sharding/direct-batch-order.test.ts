// Direct batches (docs/protocol.md §8.8 "Batches") keep every sender's order: over real loopback TCP, one caller's
// synchronous bursts interleave tells of two senders to entities on two owners with asks (a sender of their own each)
// to the same entities, so a batch ends and restarts on every sender switch and each owner's batch holds several
// senders' runs; meanwhile an operator moves one entity's shard to the other owner and back (announcements, markers,
// the coordinator route and a new grant in the middle of the traffic). Every tell of each sender is processed once, in
// the order sent, and every ask is answered. One sender's tells have a binary payload, so its batches are compact.
import assert from "node:assert/strict";
import { test } from "node:test";
import { AbstractBehavior, type ActorRef } from "../../src/actor/index.ts";
import { LeastLoadedAllocation, NoRebalance } from "../../src/sharding/index.ts";
import { HandoffAnnounce } from "../../src/sharding/internal/messages.ts";
import { eventually } from "../fixtures/eventually.ts";
import { BinarySeq, type OrderCommand, OrderReply, Seq, sequenceSink } from "./fixtures/order.ts";
import { describeNodes, idOwnedBy, type ShardingNode, startWithType, terminateAll } from "./fixtures/tcp-nodes.ts";

const type = "BatchOrder";
const settings = {
  shardCount: 16,
  allocation: new LeastLoadedAllocation(),
  rebalance: new NoRebalance(),
  routing: "direct" as const,
};

/** A sender that ignores what it is answered. */
class Quiet extends AbstractBehavior<unknown> {
  receive(): void {}
}

/** Numbers of sender `s` (0, 1: actors; 2: asks) for message `k`: the sender is recoverable from the number. */
const numberOf = (s: number, k: number) => s * 1_000_000 + k;
const senderOf = (n: number) => Math.floor(n / 1_000_000);

test("direct batches over TCP keep each sender's order across sender switches, asks, two owners and two moves", async () => {
  const nodes = await startWithType(4, type, settings);
  let running = true;
  let loop: Promise<void> = Promise.resolve();
  try {
    const [coordinator, caller, owner1, owner2] = nodes as [ShardingNode, ShardingNode, ShardingNode, ShardingNode];
    const e1 = idOwnedBy(coordinator, type, owner1, "one");
    const e2 = idOwnedBy(coordinator, type, owner2, "two");
    const ids = [e1, e2];
    const refs = ids.map((id) => caller.sharding.entityRefFor<OrderCommand>(type, id));
    const senders: ActorRef<unknown>[] = [caller.system.spawn(new Quiet(), "a"), caller.system.spawn(new Quiet(), "b")];
    // The grants first: a shard's first messages go through the coordinator (§8.8).
    for (const ref of refs) await ref.ask(new Seq(numberOf(2, 0)), OrderReply, 5_000);
    const next = ids.map(() => [1, 1, 1]);
    const asks: Promise<unknown>[] = [];
    const thrown: unknown[] = [];
    /** One synchronous burst: the tells (and asks) of `rounds` rounds to every entity. */
    const burst = (rounds: number) => {
      for (let round = 0; round < rounds; round++) {
        for (const [i, ref] of refs.entries()) {
          for (const s of [0, 0, 1, 0]) {
            try {
              // Sender 0's tells have a binary payload (its batches are written compact), sender 1's JSON ones.
              const n = numberOf(s, next[i]![s]!++);
              ref.tell(s === 0 ? new BinarySeq(n) : new Seq(n), senders[s]!);
            } catch (error) {
              thrown.push(error);
            }
          }
          if (round === 1) asks.push(ref.ask(new Seq(numberOf(2, next[i]![2]!++)), OrderReply, 10_000));
        }
      }
    };
    // Each move's announcement reaches the caller right after a burst it has not written yet (as in tcp-direct.test.ts,
    // here with two senders and asks): the marker it sends must follow all of it on the link to the old owner.
    const daemonHost = caller.sharding as unknown as { onDaemonMessage(message: unknown, ctx: unknown): void };
    const onDaemonMessage = daemonHost.onDaemonMessage.bind(daemonHost);
    let announcementsAfterABurst = 0;
    daemonHost.onDaemonMessage = (message, ctx) => {
      if (message instanceof HandoffAnnounce && running) {
        burst(2);
        announcementsAfterABurst++;
      }
      onDaemonMessage(message, ctx);
    };
    loop = (async () => {
      while (running) {
        // Per round, each entity gets two tells of a, one of b, one of a again, and in the second round an ask: the
        // envelopes to one owner share its batch, split at every sender switch (and at every grant generation change).
        burst(2);
        await new Promise((resolve) => setTimeout(resolve, 8));
      }
    })();
    await eventually(() => caller.sharding.stats.directBatches > 30, {
      what: "batches from the caller",
      describe: () => caller.sharding.stats,
    });
    const shard = caller.sharding.shardOf(type, e1);
    for (const to of [owner2, owner1]) {
      const decision = coordinator.sharding.moveShard(type, shard, { to: to.cluster.selfAddress });
      assert.equal(decision.kind, "moving");
      await eventually(
        () => nodes.every((n) => n.sharding.ownerFor(type, e1)?.equals(to.cluster.selfAddress) === true),
        { what: `e1's shard moved to port ${to.port}`, describe: describeNodes(nodes, type), timeoutMs: 20_000 },
      );
      const batches = caller.sharding.stats.directBatches;
      await eventually(() => caller.sharding.stats.directBatches > batches + 20, {
        what: `batches again after the move to port ${to.port}`,
        describe: () => caller.sharding.stats,
        timeoutMs: 20_000,
      });
    }
    running = false;
    await loop;
    assert.ok(announcementsAfterABurst >= 2, `${announcementsAfterABurst} announcements came right after a burst`);
    assert.deepEqual(thrown, [], "no tell refused at the caller");
    const answered = await Promise.allSettled(asks);
    assert.deepEqual(
      answered.filter((r) => r.status === "rejected"),
      [],
      "every ask answered",
    );
    const sentTells = next.reduce((sum, perSender) => sum + perSender[0]! - 1 + perSender[1]! - 1, 0);
    const processedTells = () =>
      ids.reduce((sum, id) => sum + (sequenceSink.get(id) ?? []).filter((n) => senderOf(n) < 2).length, 0);
    await eventually(() => processedTells() === sentTells, {
      what: `all ${sentTells} tells processed`,
      describe: () => ({ processed: processedTells(), stats: nodes.map((n) => n.sharding.stats) }),
    });
    for (const [i, id] of ids.entries()) {
      const processed = sequenceSink.get(id)!;
      for (const s of [0, 1]) {
        assert.deepEqual(
          processed.filter((n) => senderOf(n) === s).map((n) => n - numberOf(s, 0)),
          Array.from({ length: next[i]![s]! - 1 }, (_, k) => k + 1),
          `sender ${s}'s tells to ${id}: each once, in the order sent`,
        );
      }
      const askNumbers = processed.filter((n) => senderOf(n) === 2);
      assert.equal(new Set(askNumbers).size, askNumbers.length, `no ask to ${id} processed twice`);
      assert.equal(askNumbers.length, next[i]![2]!, `every ask to ${id} processed`);
    }
    assert.equal(
      nodes.reduce((sum, n) => sum + n.sharding.stats.directRefusals, 0),
      0,
      "no direct delivery refused",
    );
  } finally {
    running = false;
    await loop;
    await terminateAll(nodes);
  }
});
