// Issue 22 over real loopback TCP: membership changes are invisible to callers. One caller keeps numbered tells and
// asks (3 s ask timeout) going to every entity while a node joins, a node leaves gracefully and the coordinator itself
// leaves (so the coordinator changes): no ask fails (the caller waits for a converged coordinator instead of failing
// with NoShardOwnerError, docs/protocol.md §8.6, and what was in flight to the old coordinator is flushed to the new
// one, §8.7), every tell is delivered, and each entity processes the caller's messages in the order they were sent. Then a member becomes unreachable: the wait ends at heldDeliveryTimeout with
// an error that names the member.
import assert from "node:assert/strict";
import { test } from "node:test";
import { UniqueAddress } from "../../src/actor/index.ts";
import { NoShardOwnerError } from "../../src/sharding/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { OrderCommand, OrderReply, Seq, SequenceBehavior, sequenceSink } from "./fixtures/order.ts";
import {
  describeNodes,
  recordingLogger,
  type ShardingNode,
  settled,
  startShardingNode,
  startShardingNodes,
  terminateAll,
} from "./fixtures/tcp-nodes.ts";

const type = "ZeroDowntime";
// The wait is bounded well below the test's patience but above any transition window on a loaded host.
const settings = { shardCount: 16, heldDeliveryTimeout: 2_500 };
const askTimeoutMs = 3_000;
const entities = Array.from({ length: 12 }, (_, i) => `zd-${i}`);

/** The caller's traffic: per entity, one loop sending Seq 1, 2, 3, … alternating tell and ask, paced. */
function startTraffic(caller: ShardingNode) {
  const sent = new Map(entities.map((id) => [id, 0]));
  const failures: { window: string; id: string; n: number; error: string }[] = [];
  /** `${id}#${n}` → the window it was sent in. */
  const windowOf = new Map<string, string>();
  let running = true;
  let window = "steady";
  const loops = entities.map(async (id) => {
    const ref = caller.sharding.entityRefFor<OrderCommand>(type, id);
    while (running) {
      const n = sent.get(id)! + 1;
      sent.set(id, n);
      windowOf.set(`${id}#${n}`, window);
      try {
        if (n % 2 === 1) ref.tell(new Seq(n));
        else await ref.ask(new Seq(n), OrderReply, askTimeoutMs);
      } catch (error) {
        failures.push({ window, id, n, error: `${n % 2 === 1 ? "tell" : "ask"} failed: ${String(error)}` });
      }
      // Pacing, not synchronisation: ~12 entities × ~80 messages a second keeps the shared host calm.
      await new Promise((resolve) => setTimeout(resolve, 12));
    }
  });
  return {
    sent,
    failures,
    windowOf,
    set window(name: string) {
      window = name;
    },
    async stop() {
      running = false;
      await Promise.all(loops);
    },
  };
}

const lowestFirst = (nodes: ShardingNode[]) =>
  [...nodes].sort((x, y) => UniqueAddress.compare(x.cluster.selfAddress, y.cluster.selfAddress));

