/**
 * The demo's handle on one node process: a forked child driven over IPC, one request and its typed reply at a time per
 * reply type. A child can go away at any moment (it was told to shut down, or it crashed), and Node reports that as
 * `disconnect` first and `exit` later: a send in between emits an `error` event on the ChildProcess, which without a
 * listener would crash the demo itself. So a request to a node that is gone, or that goes away before it answers, is
 * rejected with {@link NodeProcessGoneError} instead, and waiters never sit out their timeout.
 */
import { type ChildProcess, type ForkOptions, fork } from "node:child_process";

/** A message a node process sends back; `type` says which request it answers. */
export interface NodeReply {
  readonly type: string;
  readonly [key: string]: unknown;
}

/** A request could not be answered because the node process disconnected or exited. */
export class NodeProcessGoneError extends Error {
  override readonly name = "NodeProcessGoneError";
}

/** A request was not answered within its timeout while the node process stayed up. */
export class NodeProcessTimeoutError extends Error {
  override readonly name = "NodeProcessTimeoutError";
}

interface Waiter {
  readonly type: string;
  readonly resolve: (reply: NodeReply) => void;
  readonly reject: (error: Error) => void;
}

/** One forked node process and the requests in flight to it. */
export class NodeProcess {
  readonly process: ChildProcess;
  private readonly waiters: Waiter[] = [];
  /** Replies nobody waited for yet (a node may report "ready" while the demo still waits for another). */
  private readonly unclaimed: NodeReply[] = [];
  /** Why the node is gone, once its IPC channel closed or it exited; null while it is connected. */
  private goneReason: string | null = null;
  private readonly exitPromise: Promise<void>;

  /** Called with every reply, claimed or not, before it is handed to a waiter. */
  onReply: (reply: NodeReply) => void = () => undefined;

  constructor(
    readonly name: string,
    script: string,
    args: readonly string[],
    options: ForkOptions = {},
  ) {
    this.process = fork(script, [...args], { stdio: ["ignore", "inherit", "inherit", "ipc"], ...options });
    this.exitPromise = new Promise((resolve) => this.process.once("exit", () => resolve()));
    this.process.on("message", (reply: NodeReply) => {
      this.onReply(reply);
      const index = this.waiters.findIndex((w) => w.type === reply.type);
      if (index >= 0) this.waiters.splice(index, 1)[0]!.resolve(reply);
      else this.unclaimed.push(reply);
    });
    this.process.on("disconnect", () => this.gone("its IPC channel closed"));
    this.process.on("exit", (code, signal) => this.gone(`it exited (${signal ?? `code ${code}`})`));
    // A send racing the channel's close is answered by the callback in request(); this only keeps a late one from
    // becoming an uncaught 'error' event.
    this.process.on("error", (error) => this.gone(`its process failed: ${error.message}`));
  }

  /** True once the node disconnected or exited: it takes no more requests. */
  get exited(): boolean {
    return this.goneReason !== null;
  }

  /** Resolves when the process has exited (at once if it already has). */
  whenExited(): Promise<void> {
    return this.exitPromise;
  }

  /** Sends a command without waiting for an answer; false when the node is already gone. */
  tell(command: { readonly type: string; readonly [key: string]: unknown }): boolean {
    if (this.exited) return false;
    this.process.send(command, (error) => {
      if (error !== null) this.gone(`a send failed: ${error.message}`);
    });
    return true;
  }

  /**
   * Sends `command` and resolves with the next reply of `replyType` (or one that already arrived unclaimed). Rejects
   * with {@link NodeProcessGoneError} when the node is or goes away first, and with {@link NodeProcessTimeoutError}
   * after `timeoutMs`.
   */
  request<T = NodeReply>(
    command: { readonly type: string; readonly [key: string]: unknown },
    replyType: string,
    timeoutMs = 30_000,
  ): Promise<T> {
    const early = this.unclaimed.findIndex((r) => r.type === replyType);
    if (early >= 0) return Promise.resolve(this.unclaimed.splice(early, 1)[0] as unknown as T);
    if (this.goneReason !== null) return Promise.reject(this.goneError(command.type));
    return new Promise<T>((resolve, reject) => {
      const waiter: Waiter = {
        type: replyType,
        resolve: (reply) => {
          clearTimeout(timer);
          resolve(reply as unknown as T);
        },
        reject: (error) => {
          clearTimeout(timer);
          reject(error);
        },
      };
      const timer = setTimeout(() => {
        const index = this.waiters.indexOf(waiter);
        if (index >= 0) this.waiters.splice(index, 1);
        reject(new NodeProcessTimeoutError(`${this.name} did not answer ${command.type} within ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiters.push(waiter);
      this.process.send(command, (error) => {
        if (error !== null) this.gone(`a send failed: ${error.message}`);
      });
    });
  }

  private gone(reason: string): void {
    if (this.goneReason === null) this.goneReason = reason;
    for (const waiter of this.waiters.splice(0)) waiter.reject(this.goneError(waiter.type));
  }

  private goneError(what: string): NodeProcessGoneError {
    return new NodeProcessGoneError(`${this.name} cannot answer ${what}: ${this.goneReason}`);
  }
}
