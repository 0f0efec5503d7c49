import {
  type ActorPath,
  type ActorRef,
  type ActorSystem,
  type Address,
  DRAIN_AND_STOP,
  DrainAndStop,
  ActorPath as Path,
  STOP,
  Stop,
  type SystemMessage,
  Terminated,
  UniqueAddress,
  Unwatch,
  Watch,
} from "../actor/index.ts";
import { EnvelopeDecodeError } from "./errors.ts";
import { RemoteActorRef } from "./remote-actor-ref.ts";
import type { RemoteWatches } from "./remote-watches.ts";
import type { Remoting } from "./remoting.ts";
import { authorizeSystemMessage, type RemoteSystemKind, type SystemRefusal } from "./system-authorization.ts";

/** Peers whose first refused system message was logged (cleared when full: a flood logs a line per this many). */
const loggedPeersMax = 1024;

/**
 * What the system messages that cross the wire (Stop, DrainAndStop, Watch, Unwatch, Terminated) look like as bodies of
 * the sequenced system channel, both ways: {@link bodyOf} for one sent, {@link apply} for one received. Each keeps the
 * watch bookkeeping its message implies.
 */
export class SystemMessages {
  private readonly system: ActorSystem;
  private readonly loggedPeers = new Set<string>();

  constructor(
    private readonly remoting: Remoting,
    private readonly selfUid: string,
    private readonly watches: RemoteWatches,
  ) {
    this.system = remoting.system;
  }

  /** True for the system messages that cross the wire (the others stay local, see {@link bodyOf}). */
  static crossesWire(message: SystemMessage): boolean {
    return (
      message instanceof Stop ||
      message instanceof DrainAndStop ||
      message instanceof Watch ||
      message instanceof Unwatch ||
      message instanceof Terminated
    );
  }

  /**
   * The system stream with the peer at `address` (incarnation `uid`, null when none is known yet) was abandoned, by
   * this node or by the peer: every watch between the two ends as if that incarnation were lost (see system-channel.ts).
   */
  streamLost(address: Address, uid: string | null): void {
    this.watches.endWatches(address, uid);
  }

  /** The channel body of `message` for the remote `target`, or null for a system message that stays local. */
  bodyOf(target: RemoteActorRef, message: SystemMessage): Record<string, unknown> | null {
    const to = target.path.localPart;
    if (message instanceof Stop) return { sys: "stop", to };
    if (message instanceof DrainAndStop) return { sys: "drain", to };
    if (message instanceof Watch) {
      this.watches.watchRemote(target, message.watcher);
      return { sys: "watch", to, ref: message.watcher.path.toString(), refUid: this.uidOf(message.watcher) };
    }
    if (message instanceof Unwatch) {
      this.watches.unwatchRemote(target, message.watcher);
      return { sys: "unwatch", to, ref: message.watcher.path.toString(), refUid: this.uidOf(message.watcher) };
    }
    if (message instanceof Terminated) {
      if (target.uid !== null) {
        this.watches.inboundTerminated(message.ref, target, new UniqueAddress(target.path.address, target.uid));
      }
      return {
        sys: "terminated",
        to,
        ref: message.ref.path.toString(),
        refUid: this.uidOf(message.ref),
        addressTerminated: message.addressTerminated,
      };
    }
    return null;
  }

  private uidOf(ref: ActorRef<unknown>): string | null {
    if (ref instanceof RemoteActorRef) return ref.uid;
    return this.system.isLocalAddress(ref.path.address) ? this.selfUid : null;
  }

