import type { ActorRef } from "./actor-ref.ts";

/** Stop the actor after the message it is processing; what is still in its mailbox goes to dead letters. */
export class Stop {
  readonly kind = "Stop";
}

/** Finish every message already in the mailbox, then stop; messages sent afterwards are dead letters. */
export class DrainAndStop {
  readonly kind = "DrainAndStop";
}

/** Stop an actor after its current message (see {@link Stop}). */
export const STOP: Stop = new Stop();
/** Drain an actor's mailbox, then stop it (see {@link DrainAndStop}). Cluster sharding's handoff uses it. */
export const DRAIN_AND_STOP: DrainAndStop = new DrainAndStop();

/** Ask the receiver to send {@link Terminated} to `watcher` when it stops. Sent by `context.watch`. */
export class Watch {
  readonly kind = "Watch";
  constructor(readonly watcher: ActorRef<unknown>) {}
}

/** Cancel an earlier {@link Watch}. */
export class Unwatch {
  readonly kind = "Unwatch";
  constructor(readonly watcher: ActorRef<unknown>) {}
}

/**
 * Signal delivered to a watcher when a watched actor stopped, or (for a remote actor) when its node's association is
 * lost for good (`addressTerminated`).
 */
export class Terminated {
  readonly kind = "Terminated";
  constructor(
    readonly ref: ActorRef<unknown>,
    readonly addressTerminated = false,
  ) {}
}

/** The system messages a ref accepts through `sendSystem`. */
export type SystemMessage = Stop | DrainAndStop | Watch | Unwatch | Terminated;

/** Signal delivered when no message arrived within the receive timeout set by `context.setReceiveTimeout`. */
export class ReceiveTimeout {
  readonly kind = "ReceiveTimeout";
}

/** The shared {@link ReceiveTimeout} signal value. */
export const RECEIVE_TIMEOUT: ReceiveTimeout = new ReceiveTimeout();

/** Signals a behavior may handle in `receiveSignal`. */
export type Signal = Terminated | ReceiveTimeout;

/** True when `value` is one of the system messages. */
export function isSystemMessage(value: unknown): value is SystemMessage {
  return (
    value instanceof Stop ||
    value instanceof DrainAndStop ||
    value instanceof Watch ||
    value instanceof Unwatch ||
    value instanceof Terminated
  );
}
