import type { ActorRef, AskOptions, Class } from "./actor-ref.ts";
import type { ActorSystem } from "./actor-system.ts";
import type { Cancellable } from "./clock.ts";
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

/**
 * The temporary reply actor of one ask: a ref (registered under `/temp` so replies can find it by path, also from
 * other nodes) that settles the ask's Promise on the first reply and unregisters itself when the ask settles, however
 * it settles.
 */
export class PromiseActorRef<R> implements ActorRef<unknown> {
  private settled = false;
  private timer: Cancellable | null = null;
  private signal: AbortSignal | null = null;
  private readonly onAbort = (): void => this.reject(new AskCancelledError(this.targetPath, this.messageType));

  constructor(
    private readonly system: ActorSystem,
    readonly name: string,
    private readonly targetPath: string,
    private readonly messageType: string,
    private readonly replyType: Class<R>,
    private readonly resolveAsk: (reply: R) => void,
    private readonly rejectAsk: (error: Error) => void,
  ) {}

  get path(): ActorPath {
    return this.system.tempPath(this.name);
  }

  /** @internal */
  arm(timeoutMs: number, signal: AbortSignal | undefined): void {
    this.timer = this.system.scheduler.scheduleOnce(timeoutMs, () =>
      this.reject(new AskTimeoutError(this.targetPath, this.messageType, timeoutMs)),
    );
    if (signal !== undefined) {
      this.signal = signal;
      signal.addEventListener("abort", this.onAbort, { once: true });
    }
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
      this.reject(new AskReplyTypeError(this.targetPath, this.replyType.name, typeNameOf(message)));
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

  private reject(error: Error): void {
    if (this.settled) return;
    this.cleanup();
    this.rejectAsk(error);
  }

  private cleanup(): void {
    this.settled = true;
    this.timer?.cancel();
    this.timer = null;
    this.signal?.removeEventListener("abort", this.onAbort);
    this.signal = null;
    this.system.unregisterTemp(this.name);
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
  const messageType = typeNameOf(message);
  if (signal?.aborted === true) return Promise.reject(new AskCancelledError(target.path.toString(), messageType));
  return new Promise<R>((resolve, reject) => {
    const replyTo = system.registerTemp(
      (name) => new PromiseActorRef<R>(system, name, target.path.toString(), messageType, replyType, resolve, reject),
    );
    replyTo.arm(timeoutMs, signal);
    try {
      target.tell(message, replyTo);
    } catch (error) {
      replyTo.failAsk(error instanceof Error ? error : new Error(String(error)));
    }
  });
}
