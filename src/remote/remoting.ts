import { randomBytes } from "node:crypto";
import { createServer as createNetServer, type Server, type Socket } from "node:net";
import { createServer as createTlsServer } from "node:tls";
import {
  type ActorPath,
  type ActorRef,
  type ActorSystem,
  Address,
  type Extension,
  type ExtensionId,
  ActorPath as Path,
  type SystemMessage,
  UniqueAddress,
} from "../actor/index.ts";
import type { Association, AssociationHost, AssociationState } from "./association.ts";
import { Connection, type ConnectionContext, type ConnectionOwner } from "./connection.ts";
import { HandshakeError, RemotingNotEnabledError } from "./errors.ts";
import { FrameWriter } from "./frame-writer.ts";
import { InboundLimits } from "./inbound-limits.ts";
import { MessageRegistry } from "./message-registry.ts";
import { ReadGate } from "./read-gate.ts";
import { ReceivePath } from "./receive-path.ts";
import { RemoteActorRef } from "./remote-actor-ref.ts";
import { RemoteWatches } from "./remote-watches.ts";
import { SendPath } from "./send-path.ts";
import {
  bindingNotice,
  type RemotingSettings,
  type ResolvedRemotingSettings,
  resolveRemotingSettings,
} from "./settings.ts";
import { emptyStats, type RemotingStats } from "./stats.ts";
import { SystemInbox } from "./system-channel.ts";
import { SystemMessages } from "./system-messages.ts";

/** An inbound envelope remoting dropped as undecodable, for `remoting.onInboundRejected`. */
export interface InboundRejection {
  /** The authenticated peer that sent it. */
  readonly peer: UniqueAddress;
  readonly reason: "undecodable" | "unknownType" | "schemaInvalid";
  /** Its registered wire name, when the type was known. */
  readonly typeName: string | null;
}

/** Something that happened to an association, for `remoting.subscribe`. */
export type AssociationEvent =
  | { readonly kind: "connected"; readonly peer: UniqueAddress }
  | { readonly kind: "disconnected"; readonly peer: UniqueAddress }
  /** The peer incarnation is gone for good: it restarted with a new uid, or it was quarantined. */
  | { readonly kind: "lost"; readonly peer: UniqueAddress; readonly reason: "uidChanged" | "quarantined" };

/** What `remoting.peers()` reports about one peer address. */
export interface PeerInfo {
  /** `host:port`. */
  readonly peer: string;
  readonly address: string;
  /** Uid of the incarnation last seen at that address, or null. */
  readonly uid: string | null;
  /** State of this node's outbound connection to it ("none" when this node never sent to it). */
  readonly state: AssociationState | "none";
  readonly blackholed: boolean;
  /** Authenticated inbound connections from it. */
  readonly inbound: number;
  /** System messages sent and not yet acknowledged. */
  readonly pendingSystemMessages: number;
  /** Bytes waiting to be written to it: on this node's association plus replies on its inbound connections. */
  readonly bufferedBytes: number;
}

/**
 * Says whether an authenticated peer incarnation may send this node the system messages that act on its actors
 * (watch, unwatch, and STOP/DrainAndStop of `/user` actors); see `remoting.setPeerAuthorizer`.
 */
export type PeerAuthorizer = (peer: UniqueAddress) => boolean;

/** Recently lost incarnations remembered, so refs to them keep failing fast. */
const lostIncarnationsMax = 4096;

/**
 * Host:ports whose last incarnation is remembered. Entries of peers with an association or an open inbound connection
 * are never evicted (they are what the uid checks and stale-ref detection need, and those are bounded by the
 * connection and association limits); past the cap the oldest of the others go first. An evicted peer loses only the
 * memory of its uid: its next incarnation is admitted without a "lost" event, which nothing can be waiting for,
 * since watches and sequenced system messages need an association. 4,096 entries are well under a megabyte and more
 * host:ports than a node talks to outside its associations.
 */
export const incarnationsMax = 4096;

/** Incarnations membership declared Down or Removed ({@link Remoting.markIncarnationGone}) remembered. */
const goneIncarnationsMax = 4096;

/**
 * TCP remoting of one actor system (an Extension: it stops with the system). It listens on `host:port`, keeps one
 * outbound connection per peer address (messages to a peer go over this node's connection to it; the peer's
 * messages come over its own connection to this node, so each direction is one TCP connection and there is no
 * simultaneous-open race), authenticates every connection with the handshake, and delivers each inbound envelope
 * stamped with the authenticated peer's UniqueAddress (`context.origin`).
 */
