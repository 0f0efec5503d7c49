/**
 * The driver of a forked node process over IPC, shared by the demo and the multi-process benchmarks. Every request
 * carries a number `id` that its one reply echoes (`{ id, ...fields }`, or `{ id, error }` when it failed); the child
 * sends `{ id: 0, ... }` unasked once it is up. Numbers rather than reply types, so that two requests of one kind in
 * flight, or a late reply to a request that timed out, can never be handed to the wrong caller.
 *
 * A child can go away at any moment (it was told to shut down, or it crashed), and Node reports that as `disconnect`
 * first and `exit` later: a send in between emits an `error` event on the ChildProcess, which without a listener would
 * crash the parent. So a request to a node that is gone, or that goes away before it answers, is rejected with
 * {@link NodeProcessGoneError} instead, and waiters never sit out their timeout.
 */
import { type ChildProcess, fork } from "node:child_process";

/** A command to a node process; `type` says what to do. */
export interface NodeCommand {
  readonly type: string;
  readonly [field: string]: unknown;
}

/** A reply from a node process: `id` echoes the request (0 is the ready message); `error` marks a failure. */
export interface NodeReply {
  readonly id: number;
  readonly error?: string;
  readonly [field: string]: unknown;
}

/** A request could not be answered because the node process disconnected or exited. */
export class NodeProcessGoneError extends Error {
  override readonly name = "NodeProcessGoneError";
}

/** A request was not answered within its timeout while the node process stayed up. */
export class NodeProcessTimeoutError extends Error {
  override readonly name = "NodeProcessTimeoutError";
}

/** How to fork a {@link NodeProcess}. */
export interface NodeProcessOptions {
  /** Node's flags for the child (`["--import", "tsx"]` for a TypeScript script); Node's default is the parent's. */
  readonly execArgv?: readonly string[];
  /** Variables set over the parent's environment. */
  readonly env?: NodeJS.ProcessEnv;
  /** Writes a CPU profile of the child on its normal exit into `<profileDir>/<name>` (to find hot paths). */
  readonly profileDir?: string;
  /** How long the ready message and each request may take unless the request says otherwise (ms); 30 s by default. */
  readonly requestTimeoutMs?: number;
}

interface Waiter {
  /** What the caller waits for, for the errors' messages. */
  readonly what: string;
  readonly resolve: (reply: NodeReply) => void;
  readonly reject: (error: Error) => void;
}

/** One forked node process and the requests in flight to it. */
export class NodeProcess<Ready = NodeReply> {
  readonly process: ChildProcess;
  /** The child's first message (id 0); rejects when it goes away or stays silent for the request timeout first. */
  readonly ready: Promise<Ready>;
  private readonly pending = new Map<number, Waiter>();
  private nextId = 1;
  private readonly requestTimeoutMs: number;
  /** Why the node is gone, once its IPC channel closed or it exited; null while it is connected. */
  private goneReason: string | null = null;
  private readonly exitPromise: Promise<void>;

  constructor(
    readonly name: string,
    script: string,
    args: readonly string[],
    options: NodeProcessOptions = {},
  ) {
    this.requestTimeoutMs = options.requestTimeoutMs ?? 30_000;
    const profileArgs =
      options.profileDir === undefined ? [] : ["--cpu-prof", `--cpu-prof-dir=${options.profileDir}/${name}`];
    this.process = fork(script, [...args], {
      stdio: ["ignore", "inherit", "inherit", "ipc"],
      execArgv: [...(options.execArgv ?? process.execArgv), ...profileArgs],
      env: { ...process.env, ...options.env },
    });
    // 'close' too: a process that could not be spawned (ENOENT, EAGAIN, EMFILE) emits 'error' and 'close', never 'exit'.
    this.exitPromise = new Promise((resolve) => {
      this.process.once("exit", () => resolve());
      this.process.once("close", () => resolve());
    });
    this.ready = this.waitFor<Ready>(0, "its ready message", this.requestTimeoutMs);
    // Nobody may be listening yet when the node dies before it is up; whoever awaits `ready` still sees the error.
    this.ready.catch(() => undefined);
    this.process.on("message", (reply: NodeReply | null) => {
      // A child may send anything (null included): only an object can be a reply, and a throw here would be uncaught.
      if (typeof reply !== "object" || reply === null) return;
      const waiter = this.pending.get(reply.id);
      if (waiter === undefined) return; // a tell's answer, or a late one to a request that timed out
      this.pending.delete(reply.id);
      if (reply.error !== undefined) waiter.reject(new Error(`${this.name} failed ${waiter.what}: ${reply.error}`));
      else waiter.resolve(reply);
    });
    this.process.on("disconnect", () => this.gone("its IPC channel closed"));
    this.process.on("exit", (code, signal) => this.gone(`it exited (${signal ?? `code ${code}`})`));
    // A send racing the channel's close is answered by its callback in send(); this only keeps a late one (or a kill
    // that could not be delivered) from becoming an uncaught 'error' event.
    this.process.on("error", (error) => this.gone(`its process failed: ${error.message}`));
  }