test("asks and tells during a join, a graceful leave and a coordinator change: none fails, all delivered once and in order", async () => {
  const logger = recordingLogger();
  const started = await startShardingNodes(3, [], logger);
  const nodes = [...started];
  const all = [...started];
  try {
    for (const n of nodes) n.sharding.init(type, OrderCommand, settings, (id) => new SequenceBehavior(id));
    await eventually(() => nodes.every((n) => settled(n, 3) && n.sharding.allocations(type).size === 16), {
      what: "three Up members and a plan",
      describe: describeNodes(nodes, type),
    });
    // The caller is never the coordinator (the lowest address) and never leaves.
    const caller = lowestFirst(nodes)[2]!;
    const traffic = startTraffic(caller);
    let joinerCoordinates = false;
    const windows: Record<string, number> = {};
    const timed = async (name: string, run: () => Promise<void>) => {
      traffic.window = name;
      const t0 = performance.now();
      await run();
      windows[name] = Math.round(performance.now() - t0);
      // Windows do not overlap: what was sent in this one is processed (or lost) before the next change starts.
      traffic.window = `after ${name}`;
      const sentBy = new Map(traffic.sent);
      await eventually(() => entities.every((id) => (sequenceSink.get(id)?.at(-1) ?? 0) > sentBy.get(id)!), {
        what: `traffic past the ${name}`,
        describe: () => entities.map((id) => [id, sequenceSink.get(id)?.at(-1), sentBy.get(id)]),
      });
    };
    try {
      await eventually(() => [...traffic.sent.values()].every((n) => n >= 4), { what: "steady traffic" });

      await timed("join", async () => {
        const joiner = await startShardingNode(started[0]!.port, { logger });
        nodes.push(joiner);
        joinerCoordinates = lowestFirst(nodes)[0] === joiner;
        all.push(joiner);
        joiner.sharding.init(type, OrderCommand, settings, (id) => new SequenceBehavior(id));
        await eventually(
          () =>
            nodes.every((n) => settled(n, 4)) &&
            [...caller.sharding.allocations(type).values()].some((o) => o.equals(joiner.cluster.selfAddress)),
          { what: "the joiner Up and hosting shards", timeoutMs: 10_000, describe: describeNodes(nodes, type) },
        );
      });

      const [coordinator, other] = lowestFirst(nodes).filter((n) => n !== caller) as [ShardingNode, ShardingNode];
      await timed("leave", async () => {
        await other.cluster.leave(other.cluster.selfAddress, 10_000);
        nodes.splice(nodes.indexOf(other), 1);
        await eventually(() => nodes.every((n) => settled(n, 3)), { what: "three Up members after the leave" });
      });

      await timed("coordinator change", async () => {
        await coordinator.cluster.leave(coordinator.cluster.selfAddress, 10_000);
        nodes.splice(nodes.indexOf(coordinator), 1);
        await eventually(() => nodes.every((n) => settled(n, 2)), {
          what: "two Up members after the coordinator left",
        });
      });
      traffic.window = "after";
      const atEnd = new Map(traffic.sent);
      await eventually(() => entities.every((id) => traffic.sent.get(id)! >= atEnd.get(id)! + 4), {
        what: "traffic continuing after the changes",
      });
    } finally {
      await traffic.stop();
    }

    // On failure, the handoff and flush lines of the log say which move held or rejected what.
    const transitionLog = () =>
      [...logger.warnings, ...logger.infos]
        .filter((l) => /handoff (aborted|waits)|flush|coordinator changed|deadline/.test(l.message))
        .map((l) => `${l.message} ${JSON.stringify(l.context)}`);
    // A joiner with a lower address than every member (ports are the kernel's choice) takes over as coordinator: then
    // the join is a coordinator change too. Either way nothing may fail: what was in flight to the old coordinator is
    // relayed to the new one behind the caller's flush marker (docs/protocol.md §8.7).
    assert.deepEqual(traffic.failures, [], `no tell or ask failed in any window; ${JSON.stringify(transitionLog())}`);
    // Every message was processed exactly once, in order.
    const lastOf = (id: string) => traffic.sent.get(id)!;
    await eventually(() => entities.every((id) => sequenceSink.get(id)?.at(-1) === lastOf(id)), {
      what: "every entity processed the caller's last message",
      describe: () => entities.map((id) => [id, sequenceSink.get(id)?.at(-1), lastOf(id)]),
    });
    for (const id of entities) {
      const processed = sequenceSink.get(id)!;
      for (let i = 1; i < processed.length; i++) assert.ok(processed[i]! > processed[i - 1]!, `${id}: in order, once`);
      const seen = new Set(processed);
      for (let n = 1; n <= lastOf(id); n++) {
        assert.ok(
          seen.has(n),
          `${id} #${n} (sent during ${traffic.windowOf.get(`${id}#${n}`)}) was never processed; ${JSON.stringify(transitionLog())}`,
        );
      }
    }
    const held = all.reduce((sum, n) => sum + n.sharding.stats.heldDeliveries, 0);
    const messages = [...traffic.sent.values()].reduce((x, y) => x + y, 0);
    console.log(
      `zero-downtime: ${messages} messages, ${held} held while waiting for a coordinator or a flush, 0 failed or lost, windows ${JSON.stringify(windows)} ms${joinerCoordinates ? " (the joiner became the coordinator)" : ""}`,
    );
    assert.ok(held > 0, "some deliveries did wait for a coordinator (else the test proves nothing)");
  } finally {
    await terminateAll(all);
  }
});

test("with an unreachable member the wait ends at heldDeliveryTimeout and the error names the member", async () => {
  const nodes = await startShardingNodes(2);
  const [a, b] = nodes as [ShardingNode, ShardingNode];
  try {
    const quick = { shardCount: 4, heldDeliveryTimeout: 500 };
    for (const n of nodes) n.sharding.init("Unreachable", OrderCommand, quick, (id) => new SequenceBehavior(id));
    await eventually(() => nodes.every((n) => settled(n, 2) && n.sharding.allocations("Unreachable").size === 4), {
      what: "two Up members and a plan",
    });
    a.remoting.blackhole(b.remoting.selfAddress);
    await eventually(() => a.cluster.snapshot().unreachable.length > 0, { what: "b unreachable from a" });
    const t0 = performance.now();
    const missing = b.cluster.selfAddress.toString();
    await assert.rejects(
      a.sharding.entityRefFor<OrderCommand>("Unreachable", "u-1").ask(new Seq(1), OrderReply, askTimeoutMs),
      (e: unknown) => e instanceof NoShardOwnerError && e.unreachableMember === missing && e.message.includes(missing),
    );
    const waitedMs = performance.now() - t0;
    assert.ok(waitedMs >= 450 && waitedMs < askTimeoutMs, `waited ${Math.round(waitedMs)} ms, about the 500 ms bound`);
    assert.equal(a.sharding.stats.heldExpired, 1);
  } finally {
    a.remoting.unblackhole(b.remoting.selfAddress);
    await terminateAll(nodes);
  }
});
