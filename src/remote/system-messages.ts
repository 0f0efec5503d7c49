import {
  type ActorPath,
  type ActorRef,
  type ActorSystem,
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
import { describe } from "../actor/untrusted.ts";
import { EnvelopeDecodeError } from "./errors.ts";
import { RemoteActorRef } from "./remote-actor-ref.ts";
import type { RemoteWatches } from "./remote-watches.ts";
import type { Remoting } from "./remoting.ts";

/**
 * What the system messages that cross the wire (Stop, DrainAndStop, Watch, Unwatch, Terminated) look like as bodies of
 * the sequenced system channel, both ways: {@link bodyOf} for one sent, {@link apply} for one received. Each keeps the
 * watch bookkeeping its message implies.
 */
export class SystemMessages {
  private readonly system: ActorSystem;

  constructor(
    private readonly remoting: Remoting,
    private readonly selfUid: string,
    private readonly watches: RemoteWatches,
  ) {
    this.system = remoting.system;
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

  /** Applies the system message `doc` that the authenticated `peer` sent to one of this node's actors. */
  apply(peer: UniqueAddress, doc: Record<string, unknown>): void {
    const to = doc.to as string;
    if (to[0] !== "/") throw new EnvelopeDecodeError("undecodable", `bad system recipient ${describe(to)}`);
    const elements = to.slice(1).split("/");
    const target = this.system.actorSelection(new Path(this.system.address, elements));
    const refText = typeof doc.ref === "string" ? doc.ref : null;
    const refUid = typeof doc.refUid === "string" ? doc.refUid : null;
    // A uid names an incarnation and is never empty: an empty one would fail later, where a ref is turned back into
    // a unique address (a Terminated for that watcher), outside any check.
    if (refUid === "") throw new EnvelopeDecodeError("undecodable", "system message with an empty refUid");
    const remoteRef = (): RemoteActorRef => {
      if (refText === null) throw new EnvelopeDecodeError("undecodable", "system message without ref");
      let parsed: ActorPath;
      try {
        parsed = Path.parse(refText);
      } catch {
        throw new EnvelopeDecodeError("undecodable", `bad ref path "${refText}"`);
      }
      // A watcher lives on a node reachable over TCP: a ref without host and port (movie://other/…) would be dialled
      // with no port when this node writes it a Terminated, a TypeError thrown from inside the receive path.
      if (!parsed.address.isRemote) {
        throw new EnvelopeDecodeError("undecodable", "system message ref is not a remote address (no host:port)");
      }
      return new RemoteActorRef(
        this.remoting,
        parsed,
        refUid ?? (parsed.address.equals(peer.address) ? peer.uid : null),
      );
    };
    switch (doc.sys) {
      case "stop":
        target.sendSystem(STOP);
        return;
      case "drain":
        target.sendSystem(DRAIN_AND_STOP);
        return;
      case "watch": {
        const watcher = remoteRef();
        this.watches.watchInbound(peer, target, watcher);
        target.sendSystem(new Watch(watcher));
        return;
      }
      case "unwatch": {
        const watcher = remoteRef();
        this.watches.unwatchInbound(peer, target, watcher);
        target.sendSystem(new Unwatch(watcher));
        return;
      }
      case "terminated": {
        const ref = remoteRef();
        this.watches.remoteTerminated(ref, target.path.toString());
        target.sendSystem(new Terminated(ref, doc.addressTerminated === true));
        return;
      }
      default:
        throw new EnvelopeDecodeError("undecodable", `unknown system message ${describe(doc.sys)}`);
    }
  }
}