  /**
   * Applies the system message `doc` that the authenticated `peer` sent to one of this node's actors, or refuses it
   * (counted in `rejected.unauthorizedSystem`, logged once per peer) when system-authorization.ts says so.
   */
  apply(peer: UniqueAddress, doc: Record<string, unknown>): void {
    const to = doc.to as string;
    if (to[0] !== "/") throw new EnvelopeDecodeError("undecodable", "system recipient is not a local path");
    const kind = doc.sys;
    if (kind !== "stop" && kind !== "drain" && kind !== "watch" && kind !== "unwatch" && kind !== "terminated") {
      throw new EnvelopeDecodeError("undecodable", "unknown system message kind");
    }
    const elements = to.slice(1).split("/");
    const refusal = authorizeSystemMessage(
      kind,
      elements[0]!,
      this.remoting.peerAuthorized(peer),
      this.remoting.settings.remoteStop,
    );
    if (refusal !== null) {
      this.refuse(peer, kind, to, refusal);
      return;
    }
    const target = this.system.actorSelection(new Path(this.system.address, elements));
    if (kind === "stop") {
      target.sendSystem(STOP);
      return;
    }
    if (kind === "drain") {
      target.sendSystem(DRAIN_AND_STOP);
      return;
    }
    // Watch, Unwatch and Terminated name an actor of the sending peer (the watcher, or the watchee that terminated): a
    // peer speaks only for its own actors, so it can neither subscribe a third node to Terminated nor end its watches.
    const ref = this.peerRef(peer, doc);
    if (ref === null) {
      this.refuse(peer, kind, to, "foreignRef");
      return;
    }
    if (kind === "watch") {
      if (!this.watches.watchInbound(peer, target, ref)) {
        this.refuse(peer, kind, to, "watchLimit");
        return;
      }
      target.sendSystem(new Watch(ref));
    } else if (kind === "unwatch") {
      this.watches.unwatchInbound(peer, target, ref);
      target.sendSystem(new Unwatch(ref));
    } else {
      const watcherPath = target.path.toString();
      // A Terminated for a watch this node no longer holds is stale, not hostile (the watcher unwatched while it was
      // on the way, or the stream restarted): dropped without a count, as the watcher's cell would drop it.
      if (!this.watches.isWatching(ref, watcherPath)) return;
      this.watches.remoteTerminated(ref, watcherPath);
      target.sendSystem(new Terminated(ref, doc.addressTerminated === true));
    }
  }

  /**
   * The peer's actor that a watch, unwatch or Terminated names (its `ref`, bound to the peer's own incarnation), or
   * null when `ref` or `refUid` name another node or another incarnation.
   * @throws EnvelopeDecodeError when `ref` is missing or not an actor path
   */
  private peerRef(peer: UniqueAddress, doc: Record<string, unknown>): RemoteActorRef | null {
    if (typeof doc.ref !== "string") throw new EnvelopeDecodeError("undecodable", "system message without ref");
    let parsed: ActorPath;
    try {
      parsed = Path.parse(doc.ref);
    } catch {
      throw new EnvelopeDecodeError("undecodable", "system message ref is not an actor path");
    }
    if (!parsed.address.equals(peer.address)) return null;
    if (doc.refUid !== undefined && doc.refUid !== null && doc.refUid !== peer.uid) return null;
    const ref = new RemoteActorRef(this.remoting, parsed, peer.uid);
    // Only ever the authenticated peer's own address; marked as learned all the same, so a ref built from a frame
    // can never be the first reason to dial an address.
    ref.learned = true;
    return ref;
  }

  /**
   * Counts a refused system message (`rejected.unauthorizedSystem`, or `systemWatchesRefused` for a watch over the
   * per-peer bound) and logs the first refusal of each peer incarnation.
   */
  private refuse(peer: UniqueAddress, kind: RemoteSystemKind, to: string, reason: SystemRefusal | "watchLimit"): void {
    if (reason === "watchLimit") this.remoting.stats_.systemWatchesRefused++;
    else this.remoting.stats_.rejected.unauthorizedSystem++;
    const key = peer.toString();
    if (this.loggedPeers.has(key)) return;
    if (this.loggedPeers.size >= loggedPeersMax) this.loggedPeers.clear();
    this.loggedPeers.add(key);
    this.remoting.connectionContext.warn(
      { peer: key, kind, to: to.length > 200 ? `${to.slice(0, 200)}…` : to, reason },
      "refused a remote system message (further refusals from this peer are only counted)",
    );
  }
}