export class Remoting implements Extension {
  /** This node: bound host and port plus the random 64-bit uid chosen at start. */
  readonly selfAddress: UniqueAddress;
  /** Where wire names are resolved (this system's registry over the process-wide default). */
  readonly registry: MessageRegistry;
  /** @internal */ readonly stats_: RemotingStats = emptyStats();
  /** @internal */ readonly settings: ResolvedRemotingSettings;
  /** @internal */ readonly connectionContext: ConnectionContext;
  private readonly associations = new Map<string, Association>();
  private readonly inbound = new Set<Connection>();
  private readonly incarnations = new Map<string, string>();
  private readonly lost = new Set<string>();
  private readonly gone = new Set<string>();
  /** @internal The cap on remembered incarnations ({@link incarnationsMax}; tests lower it). */
  incarnationsLimit = incarnationsMax;
  private readonly quarantined = new Set<string>();
  private readonly blackholed = new Set<string>();
  private readonly inbox = new SystemInbox();
  private readonly listeners = new Set<(event: AssociationEvent) => void>();
  private readonly rejectionListeners = new Set<(rejection: InboundRejection) => void>();
  private readonly dialFailureListeners = new Set<(address: Address, error: Error) => void>();
  private readonly watches = new RemoteWatches();
  private stopped = false;
  private readonly limits: InboundLimits;
  private readonly readGate: ReadGate;
  private limitLogged = false;
  private peerAuthorizer: PeerAuthorizer | null = null;
  private readonly host: AssociationHost;
  private readonly sendPath: SendPath;
  private readonly receivePath: ReceivePath;

  private constructor(
    /** The system this remoting serves. */
    readonly system: ActorSystem,
    settings: ResolvedRemotingSettings,
    private readonly server: Server,
    port: number,
    registry: MessageRegistry,
  ) {
    this.settings = settings;
    this.limits = new InboundLimits(settings);
    this.readGate = new ReadGate(
      () => system.inboundBacklog,
      settings.maxInboundBacklog,
      system.scheduler,
      this.stats_,
    );
    this.registry = registry;
    const selfUid = randomBytes(8).toString("hex");
    this.selfAddress = new UniqueAddress(Address.tcp(system.name, settings.host, port), selfUid);
    const log = system.log;
    this.connectionContext = {
      identity: { system: system.name, cluster: settings.clusterName, uniqueAddress: this.selfAddress },
      secret: settings.secret,
      handshakeTimeoutMs: settings.handshakeTimeoutMs,
      maxFrameBytes: settings.maxFrameBytes,
      idleTimeoutMs: settings.heartbeatTimeoutMs,
      idleCheckMs: settings.heartbeatIntervalMs,
      scheduler: system.scheduler,
      stats: this.stats_,
      readGate: this.readGate,
      warn: (context, message) => log.warn({ node: this.selfAddress.toString(), ...context }, message),
    };
    const systemMessages = new SystemMessages(this, selfUid, this.watches);
    const receivePath = new ReceivePath(
      this,
      this.associations,
      this.blackholed,
      this.inbox,
      this.rejectionListeners,
      systemMessages,
    );
    this.receivePath = receivePath;
    this.host = {
      settings,
      stats: this.stats_,
      connectionContext: this.connectionContext,
      admit: (peer) => this.admit(peer),
      frames: (connection, frames, from) => receivePath.onFrames(connection, frames, from),
      changed: (association, event) => {
        const peer = association.peer ?? new UniqueAddress(association.address, association.uid ?? "unknown");
        this.emit({ kind: event, peer });
      },
      watched: (association) => this.watches.watchesAt(association.key),
      retire: (association, reason) => this.retire(association, reason),
      dialFailed: (association, error) => {
        for (const listener of this.dialFailureListeners) {
          try {
            listener(association.address, error);
          } catch (failure) {
            this.system.log.warn({ error: failure }, "dial failure listener failed");
          }
        }
      },
    };
    this.sendPath = new SendPath(
      this,
      this.host,
      this.associations,
      this.incarnations,
      this.lost,
      this.blackholed,
      systemMessages,
    );
  }

