import type { ActorRef } from "./actor-ref.ts";
import type { ActorSystem } from "./actor-system.ts";
import type { UniqueAddress } from "./address.ts";
import type { BehaviorSource } from "./behavior.ts";
import type { Logger } from "./logger.ts";
import type { MailboxBudget } from "./mailbox-budget.ts";
import type { SupervisorStrategy } from "./supervision.ts";

/** Options of `spawn`. */
export interface SpawnOptions {
  /** How the parent handles this child's failures; defaults to the parent behavior's strategy, then restart. */
  supervision?: SupervisorStrategy;
  /**
   * Most messages the mailbox holds (1..1,000,000); one more goes to dead letters (counted in
   * `ActorSystem.mailboxOverflowCount`) and an ask carrying it rejects with MailboxOverflowError. Timer firings and
   * watch notifications are never refused. Default the system's `mailboxCapacity` for actors under `/user`, else
   * unbounded.
   */
  mailboxCapacity?: number;
  /**
   * A count shared with other actors: every message queued here adds one, every message taken out subtracts it (see
   * MailboxBudget). Counting only; the deliverer refuses. Default none (nothing counted, nothing paid per message).
   */
  mailboxBudget?: MailboxBudget;
}

/** What a behavior sees of its own actor while it handles a message. */
export interface ActorContext<T> {
  /** This actor's own ref. */
  readonly self: ActorRef<T>;
  /** The sender of the current message, or null when it had none. */
  readonly sender: ActorRef<unknown> | null;
  /**
   * The authenticated node the current message came from over remoting, or null for a message sent inside this
   * process. Set from the transport's association, never from the payload.
   */
  readonly origin: UniqueAddress | null;
  /** The system this actor belongs to. */
  readonly system: ActorSystem;
  /** The system's logger. */
  readonly log: Logger;
  /**
   * Messages waiting in this actor's mailbox now, the one being handled not included (a gauge for operators: a
   * daemon whose mailbox grows is falling behind).
   */
  readonly mailboxSize: number;
  /**
   * Starts a child actor under this one.
   * @throws InvalidActorNameError, DuplicateActorNameError
   */
  spawn<C>(behavior: BehaviorSource<C>, name?: string, options?: SpawnOptions): ActorRef<C>;
  /** Stops a child, or this actor itself, after its current message. Other refs are ignored. */
  stop(child: ActorRef<unknown>): void;
  /** The live children. */
  readonly children: readonly ActorRef<unknown>[];
  /**
   * Delivers a `Terminated` signal to `receiveSignal` when `ref` stops (at once if it already has), queued behind the
   * messages already in this actor's mailbox, so whatever `ref` sent before it stopped arrives first.
   */
  watch(ref: ActorRef<unknown>): void;
  /** Stops watching `ref`; a `Terminated` already queued is dropped. */
  unwatch(ref: ActorRef<unknown>): void;
  /**
   * Delivers `ReceiveTimeout` to `receiveSignal` when no message arrived for `timeoutMs`; `null` turns it off.
   * @throws InvalidArgumentError for a non-positive timeout
   */
  setReceiveTimeout(timeoutMs: number | null): void;
  /** Sends `message` to self once after `delayMs`, replacing any timer with the same key. */
  startSingleTimer(key: string, message: T, delayMs: number): void;
  /** Sends `message` to self every `intervalMs`, replacing any timer with the same key. */
  startTimerAtFixedRate(key: string, message: T, intervalMs: number): void;
  /** Cancels the keyed timer; a message it already queued is dropped. */
  cancelTimer(key: string): void;
  /** True while the keyed timer is scheduled. */
  isTimerActive(key: string): boolean;
}
