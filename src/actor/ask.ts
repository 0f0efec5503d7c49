import type { ActorRef, AskOptions, Class } from "./actor-ref.ts";
import type { ActorSystem } from "./actor-system.ts";
import type { Cancellable, TimeoutTarget } from "./clock.ts";
import {
  AskCancelledError,
  AskReplyTypeError,
  AskTimeoutError,
  InvalidMessageError,
  requireDurationMs,
  typeNameOf,
} from "./errors.ts";
import type { ActorPath } from "./path.ts";
import type { SystemMessage } from "./system-messages.ts";
import { describe } from "./untrusted.ts";

/**
 * The temporary reply actor of one ask: a ref that settles the ask's Promise on the first reply and cleans up when
 * the ask settles, however it settles. It gets a name under `/temp` (so a reply can find it by path, also from other
 * nodes) only when someone reads its path; a purely local ask never pays for the name or the registration.
 */
export class PromiseActorRef<R> implements ActorRef<unknown>, TimeoutTarget {
  private settled = false;
  private timeoutMs = 0;
  private name: string | null = null;
  private timer: Cancellable | null = null;
  private signal: AbortSignal | null = null;
  /** @internal Neighbours in the system's list of pending asks. */
  prevPending: PromiseActorRef<unknown> | null = null;
  /** @internal */
  nextPending: PromiseActorRef<unknown> | null = null;
  private resolveAsk!: (reply: R) => void;
  private rejectAsk!: (error: Error) => void;
  /** @internal The Promise the ask returns. */
  readonly promise: Promise<R>;

  constructor(
    private readonly system: ActorSystem,
    private readonly target: ActorRef<unknown>,
    private readonly message: unknown,
    private readonly replyType: Class<R>,
  ) {
    this.promise = new Promise<R>((resolve, reject) => {
      this.resolveAsk = resolve;
      this.rejectAsk = reject;
    });
  }

  get path(): ActorPath {
    if (this.name === null) {
      this.name = this.system.registerTemp(this as PromiseActorRef<unknown>);
      if (this.settled) this.system.unregisterTemp(this.name);
    }
    return this.system.tempPath(this.name);
  }

  /** @internal Starts the timeout and listens to the signal. */
  arm(timeoutMs: number, signal: AbortSignal | undefined): void {
    this.timeoutMs = timeoutMs;
    this.timer = this.system.timeouts.schedule(timeoutMs, this);
    if (signal !== undefined) {
      this.signal = signal;
      signal.addEventListener("abort", this, { once: true });
    }
  }

  /** @internal The ask's deadline passed. */
  onTimeout(): void {
    this.reject(new AskTimeoutError(this.targetText(), typeNameOf(this.message), this.timeoutMs));
  }

  /** @internal The AbortSignal's listener. */
  handleEvent(): void {
    this.reject(new AskCancelledError(this.targetText(), typeNameOf(this.message)));
  }

  tell(message: unknown): void {
    if (this.settled) {
      this.system.deadLetterOffice.publish(message, null, this.path.toString());
      return;
    }
    if (message instanceof this.replyType) {
      this.cleanup();
      this.resolveAsk(message);
    } else {
      this.reject(new AskReplyTypeError(this.targetText(), this.replyType.name, typeNameOf(message)));
    }
  }

  ask<X>(): Promise<X> {
    return Promise.reject(new InvalidMessageError("an ask's reply actor cannot be asked"));
  }

  sendSystem(_message: SystemMessage): void {}

  failAsk(error: Error): void {
    this.reject(error);
  }

  /** True once the ask settled. */
  get isSettled(): boolean {
    return this.settled;
  }

  private targetText(): string {
    return this.target.path.toString();
  }

  private reject(error: Error): void {
    if (this.settled) return;
    this.cleanup();
    this.rejectAsk(error);
  }

  private cleanup(): void {
    this.settled = true;
    this.timer?.cancel();
    this.timer = null;
    this.signal?.removeEventListener("abort", this);
    this.signal = null;
    this.system.pendingAsks.remove(this as PromiseActorRef<unknown>);
    if (this.name !== null) this.system.unregisterTemp(this.name);
  }
}

/** The asks of one system that have not settled, as an intrusive list: adding and removing allocate nothing. */
export class PendingAsks {
  private head: PromiseActorRef<unknown> | null = null;
  private count = 0;

  /** Number of pending asks. */
  get size(): number {
    return this.count;
  }

  add(ask: PromiseActorRef<unknown>): void {
    ask.nextPending = this.head;
    if (this.head !== null) this.head.prevPending = ask;
    this.head = ask;
    this.count++;
  }

  remove(ask: PromiseActorRef<unknown>): void {
    if (ask.prevPending === null && this.head !== ask) return;
    if (ask.prevPending === null) this.head = ask.nextPending;
    else ask.prevPending.nextPending = ask.nextPending;
    if (ask.nextPending !== null) ask.nextPending.prevPending = ask.prevPending;
    ask.prevPending = null;
    ask.nextPending = null;
    this.count--;
  }

  /** Rejects every pending ask with `error` (the system is terminating). */
  failAll(error: Error): void {
    while (this.head !== null) this.head.failAsk(error);
  }
}

/**
 * Sends `message` to `target` with a fresh reply actor as sender and waits for a reply of type `replyType`.
 * Any ref type (local, remote, sharded) asks through this one function.
 */
export function askVia<T, R>(
  system: ActorSystem,
  target: ActorRef<T>,
  message: T,
  replyType: Class<R>,
  timeoutMs: number,
  options?: AskOptions,
): Promise<R> {
  if (message === undefined || message === null) {
    return Promise.reject(new InvalidMessageError("ask needs a message value, got " + message));
  }
  try {
    requireDurationMs("ask timeout", timeoutMs);
  } catch (error) {
    return Promise.reject(error);
  }
  const signal = options?.signal;
  if (signal?.aborted === true) {
    return Promise.reject(new AskCancelledError(target.path.toString(), typeNameOf(message)));
  }
  const replyTo = new PromiseActorRef<R>(system, target as ActorRef<unknown>, message, replyType);
  system.pendingAsks.add(replyTo as PromiseActorRef<unknown>);
  replyTo.arm(timeoutMs, signal);
  try {
    target.tell(message, replyTo);
  } catch (error) {
    replyTo.failAsk(error instanceof Error ? error : new Error(`a non-Error was thrown: ${describe(error)}`));
  }
  return replyTo.promise;
}
