// npm run bench:membership-windows — where the time of a membership change's window goes (issue 22).
//
// In-process nodes over loopback TCP (test/sharding/fixtures/tcp-nodes.ts, fast gossip: 30 ms). Three nodes settle
// a 64-shard plan; a surviving node keeps 20 asks in flight to 200 entities. Then one change:
//   join (high)   a fourth node whose port sorts above every member joins (the coordinator stays);
//   join (low)    a fourth node whose port sorts below every member joins (it becomes the coordinator: the
//                 election picks the lowest address, not the oldest member);
//   leave         the highest non-coordinator leaves gracefully;
//   leave coord   the coordinator leaves gracefully.
// A 1 ms sampler timestamps, from the change's start: the first sample where some node's view is not converged, the
// view converged again on every remaining node, every node naming the same coordinator, the new coordinator's
// bootstrap (start = it names itself; end = it authored a plan), the first newer plan stored on every node, the
// final plan everywhere, each handoff's start and finish (from the "sharding handoff started/finished" log lines),
// the first ask answered after the change's start and the longest any ask took in the window (held).
//
// MOVIE_WINDOWS_RUNS (3) and MOVIE_WINDOWS_SCENARIOS (comma list of names) tune it.
import { mkdirSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import type { Logger } from "../src/actor/index.ts";
import { LeastLoadedAllocation } from "../src/sharding/index.ts";
import { GetOrder, OrderCommand, OrderReply, SequenceBehavior } from "../test/sharding/fixtures/order.ts";
import {
  planSettled,
  type ShardingNode,
  settled,
  startShardingNode,
  terminateAll,
} from "../test/sharding/fixtures/tcp-nodes.ts";
import { median, sleep, until } from "./support/node-process.ts";

const runs = Number(process.env.MOVIE_WINDOWS_RUNS ?? 3);
const type = "Window";
const settings = { shardCount: 64, allocation: new LeastLoadedAllocation() };
const entities = 200;
const inFlight = 20;

type Scenario = "join (high)" | "join (low)" | "leave" | "leave coord";
const allScenarios: Scenario[] = ["join (high)", "join (low)", "leave", "leave coord"];
const chosen = process.env.MOVIE_WINDOWS_SCENARIOS?.split(",").map((s) => s.trim());
const unknown = (chosen ?? []).filter((name) => !(allScenarios as string[]).includes(name));
if (unknown.length > 0) {
  console.error(
    `MOVIE_WINDOWS_SCENARIOS names no scenario ${JSON.stringify(unknown)}; choose from ${JSON.stringify(allScenarios)}`,
  );
  process.exit(2);
}
const scenarios = chosen === undefined ? allScenarios : allScenarios.filter((s) => chosen.includes(s));

/** Phases, in ms from the change's start (null: did not happen in this run). */
interface Phases {
  nonConverged: number | null;
  converged: number | null;
  coordinatorAgreed: number | null;
  coordinatorChanged: boolean;
  bootstrapStart: number | null;
  bootstrapEnd: number | null;
  firstNewPlanEverywhere: number | null;
  /** Handoffs finished with outcome "done". */
  handoffs: number;
  /** "sharding handoff started" lines: a handoff restarted by a new coordinator counts twice. */
  handoffAttempts: number;
  firstHandoffStart: number | null;
  lastHandoffFinish: number | null;
  handoffMedianMs: number | null;
  finalPlanEverywhere: number | null;
  firstAnswer: number | null;
  maxHeldMs: number;
  failedAsks: number;
}

/**
 * A handoff line of any node's log. Only a coordinator starts and finishes handoffs; a coordinator change can start a
 * shard's handoff twice (the old coordinator's attempt aborted, the new one's done), so handoffs are counted by their
 * "done" outcome.
 */
interface HandoffEvent {
  readonly at: number;
  readonly what: "started" | "finished";
  readonly shard: number;
  readonly outcome: string | null;
}

/** A logger stamping the handoff lines with the time they were logged. */
function handoffLogger(events: HandoffEvent[]): Logger {
  const info = (context: object, message: string): void => {
    const { shard = -1, outcome = null } = context as { shard?: number; outcome?: string };
    if (message === "sharding handoff started") events.push({ at: performance.now(), what: "started", shard, outcome });
    if (message === "sharding handoff finished")
      events.push({ at: performance.now(), what: "finished", shard, outcome });
  };
  return { debug: () => {}, info, warn: () => {}, error: () => {} };
}

/** A free loopback port at or above `from` (a join's port decides whether it sorts below or above the members). */
async function freePort(from: number): Promise<number> {
  for (let port = from; port < from + 500; port++) {
    const ok = await new Promise<boolean>((resolve) => {
      const server = createServer();
      server.once("error", () => resolve(false));
      server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
    });
    if (ok) return port;
  }
  throw new Error(`no free port from ${from}`);
}

function init(node: ShardingNode): void {
  node.sharding.init(type, OrderCommand, settings, (id) => new SequenceBehavior(id));
}

async function runOnce(scenario: Scenario): Promise<Phases> {
  const events: HandoffEvent[] = [];
  const logger = handoffLogger(events);
  // Members on ports 40000+; a low joiner takes a port below them, a high one above.
  const base = await freePort(40_000 + Math.floor(Math.random() * 2_000));
  const first = await startShardingNode(null, { logger, port: base });
  const nodes: ShardingNode[] = [first];
  for (let i = 0; i < 2; i++)
    nodes.push(await startShardingNode(first.port, { logger, port: await freePort(base + 1) }));
  let stopLoad = false;
  const asks: { start: number; end: number; ok: boolean }[] = [];
  try {
    for (const n of nodes) init(n);
    await until(
      "three nodes with a settled plan",
      async () => nodes.every((n) => settled(n, 3)) && planSettled(nodes, type, settings),
      30_000,
    );
    const byPort = [...nodes].sort((a, b) => a.port - b.port);
    const coordinator = byPort[0]!;
    const highest = byPort[2]!;
    const leaving = scenario === "leave" ? highest : scenario === "leave coord" ? coordinator : null;
    const caller = byPort[1]!; // neither leaves
    const loop = async (): Promise<void> => {
      while (!stopLoad) {
        const id = `e${Math.floor(Math.random() * entities)}`;
        const start = performance.now();
        let ok = true;
        try {
          await caller.sharding.entityRefFor<OrderCommand>(type, id).ask(new GetOrder(), OrderReply, 5_000);
        } catch {
          ok = false;
        }
        asks.push({ start, end: performance.now(), ok });
      }
    };
    const loops = Array.from({ length: inFlight }, loop);
    await sleep(500);
    const generationBefore = coordinator.sharding.planGeneration(type);
    const coordinatorBefore = coordinator.cluster.selfAddress.toString();
    const eventsBefore = events.length;
    const remaining = (): ShardingNode[] => nodes.filter((n) => n !== leaving);
    const expectedUp = leaving === null ? 4 : 2;
    const p: Phases = {
      nonConverged: null,
      converged: null,
      coordinatorAgreed: null,
      coordinatorChanged: false,
      bootstrapStart: null,
      bootstrapEnd: null,
      firstNewPlanEverywhere: null,
      handoffs: 0,
      handoffAttempts: 0,
      firstHandoffStart: null,
      lastHandoffFinish: null,
      handoffMedianMs: null,
      finalPlanEverywhere: null,
      firstAnswer: null,
      maxHeldMs: 0,
      failedAsks: 0,
    };
    const t0 = performance.now();
    const since = (): number => Math.round((performance.now() - t0) * 10) / 10;
    let joined: ShardingNode | null = null;
    const sampler = setInterval(() => {
      const live = remaining();
      if (p.nonConverged === null && live.some((n) => !n.cluster.snapshot().converged)) p.nonConverged = since();
      if (p.converged === null && live.length === expectedUp && live.every((n) => settled(n, expectedUp))) {
        p.converged = since();
      }
      if (p.converged !== null && p.coordinatorAgreed === null) {
        const named = live.map((n) => n.sharding.inspect(type).coordinator?.toString() ?? null);
        if (named[0] !== null && named.every((c) => c === named[0])) {
          p.coordinatorAgreed = since();
          p.coordinatorChanged = named[0] !== coordinatorBefore;
        }
      }
      if (p.coordinatorChanged && p.coordinatorAgreed !== null) {
        const elected = live.find((n) => n.cluster.selfAddress.toString() === coordinatorOf(live));
        if (elected !== undefined) {
          const view = elected.sharding.inspect(type);
          if (p.bootstrapStart === null) p.bootstrapStart = p.coordinatorAgreed;
          if (p.bootstrapEnd === null && view.planAuthor?.equals(elected.cluster.selfAddress) === true) {
            p.bootstrapEnd = since();
          }
        }
      }
      if (
        p.firstNewPlanEverywhere === null &&
        live.length === expectedUp &&
        live.every((n) => n.sharding.planGeneration(type) > generationBefore)
      ) {
        const g = live.map((n) => n.sharding.planGeneration(type));
        if (g.every((x) => x === g[0])) p.firstNewPlanEverywhere = since();
      }
    }, 1);
    if (leaving === null) {
      const port = scenario === "join (low)" ? await freePort(20_000) : await freePort(60_000);
      joined = await startShardingNode(first.port, { logger, port });
      init(joined);
      nodes.push(joined);
    } else {
      await leaving.cluster.leave();
    }
    try {
      await until(
        "the plan settled after the change",
        async () => {
          const live = remaining();
          return live.every((n) => settled(n, expectedUp)) && planSettled(live, type, settings);
        },
        30_000,
      );
    } finally {
      clearInterval(sampler);
    }
    p.finalPlanEverywhere = Math.round((performance.now() - t0) * 10) / 10;
    stopLoad = true;
    await Promise.all(loops);
    const mine = events.slice(eventsBefore);
    const starts = new Map<number, number>();
    const durations: number[] = [];
    for (const e of mine) {
      if (e.what === "started") starts.set(e.shard, e.at);
      else if (e.outcome === "done" && starts.has(e.shard)) durations.push(e.at - starts.get(e.shard)!);
    }
    const rel = (at: number): number => Math.round((at - t0) * 10) / 10;
    const startsAt = mine.filter((e) => e.what === "started").map((e) => e.at);
    const finishesAt = mine.filter((e) => e.what === "finished").map((e) => e.at);
    p.handoffs = mine.filter((e) => e.what === "finished" && e.outcome === "done").length;
    p.handoffAttempts = startsAt.length;
    p.firstHandoffStart = startsAt.length === 0 ? null : rel(Math.min(...startsAt));
    p.lastHandoffFinish = finishesAt.length === 0 ? null : rel(Math.max(...finishesAt));
    p.handoffMedianMs = durations.length === 0 ? null : Math.round(median(durations) * 10) / 10;
    const window = asks.filter((a) => a.end >= t0);
    const answered = window.filter((a) => a.ok && a.start >= t0).map((a) => a.end);
    p.firstAnswer = answered.length === 0 ? null : rel(Math.min(...answered));
    p.maxHeldMs = Math.round(Math.max(0, ...window.filter((a) => a.ok).map((a) => a.end - a.start)));
    p.failedAsks = window.filter((a) => !a.ok).length;
    return p;
  } finally {
    stopLoad = true;
    await terminateAll(nodes);
  }
}

function coordinatorOf(live: ShardingNode[]): string | null {
  return live[0]?.sharding.inspect(type).coordinator?.toString() ?? null;
}

const columns: [keyof Phases, string][] = [
  ["nonConverged", "not conv."],
  ["converged", "converged"],
  ["coordinatorAgreed", "coord agreed"],
  ["bootstrapStart", "bootstrap from"],
  ["bootstrapEnd", "bootstrap to"],
  ["firstNewPlanEverywhere", "new plan all"],
  ["firstHandoffStart", "1st handoff"],
  ["lastHandoffFinish", "last handoff"],
  ["handoffMedianMs", "handoff p50"],
  ["finalPlanEverywhere", "final plan"],
  ["firstAnswer", "1st answer"],
  ["maxHeldMs", "max held"],
  ["handoffs", "handoffs"],
  ["handoffAttempts", "started"],
  ["failedAsks", "failed"],
];

function medianOf(all: Phases[], key: keyof Phases): number | null {
  const values = all.map((p) => p[key]).filter((v): v is number => typeof v === "number");
  return values.length === 0 ? null : Math.round(median(values) * 10) / 10;
}

const results: Record<string, { runs: Phases[]; median: Record<string, number | null> }> = {};
for (const scenario of scenarios) {
  const all: Phases[] = [];
  for (let i = 0; i < runs; i++) {
    all.push(await runOnce(scenario));
    console.log(`${scenario} run ${i + 1}: ${JSON.stringify(all.at(-1))}`);
  }
  results[scenario] = {
    runs: all,
    median: Object.fromEntries(columns.map(([key]) => [key, medianOf(all, key)])),
  };
}

console.log(
  `\nmedian of ${runs} runs, ms from the change's start (gossip 30 ms, 64 shards, ${inFlight} asks in flight)`,
);
const width = 15;
console.log(["scenario".padEnd(12), ...columns.map(([, h]) => h.padStart(width))].join(""));
for (const [scenario, r] of Object.entries(results)) {
  const cells = columns.map(([key]) => String(r.median[key] ?? "—").padStart(width));
  const changed = r.runs.filter((p) => p.coordinatorChanged).length;
  console.log([scenario.padEnd(12), ...cells].join("") + `   (coordinator changed in ${changed}/${runs})`);
}
mkdirSync(new URL("./results/", import.meta.url), { recursive: true });
const file = new URL(`./results/membership-windows-${Date.now()}.json`, import.meta.url);
writeFileSync(file, JSON.stringify({ runs, inFlight, entities, settings: { shardCount: 64 }, results }, null, 2));
console.log(`wrote ${file.pathname}`);
