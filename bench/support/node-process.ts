// The driver side of the multi-process benchmarks: their node processes are examples/support/node-process.ts's, forked
// with the options below; the helpers wait on them.
import { NodeProcess, type NodeProcessOptions } from "../../examples/support/node-process.ts";
import { clock } from "./raw-frames.ts";

export { NodeProcess };

/**
 * Fork options for a bench node script: run through tsx, allow two minutes per request (a memory or failover run
 * takes a while), and with MOVIE_BENCH_PROFILE=<dir> write a CPU profile per node process (to find hot paths);
 * MOVIE_BENCH_PROFILE_INTERVAL_US=<µs> samples more often than V8's default 1,000 µs (a short phase needs more samples).
 */
export function benchNodeOptions(
  options: { execArgv?: readonly string[]; env?: NodeJS.ProcessEnv } = {},
): NodeProcessOptions {
  const interval = process.env.MOVIE_BENCH_PROFILE_INTERVAL_US;
  const profiling = process.env.MOVIE_BENCH_PROFILE !== undefined && interval !== undefined;
  const intervalUs = profiling ? Number(interval) : 0;
  if (profiling && !(Number.isSafeInteger(intervalUs) && intervalUs > 0)) {
    throw new Error(`MOVIE_BENCH_PROFILE_INTERVAL_US must be a whole number of microseconds, got ${interval}`);
  }
  return {
    execArgv: [
      ...(options.execArgv ?? []),
      ...(profiling ? [`--cpu-prof-interval=${intervalUs}`] : []),
      "--import",
      "tsx",
    ],
    env: options.env,
    profileDir: process.env.MOVIE_BENCH_PROFILE,
    requestTimeoutMs: 120_000,
  };
}

/** The middle value, or the mean of the two middle ones for an even count (NaN for none). */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  if (sorted.length === 0) return Number.NaN;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

export async function sleep(ms: number): Promise<void> {
  await new Promise<void>((r) => clock.scheduleOnce(ms, r));
}

/** Polls `condition` every 50 ms until it holds; throws naming `what` after `timeoutMs`. */
export async function until(what: string, condition: () => Promise<boolean>, timeoutMs = 60_000): Promise<void> {
  const started = clock.now();
  while (!(await condition())) {
    if (clock.now() - started > timeoutMs) throw new Error(`bench: timed out waiting for ${what}`);
    await sleep(50);
  }
}

/** The membership part of a node's status that {@link converged} reads. */
export interface MembershipStatus {
  coordinator: string | null;
  converged: boolean;
  up: number;
}

/** Waits until every node sees all of them Up, converged, with one coordinator; their statuses then. */
export async function converged<S extends MembershipStatus>(
  nodes: readonly { status(name: string): Promise<S> }[],
  timeoutMs = 60_000,
): Promise<S[]> {
  let statuses: S[] = [];
  await until(
    `${nodes.length} Up members`,
    async () => {
      statuses = await Promise.all(nodes.map((n) => n.status("")));
      const coordinator = statuses[0]!.coordinator;
      return statuses.every((s) => s.converged && s.up === nodes.length && s.coordinator === coordinator);
    },
    timeoutMs,
  );
  return statuses;
}