  /** @internal Binds the listener and installs remote addressing; used by `system.enableRemoting`. */
  static async start(system: ActorSystem, options: RemotingSettings): Promise<Remoting> {
    const settings = resolveRemotingSettings(options);
    let remoting: Remoting | null = null;
    const onSocket = (socket: Socket): void => {
      if (remoting === null) socket.destroy();
      else remoting.accept(socket);
    };
    const server =
      settings.tls === null
        ? createNetServer()
        : createTlsServer({
            ...settings.tls,
            requestCert: true,
            rejectUnauthorized: true,
            // Node's default is 120 s: a stalled TLS handshake would hold an unauthenticated slot that long.
            handshakeTimeout: settings.handshakeTimeoutMs,
          });
    // Every TCP socket, before TLS and before the handshake, is screened against the inbound limits first.
    server.on("connection", (raw: Socket) => {
      if (remoting === null) raw.destroy();
      else remoting.screen(raw);
    });
    server.on(settings.tls === null ? "connection" : "secureConnection", onSocket);
    // TLS errors before the handshake (bad certificate) would otherwise be unhandled.
    server.on("tlsClientError", (_error: Error, socket: Socket) => {
      if (remoting !== null) remoting.stats_.handshakesFailed++;
      // With a listener, Node leaves the socket open (a handshake timeout, for one): close it here.
      socket.destroy();
    });
    server.on("error", (error) => system.log.warn({ error }, "remoting listener error"));
    await new Promise<void>((resolve, reject) => {
      const onError = (error: Error): void => reject(error);
      server.once("error", onError);
      server.listen(settings.port, settings.host, () => {
        server.off("error", onError);
        resolve();
      });
    });
    const bound = server.address();
    const port = typeof bound === "object" && bound !== null ? bound.port : settings.port;
    remoting = new Remoting(system, settings, server, port, options.registry ?? new MessageRegistry());
    const notice = bindingNotice(settings);
    if (notice !== null) system.log[notice.level]({ host: settings.host, port }, notice.message);
    const created = remoting;
    try {
      system.extension({ key: remotingKey, create: () => created });
    } catch (error) {
      server.close();
      throw error;
    }
    system.enableRemoteAddressing(remoting.selfAddress.address, (path) => created.refFor(path));
    return remoting;
  }

  /**
   * The remoting of `system`.
   * @throws RemotingNotEnabledError when `system.enableRemoting` has not completed
   */
  static get(system: ActorSystem): Remoting {
    const remoting = system.hasExtension(remotingId);
    if (remoting === undefined) throw new RemotingNotEnabledError(system.name);
    return remoting;
  }

  /** A snapshot of the counters. */
  get stats(): RemotingStats {
    const s = this.stats_;
    return { ...s, rejected: { ...s.rejected }, internalErrors: { ...s.internalErrors } };
  }

  /**
   * A ref for `path` (text or parsed): the local actor for this node's own address, else a remote ref bound to
   * `uid` when given, else to the incarnation this node's connection reaches now, else to the one its first message
   * reaches (afterwards a restarted peer makes it fail fast). `{ anyIncarnation: true }` gives a ref that is never
   * bound: it reaches whichever incarnation listens at that address (seed-node contact, for example).
   * @throws InvalidAddressError for text that is not an actor path
   */
  refFor(path: string | ActorPath, uid?: string | { anyIncarnation: true }): ActorRef<unknown> {
    const parsed = typeof path === "string" ? Path.parse(path) : path;
    if (this.system.isLocalAddress(parsed.address)) return this.system.actorSelection(parsed);
    if (typeof uid === "object" && uid !== null) return new RemoteActorRef(this, parsed, null, true);
    if (uid !== undefined) return new RemoteActorRef(this, parsed, uid);
    // Not the last uid remembered for the address: while the association is down that incarnation may be gone (the
    // peer restarted on the same port), and a ref bound to it would drop every message as staleUid forever.
    const association = this.associations.get(parsed.address.hostPort);
    const reached = association?.state === "up" && association.address.equals(parsed.address) ? association.uid : null;
    return new RemoteActorRef(this, parsed, reached);
  }

