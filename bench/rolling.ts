// `npm run bench:rolling`: a rolling restart of every backend under continuous load, on loopback node processes.
// A frontend (hosts no entities) and 3 backends; the frontend runs asks (ROLL_ASKERS in flight, 3 s timeout) and
// numbered tells to ROLL_ENTITIES entities; then each backend in turn is replaced: a fresh backend joins, the old one
// leaves gracefully and exits. Reported: failed asks by error, refused / lost / reordered tells, ask latency during
// the roll against the steady state before it (the ceiling of the same run), shard moves per shard, coordinator
// changes, the total roll time, and where the time of each join and leave went (membership, convergence, coordinator,
// plan). Measured, never asserted; writes bench/results/rolling-<mode>.json.
//
// Environment: ROLL_VERSIONS=1 (old backends appVersion 1, replacements 2, NewestVersionAllocation and
// VersionAwareRebalance), ROLL_WAIT=wait|fail (routing while there is no coordinator: wait within the ask timeout and hold tells,
// or fail at once; default wait), ROLL_ORDER=coordinator-last|coordinator-first (which old backend is replaced first),
// ROLL_FRONTEND=high|low (the frontend's address above or below the backends': below, it stays the coordinator),
// ROLL_STEADY_MS (default 4000), ROLL_ENTITIES (300), ROLL_ASKERS (32), ROLL_SHARDS (64).
import { mkdirSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { fileURLToPath } from "node:url";
import { benchNodeOptions, NodeProcess, sleep, until } from "./support/node-process.ts";
import { clock, pct } from "./support/raw-frames.ts";

const nodeScript = fileURLToPath(new URL("./rolling-node.ts", import.meta.url));
const mode = process.env.ROLL_WAIT === "fail" ? "fail" : "wait";
const order = process.env.ROLL_ORDER === "coordinator-first" ? "coordinator-first" : "coordinator-last";
const frontendPlace = process.env.ROLL_FRONTEND === "low" ? "low" : "high";
const steadyMs = Number(process.env.ROLL_STEADY_MS ?? 4_000);
const entities = Number(process.env.ROLL_ENTITIES ?? 300);
const askers = Number(process.env.ROLL_ASKERS ?? 32);
const shardCount = Number(process.env.ROLL_SHARDS ?? 64);
const versions = process.env.ROLL_VERSIONS === "1";
const askTimeoutMs = 3_000;

const progress = (text: string): void => {
  process.stderr.write(`[rolling ${((clock.now() - t0) / 1000).toFixed(1).padStart(5)}s] ${text}\n`);
};
const t0 = clock.now();

interface Status {
  node: string;
  coordinator: string | null;
  converged: boolean;
  members: { node: string; status: string }[];
  owners: Record<string, number>;
  planned: number;
  authored: boolean;
  handoffs: number;
}
interface TimelineEvent {
  t: number;
  what: string;
  detail?: string;
}
interface AskRecord {
  t: number;
  ms: number;
  error: string | null;
}

class RollNode extends NodeProcess<{ node: string; hostPort: string }> {
  constructor(name: string, role: string, port: number, seed: string) {
    super(name, nodeScript, [name, role, String(port), seed], {
      ...benchNodeOptions(),
      env: {
        ROLL_WAIT: mode,
        ROLL_SHARDS: String(shardCount),
        ROLL_VERSIONS: versions ? "1" : "0",
        ...(versions ? { ROLL_APP_VERSION: name.startsWith("new-") ? "2" : "1" } : {}),
      },
    });
  }
  status(): Promise<Status> {
    return this.request<Status>({ type: "status" });
  }
}

/** `n` ports free right now on loopback, ascending (a port's text decides the coordinator: the lowest address). */
async function freePorts(n: number): Promise<number[]> {
  const ports: number[] = [];
  const servers = [];
  for (let i = 0; i < n; i++) {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const address = server.address();
    if (address !== null && typeof address === "object") ports.push(address.port);
    servers.push(server);
  }
  await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  // Addresses compare as text: keep ports of one digit count so text order is numeric order.
  return ports.sort((a, b) => String(a).localeCompare(String(b)));
}

/** True when the owners' shard counts differ by at most one (the rate-limited rebalance's end state). */
function balanced(owners: Record<string, number>): boolean {
  const counts = Object.values(owners);
  return counts.length > 0 && Math.max(...counts) - Math.min(...counts) <= 1;
}

const nodes: RollNode[] = [];
async function cleanUp(): Promise<void> {
  for (const node of nodes) if (!node.exited) node.process.kill("SIGKILL");
  await Promise.all(nodes.map((n) => n.whenExited()));
}

const ports = await freePorts(7);
const frontendPort = frontendPlace === "low" ? ports[0]! : ports[6]!;
const backendPorts = ports.filter((p) => p !== frontendPort);
const oldPorts = backendPorts.slice(0, 3);
const newPorts = backendPorts.slice(3, 6);
progress(
  `mode=${mode} versions=${versions} order=${order} frontend=${frontendPlace} ports frontend ${frontendPort}, old ${oldPorts}`,
);

try {
  const frontend = new RollNode("frontend", "frontend", frontendPort, "self");
  nodes.push(frontend);
  const seed = (await frontend.ready).hostPort;
  const old = oldPorts.map((p, i) => new RollNode(`old-${i + 1}`, "backend", p, seed));
  nodes.push(...old);
  await Promise.all(old.map((n) => n.ready));
  const planReady = async (expectUp: number): Promise<boolean> => {
    const s = await frontend.status();
    return (
      s.converged &&
      s.members.filter((m) => m.status === "Up").length === expectUp &&
      s.authored &&
      s.planned === shardCount &&
      s.handoffs === 0 &&
      // The start's own rebalance must be over, or its moves would count as the roll's.
      balanced(s.owners)
    );
  };
  await until("4 Up members and a full plan", () => planReady(4), 60_000);
  // Every backend's own view must have the plan too before load starts.
  await until("backends see the plan", async () =>
    (await Promise.all(old.map((n) => n.status()))).every((s) => s.authored),
  );
  const mark = (label: string) => frontend.request<{ t: number }>({ type: "mark", label });
  progress("cluster up; steady load");
  await frontend.request({ type: "startLoad", entities, askers, askTimeoutMs, tellEveryMs: 2 });
  await sleep(1_000); // warm-up: first activations
  const steadyStart = (await mark("steady")).t;
  await sleep(steadyMs);
  const rollStart = (await mark("roll")).t;
  const replaceOrder = order === "coordinator-last" ? [2, 1, 0] : [0, 1, 2];
  const phases: { label: string; start: number; end: number }[] = [];
  for (const [step, i] of replaceOrder.entries()) {
    const fresh = new RollNode(`new-${step + 1}`, "backend", newPorts[step]!, seed);
    nodes.push(fresh);
    // The phase starts once the process is up and asks to join (a process start under load takes seconds and is
    // no part of the cluster's window).
    const freshNode = (await fresh.ready).node;
    const joinStart = (await mark(`join-${step + 1}`)).t;
    progress(`join new-${step + 1}`);
    await until(
      `new-${step + 1} Up${versions ? "" : " and hosting shards"}`,
      async () => {
        const s = await frontend.status();
        return (
          s.converged &&
          s.members.some((m) => m.node === freshNode && m.status === "Up") &&
          s.authored &&
          // With versions the replacement takes shards only when an old owner leaves.
          (versions || (s.owners[freshNode] ?? 0) > 0) &&
          s.handoffs === 0
        );
      },
      60_000,
    );
    const joinEnd = (await mark(`joined-${step + 1}`)).t;
    phases.push({ label: `join ${step + 1}`, start: joinStart, end: joinEnd });
    const leaving = old[i]!;
    const leavingNode = (await leaving.ready).node;
    progress(`leave ${leaving.name}`);
    const leaveStart = (await mark(`leave-${step + 1}`)).t;
    await leaving.request({ type: "leave" }, 60_000);
    await until(
      `${leaving.name} removed`,
      async () => {
        const s = await frontend.status();
        return s.converged && !s.members.some((m) => m.node === leavingNode) && s.authored;
      },
      60_000,
    );
    const leaveEnd = (await mark(`left-${step + 1}`)).t;
    phases.push({ label: `leave ${step + 1}`, start: leaveStart, end: leaveEnd });
    await leaving.shutdown(10_000);
  }
  const rollEnd = (await mark("rolled")).t;
  progress("roll done; steady load after");
  await sleep(1_000);
  const afterEnd = (await mark("after")).t;
  const load = await frontend.request<{
    asks: AskRecord[];
    tellsAccepted: number;
    tellsRefused: Record<string, number>;
    tellsLost: number;
    tellsOutOfOrder: number;
    tellsDuplicated: number;
  }>({ type: "stopLoad", drainMs: 5_000 });
  const { timeline, movesPerShard } = await frontend.request<{
    timeline: TimelineEvent[];
    movesPerShard: number[];
  }>({ type: "timeline" });
  // Coordinator changes during the roll: each time the elected coordinator, once known again, is another node (a
  // window without one in between, for convergence, is not a change).
  let coordinatorChanges = 0;
  let knownCoordinator: string | null = null;
  for (const e of timeline) {
    if (e.what !== "coordinator" || e.detail === "none" || e.detail === undefined) continue;
    if (e.t >= rollStart && knownCoordinator !== null && e.detail !== knownCoordinator) coordinatorChanges++;
    knownCoordinator = e.detail;
  }

  // -------------------------------------------------------------------------------------------------------------
  // Figures

  const window = (from: number, to: number) => {
    const asks = load.asks.filter((a) => a.t >= from && a.t < to);
    const ok = asks
      .filter((a) => a.error === null)
      .map((a) => a.ms)
      .sort((a, b) => a - b);
    const failed: Record<string, number> = {};
    for (const a of asks) if (a.error !== null) failed[a.error] = (failed[a.error] ?? 0) + 1;
    return {
      asks: asks.length,
      ok: ok.length,
      failed,
      failedTotal: asks.length - ok.length,
      p50: pct(ok, 50),
      p99: pct(ok, 99),
      max: ok.at(-1) ?? Number.NaN,
      ratePerS: (asks.length / (to - from)) * 1000,
    };
  };
  const steady = window(steadyStart, rollStart);
  const roll = window(rollStart, rollEnd);
  const after = window(rollEnd, afterEnd);
  const all = window(0, Number.POSITIVE_INFINITY);
  // The longest stretch of the roll in which no ask completed successfully.
  const completions = load.asks
    .filter((a) => a.error === null && a.t + a.ms >= rollStart && a.t + a.ms <= rollEnd)
    .map((a) => a.t + a.ms)
    .sort((a, b) => a - b);
  let longestGap = 0;
  for (let k = 1; k < completions.length; k++) longestGap = Math.max(longestGap, completions[k]! - completions[k - 1]!);

  // Where the time goes: per join/leave phase, when each thing happened (ms after the phase started) and how long
  // routing had no coordinator / no plan of the current coordinator.
  const breakdown = phases.map((phase) => {
    const events = timeline.filter((e) => e.t >= phase.start && e.t <= phase.end);
    const at = (pred: (e: TimelineEvent) => boolean): number | null => {
      const e = events.find(pred);
      return e === undefined ? null : Math.round(e.t - phase.start);
    };
    const windowOf = (down: string, up: string): number => {
      let total = 0;
      let since: number | null = null;
      // The state at the phase start: the last event before it.
      const before = timeline.filter((e) => e.t < phase.start && (e.what === down || e.what === up)).at(-1);
      if (before?.what === down) since = phase.start;
      for (const e of events) {
        if (e.what === down && since === null) since = e.t;
        if (e.what === up && since !== null) {
          total += e.t - since;
          since = null;
        }
      }
      if (since !== null) total += phase.end - since;
      return Math.round(total);
    };
    const noCoordinator = (() => {
      let total = 0;
      let since: number | null = null;
      for (const e of events) {
        if (e.what !== "coordinator") continue;
        if (e.detail === "none" && since === null) since = e.t;
        else if (e.detail !== "none" && since !== null) {
          total += e.t - since;
          since = null;
        }
      }
      if (since !== null) total += phase.end - since;
      return Math.round(total);
    })();
    const generations = events.filter((e) => e.what === "generation");
    return {
      phase: phase.label,
      totalMs: Math.round(phase.end - phase.start),
      membershipChanges: events.filter((e) => e.what === "members").length,
      firstMembershipChangeMs: at((e) => e.what === "members"),
      lastMembershipChangeMs: (() => {
        const last = events.filter((e) => e.what === "members").at(-1);
        return last === undefined ? null : Math.round(last.t - phase.start);
      })(),
      divergedMs: windowOf("diverged", "converged"),
      noCoordinatorMs: noCoordinator,
      noPlanMs: windowOf("no-plan", "plan"),
      coordinatorEvents: events.filter((e) => e.what === "coordinator").map((e) => e.detail),
      planGenerations: generations.length,
      firstPlanChangeMs: at((e) => e.what === "generation"),
      lastPlanChangeMs: generations.length === 0 ? null : Math.round(generations.at(-1)!.t - phase.start),
      shardsMoved: generations.reduce((sum, g) => sum + Number(/moved=(\d+)/.exec(g.detail ?? "")?.[1] ?? 0), 0),
    };
  });
  const moveHistogram: Record<string, number> = {};
  for (const m of movesPerShard) moveHistogram[String(m)] = (moveHistogram[String(m)] ?? 0) + 1;

  const fmt = (n: number): string => (Number.isFinite(n) ? n.toFixed(1) : "-");
  const failedText = (f: Record<string, number>): string =>
    Object.keys(f).length === 0
      ? "0"
      : Object.entries(f)
          .map(([k, v]) => `${v} ${k}`)
          .join(", ");
  console.log(
    `\nbench:rolling  mode=${mode}  versions=${versions}  order=${order}  frontend=${frontendPlace}  ${entities} entities, ${shardCount} shards, ${askers} asks in flight`,
  );
  console.log("| window | asks | failed asks | p50 ms | p99 ms | max ms | asks/s |");
  console.log("|---|---:|---|---:|---:|---:|---:|");
  for (const [name, w] of [
    ["steady (ceiling)", steady],
    ["roll", roll],
    ["after", after],
  ] as const) {
    console.log(
      `| ${name} | ${w.asks} | ${failedText(w.failed)} | ${fmt(w.p50)} | ${fmt(w.p99)} | ${fmt(w.max)} | ${fmt(w.ratePerS)} |`,
    );
  }
  console.log(
    `\nroll/steady: p50 ×${fmt(roll.p50 / steady.p50)}, p99 ×${fmt(roll.p99 / steady.p99)}; longest stretch without a successful reply during the roll: ${fmt(longestGap)} ms`,
  );
  console.log(
    `tells: ${load.tellsAccepted} accepted, refused ${failedText(load.tellsRefused)}, lost ${load.tellsLost}, out of order ${load.tellsOutOfOrder}, duplicated ${load.tellsDuplicated}`,
  );
  console.log(
    `shard moves per shard: ${Object.entries(moveHistogram)
      .map(([moves, shards]) => `${shards} shards moved ${moves}×`)
      .join(", ")}; coordinator changes: ${coordinatorChanges}; roll time ${fmt((rollEnd - rollStart) / 1000)} s`,
  );
  console.log(
    "\n| phase | total ms | membership changes (first..last ms) | diverged ms | no coordinator ms | no plan ms | plan generations (first..last ms) | shards moved |",
  );
  console.log("|---|---:|---|---:|---:|---:|---|---:|");
  for (const b of breakdown) {
    console.log(
      `| ${b.phase} | ${b.totalMs} | ${b.membershipChanges} (${b.firstMembershipChangeMs}..${b.lastMembershipChangeMs}) | ${b.divergedMs} | ${b.noCoordinatorMs} | ${b.noPlanMs} | ${b.planGenerations} (${b.firstPlanChangeMs}..${b.lastPlanChangeMs}) | ${b.shardsMoved} |`,
    );
  }
  const results = {
    mode,
    versions,
    order,
    frontend: frontendPlace,
    entities,
    shardCount,
    askers,
    askTimeoutMs,
    steady,
    roll,
    after,
    all: { asks: all.asks, failed: all.failed },
    ratio: { p50: roll.p50 / steady.p50, p99: roll.p99 / steady.p99 },
    longestGapMs: longestGap,
    tells: {
      accepted: load.tellsAccepted,
      refused: load.tellsRefused,
      lost: load.tellsLost,
      outOfOrder: load.tellsOutOfOrder,
      duplicated: load.tellsDuplicated,
    },
    moveHistogram,
    coordinatorChanges,
    rollMs: rollEnd - rollStart,
    breakdown,
    timeline: timeline
      .filter((e) => e.t >= rollStart && e.t <= rollEnd)
      .map((e) => ({ ...e, t: Math.round(e.t - rollStart) })),
  };
  mkdirSync(new URL("./results/", import.meta.url), { recursive: true });
  const file = `rolling-${mode}${versions ? "-versions" : ""}-${order}-${frontendPlace}.json`;
  writeFileSync(new URL(`./results/${file}`, import.meta.url), `${JSON.stringify(results, null, 2)}\n`);
  console.log(`\nwrote bench/results/${file}`);
  const leftover = nodes.filter((n) => !n.exited);
  await Promise.all(leftover.map((n) => n.shutdown(10_000)));
} finally {
  await cleanUp();
}
