import { AbstractBehavior, type ActorContext, type Signal, Terminated } from "../actor/index.ts";

/** What the daemon hands every inbound message to: the sharding extension. */
export interface DaemonHandler {
  /** Any message that reached `/system/sharding`, with the transport's authenticated origin. */
  daemonReceive(message: unknown, context: ActorContext<unknown>): void;
  /** A watched entity actor terminated. */
  entityTerminated(signal: Terminated): void;
}

/**
 * The `/system/sharding` actor: the one address other nodes send envelopes and control messages to. It decides
 * nothing itself; it passes each message with `ctx.origin` (the authenticated peer) and `ctx.sender` to the
 * extension, whose handlers never block (drains and asks run asynchronously), so one slow handoff never stalls
 * routing. Entity actors are its children.
 */
export class ShardingDaemon extends AbstractBehavior<unknown> {
  constructor(private readonly handler: DaemonHandler) {
    super();
  }

  receive(message: unknown, context: ActorContext<unknown>): void {
    this.handler.daemonReceive(message, context);
  }

  override receiveSignal(signal: Signal): void {
    if (signal instanceof Terminated) this.handler.entityTerminated(signal);
  }
}
