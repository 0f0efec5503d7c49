import type { ActorRef, Address } from "../actor/index.ts";
import { Terminated, UniqueAddress, Unwatch } from "../actor/index.ts";
import type { RemoteActorRef } from "./remote-actor-ref.ts";

/**
 * Most watches one peer incarnation may hold on this node's actors: each costs an entry here and one in the watched
 * actor's watcher table, and a peer names as many distinct watchers as it likes.
 */
export const inboundWatchesPerPeerMax = 100_000;

/**
 * The watches that cross the wire, in both directions, remembered so that losing a peer incarnation ends them: local
 * watchers of its actors get `Terminated` (address terminated), and local actors it watched forget their watchers.
 */
export class RemoteWatches {
  constructor(
    /** Most watches one peer incarnation may hold here (tests lower it). */
    private readonly perPeerMax = inboundWatchesPerPeerMax,
  ) {}

  /** Remote actors watched by local ones: watchee path text → watchee ref and its local watchers. */
  private readonly remoteWatches = new Map<string, { ref: RemoteActorRef; watchers: Map<string, ActorRef<unknown>> }>();
  /** Local actors watched by remote ones: peer UniqueAddress text → (watchee|watcher) → pair. */
  private readonly inboundWatches = new Map<
    string,
    Map<string, { watchee: ActorRef<unknown>; watcher: RemoteActorRef }>
  >();

  /** The local `watcher` watches the remote `watchee`. */
  watchRemote(watchee: RemoteActorRef, watcher: ActorRef<unknown>): void {
    let entry = this.remoteWatches.get(watchee.pathText);
    if (entry === undefined) this.remoteWatches.set(watchee.pathText, (entry = { ref: watchee, watchers: new Map() }));
    entry.watchers.set(watcher.path.toString(), watcher);
  }

  /** The local `watcher` stops watching the remote `watchee`. */
  unwatchRemote(watchee: RemoteActorRef, watcher: ActorRef<unknown>): void {
    const entry = this.remoteWatches.get(watchee.pathText);
    entry?.watchers.delete(watcher.path.toString());
    if (entry?.watchers.size === 0) this.remoteWatches.delete(watchee.pathText);
  }

  /** The remote `watchee` reported its termination to the local watcher at `watcherPath`: that watch is over. */
  remoteTerminated(watchee: RemoteActorRef, watcherPath: string): void {
    const entry = this.remoteWatches.get(watchee.pathText);
    if (entry !== undefined) {
      entry.watchers.delete(watcherPath);
      if (entry.watchers.size === 0) this.remoteWatches.delete(watchee.pathText);
    }
  }

  /** True when the local actor at `watcherPath` watches the remote `watchee` (its Terminated is expected). */
  isWatching(watchee: RemoteActorRef, watcherPath: string): boolean {
    return this.remoteWatches.get(watchee.pathText)?.watchers.has(watcherPath) === true;
  }

  /**
   * `peer`'s actor `watcher` watches the local `watchee`; false (nothing recorded) when the peer already holds the
   * most watches on this node's actors (default {@link inboundWatchesPerPeerMax}).
   */
  watchInbound(peer: UniqueAddress, watchee: ActorRef<unknown>, watcher: RemoteActorRef): boolean {
    const key = peer.toString();
    let pairs = this.inboundWatches.get(key);
    if (pairs === undefined) this.inboundWatches.set(key, (pairs = new Map()));
    const pair = `${watchee.path}|${watcher.pathText}`;
    if (pairs.size >= this.perPeerMax && !pairs.has(pair)) return false;
    pairs.set(pair, { watchee, watcher });
    return true;
  }

  /** `peer`'s actor `watcher` stops watching the local `watchee`. */
  unwatchInbound(peer: UniqueAddress, watchee: ActorRef<unknown>, watcher: RemoteActorRef): void {
    this.inboundWatches.get(peer.toString())?.delete(`${watchee.path}|${watcher.pathText}`);
  }

  /** The local `watchee` reports its termination to the remote `watcher`: that watch is over. */
  inboundTerminated(watchee: ActorRef<unknown>, watcher: RemoteActorRef, watcherPeer: UniqueAddress): void {
    this.inboundWatches.get(watcherPeer.toString())?.delete(`${watchee.path}|${watcher.pathText}`);
  }

  /** Whether a local actor watches an actor at `hostPort` (a scan: called on the rare idle-expiry path only). */
  watchesAt(hostPort: string): boolean {
    for (const entry of this.remoteWatches.values()) if (entry.ref.path.address.hostPort === hostPort) return true;
    return false;
  }

  /**
   * Nothing answers at `hostPort` and this node stopped trying: local watchers of actors there get `Terminated`
   * (address terminated), whichever incarnation they were bound to.
   */
  addressUnreachable(hostPort: string): void {
    for (const [path, entry] of this.remoteWatches) {
      if (entry.ref.path.address.hostPort !== hostPort) continue;
      this.remoteWatches.delete(path);
      for (const watcher of entry.watchers.values()) watcher.sendSystem(new Terminated(entry.ref, true));
    }
  }

  /** The incarnation `peer` is gone for good: ends every watch it took part in. */
  incarnationLost(peer: UniqueAddress): void {
    this.endWatches(peer.address, peer.uid);
  }

  /**
   * Ends every watch between this node and the peer at `address` with incarnation `uid` (null: any incarnation there):
   * local watchers of its actors get `Terminated` (address terminated), local actors it watched forget their
   * watchers. Used when the incarnation is lost, and when the system stream with it was abandoned.
   */
  endWatches(address: Address, uid: string | null): void {
    const key = address.hostPort;
    for (const [path, entry] of this.remoteWatches) {
      if (entry.ref.path.address.hostPort !== key) continue;
      if (uid !== null && entry.ref.uid !== null && entry.ref.uid !== uid) continue;
      this.remoteWatches.delete(path);
      for (const watcher of entry.watchers.values()) watcher.sendSystem(new Terminated(entry.ref, true));
    }
    if (uid === null) return;
    const text = new UniqueAddress(address, uid).toString();
    const watched = this.inboundWatches.get(text);
    if (watched !== undefined) {
      this.inboundWatches.delete(text);
      for (const { watchee, watcher } of watched.values()) watchee.sendSystem(new Unwatch(watcher));
    }
  }
}