  /** True once the node disconnected or exited: it takes no more requests. */
  get exited(): boolean {
    return this.goneReason !== null;
  }

  /** Resolves when the process has exited (at once if it already has), or could not be spawned at all. */
  whenExited(): Promise<void> {
    return this.exitPromise;
  }

  /** Sends a command that is not answered; false when the node is already gone. */
  tell(command: NodeCommand): boolean {
    if (this.exited) return false;
    this.send(command);
    return true;
  }

  /**
   * Sends `command` and resolves with its reply. Rejects with an Error carrying the child's text when it answers with
   * `error`, with the channel's error when `command` cannot be serialized, with {@link NodeProcessGoneError} when the
   * node is or goes away first, and with {@link NodeProcessTimeoutError} after `timeoutMs`.
   */
  request<T = NodeReply>(command: NodeCommand, timeoutMs = this.requestTimeoutMs): Promise<T> {
    if (this.exited) return Promise.reject(this.goneError(command.type));
    const id = this.nextId++;
    const reply = this.waitFor<T>(id, command.type, timeoutMs);
    try {
      this.send({ ...command, id });
    } catch (error) {
      // A command the channel cannot serialize (a BigInt, a cycle) throws before anything is sent: the caller gets
      // it as this request's rejection, and no waiter is left behind to reject unhandled at its timeout.
      const waiter = this.pending.get(id);
      this.pending.delete(id);
      waiter?.reject(error instanceof Error ? error : new Error(String(error)));
    }
    return reply;
  }

  /**
   * Asks the node to shut down and waits for it to exit; the node's reply, or null when it did not answer (it exited
   * without one, or was already gone). A node still running after `timeoutMs` is killed with SIGKILL.
   */
  async shutdown<T = NodeReply>(timeoutMs = 30_000): Promise<T | null> {
    const reply = this.exited ? null : this.request<T>({ type: "shutdown" }, timeoutMs).catch(() => null);
    // One deadline for answering and exiting: a node that answered exits by itself, and killing it early would lose
    // what it writes on exit (a CPU profile).
    let timer: ReturnType<typeof setTimeout> | undefined;
    const inTime = await Promise.race([
      this.exitPromise.then(() => true),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), timeoutMs);
      }),
    ]);
    clearTimeout(timer);
    if (!inTime) this.process.kill("SIGKILL");
    await this.exitPromise;
    return reply;
  }

  private waitFor<T>(id: number, what: string, timeoutMs: number): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new NodeProcessTimeoutError(`${this.name} did not answer ${what} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, {
        what,
        resolve: (reply) => {
          clearTimeout(timer);
          resolve(reply as unknown as T);
        },
        reject: (error) => {
          clearTimeout(timer);
          reject(error);
        },
      });
    });
  }

  private send(message: object): void {
    this.process.send(message, (error) => {
      if (error !== null) this.gone(`a send failed: ${error.message}`);
    });
  }

  private gone(reason: string): void {
    if (this.goneReason === null) this.goneReason = reason;
    const waiters = [...this.pending.values()];
    this.pending.clear();
    for (const waiter of waiters) waiter.reject(this.goneError(waiter.what));
  }

  private goneError(what: string): NodeProcessGoneError {
    return new NodeProcessGoneError(`${this.name} cannot answer ${what}: ${this.goneReason}`);
  }
}
