import type { ActorPath } from "./path.ts";
import type { SystemMessage } from "./system-messages.ts";

/** A class usable as a runtime type: `ask` checks `reply instanceof replyType`. */
export type Class<T> = abstract new (...args: never) => T;

/** Options of an ask. */
export interface AskOptions {
  /** Aborting rejects the ask with `AskCancelledError` and frees its reply actor. */
  signal?: AbortSignal;
}

/**
 * A handle to an actor, local or remote. Refs are cheap values: compare them by `path`.
 *
 * `tell` is fire-and-forget and at-most-once across nodes; `ask` sends the message with a temporary reply actor as
 * sender and resolves with the first reply that is an instance of `replyType`.
 */
export interface ActorRef<T> {
  /** Where the actor lives. */
  readonly path: ActorPath;
  /**
   * Enqueues `message`; `sender` becomes `context.sender` at the receiver.
   * @throws InvalidMessageError when `message` is undefined or null
   */
  tell(message: T, sender?: ActorRef<unknown> | null): void;
  /**
   * Sends `message` and waits for a reply of type `replyType`.
   * Rejects `AskTimeoutError` after `timeoutMs` milliseconds, `AskCancelledError` when `options.signal` aborts,
   * `AskReplyTypeError` for a reply of another type, the target's error when it fails while handling the ask,
   * `InvalidArgumentError` for a negative or non-finite timeout and `InvalidMessageError` for an undefined or null
   * message (validation errors reject too, so callers handle one failure path).
   */
  ask<R>(message: T, replyType: Class<R>, timeoutMs: number, options?: AskOptions): Promise<R>;
  /** Sends a system message: `STOP`, `DRAIN_AND_STOP`, or the watch protocol messages. */
  sendSystem(message: SystemMessage): void;
  /**
   * @internal Tells the asker behind this ref that its ask failed (the runtime calls this when a `receive` throws
   * while its sender is an ask's reply actor). Ordinary refs ignore it.
   */
  failAsk?(error: Error): void;
}
