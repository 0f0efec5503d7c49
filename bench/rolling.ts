// npm run bench:rolling — a rolling update of every backend under continuous load, on loopback node processes.
//
// A frontend (which registers the type but hosts no shard) and three backends; the frontend keeps `inFlight` asks
// in flight to 200 entities and sends numbered tells whose receipt each entity reports back. After a steady phase,
// each backend in turn is replaced: a new backend joins (with the new app version when the variant uses versions),
// then the old one leaves gracefully and exits. Then another steady phase. Per variant the table shows failed asks
// (by error), lost and reordered tells, ask latency p50/p99/max during the roll beside steady state (the ceiling of
// this run: the ratio is roll / steady), how often each shard changed owner (goal with versions: at most once),
// coordinator changes and the roll's duration. Variants: app versions with the caller-side wait (the default); the
// same without versions; and with versions but the wait turned off (awaitCoordinator: false) when available.
//
// MOVIE_ROLLING_INFLIGHT (50), MOVIE_ROLLING_STEADY_MS (4000), MOVIE_ROLLING_VARIANTS (comma list of names) tune it.
import { mkdirSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { NodeProcess } from "../examples/support/node-process.ts";
import { shardingSettingsShape } from "../src/sharding/settings.ts";
import { benchNodeOptions, median, sleep, until } from "./support/node-process.ts";
import { pct } from "./support/raw-frames.ts";

const script = fileURLToPath(new URL("./rolling-node.ts", import.meta.url));
const inFlight = Number(process.env.MOVIE_ROLLING_INFLIGHT ?? 50);
const steadyMs = Number(process.env.MOVIE_ROLLING_STEADY_MS ?? 4_000);
const entities = 200;
const tellsPerSecond = 500;

interface Status {
  label: string;
  up: number;
  members: number;
  converged: boolean;
  coordinator: string | null;
  allocated: number;
  handoffs: number;
  shardsPerOwner: number[];
}
interface LoadResult {
  phases: Record<string, { latencies: number[]; failed: Record<string, number> }>;
  tells: { sent: number; refused: number; received: number; outOfOrder: number; duplicates: number };
  moves: number[];
  coordinatorChanges: number;
  history?: string[][];
}

class RollNode extends NodeProcess<{ node: string; hostPort: string }> {
  constructor(label: string, role: string, seed: string, version: string, immediate: boolean) {
    super(label, script, [label, role, seed, version], {
      ...benchNodeOptions({ env: immediate ? { MOVIE_ROLLING_IMMEDIATE: "1" } : {} }),
    });
  }
  status(): Promise<Status> {
    return this.request<Status>({ type: "status" });
  }
}

interface Variant {
  readonly name: string;
  readonly versions: boolean;
  readonly immediate: boolean;
}

/** True when this checkout has the caller-side wait's setting (the comparison variant needs it). */
function hasAwaitSetting(): boolean {
  return Object.hasOwn(shardingSettingsShape, "awaitCoordinator");
}

const allVariants: Variant[] = [
  { name: "versions + wait", versions: true, immediate: false },
  { name: "no versions + wait", versions: false, immediate: false },
  ...(hasAwaitSetting() ? [{ name: "versions, no wait", versions: true, immediate: true }] : []),
];
const chosen = process.env.MOVIE_ROLLING_VARIANTS?.split(",").map((s) => s.trim());
const variants = chosen === undefined ? allVariants : allVariants.filter((v) => chosen.includes(v.name));

const started = performance.now();
const say = (text: string): void =>
  console.log(`${((performance.now() - started) / 1000).toFixed(1).padStart(6)}s  ${text}`);

/**
 * Waits until the frontend sees `members` members Up and converged and every shard placed; with `balancedOver`,
 * also no handoff in progress and the shards spread over that many backends within one of each other.
 */
async function settled(frontend: RollNode, members: number, what: string, balancedOver?: number): Promise<void> {
  let last: Status | null = null;
  try {
    await until(
      what,
      async () => {
        last = await frontend.status();
        const placed = last.converged && last.up === members && last.members === members && last.allocated === 64;
        if (!placed || balancedOver === undefined) return placed;
        const counts = last.shardsPerOwner;
        return last.handoffs === 0 && counts.length === balancedOver && Math.max(...counts) - Math.min(...counts) <= 1;
      },
      60_000,
    );
  } catch (error) {
    throw new Error(`${(error as Error).message}; the frontend saw ${JSON.stringify(last)}`);
  }
}

async function run(variant: Variant): Promise<Record<string, unknown>> {
  const nodes: RollNode[] = [];
  const oldVersion = variant.versions ? "1.0.0" : "-";
  const newVersion = variant.versions ? "1.1.0" : "-";
  try {
    const frontend = new RollNode("frontend", "frontend", "self", oldVersion, variant.immediate);
    nodes.push(frontend);
    const seed = (await frontend.ready).hostPort;
    const old = ["a", "b", "c"].map((l) => new RollNode(l, "backend", seed, oldVersion, variant.immediate));
    nodes.push(...old);
    await Promise.all(old.map((n) => n.ready));
    await settled(frontend, 4, "the frontend and three backends Up with a balanced plan", 3);
    await frontend.request({ type: "start-load", inFlight, entities, tellsPerSecond });
    say(`${variant.name}: steady load (${inFlight} asks in flight, ${tellsPerSecond} tells/s)`);
    await sleep(steadyMs);
    await frontend.request({ type: "phase", name: "roll" });
    const rollStarted = performance.now();
    for (const [i, leaving] of old.entries()) {
      const fresh = new RollNode(`${"def"[i]}`, "backend", seed, newVersion, variant.immediate);
      nodes.push(fresh);
      await fresh.ready;
      await settled(frontend, 5, `new backend ${fresh.name} Up`);
      say(`${variant.name}: ${fresh.name} joined; ${leaving.name} leaves`);
      await leaving.request({ type: "leave" }, 60_000);
      await leaving.shutdown(10_000);
      await settled(frontend, 4, `${leaving.name} removed`);
    }
    const rollMs = performance.now() - rollStarted;
    // Without versions the planner rebalances after the roll; the roll ends when the plan is balanced again.
    await settled(frontend, 4, "a balanced plan over the new backends", 3);
    const balancedMs = performance.now() - rollStarted;
    await frontend.request({ type: "phase", name: "after" });
    await sleep(steadyMs);
    const result = await frontend.request<LoadResult>({ type: "stop-load" }, 60_000);
    return summarize(variant, result, rollMs, balancedMs);
  } finally {
    await Promise.all(nodes.map((n) => n.shutdown(10_000)));
  }
}

function summarize(variant: Variant, result: LoadResult, rollMs: number, balancedMs: number): Record<string, unknown> {
  // MOVIE_ROLLING_DEBUG=1: each shard that moved more than once, with its owners in order (owner@plan generation).
  for (const [shard, owners] of (result.history ?? []).entries()) {
    if (owners.length > 2) say(`shard ${shard}: ${owners.join(" → ")}`);
  }
  const latencies = (phase: string) => [...(result.phases[phase]?.latencies ?? [])].sort((a, b) => a - b);
  const steady = [...latencies("steady"), ...latencies("after")].sort((a, b) => a - b);
  const roll = latencies("roll");
  const failed: Record<string, number> = {};
  for (const p of Object.values(result.phases)) {
    for (const [name, n] of Object.entries(p.failed)) failed[name] = (failed[name] ?? 0) + n;
  }
  const asks = Object.values(result.phases).reduce(
    (n, p) => n + p.latencies.length + Object.values(p.failed).reduce((a, b) => a + b, 0),
    0,
  );
  const movesPerShard = result.moves;
  return {
    variant: variant.name,
    asks,
    failedAsks: Object.values(failed).reduce((a, b) => a + b, 0),
    failedByError: failed,
    tellsSent: result.tells.sent,
    tellsRefused: result.tells.refused,
    tellsLost: result.tells.sent - result.tells.received,
    tellsOutOfOrder: result.tells.outOfOrder,
    tellsDuplicated: result.tells.duplicates,
    steady: { p50: pct(steady, 50), p99: pct(steady, 99), max: steady.at(-1) ?? Number.NaN },
    roll: { p50: pct(roll, 50), p99: pct(roll, 99), max: roll.at(-1) ?? Number.NaN },
    p99RatioRollToSteady: pct(roll, 99) / pct(steady, 99),
    maxMovesPerShard: Math.max(...movesPerShard),
    medianMovesPerShard: median(movesPerShard),
    totalMoves: movesPerShard.reduce((a, b) => a + b, 0),
    coordinatorChanges: result.coordinatorChanges,
    rollSeconds: rollMs / 1000,
    balancedSeconds: balancedMs / 1000,
  };
}

const rows: Record<string, unknown>[] = [];
for (const variant of variants) rows.push(await run(variant));

const ms = (n: unknown) => (typeof n === "number" && Number.isFinite(n) ? n.toFixed(1) : "-");
console.log("");
console.log(
  "| variant | asks | failed asks | tells refused / lost / reordered | steady p50 / p99 / max ms | roll p50 / p99 / max ms | roll p99 ÷ steady p99 | moves per shard (max) | coordinator changes | roll s (balanced at) |",
);
console.log("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
for (const r of rows) {
  const s = r.steady as { p50: number; p99: number; max: number };
  const l = r.roll as { p50: number; p99: number; max: number };
  const failedBy = Object.entries(r.failedByError as Record<string, number>)
    .map(([k, v]) => `${v} ${k}`)
    .join(", ");
  console.log(
    `| ${r.variant} | ${r.asks} | ${r.failedAsks}${failedBy === "" ? "" : ` (${failedBy})`} | ${r.tellsRefused} / ${r.tellsLost} / ${r.tellsOutOfOrder} of ${r.tellsSent} | ${ms(s.p50)} / ${ms(s.p99)} / ${ms(s.max)} | ${ms(l.p50)} / ${ms(l.p99)} / ${ms(l.max)} | ${ms(r.p99RatioRollToSteady)} | ${r.maxMovesPerShard} (total ${r.totalMoves}) | ${r.coordinatorChanges} | ${ms(r.rollSeconds)} (${ms(r.balancedSeconds)}) |`,
  );
}
mkdirSync(fileURLToPath(new URL("./results/", import.meta.url)), { recursive: true });
const out = fileURLToPath(new URL("./results/rolling.json", import.meta.url));
writeFileSync(out, `${JSON.stringify({ measuredAt: new Date().toISOString(), inFlight, steadyMs, rows }, null, 2)}\n`);
console.log(`\nwritten ${out}`);
