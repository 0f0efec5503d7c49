import { AbstractBehavior, type ActorContext } from "../actor/index.ts";
import { type ClusterMessage, isClusterMessage } from "./messages.ts";

/** What the daemon hands inbound protocol messages to (the {@link Cluster} extension). */
export interface ClusterInbound {
  /** Handles one message that arrived at `/system/cluster`; never throws. */
  receiveInbound(message: ClusterMessage, origin: ClusterInboundOrigin): void;
  /** Counts a message at `/system/cluster` that is not part of the protocol. */
  rejectForeign(message: unknown, origin: ClusterInboundOrigin): void;
}

/** Where an inbound message came from, as the transport and the actor runtime report it. */
export interface ClusterInboundOrigin {
  readonly origin: ActorContext<unknown>["origin"];
  readonly senderPath: string | null;
}

/**
 * The system actor at `/system/cluster`: the address other nodes' daemons send joins, gossip and heartbeats to. It
 * holds no state; the membership core lives in the extension, which steps it synchronously.
 */
export class ClusterDaemon extends AbstractBehavior<unknown> {
  constructor(private readonly cluster: ClusterInbound) {
    super();
  }

  receive(message: unknown, context: ActorContext<unknown>): void {
    const origin = { origin: context.origin, senderPath: context.sender?.path.toString() ?? null };
    if (isClusterMessage(message)) this.cluster.receiveInbound(message, origin);
    else this.cluster.rejectForeign(message, origin);
  }
}
