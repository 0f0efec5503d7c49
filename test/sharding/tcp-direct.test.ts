// Direct routing (docs/protocol.md §8.8) over real loopback TCP: callers on every node send straight to the owners
// once granted; a join and a graceful leave move shards under that traffic (announcements, markers, drain after the
// markers), and every accepted message is processed once, in order per entity; an owner refuses a direct delivery
// named under a plan it no longer holds, typed and counted, and the sender's next messages still arrive; a caller
// with a stale plan (it hears nothing from the coordinator during a move) keeps order and the move completes.
import assert from "node:assert/strict";
import { test } from "node:test";
import { askVia, UniqueAddress } from "../../src/actor/index.ts";
import { encodeNested, MessageRegistry, RemoteAskError } from "../../src/remote/index.ts";
import {
  LeastLoadedAllocation,
  NoRebalance,
  NoShardOwnerError,
  RateLimitedRebalance,
  ShardingSettings,
} from "../../src/sharding/index.ts";
import {
  DirectBatchEntry,
  DirectEnvelope,
  HandoffAnnounce,
  ShardingEnvelope,
} from "../../src/sharding/internal/messages.ts";
import { eventually } from "../fixtures/eventually.ts";
import { freePortAbove } from "../fixtures/free-port.ts";
import { OrderCommand, OrderReply, Seq, SequenceBehavior, sequenceSink } from "./fixtures/order.ts";
import {
  describeNodes,
  planSettled,
  type ShardingNode,
  settled,
  startShardingNode,
  startShardingNodes,
  startWithType,
  terminateAll,
} from "./fixtures/tcp-nodes.ts";

const settings = {
  shardCount: 16,
  allocation: new LeastLoadedAllocation(),
  rebalance: new RateLimitedRebalance({ threshold: 1, maxConcurrent: 4 }),
  routing: "direct" as const,
};

/** No voluntary moves: an operator's move is not undone. */
const stillSettings = { ...settings, rebalance: new NoRebalance() };

