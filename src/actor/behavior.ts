import type { ActorContext } from "./actor-context.ts";
import type { SupervisorStrategy } from "./supervision.ts";
import type { Signal } from "./system-messages.ts";

/**
 * The base class of every actor behavior. `receive` handles one message at a time; when it returns a Promise the actor
 * takes its next message only after that Promise settles, so per-actor FIFO holds for asynchronous handlers too.
 */
export abstract class AbstractBehavior<T> {
  /** Handles one message. A thrown error or rejected Promise goes to the supervisor strategy. */
  abstract receive(message: T, context: ActorContext<T>): void | Promise<void>;
  /** Handles `Terminated` (after `context.watch`) and `ReceiveTimeout`. Unhandled signals are ignored. */
  receiveSignal?(signal: Signal, context: ActorContext<T>): void | Promise<void>;
  /** Runs before the first message (and after each restart, on the new instance). */
  preStart?(context: ActorContext<T>): void | Promise<void>;
  /** Runs once, after the children stopped and before watchers are told. */
  postStop?(context: ActorContext<T>): void | Promise<void>;
  /** Runs on the failed instance before a restart replaces it. */
  preRestart?(context: ActorContext<T>, error: Error): void;
  /** Strategy applied to this actor's children when they fail (unless their spawn options say otherwise). */
  supervisorStrategy?: SupervisorStrategy;
}

/** A behavior instance, or a factory that makes a fresh one (needed for a restart to start from clean state). */
export type BehaviorSource<T> = AbstractBehavior<T> | (() => AbstractBehavior<T>);

class FunctionBehavior<T> extends AbstractBehavior<T> {
  constructor(private readonly handler: (message: T, context: ActorContext<T>) => void | Promise<void>) {
    super();
  }
  receive(message: T, context: ActorContext<T>): void | Promise<void> {
    return this.handler(message, context);
  }
}

/** Small helpers for behaviors that need no class. */
export const Behaviors = {
  /** A behavior that calls `handler` for each message. */
  receive<T>(handler: (message: T, context: ActorContext<T>) => void | Promise<void>): AbstractBehavior<T> {
    return new FunctionBehavior(handler);
  },
  /** A behavior that ignores every message. */
  ignore<T>(): AbstractBehavior<T> {
    return new FunctionBehavior<T>(() => {});
  },
};
