// Where the time goes in a graceful leave (issue 22): three sharding nodes in one process over loopback TCP (the test
// fixtures' cluster timings: 30 ms gossip), one caller asking every entity continuously, then a leave, once of a
// non-coordinator and once of the coordinator. Prints, in ms from the leave() call, when each step was first seen:
// Leaving spread, views converged again, the coordinator's plan moved, handoffs started and finished, Exiting, Removed,
// and the caller's wait (asks held, slowest ask). Run: npx tsx --conditions=movie-source scripts/leave-timeline.ts
import { UniqueAddress } from "../src/actor/index.ts";
import { OrderCommand, OrderReply, Seq, SequenceBehavior } from "../test/sharding/fixtures/order.ts";
import {
  recordingLogger,
  type ShardingNode,
  settled,
  startShardingNode,
  terminateAll,
} from "../test/sharding/fixtures/tcp-nodes.ts";

const type = "Timeline";
const entities = Array.from({ length: 24 }, (_, i) => `t-${i}`);

async function until(condition: () => boolean, what: string, timeoutMs = 15_000): Promise<void> {
  const started = Date.now();
  while (!condition()) {
    if (Date.now() - started > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

async function timeline(leaveCoordinator: boolean): Promise<void> {
  const logLines: { at: number; message: string }[] = [];
  const base = recordingLogger();
  const logger = {
    ...base,
    info: (_context: object, message: string) => logLines.push({ at: performance.now(), message }),
  };
  const first = await startShardingNode(null, { logger });
  const others = await Promise.all([
    startShardingNode(first.port, { logger }),
    startShardingNode(first.port, { logger }),
  ]);
  const nodes = [first, ...others];
  try {
    for (const n of nodes) n.sharding.init(type, OrderCommand, { shardCount: 24 }, (id) => new SequenceBehavior(id));
    await until(() => nodes.every((n) => settled(n, 3) && n.sharding.allocations(type).size === 24), "a plan");
    const sorted = [...nodes].sort((x, y) => UniqueAddress.compare(x.cluster.selfAddress, y.cluster.selfAddress));
    const leaver = leaveCoordinator ? sorted[0]! : sorted[1]!;
    const caller = sorted[2]!;
    const survivors = nodes.filter((n) => n !== leaver);
    let running = true;
    let slowestMs = 0;
    let failed = 0;
    const loops = entities.map(async (id) => {
      const ref = caller.sharding.entityRefFor<OrderCommand>(type, id);
      for (let n = 1; running; n++) {
        const t0 = performance.now();
        try {
          await ref.ask(new Seq(n), OrderReply, 3_000);
        } catch {
          failed++;
        }
        slowestMs = Math.max(slowestMs, performance.now() - t0);
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    });
    await new Promise((resolve) => setTimeout(resolve, 300));
    slowestMs = 0;
    const heldBefore = caller.sharding.stats.heldDeliveries;
    const events = new Map<string, number>();
    const mark = (name: string, condition: boolean) => {
      if (condition && !events.has(name)) events.set(name, performance.now());
    };
    const addr = leaver.cluster.selfAddress.toString();
    const statusOn = (n: ShardingNode) =>
      n.cluster.snapshot().members.find((m) => m.uniqueAddress.toString() === addr)?.status ?? "Removed";
    const generation = caller.sharding.planGeneration(type);
    const t0 = performance.now();
    logLines.length = 0;
    const watching = setInterval(() => {
      mark(
        "Leaving seen by every survivor",
        survivors.every((n) => statusOn(n) !== "Up"),
      );
      mark(
        "survivors converged again",
        events.has("Leaving seen by every survivor") && survivors.every((n) => n.cluster.snapshot().converged),
      );
      mark("caller's plan generation moved", caller.sharding.planGeneration(type) !== generation);
      mark("first ask held at the caller", caller.sharding.stats.heldDeliveries > heldBefore);
      mark(
        "no shard left on the leaver",
        ![...caller.sharding.allocations(type).values()].some((o) => o.toString() === addr),
      );
      mark("Exiting seen by the caller", statusOn(caller) === "Exiting" || statusOn(caller) === "Removed");
      mark("Removed seen by the caller", statusOn(caller) === "Removed");
    }, 1);
    await leaver.cluster.leave(leaver.cluster.selfAddress, 15_000);
    await until(() => events.has("Removed seen by the caller"), "removal");
    await new Promise((resolve) => setTimeout(resolve, 200));
    clearInterval(watching);
    running = false;
    await Promise.all(loops);
    const handoffs = logLines.filter((l) => /handoff (started|finished)/.test(l.message));
    if (handoffs.length > 0) {
      events.set("first handoff started", handoffs[0]!.at);
      events.set("last handoff finished", handoffs.at(-1)!.at);
    }
    const bootstrap = logLines.find((l) => /handoff waits/.test(l.message));
    if (bootstrap !== undefined) events.set("a handoff waited for convergence", bootstrap.at);
    console.log(`\n${leaveCoordinator ? "the coordinator" : "a non-coordinator"} leaves (3 nodes, 24 shards):`);
    for (const [name, at] of [...events].sort((x, y) => x[1] - y[1])) {
      console.log(`  ${String(Math.round(at - t0)).padStart(6)} ms  ${name}`);
    }
    console.log(
      `  asks held at the caller: ${caller.sharding.stats.heldDeliveries - heldBefore}, failed: ${failed}, slowest ask: ${Math.round(slowestMs)} ms`,
    );
  } finally {
    await terminateAll(nodes);
  }
}

await timeline(false);
await timeline(true);
