// The driver side of the multi-process benchmarks: a forked node process answering numbered requests over IPC.
import { type ChildProcess, fork } from "node:child_process";
import { clock } from "./raw-frames.ts";

/** A reply from a node process: `id` echoes the request (0 is the ready message); `error` marks a failure. */
export type Reply = Record<string, unknown> & { id: number; error?: string };

/** One node process and its request/reply channel. */
export class NodeProcess<Ready> {
  readonly process: ChildProcess;
  /** The process's first message (id 0), sent once it is up. */
  readonly ready: Promise<Ready>;
  private readonly pending = new Map<number, { resolve: (r: Reply) => void; reject: (e: Error) => void }>();
  private nextId = 1;

  constructor(
    readonly label: string,
    script: string,
    args: readonly string[],
    options: { execArgv?: readonly string[]; env?: NodeJS.ProcessEnv } = {},
  ) {
    // MOVIE_BENCH_PROFILE=<dir> writes a CPU profile per node process (to find hot paths).
    const profile = process.env.MOVIE_BENCH_PROFILE;
    const profileArgs = profile === undefined ? [] : ["--cpu-prof", `--cpu-prof-dir=${profile}/${label}`];
    this.process = fork(script, [...args], {
      execArgv: [...(options.execArgv ?? []), ...profileArgs, "--import", "tsx"],
      stdio: ["ignore", "inherit", "inherit", "ipc"],
      env: { ...process.env, ...options.env },
    });
    this.ready = new Promise((resolve, reject) => {
      this.pending.set(0, { resolve: (r) => resolve(r as unknown as Ready), reject });
    });
    this.process.on("message", (reply: Reply) => {
      const waiter = this.pending.get(reply.id);
      if (waiter === undefined) return;
      this.pending.delete(reply.id);
      if (reply.error !== undefined) waiter.reject(new Error(reply.error));
      else waiter.resolve(reply);
    });
    this.process.on("exit", (code, signal) => {
      for (const w of this.pending.values()) w.reject(new Error(`${label} exited (${code ?? signal}) mid-request`));
      this.pending.clear();
    });
  }

  /** Sends `command` and resolves its reply; rejects on an error reply, on exit, or after `timeoutMs`. */
  request<T>(command: { type: string; [field: string]: unknown }, timeoutMs = 120_000): Promise<T> {
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      const timer = clock.scheduleOnce(timeoutMs, () => {
        this.pending.delete(id);
        reject(new Error(`${this.label} did not answer ${command.type} within ${timeoutMs} ms`));
      });
      this.pending.set(id, {
        resolve: (r) => {
          timer.cancel();
          resolve(r as unknown as T);
        },
        reject: (e) => {
          timer.cancel();
          reject(e);
        },
      });
      this.process.send({ ...command, id });
    });
  }

  get alive(): boolean {
    return this.process.exitCode === null && this.process.signalCode === null;
  }

  /** Asks the process to shut down and waits for it to exit (killing it if it does not answer); its reply or null. */
  async shutdown<T>(): Promise<T | null> {
    if (!this.alive) return null;
    const exited = new Promise((r) => this.process.once("exit", r));
    const reply = await this.request<T>({ type: "shutdown" }, 30_000).catch(() => {
      this.process.kill("SIGKILL");
      return null;
    });
    await exited;
    return reply;
  }
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
