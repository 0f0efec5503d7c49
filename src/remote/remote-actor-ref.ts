import {
  type ActorPath,
  type ActorRef,
  type AskOptions,
  askVia,
  type Class,
  type SystemMessage,
} from "../actor/index.ts";
import type { Association } from "./association.ts";
import type { Connection } from "./connection.ts";
import type { Remoting } from "./remoting.ts";

/**
 * A ref to an actor on another node. `tell` encodes the message at once (so an unregistered type or an oversize message
 * throws here) and queues it on the association to that node; delivery is at-most-once. The ref remembers the peer's
 * node uid (learnt at creation or on first send): once the peer restarted with a new uid, this ref fails fast — its
 * messages become dead letters and its asks reject with `RemoteDeliveryError` — instead of reaching the new incarnation.
 */
export class RemoteActorRef<T = unknown> implements ActorRef<T> {
  /** @internal The recipient's path below the root, UTF-8, as the envelope header carries it. */
  readonly recipientBytes: Buffer;
  private readonly text: string;
  /** @internal The association last used for this ref (re-resolved when it stopped). */
  association: Association | null = null;
  /**
   * @internal For an ask's reply actor learnt from an inbound envelope: the connection that envelope came on. Replies
   * go back over it while it is open (one TCP connection per request/reply, as a plain socket's), else over the
   * association.
   */
  replyConnection: Connection | null = null;
  /**
   * @internal True for a ref made from a peer's claim (a sender or watcher path in its frames): sends to it never
   * dial its address unless an authenticated handshake has shown a node there (see SendPath.associationFor).
   */
  learned = false;

  constructor(
    private readonly remoting: Remoting,
    readonly path: ActorPath,
    /** @internal The node uid this ref is bound to, or null until known. */
    public uid: string | null,
    /** True for a ref that never binds to one incarnation (it follows restarts of the peer). */
    readonly anyIncarnation = false,
  ) {
    this.recipientBytes = Buffer.from(path.localPart, "utf8");
    this.text = path.toString();
  }

  /** The full path text (cached). */
  get pathText(): string {
    return this.text;
  }

  /**
   * Encodes and queues `message` for the remote actor.
   * @throws UnknownMessageTypeError for an unregistered class, MessageTooLargeError above `maxFrameBytes`,
   * InvalidMessageError for undefined or null
   */
  tell(message: T, sender?: ActorRef<unknown> | null): void {
    this.remoting.sendUser(this, message, sender ?? null);
  }

  ask<R>(message: T, replyType: Class<R>, timeoutMs: number, options?: AskOptions): Promise<R> {
    return askVia(this.remoting.system, this, message, replyType, timeoutMs, options);
  }

  /** Sends STOP, DRAIN_AND_STOP, Watch, Unwatch or Terminated over the sequenced, acknowledged channel. */
  sendSystem(message: SystemMessage): void {
    this.remoting.sendSystemMessage(this, message);
  }

  /** @internal Tells a remote asker (this ref is its reply actor) that handling its ask failed. */
  failAsk(error: Error): void {
    this.remoting.sendAskFailure(this, error);
  }

  toString(): string {
    return `RemoteActorRef(${this.text}${this.uid === null ? "" : `#${this.uid}`})`;
  }
}