/** Asks from `caller` to each of `ids`, one in flight per entity at most every 2 ms; each message's fate is kept. */
function continuousTraffic(caller: ShardingNode, type: string, ids: string[]) {
  const next = new Map<string, number>(ids.map((id) => [id, 0]));
  const replied = new Map<string, number[]>(ids.map((id) => [id, []]));
  const failures: Error[] = [];
  /** Which message each failure was, for the report. */
  const failed: { id: string; n: number; error: Error }[] = [];
  const inFlight = new Set<Promise<void>>();
  let running = true;
  const loop = (async () => {
    while (running) {
      for (const id of ids) {
        const n = next.get(id)!;
        next.set(id, n + 1);
        let p: Promise<void>;
        try {
          p = caller.sharding
            .entityRefFor<OrderCommand>(type, id)
            .ask(new Seq(n), OrderReply, 5_000)
            .then(
              () => void replied.get(id)!.push(n),
              (error: Error) => {
                failures.push(error);
                failed.push({ id, n, error });
              },
            );
        } catch (error) {
          failures.push(error as Error);
          failed.push({ id, n, error: error as Error });
          continue;
        }
        inFlight.add(p);
        void p.finally(() => inFlight.delete(p));
      }
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
  })();
  return {
    replied,
    failures,
    failed,
    next,
    async stop() {
      running = false;
      await loop;
      await Promise.all([...inFlight]);
    },
  };
}

test("direct routing over TCP: a join and a graceful leave under continuous traffic from three callers lose no accepted message and reorder none", async () => {
  const nodes = await startShardingNodes(3);
  const joined: ShardingNode[] = [];
  try {
    for (const n of nodes) n.sharding.init("Direct", OrderCommand, settings, (id) => new SequenceBehavior(id));
    await eventually(() => nodes.every((n) => settled(n, 3)) && planSettled(nodes, "Direct", settings), {
      what: "a balanced plan",
      describe: describeNodes(nodes, "Direct"),
    });
    const sorted = [...nodes].sort((a, b) => UniqueAddress.compare(a.cluster.selfAddress, b.cluster.selfAddress));
    const coordinator = sorted[0]!;
    // Each caller has entities of its own, so per-entity order is per-sender order.
    const traffics = sorted.map((caller, i) =>
      continuousTraffic(
        caller,
        "Direct",
        Array.from({ length: 12 }, (_, j) => `direct-${i}-${j}`),
      ),
    );
    const allReplied = () => traffics.flatMap((t) => [...t.replied.values()]);
    await eventually(() => allReplied().every((r) => r.length > 20), { what: "traffic flowing" });
    const directBefore = nodes.reduce((sum, n) => sum + n.sharding.stats.directRoutes, 0);
    assert.ok(directBefore > 0, "callers that are not the coordinator went direct");

    // A fourth node joins (the planner moves shards to it), then a node that is not the coordinator leaves. The joiner's
    // address sorts above the coordinator's, so the coordinator stays: this test is about handoffs. (A coordinator
    // change refuses the direct deliveries still in flight under the old one, typed and counted, §8.8; the node
    // simulator's churn histories check it keeps order.)
    const joiner = await startShardingNode(coordinator.port, {
      port: await freePortAbove(Math.max(...nodes.map((n) => n.port))),
    });
    joined.push(joiner);
    joiner.sharding.init("Direct", OrderCommand, settings, (id) => new SequenceBehavior(id));
    const four = [...nodes, joiner];
    await eventually(() => four.every((n) => settled(n, 4)) && planSettled(four, "Direct", settings), {
      what: "four nodes with a balanced plan",
      describe: describeNodes(four, "Direct"),
      timeoutMs: 20_000,
    });
    const leaver = sorted[2]!;
    const handoffsBefore = coordinator.sharding.stats.handoffShards;
    await leaver.cluster.leave();
    // The leaver's own caller stops routing as it leaves (fail closed); the other two keep sending.
    await eventually(() => coordinator.cluster.snapshot().members.length === 3, { what: "leaver removed" });
    const atRemoval = traffics.slice(0, 2).map((t) => new Map([...t.replied].map(([id, r]) => [id, r.length])));
    await eventually(
      () =>
        traffics.slice(0, 2).every((t, i) => [...t.replied].every(([id, r]) => r.length > atRemoval[i]!.get(id)! + 30)),
      { what: "traffic reaching the new owners after the leave", timeoutMs: 20_000 },
    );
    for (const t of traffics) await t.stop();

    const failures = traffics.flatMap((t) => t.failures);
    const remoteClass = (e: Error) => (e instanceof RemoteAskError ? e.remoteClass : e.name);
    assert.ok(
      failures.every((e) => e instanceof NoShardOwnerError || remoteClass(e) === "NoShardOwnerError"),
      `only fail-closed rejections, got ${[...new Set(failures.map((e) => `${remoteClass(e)}: ${e.message}`))]}; ports ${sorted.map((n) => n.port)} joiner ${joiner.port}; ${JSON.stringify(
        traffics.flatMap((t, i) =>
          t.failed
            .filter((f) => remoteClass(f.error) !== "NoShardOwnerError")
            .map((f) => ({
              caller: i,
              id: f.id,
              n: f.n,
              processed: (sequenceSink.get(f.id) ?? []).includes(f.n),
              around: (sequenceSink.get(f.id) ?? []).filter((x) => Math.abs(x - f.n) < 4),
            })),
        ),
      )}; stats ${JSON.stringify([...nodes, joiner].map((n) => ({ port: n.port, direct: n.sharding.stats.directRoutes, refusals: n.sharding.stats.directRefusals, rejected: n.sharding.stats.rejectedEnvelopes })))}`,
    );
    const survivors = [...nodes.filter((n) => n !== leaver), joiner];
    assert.equal(
      survivors.reduce((sum, n) => sum + n.sharding.stats.directRefusals, 0) + leaver.sharding.stats.directRefusals,
      0,
      "no direct delivery was refused: every member's markers came before the drains",
    );
    for (const [i, t] of traffics.entries()) {
      for (const [id, acked] of t.replied) {
        const processed = sequenceSink.get(id) ?? [];
        for (let k = 1; k < processed.length; k++) {
          assert.ok(processed[k]! > processed[k - 1]!, `FIFO for ${id}: ${processed.slice(Math.max(0, k - 3), k + 2)}`);
        }
        assert.deepEqual(
          processed,
          [...acked].sort((x, y) => x - y),
          `caller ${i}: every processed message of ${id} was acknowledged and vice versa`,
        );
      }
      const sent = [...t.next.values()].reduce((x, y) => x + y, 0);
      const processed = [...t.replied.keys()].reduce((sum, id) => sum + (sequenceSink.get(id)?.length ?? 0), 0);
      assert.equal(processed + t.failures.length, sent, `caller ${i}: every message was processed or rejected`);
    }
    assert.ok(coordinator.sharding.stats.handoffShards > handoffsBefore, "the leave moved shards");
    const directAfter = survivors.reduce((sum, n) => sum + n.sharding.stats.directRoutes, 0);
    assert.ok(directAfter > directBefore, "direct routing resumed after the handoffs");
    const plan = coordinator.sharding.allocations("Direct");
    assert.ok(
      [...plan.values()].every((o) => !o.equals(leaver.cluster.selfAddress)),
      "no shard left on the leaver",
    );
  } finally {
    await terminateAll([...nodes, ...joined]);
  }
});

test("direct routing over TCP: an owner refuses a direct delivery named under a plan it no longer holds — typed, counted, not processed — and the sender's next message arrives", async () => {
  const nodes = await startShardingNodes(3);
  try {
    for (const n of nodes) n.sharding.init("Stale", OrderCommand, stillSettings, (id) => new SequenceBehavior(id));
    await eventually(() => nodes.every((n) => settled(n, 3)) && planSettled(nodes, "Stale", stillSettings), {
      what: "a balanced plan",
      describe: describeNodes(nodes, "Stale"),
    });
    const sorted = [...nodes].sort((a, b) => UniqueAddress.compare(a.cluster.selfAddress, b.cluster.selfAddress));
    const [coordinator, caller, owner] = sorted as [ShardingNode, ShardingNode, ShardingNode];
    // An entity on the third node, and the generation under which that node owns it.
    let id = "";
    for (let i = 0; id === ""; i++) {
      if (coordinator.sharding.ownerFor("Stale", `stale-${i}`)?.equals(owner.cluster.selfAddress)) id = `stale-${i}`;
    }
    const ref = caller.sharding.entityRefFor<OrderCommand>("Stale", id);
    await ref.ask(new Seq(0), OrderReply, 5_000);
    await ref.ask(new Seq(1), OrderReply, 5_000);
    const staleGeneration = owner.sharding.planGeneration("Stale");
    const shard = caller.sharding.shardOf("Stale", id);
    // An operator moves the shard to the caller: the owner drains it and no longer owns it.
    const decision = coordinator.sharding.moveShard("Stale", shard, { to: caller.cluster.selfAddress });
    assert.equal(decision.kind, "moving");
    await eventually(() => owner.sharding.ownerFor("Stale", id)?.equals(caller.cluster.selfAddress) === true, {
      what: "the shard moved to the caller",
    });

    // A sender with a stale plan: a direct envelope naming the old generation, sent over TCP to the old owner.
    const key = ShardingSettings.create(stillSettings).key;
    const message = encodeNested(MessageRegistry.default, new Seq(99));
    const hop0 = new ShardingEnvelope("User", "Stale", id, shard, key, 0, null, 3_000, false, message);
    const stale = DirectEnvelope.of(hop0, coordinator.cluster.selfAddress, staleGeneration);
    const daemon = caller.system.actorSelection(`${owner.cluster.selfAddress.address}/system/sharding`);
    const refusalsBefore = owner.sharding.stats.directRefusals;
    await assert.rejects(askVia(caller.system, daemon, stale, OrderReply, 3_000), (e: unknown) => {
      assert.ok(e instanceof RemoteAskError, String(e));
      assert.equal(e.remoteClass, "DirectDeliveryRefusedError");
      return true;
    });
    assert.equal(owner.sharding.stats.directRefusals, refusalsBefore + 1);
    assert.ok(!(sequenceSink.get(id) ?? []).includes(99), "the refused message was not processed");
    const reply = await ref.ask(new Seq(2), OrderReply, 5_000);
    assert.equal(reply.host, caller.system.address.toString(), "the next message reaches the new owner");
    assert.deepEqual(sequenceSink.get(id), [0, 1, 2]);
  } finally {
    await terminateAll(nodes);
  }
});

test("direct routing over TCP: a caller with a stale plan (it hears nothing from the coordinator while a shard it sends to directly moves) keeps sending to the old owner, which drains only after its marker; every message is processed once, in order, or refused typed, and the next ones reach the new owner", async () => {
  const nodes = await startShardingNodes(3);
  // A failed assertion must not leave the traffic loop running (the test process would never end).
  let stopTraffic: () => Promise<void> = async () => {};
  try {
    for (const n of nodes)
      n.sharding.init("StaleCaller", OrderCommand, stillSettings, (id) => new SequenceBehavior(id));
    await eventually(() => nodes.every((n) => settled(n, 3)) && planSettled(nodes, "StaleCaller", stillSettings), {
      what: "a balanced plan",
      describe: describeNodes(nodes, "StaleCaller"),
    });
    const sorted = [...nodes].sort((a, b) => UniqueAddress.compare(a.cluster.selfAddress, b.cluster.selfAddress));
    const [coordinator, caller, owner] = sorted as [ShardingNode, ShardingNode, ShardingNode];
    // Six entities of one shard the third node owns.
    let shard = -1;
    const ids: string[] = [];
    for (let i = 0; ids.length < 6 && i < 10_000; i++) {
      const id = `stale-caller-${i}`;
      if (shard === -1 && coordinator.sharding.ownerFor("StaleCaller", id)?.equals(owner.cluster.selfAddress)) {
        shard = caller.sharding.shardOf("StaleCaller", id);
      }
      if (shard !== -1 && caller.sharding.shardOf("StaleCaller", id) === shard) ids.push(id);
    }
    assert.equal(ids.length, 6);
    const traffic = continuousTraffic(caller, "StaleCaller", ids);
    stopTraffic = () => traffic.stop();
    await eventually(
      () => [...traffic.replied.values()].every((r) => r.length > 20) && caller.sharding.stats.directRoutes > 50,
      {
        what: "the caller sending straight to the owner",
        describe: () => caller.sharding.stats,
      },
    );

    // The caller hears nothing from the coordinator from now on: no announcement, no plan. The operator moves the shard
    // to the coordinator; the caller keeps sending directly to the old owner on its stale plan.
    caller.remoting.blackhole(coordinator.remoting.selfAddress);
    let unblocked = false;
    try {
      const decision = coordinator.sharding.moveShard("StaleCaller", shard, { to: coordinator.cluster.selfAddress });
      assert.equal(decision.kind, "moving");
      const directAtMove = caller.sharding.stats.directRoutes;
      await eventually(() => caller.sharding.stats.directRoutes >= directAtMove + 20, {
        what: "direct deliveries to the old owner after the handoff was announced",
        describe: () => caller.sharding.stats,
      });
      assert.ok(
        caller.sharding.ownerFor("StaleCaller", ids[0]!)?.equals(owner.cluster.selfAddress) !== false,
        "the caller's plan still names the old owner (or it fails closed)",
      );
    } finally {
      caller.remoting.unblackhole(coordinator.remoting.selfAddress);
      unblocked = true;
    }
    assert.ok(unblocked);
    await eventually(
      () =>
        nodes.every(
          (n) => n.sharding.ownerFor("StaleCaller", ids[0]!)?.equals(coordinator.cluster.selfAddress) === true,
        ),
      { what: "the shard moved to the coordinator", describe: describeNodes(nodes, "StaleCaller"), timeoutMs: 20_000 },
    );
    const atMove = new Map([...traffic.replied].map(([id, r]) => [id, r.length]));
    await eventually(() => [...traffic.replied].every(([id, r]) => r.length > atMove.get(id)! + 20), {
      what: "traffic reaching the new owner",
      timeoutMs: 20_000,
    });
    await traffic.stop();

    const remoteClass = (e: Error) => (e instanceof RemoteAskError ? e.remoteClass : e.name);
    const typed = new Set(["NoShardOwnerError", "DirectDeliveryRefusedError"]);
    assert.ok(
      traffic.failures.every((e) => typed.has(remoteClass(e))),
      `only typed refusals, got ${[...new Set(traffic.failures.map((e) => `${remoteClass(e)}: ${e.message}`))]}`,
    );
    for (const [id, acked] of traffic.replied) {
      const processed = sequenceSink.get(id) ?? [];
      for (let k = 1; k < processed.length; k++) {
        assert.ok(processed[k]! > processed[k - 1]!, `FIFO for ${id}: ${processed.slice(Math.max(0, k - 3), k + 2)}`);
      }
      assert.deepEqual(
        processed,
        [...acked].sort((x, y) => x - y),
        `every processed message of ${id} acknowledged`,
      );
    }
    const sent = [...traffic.next.values()].reduce((x, y) => x + y, 0);
    const processed = ids.reduce((sum, id) => sum + (sequenceSink.get(id)?.length ?? 0), 0);
    assert.equal(
      processed + traffic.failures.length,
      sent,
      "every message was processed or refused, none lost silently",
    );
    const reply = await caller.sharding
      .entityRefFor<OrderCommand>("StaleCaller", ids[0]!)
      .ask(new Seq(1_000_000), OrderReply, 5_000);
    assert.equal(reply.host, coordinator.system.address.toString(), "the next message reaches the new owner");
  } finally {
    await stopTraffic();
    await terminateAll(nodes);
  }
});

test("direct routing over TCP: bursts of tells travel in batches, and two operator moves of their shard under them lose none and reorder none", async () => {
  const nodes = await startWithType(3, "Burst", stillSettings);
  let running = true;
  let loop: Promise<void> = Promise.resolve();
  try {
    const [coordinator, caller, owner] = nodes as [ShardingNode, ShardingNode, ShardingNode];
    // Four entities of one shard the third node owns.
    let shard = -1;
    const ids: string[] = [];
    for (let i = 0; ids.length < 4 && i < 10_000; i++) {
      const id = `burst-${i}`;
      if (shard === -1 && coordinator.sharding.ownerFor("Burst", id)?.equals(owner.cluster.selfAddress)) {
        shard = caller.sharding.shardOf("Burst", id);
      }
      if (shard !== -1 && caller.sharding.shardOf("Burst", id) === shard) ids.push(id);
    }
    assert.equal(ids.length, 4);
    // The grant first (a shard's first messages go through the coordinator, §8.8).
    const refs = ids.map((id) => caller.sharding.entityRefFor<OrderCommand>("Burst", id));
    for (const ref of refs) await ref.ask(new Seq(0), OrderReply, 5_000);
    // Every 8 ms, four tells to each entity in one synchronous burst (16 to one owner: one batch when direct). At most
    // 2,000 a second, so a handoff's held queue (1,024 per shard) does not fill on a slow machine.
    const next = new Map(ids.map((id) => [id, 1]));
    const thrown: Error[] = [];
    loop = (async () => {
      while (running) {
        for (let k = 0; k < 4; k++) {
          for (const [i, id] of ids.entries()) {
            const n = next.get(id)!;
            next.set(id, n + 1);
            try {
              refs[i]!.tell(new Seq(n));
            } catch (error) {
              thrown.push(error as Error);
            }
          }
        }
        await new Promise((resolve) => setTimeout(resolve, 8));
      }
    })();
    // The announcement of each move reaches the caller right after a burst it has not written yet: the tells its actors
    // sent earlier in the same turn of the dispatcher wait for the end of the turn (§8.8 "Batches"). The marker it sends
    // for the announcement must still come after them on the link, or the old owner drains before they arrive.
    const daemonHost = caller.sharding as unknown as { onDaemonMessage(message: unknown, ctx: unknown): void };
    const onDaemonMessage = daemonHost.onDaemonMessage.bind(daemonHost);
    let announcementsAfterABurst = 0;
    daemonHost.onDaemonMessage = (message, ctx) => {
      if (message instanceof HandoffAnnounce && running) {
        for (const [i, id] of ids.entries()) {
          const n = next.get(id)!;
          next.set(id, n + 1);
          refs[i]!.tell(new Seq(n));
        }
        announcementsAfterABurst++;
      }
      onDaemonMessage(message, ctx);
    };
    const processedNow = () => ids.reduce((sum, id) => sum + (sequenceSink.get(id)?.length ?? 0), 0);
    await eventually(() => caller.sharding.stats.directBatches > 20, {
      what: "the caller's tells going straight to the owner in batches",
      describe: () => caller.sharding.stats,
    });
    for (const to of [coordinator, owner]) {
      const decision = coordinator.sharding.moveShard("Burst", shard, { to: to.cluster.selfAddress });
      assert.equal(decision.kind, "moving");
      await eventually(
        () => nodes.every((n) => n.sharding.ownerFor("Burst", ids[0]!)?.equals(to.cluster.selfAddress) === true),
        { what: `the shard moved to port ${to.port}`, describe: describeNodes(nodes, "Burst"), timeoutMs: 20_000 },
      );
      const batchesAtMove = caller.sharding.stats.directBatches;
      const processedAtMove = processedNow();
      await eventually(() => processedNow() > processedAtMove + 400, {
        what: `traffic reaching port ${to.port}`,
        timeoutMs: 20_000,
      });
      if (to === owner) {
        await eventually(() => caller.sharding.stats.directBatches > batchesAtMove + 20, {
          what: "batches to the owner again after the move back",
          describe: () => caller.sharding.stats,
        });
      }
    }
    running = false;
    await loop;
    assert.ok(announcementsAfterABurst >= 2, `${announcementsAfterABurst} announcements came right after a burst`);
    const sent = [...next.values()].reduce((x, y) => x + y - 1, 0);
    assert.deepEqual(thrown, [], "no tell was refused at the caller");
    await eventually(() => processedNow() === sent + ids.length, {
      what: `all ${sent} tells (and the ${ids.length} asks) processed`,
      describe: () => ({ processed: processedNow(), stats: nodes.map((n) => n.sharding.stats) }),
    });
    for (const id of ids) {
      const processed = sequenceSink.get(id)!;
      assert.deepEqual(
        processed,
        Array.from({ length: next.get(id)! }, (_, n) => n),
        `every message of ${id} processed once, in the order sent`,
      );
    }
    assert.equal(
      nodes.reduce((sum, n) => sum + n.sharding.stats.directRefusals, 0),
      0,
      "no direct delivery was refused: the caller's marker came after its last batch",
    );
    // A batch entry is never sent alone: one that arrives alone is an unknown message to the daemon, refused, counted.
    const entry = Object.assign(Object.create(DirectBatchEntry.prototype) as object, {
      kind: "User",
      entityId: ids[0],
      shardId: shard,
      askTimeoutMs: null,
      senderless: true,
      deliveryAttempt: 0,
      traceparent: null,
      generation: owner.sharding.planGeneration("Burst"),
      message: encodeNested(MessageRegistry.default, new Seq(123_456)),
    });
    const rejectedBefore = owner.sharding.stats.rejectedEnvelopes;
    caller.system.actorSelection(`${owner.cluster.selfAddress.address}/system/sharding`).tell(entry);
    await eventually(() => owner.sharding.stats.rejectedEnvelopes === rejectedBefore + 1, {
      what: "a batch entry sent alone refused by the owner's daemon",
      describe: () => owner.sharding.stats,
    });
    assert.ok(!(sequenceSink.get(ids[0]!) ?? []).includes(123_456), "the entry's message was not processed");
  } finally {
    running = false;
    await loop;
    await terminateAll(nodes);
  }
});