  /** Calls `listener` for association events; returns the unsubscribe function. */
  subscribe(listener: (event: AssociationEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /**
   * Calls `listener` for every inbound envelope dropped because it could not be decoded (after `stats.rejected`
   * counted it), so a layer above can count rejections of its own wire types; returns the unsubscribe function.
   */
  onInboundRejected(listener: (rejection: InboundRejection) => void): () => void {
    this.rejectionListeners.add(listener);
    return () => this.rejectionListeners.delete(listener);
  }

  /**
   * Calls `listener` when a connection this node dialled to `address` closed before its handshake completed: the
   * socket failed (refused, reset), the handshake timed out, or the peer refused it (a HandshakeError whose `reason`
   * says why, e.g. `systemName` when the peer runs an actor system of another name). Returns the unsubscribe function.
   */
  onDialFailed(listener: (address: Address, error: Error) => void): () => void {
    this.dialFailureListeners.add(listener);
    return () => this.dialFailureListeners.delete(listener);
  }

  /** Calls `listener` when a peer incarnation is gone for good (uid changed or quarantined); returns unsubscribe. */
  onAssociationLost(listener: (peer: UniqueAddress, reason: "uidChanged" | "quarantined") => void): () => void {
    return this.subscribe((event) => {
      if (event.kind === "lost") listener(event.peer, event.reason);
    });
  }

  /**
   * Declares the incarnation `peer` gone for good (cluster calls this for a downed member): its connections close,
   * its handshakes are refused from now on, refs to it fail fast, and watchers of its actors get `Terminated`.
   */
  quarantine(peer: UniqueAddress): void {
    this.quarantined.add(peer.toString());
    this.incarnationLost(peer, "quarantined");
  }

  /**
   * Tells remoting that membership marked the incarnation `peer` Down or Removed (the cluster calls this): from now
   * on a new uid claiming its host:port is admitted even while `peer`'s connections are still alive. Without it, a
   * new uid is admitted only once every connection of the known incarnation is closed or silent for
   * `heartbeatTimeout` (a claim alone never retires a live node).
   */
  markIncarnationGone(peer: UniqueAddress): void {
    const text = peer.toString();
    if (this.gone.has(text)) return;
    if (this.gone.size >= goneIncarnationsMax) this.gone.delete(this.gone.values().next().value!);
    this.gone.add(text);
  }

  /**
   * Installs the predicate that says whether an authenticated peer incarnation may watch this node's actors and stop
   * its `/user` actors (once enabled, the cluster installs "a Joining, Up, Leaving or Exiting member, and nobody once
   * this node was downed"); null removes it. Without one every authenticated peer is authorized. `/system` and `/temp` actors are never stoppable remotely, and
   * `remoteStop: "deny"` refuses remote stops whatever the predicate says. A predicate that throws counts as false.
   */
  setPeerAuthorizer(authorizer: PeerAuthorizer | null): void {
    this.peerAuthorizer = authorizer;
  }

  /** @internal Whether `peer` passes the installed {@link setPeerAuthorizer} predicate (true when none is). */
  peerAuthorized(peer: UniqueAddress): boolean {
    const authorizer = this.peerAuthorizer;
    if (authorizer === null) return true;
    try {
      return authorizer(peer) === true;
    } catch (error) {
      this.system.log.warn(
        { peer: peer.toString(), error },
        "the peer authorizer threw; the peer counts as unauthorized",
      );
      return false;
    }
  }

  /** Test hook: silently drop all traffic to and from `peer` (as if it were paused), without closing anything. */
  blackhole(peer: UniqueAddress | string): void {
    this.blackholed.add(peerKey(peer));
  }

  /** Undoes {@link blackhole}; unacknowledged system messages to the peer are written again. */
  unblackhole(peer: UniqueAddress | string): void {
    const key = peerKey(peer);
    this.blackholed.delete(key);
    this.associations.get(key)?.resendSystem();
  }

  /**
   * Test hook: closes every connection to and from `peer` at once, as a network blip would. Both sides reconnect
   * with backoff; user messages queued meanwhile are dropped, system messages are re-sent.
   */
  disconnect(peer: UniqueAddress | string): void {
    const key = peerKey(peer);
    this.associations.get(key)?.drop(new Error("disconnected by test hook"));
    for (const connection of this.inbound) if (connection.peer?.address.hostPort === key) connection.close();
  }

  /** What this node knows about every peer address it has talked to. */
  peers(): PeerInfo[] {
    const keys = new Set<string>([...this.associations.keys(), ...this.incarnations.keys()]);
    for (const connection of this.inbound) if (connection.peer !== null) keys.add(connection.peer.address.hostPort);
    return [...keys].sort().map((key) => this.peerInfo(key)!);
  }

  /** What this node knows about one peer (`host:port` or UniqueAddress), or null. */
  peerInfo(peer: UniqueAddress | string): PeerInfo | null {
    const key = peerKey(peer);
    const association = this.associations.get(key);
    let inbound = 0;
    let address = association?.address.toString() ?? "";
    let bufferedBytes = association?.writer.bufferedBytes ?? 0;
    for (const connection of this.inbound) {
      if (connection.isOpen && connection.peer?.address.hostPort === key) {
        inbound++;
        address = connection.peer.address.toString();
        bufferedBytes += connection.writer.bufferedBytes;
      }
    }
    const uid = this.incarnations.get(key) ?? null;
    if (association === undefined && uid === null && inbound === 0) return null;
    return {
      peer: key,
      address,
      uid,
      state: association?.state ?? "none",
      blackholed: this.blackholed.has(key),
      inbound,
      pendingSystemMessages: association?.outbox.pending.length ?? 0,
      bufferedBytes,
    };
  }

  /** Closes the listener and every connection; pending asks to peers time out. Runs when the system terminates. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.sendPath.stopped = true;
    this.readGate.stop();
    for (const association of this.associations.values()) association.stop();
    for (const connection of this.inbound) connection.shutdown();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  // ---- the send path's entry points ----

  /** @internal Encodes and queues a user message for `target` (see RemoteActorRef.tell). */
  sendUser(target: RemoteActorRef, message: unknown, sender: ActorRef<unknown> | null): void {
    this.sendPath.sendUser(target, message, sender);
  }

  /** @internal Sends "your ask failed" to a remote asker's reply actor. */
  sendAskFailure(target: RemoteActorRef, error: Error): void {
    this.sendPath.sendAskFailure(target, error);
  }

  /** @internal Sends a system message over the sequenced channel (RemoteActorRef.sendSystem). */
  sendSystemMessage(target: RemoteActorRef, message: SystemMessage): void {
    this.sendPath.sendSystemMessage(target, message);
  }

  // ---- association lifecycle ----

  /**
   * Counts a new inbound TCP socket against the inbound limits, or closes it at once when it would break one
   * (counted in `stats.rejected.connectionLimit`, logged once per node).
   */
  private screen(raw: Socket): void {
    const ip = raw.remoteAddress;
    if (this.stopped || ip === undefined) {
      raw.destroy();
      return;
    }
    const key = `${ip}:${raw.remotePort}`;
    const refused = this.limits.accept(key, ip);
    if (refused !== null) {
      this.stats_.rejected.connectionLimit++;
      if (!this.limitLogged) {
        this.limitLogged = true;
        this.system.log.warn(
          { ip, limit: refused, value: this.settings[refused] },
          "refused an inbound connection over a limit (logged once; stats.rejected.connectionLimit counts them)",
        );
      }
      raw.destroy();
      return;
    }
    raw.once("close", () => this.limits.closed(key));
  }

  private accept(socket: Socket): void {
    if (this.stopped || socket.destroyed) {
      socket.destroy();
      return;
    }
    const key = `${socket.remoteAddress}:${socket.remotePort}`;
    const receivePath = this.receivePath;
    const owner: ConnectionOwner = {
      authenticated: (_connection, peer) => {
        const refused = this.admit(peer);
        if (refused === null) this.limits.authenticated(key);
        return refused;
      },
      frames: (connection, frames, from) => receivePath.onFrames(connection, frames, from),
      closed: (connection) => {
        this.inbound.delete(connection);
        this.readGate.forget(connection);
      },
    };
    const connection = new Connection(
      socket,
      "server",
      this.connectionContext,
      owner,
      new FrameWriter(this.stats_),
      null,
    );
    this.inbound.add(connection);
  }

  /** Refuses quarantined incarnations and notices a peer that restarted (new uid at a known address). */
  private admit(peer: UniqueAddress): HandshakeError | null {
    if (this.stopped) return new HandshakeError("closed", "this node is stopping");
    if (this.quarantined.has(peer.toString()) || this.lost.has(peer.toString())) {
      return new HandshakeError(
        "quarantined",
        `incarnation ${peer} is quarantined or replaced here; it cannot rejoin: restart it to join with a new uid`,
      );
    }
    const key = peer.address.hostPort;
    const known = this.incarnations.get(key);
    if (known !== undefined && known !== peer.uid) {
      const current = new UniqueAddress(peer.address, known);
      if (this.isAlive(current)) {
        this.stats_.incarnationClaimsRefused++;
        return new HandshakeError(
          "incarnationClaim",
          `${key} is served by incarnation ${known}, which is still connected; a new uid for it is admitted once that incarnation's connections close or fall silent, or membership downs or removes it`,
        );
      }
      this.incarnationLost(current, "uidChanged");
    }
    if (known !== peer.uid) {
      this.incarnations.delete(key);
      this.incarnations.set(key, peer.uid);
      if (this.incarnations.size > this.incarnationsLimit) this.evictIncarnations();
    }
    const association = this.associations.get(key);
    if (association !== undefined) association.knownUid = peer.uid;
    return null;
  }

  /**
   * Whether the incarnation `peer` still looks alive: membership has not declared it gone and some connection to or
   * from it is open and heard from within `heartbeatTimeout` (both directions heartbeat about every second).
   */
  private isAlive(peer: UniqueAddress): boolean {
    if (this.gone.has(peer.toString())) return false;
    const now = this.system.scheduler.now();
    const timeout = this.settings.heartbeatTimeoutMs;
    const association = this.associations.get(peer.address.hostPort);
    const heardMs = association?.uid === peer.uid ? association.lastHeardMs : null;
    if (heardMs !== null && now - heardMs <= timeout) return true;
    for (const connection of this.inbound) {
      if (connection.isOpen && connection.peer?.equals(peer) && now - connection.lastReceivedMs <= timeout) return true;
    }
    return false;
  }

  /** Drops the oldest remembered incarnations of host:ports with no association and no open inbound connection. */
  private evictIncarnations(): void {
    const connected = new Set<string>();
    for (const connection of this.inbound)
      if (connection.peer !== null) connected.add(connection.peer.address.hostPort);
    for (const key of this.incarnations.keys()) {
      if (this.incarnations.size <= this.incarnationsLimit) return;
      if (!this.associations.has(key) && !connected.has(key)) this.incarnations.delete(key);
    }
  }

  /** Stops and forgets an association that expired or was given up (see AssociationHost.retire). */
  private retire(association: Association, reason: "expired" | "givenUp"): void {
    const key = association.key;
    if (this.associations.get(key) === association) this.associations.delete(key);
    const peer = association.state === "up" ? association.peer : null;
    association.stop();
    if (reason === "expired") {
      this.stats_.associationsExpired++;
      if (peer !== null) this.emit({ kind: "disconnected", peer });
    } else {
      this.stats_.associationsGivenUp++;
      // Watches of actors there would otherwise wait forever: nothing will ever report their end.
      this.watches.addressUnreachable(key);
    }
    this.system.log.info(
      { peer: key, reason, attempts: this.settings.maxConnectAttempts, idleMs: this.settings.associationIdleTimeoutMs },
      reason === "expired" ? "association expired after carrying no traffic" : "gave up an address that never answered",
    );
  }

  private incarnationLost(peer: UniqueAddress, reason: "uidChanged" | "quarantined"): void {
    const text = peer.toString();
    if (this.lost.has(text)) return;
    if (this.lost.size >= lostIncarnationsMax) this.lost.delete(this.lost.values().next().value!);
    this.lost.add(text);
    this.stats_.associationsLost++;
    const key = peer.address.hostPort;
    const association = this.associations.get(key);
    if (this.incarnations.get(key) === peer.uid) {
      this.incarnations.delete(key);
      if (association !== undefined) association.knownUid = null;
    }
    this.inbox.forget(text);
    if (association !== undefined && association.outboxUid === peer.uid) {
      association.outbox.reset();
      association.outboxUid = null;
    }
    if (association !== undefined && association.state === "up" && association.uid === peer.uid) {
      association.drop(new Error(`${text} ${reason}`));
    }
    for (const connection of this.inbound) if (connection.peer?.equals(peer)) connection.close();
    this.watches.incarnationLost(peer);
    this.receivePath.forgetSenders(peer.uid);
    this.system.log.info({ peer: text, reason }, "remote incarnation lost for good");
    this.emit({ kind: "lost", peer, reason });
  }

  private emit(event: AssociationEvent): void {
    for (const listener of this.listeners) {
      try {
        listener(event);
      } catch (error) {
        this.system.log.warn({ error }, "association listener failed");
      }
    }
  }
}

const remotingKey = "movie.remoting";

/** The extension id under which remoting registers (creating it needs settings, so use enableRemoting). */
export const remotingId: ExtensionId<Remoting> = {
  key: remotingKey,
  create(system: ActorSystem): Remoting {
    throw new RemotingNotEnabledError(system.name);
  },
};

function peerKey(peer: UniqueAddress | string): string {
  return typeof peer === "string" ? peer : peer.address.hostPort;
}
