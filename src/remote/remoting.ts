import { randomBytes } from "node:crypto";
import { createServer as createNetServer, type Server, type Socket } from "node:net";
import { createServer as createTlsServer } from "node:tls";
import {
  type ActorPath,
  type ActorRef,
  type ActorSystem,
  Address,
  DRAIN_AND_STOP,
  DrainAndStop,
  type Extension,
  type ExtensionId,
  InvalidMessageError,
  LocalActorRef,
  ActorPath as Path,
  STOP,
  Stop,
  type SystemMessage,
  Terminated,
  UniqueAddress,
  Unwatch,
  Watch,
} from "../actor/index.ts";
import { Association, type AssociationHost, type AssociationState } from "./association.ts";
import type { PayloadCodec } from "./codec.ts";
import { Connection, type ConnectionContext, type ConnectionOwner } from "./connection.ts";
import {
  compressedHeaderBytes,
  type EnvelopeHeader,
  encodeControlFrame,
  FrameKind,
  type FrameKindValue,
  PayloadFormat,
  readControlFrame,
  readUserEnvelope,
  readUserHeader,
  userHeaderBytesBound,
  userHeaderEnd,
  writeCompressedHeader,
  writeFrameLength,
  writeUserHeader,
} from "./envelope.ts";
import {
  EnvelopeDecodeError,
  HandshakeError,
  MessageEncodeError,
  MessageTooLargeError,
  RemoteAskError,
  RemoteDeliveryError,
  RemotingNotEnabledError,
} from "./errors.ts";
import { frameHeaderBytes } from "./frame.ts";
import { FrameWriter } from "./frame-writer.ts";
import { headerTableSize } from "./header-table.ts";
import { decodePayload, type MessageRegistration, MessageRegistry } from "./message-registry.ts";
import { RemoteActorRef } from "./remote-actor-ref.ts";
import {
  insecureBindingWarning,
  type RemotingSettings,
  type ResolvedRemotingSettings,
  resolveRemotingSettings,
} from "./settings.ts";
import { emptyStats, type RemotingStats } from "./stats.ts";
import { SystemInbox } from "./system-channel.ts";

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
}

/** What the receive path knows about one header of a connection (kept under its id while the sender uses it). */
interface InboundHeader {
  readonly header: EnvelopeHeader;
  /** Undefined while the type is unknown here (looked up again on every frame, so a later registration works). */
  registration: MessageRegistration | undefined;
  readonly sender: ActorRef<unknown> | null;
  recipient: LocalActorRef<unknown> | null;
  /**
   * Once a binary payload of a class rebuilt without `fromJSON` or schema decoded under this header: its codec and
   * prototype. Nothing they were checked against can change while the header lives (registrations are final), so
   * the following frames decode without the checks.
   */
  direct: { readonly codec: PayloadCodec; readonly proto: object } | null;
}

/** Takes back header id `defined` (0: none) of a frame that was refused: its definition never reaches the peer. */
function forgetDefinition(association: Association, defined: number): void {
  if (defined === 0) return;
  association.headers.release(defined);
  association.lastHeader = null;
}

/** Recently lost incarnations remembered, so refs to them keep failing fast. */
const lostIncarnationsMax = 4096;
/** Inbound sender refs cached by path and uid (temp refs of asks are not cached). */
const senderCacheMax = 10_000;

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
  private readonly quarantined = new Set<string>();
  private readonly blackholed = new Set<string>();
  private readonly inbox = new SystemInbox();
  private readonly listeners = new Set<(event: AssociationEvent) => void>();
  private readonly rejectionListeners = new Set<(rejection: InboundRejection) => void>();
  private readonly recipients = new Map<string, ActorRef<unknown>>();
  private readonly senders = new Map<string, ActorRef<unknown>>();
  /** Remote actors watched by local ones: watchee path text → watchee ref and its local watchers. */
  private readonly remoteWatches = new Map<string, { ref: RemoteActorRef; watchers: Map<string, ActorRef<unknown>> }>();
  /** Local actors watched by remote ones: peer UniqueAddress text → (watchee|watcher) → pair. */
  private readonly inboundWatches = new Map<
    string,
    Map<string, { watchee: ActorRef<unknown>; watcher: RemoteActorRef }>
  >();
  private readonly selfUid: string;
  private stopped = false;
  private readonly host: AssociationHost;
  /** The association found last, keyed by Address identity (replies to one peer reuse its Address object). */
  private lastAssociation: Association | null = null;

  private constructor(
    /** The system this remoting serves. */
    readonly system: ActorSystem,
    settings: ResolvedRemotingSettings,
    private readonly server: Server,
    port: number,
    registry: MessageRegistry,
  ) {
    this.settings = settings;
    this.registry = registry;
    this.selfUid = randomBytes(8).toString("hex");
    this.selfAddress = new UniqueAddress(Address.tcp(system.name, settings.host, port), this.selfUid);
    const log = system.log;
    this.connectionContext = {
      identity: { system: system.name, cluster: settings.clusterName, uniqueAddress: this.selfAddress },
      secret: settings.secret,
      handshakeTimeoutMs: settings.handshakeTimeoutMs,
      maxFrameBytes: settings.maxFrameBytes,
      scheduler: system.scheduler,
      stats: this.stats_,
      warn: (context, message) => log.warn({ node: this.selfAddress.toString(), ...context }, message),
    };
    this.host = {
      settings,
      stats: this.stats_,
      connectionContext: this.connectionContext,
      admit: (peer) => this.admit(peer),
      frames: (connection, frames, from) => this.onFrames(connection, frames, from),
      changed: (association, event) => {
        const peer = association.peer ?? new UniqueAddress(association.address, association.uid ?? "unknown");
        this.emit({ kind: event, peer });
      },
    };
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
        ? createNetServer(onSocket)
        : createTlsServer({ ...settings.tls, requestCert: true, rejectUnauthorized: true }, onSocket);
    // TLS errors before the handshake (bad certificate) would otherwise be unhandled.
    server.on("tlsClientError", () => {
      if (remoting !== null) remoting.stats_.handshakesFailed++;
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
    const warning = insecureBindingWarning(settings);
    if (warning !== null) system.log.warn({ host: settings.host, port }, warning);
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
    return { ...s, rejected: { ...s.rejected } };
  }

  /**
   * A ref for `path` (text or parsed): the local actor for this node's own address, else a remote ref bound to
   * `uid` when given, else to the incarnation known now or reached first (afterwards a restarted peer makes it fail
   * fast). `{ anyIncarnation: true }` gives a ref that is never bound: it reaches whichever incarnation listens at
   * that address (seed-node contact, for example).
   * @throws InvalidAddressError for text that is not an actor path
   */
  refFor(path: string | ActorPath, uid?: string | { anyIncarnation: true }): ActorRef<unknown> {
    const parsed = typeof path === "string" ? Path.parse(path) : path;
    if (this.system.isLocalAddress(parsed.address)) return this.system.actorSelection(parsed);
    if (typeof uid === "object" && uid !== null) return new RemoteActorRef(this, parsed, null, true);
    return new RemoteActorRef(this, parsed, uid ?? this.incarnations.get(parsed.address.hostPort) ?? null);
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
    for (const connection of this.inbound) {
      if (connection.isOpen && connection.peer?.address.hostPort === key) {
        inbound++;
        address = connection.peer.address.toString();
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
    };
  }

  /** Closes the listener and every connection; pending asks to peers time out. Runs when the system terminates. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    for (const association of this.associations.values()) association.stop();
    for (const connection of this.inbound) connection.shutdown();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  // ---- outbound ----

  /** @internal Encodes and queues a user message for `target` (see RemoteActorRef.tell). */
  sendUser(target: RemoteActorRef, message: unknown, sender: ActorRef<unknown> | null): void {
    if (message === undefined || message === null) {
      throw new InvalidMessageError("tell needs a message value, got " + message);
    }
    const registration = this.registry.registrationOf(message);
    const codec = registration.codec;
    if (codec === null) {
      const via = this.writableAssociation(target, message, sender);
      if (via === null) return;
      const payload = JSON.stringify(message);
      this.writeEnvelope(via, FrameKind.user, target, sender, registration.name, payload, null, null, 0, null);
      return;
    }
    let bound: number;
    let repeated: Association | null;
    try {
      bound = codec.measure(message as object);
      repeated = this.repeatedOn(target, sender, registration, bound);
      // Checked before anything else, so a value the codec cannot carry is refused at send even while disconnected.
      // (A repeated tell skips the string scan: it always writes, and writing finds a lone surrogate.)
      if (repeated === null) codec.checkText(message as object);
    } catch (error) {
      if (error instanceof MessageEncodeError) this.stats_.unencodable++;
      throw error;
    }
    if (repeated !== null) {
      const id = repeated.lastHeader!.id;
      repeated.headers.touch(id);
      this.writeCompressedFrame(repeated.writer, id, registration.name, message as object, codec, bound);
      return;
    }
    const via = this.writableAssociation(target, message, sender);
    if (via === null) return;
    this.writeEnvelope(
      via,
      FrameKind.user,
      target,
      sender,
      registration.name,
      null,
      message as object,
      codec,
      bound,
      registration,
    );
  }

  /**
   * The hot path of a stream of tells: returns `target`'s association when the envelope repeats the previous one
   * written there (the same recipient path, local sender and binary type, on an up association, with nothing that
   * could drop it), else null. Such an envelope is a header id plus the payload, so none of the per-message checks of
   * {@link writableAssociation} and {@link writeEnvelope} can change their outcome.
   */
  private repeatedOn(
    target: RemoteActorRef,
    sender: ActorRef<unknown> | null,
    registration: MessageRegistration,
    bound: number,
  ): Association | null {
    const association = target.association;
    if (association === null || association.state !== "up" || target.replyConnection !== null) return null;
    const repeat = association.lastHeader?.repeat;
    if (
      repeat === undefined ||
      repeat === null ||
      // By path, not ref identity: another ref to the same actor has the same header (its association is this one).
      repeat.targetPath !== target.pathText ||
      repeat.sender !== sender ||
      repeat.registration !== registration ||
      target.uid === null ||
      // knownUid is never a lost incarnation (admit refuses those; losing the known one clears it), so this also
      // keeps refs to lost incarnations on the general path without consulting the lost set, which only grows.
      target.uid !== association.knownUid ||
      this.blackholed.size > 0 ||
      this.stopped ||
      association.writer.bufferedBytes > this.settings.maxBufferedBytes ||
      // A frame that could exceed the limit goes the general way, which measures it after writing.
      bound > this.settings.maxFrameBytes - compressedHeaderBytes
    ) {
      return null;
    }
    return association;
  }

  /** @internal Sends "your ask failed" to a remote asker's reply actor. */
  sendAskFailure(target: RemoteActorRef, error: Error): void {
    if (target.path.elements[0] !== "temp") return;
    const association = this.writableAssociation(target, error, null);
    if (association === null) return;
    const payload = JSON.stringify({ remoteClass: error.name, message: error.message });
    this.writeEnvelope(association, FrameKind.askFailure, target, null, "", payload, null, null, 0, null);
  }

  /**
   * Checks blackhole, incarnation and connection state for a message to `target`; returns the association to write
   * on (or, for an ask's reply actor, the open inbound connection the ask came on), or null after dropping (counted;
   * a local asker behind `sender` is failed fast).
   */
  private writableAssociation(
    target: RemoteActorRef,
    message: unknown,
    sender: ActorRef<unknown> | null,
  ): Association | Connection | null {
    if (this.stopped) {
      this.dropped(target, message, sender, "stopped");
      return null;
    }
    const reply = target.replyConnection;
    if (reply !== null) {
      // An ask's reply goes back over the connection the ask came on while it is open: request and reply then share
      // one TCP connection, whose ACKs ride on the data, as a plain request/response socket's do.
      if (reply.isOpen) {
        if (this.blackholed.size > 0 && this.blackholed.has(target.path.address.hostPort)) {
          this.stats_.droppedBlackholed++;
          return null;
        }
        if (reply.writer.bufferedBytes > this.settings.maxBufferedBytes) {
          this.stats_.droppedOverflow++;
          this.dropped(target, message, sender, "overflow");
          return null;
        }
        return reply;
      }
      target.replyConnection = null;
    }
    let association = target.association;
    if (association === null || association.state === "stopped") {
      association = this.associationFor(target.path.address);
      target.association = association;
    }
    if (this.blackholed.size > 0 && this.blackholed.has(association.key)) {
      this.stats_.droppedBlackholed++;
      return null;
    }
    if (
      target.uid !== null &&
      ((association.knownUid !== null && association.knownUid !== target.uid) ||
        (this.lost.size > 0 && this.lost.has(`${target.path.address}#${target.uid}`)))
    ) {
      this.stats_.droppedStaleUid++;
      this.dropped(target, message, sender, "staleUid");
      return null;
    }
    const mode = association.sendMode;
    if (mode === "drop") {
      this.stats_.droppedWhileDisconnected++;
      this.dropped(target, message, sender, "disconnected");
      return null;
    }
    if (target.uid === null && !target.anyIncarnation) {
      if (mode === "write") target.uid = association.uid;
      else association.bindOnConnect(target);
    }
    if (association.writer.bufferedBytes > this.settings.maxBufferedBytes) {
      this.stats_.droppedOverflow++;
      this.dropped(target, message, sender, "overflow");
      return null;
    }
    return association;
  }

  /**
   * Writes one user envelope or ask failure into the association's output chunk in a single pass: the header as an id
   * when this connection already carries it (kind userCompressed), else written out (and given an id unless it names
   * an ask's one-off reply actor), then the payload: binary through `codec`, or the JSON text `payload`.
   * @throws MessageTooLargeError when the frame exceeds maxFrameBytes (nothing is written, no id is kept)
   */
  private writeEnvelope(
    via: Association | Connection,
    kind: FrameKindValue,
    target: RemoteActorRef,
    sender: ActorRef<unknown> | null,
    typeName: string,
    payload: string | null,
    message: object | null,
    codec: PayloadCodec | null,
    codecBound: number,
    /** The binary message's registration (remembered for {@link repeatedOn}), else null. */
    registration: MessageRegistration | null,
  ): void {
    const max = this.settings.maxFrameBytes;
    const payloadBound = payload === null ? codecBound : 3 * payload.length;
    if (payload !== null && payload.length > max) throw new MessageTooLargeError(typeName, payload.length, max);
    if (payload === null && codecBound > 3 * max + 64) throw new MessageTooLargeError(typeName, codecBound, max);
    let senderPath: string | null = null;
    let senderUid: string | null = null;
    if (sender !== null) {
      if (sender instanceof RemoteActorRef) {
        senderPath = sender.pathText;
        senderUid = sender.uid;
      } else {
        senderPath = sender.path.toString();
        // This node's uid only for this system's actors: an actor of another system in the same process is a
        // different node (or none, without remoting).
        const ours =
          sender instanceof LocalActorRef
            ? sender.cell.system === this.system
            : this.system.isLocalAddress(sender.path.address);
        senderUid = ours ? this.selfUid : null;
      }
    }
    const writer = via.writer;
    // Only associations compress headers; a reply on an inbound connection names a one-off reply actor anyway.
    const association = via instanceof Association ? via : null;
    const last = association === null ? null : association.lastHeader;
    let id = 0;
    let defined = 0;
    if (
      association !== null &&
      last !== null &&
      last.recipient === target.recipientBytes &&
      last.sender === senderPath &&
      last.senderUid === senderUid &&
      last.typeName === typeName &&
      kind === FrameKind.user
    ) {
      // Consecutive envelopes on one association mostly share recipient, sender and type.
      id = last.id;
      association.headers.touch(id);
    } else if (
      association !== null &&
      kind === FrameKind.user &&
      !isTempPath(senderPath) &&
      target.path.elements[0] !== "temp"
    ) {
      const key = `${target.path.localPart}\n${senderPath ?? ""}\n${senderUid ?? ""}\n${typeName}`;
      id = association.headers.lookup(key);
      if (id === 0) id = defined = association.headers.assign(key);
      association.lastHeader = {
        id,
        recipient: target.recipientBytes,
        sender: senderPath,
        senderUid,
        typeName,
        repeat:
          registration !== null &&
          (sender === null || (sender instanceof LocalActorRef && sender.cell.system === this.system))
            ? { targetPath: target.pathText, sender, registration }
            : null,
      };
    }
    // else: an ask's reply actor (as sender or recipient) never repeats; its header is written out with id 0.
    const compressed = id !== 0 && defined === 0;
    if (compressed && codec !== null) {
      this.writeCompressedFrame(writer, id, typeName, message!, codec, codecBound);
      return;
    }
    let buf: Buffer;
    let o: number;
    if (compressed) {
      buf = writer.reserve(frameHeaderBytes + compressedHeaderBytes + payloadBound);
      o = writeCompressedHeader(buf, writer.offset + frameHeaderBytes, id);
    } else {
      buf = writer.reserve(userHeaderBytesBound(target.recipientBytes, senderPath, senderUid, typeName) + payloadBound);
      o = writeUserHeader(
        buf,
        writer.offset + frameHeaderBytes,
        kind,
        id,
        target.recipientBytes,
        senderPath,
        senderUid,
        typeName,
        codec === null ? PayloadFormat.json : PayloadFormat.binary,
        codec === null ? 0 : codec.fingerprint,
      );
    }
    const start = writer.offset;
    if (codec === null) {
      o += buf.write(payload!, o, "utf8");
    } else {
      try {
        o = codec.write(buf, o, message!);
      } catch (error) {
        if (association !== null) forgetDefinition(association, defined);
        if (error instanceof MessageEncodeError) this.stats_.unencodable++;
        throw error;
      }
    }
    const frameBytes = o - start - frameHeaderBytes;
    if (frameBytes > max) {
      if (association !== null) forgetDefinition(association, defined);
      throw new MessageTooLargeError(typeName, frameBytes, max);
    }
    writeFrameLength(buf, start, o);
    writer.commit(o);
  }

  /**
   * Writes a binary user envelope whose header the connection already carries as `id`: `[length][8][u16 id][payload]`.
   * @throws MessageTooLargeError when the frame exceeds maxFrameBytes (nothing is written)
   */
  private writeCompressedFrame(
    writer: FrameWriter,
    id: number,
    typeName: string,
    message: object,
    codec: PayloadCodec,
    bound: number,
  ): void {
    const buf = writer.reserve(frameHeaderBytes + compressedHeaderBytes + bound);
    const start = writer.offset;
    let end: number;
    try {
      end = codec.write(buf, writeCompressedHeader(buf, start + frameHeaderBytes, id), message);
    } catch (error) {
      // Nothing was committed: the bytes written so far are overwritten by the next frame.
      if (error instanceof MessageEncodeError) this.stats_.unencodable++;
      throw error;
    }
    const max = this.settings.maxFrameBytes;
    if (end - start - frameHeaderBytes > max)
      throw new MessageTooLargeError(typeName, end - start - frameHeaderBytes, max);
    writeFrameLength(buf, start, end);
    writer.commit(end);
  }

  private dropped(
    target: RemoteActorRef,
    message: unknown,
    sender: ActorRef<unknown> | null,
    reason: RemoteDeliveryError["reason"],
  ): void {
    if (message instanceof Error) return;
    this.system.deadLetterOffice.publish(message, sender, target.pathText);
    if (
      sender !== null &&
      !(sender instanceof RemoteActorRef) &&
      sender.path.elements[0] === "temp" &&
      sender.failAsk !== undefined
    ) {
      sender.failAsk(new RemoteDeliveryError(target.pathText, reason));
    }
  }

  /** @internal Sends a system message over the sequenced channel (RemoteActorRef.sendSystem). */
  sendSystemMessage(target: RemoteActorRef, message: SystemMessage): void {
    const to = target.path.localPart;
    let body: Record<string, unknown>;
    if (message instanceof Stop) body = { sys: "stop", to };
    else if (message instanceof DrainAndStop) body = { sys: "drain", to };
    else if (message instanceof Watch) {
      body = { sys: "watch", to, ref: message.watcher.path.toString(), refUid: this.uidOf(message.watcher) };
      let entry = this.remoteWatches.get(target.pathText);
      if (entry === undefined) this.remoteWatches.set(target.pathText, (entry = { ref: target, watchers: new Map() }));
      entry.watchers.set(message.watcher.path.toString(), message.watcher);
    } else if (message instanceof Unwatch) {
      body = { sys: "unwatch", to, ref: message.watcher.path.toString(), refUid: this.uidOf(message.watcher) };
      const entry = this.remoteWatches.get(target.pathText);
      entry?.watchers.delete(message.watcher.path.toString());
      if (entry?.watchers.size === 0) this.remoteWatches.delete(target.pathText);
    } else if (message instanceof Terminated) {
      body = {
        sys: "terminated",
        to,
        ref: message.ref.path.toString(),
        refUid: this.uidOf(message.ref),
        addressTerminated: message.addressTerminated,
      };
      if (target.uid !== null) {
        this.inboundWatches
          .get(new UniqueAddress(target.path.address, target.uid).toString())
          ?.delete(`${message.ref.path}|${target.pathText}`);
      }
    } else {
      return;
    }
    if (this.stopped) return;
    const association = this.associationFor(target.path.address);
    if (target.uid === null && !target.anyIncarnation) {
      if (association.state === "up") target.uid = association.uid;
      else association.bindOnConnect(target);
    }
    if (target.uid !== null && this.isStale(target.path.address, target.uid)) {
      this.stats_.droppedStaleUid++;
      if (message instanceof Watch) message.watcher.sendSystem(new Terminated(target, true));
      return;
    }
    const sequenced = association.outbox.enqueue(body);
    this.stats_.systemSent++;
    association.ensureConnecting();
    if (association.state === "up" && !this.blackholed.has(association.key)) {
      association.writeSystem(sequenced.seq, sequenced.body);
    }
  }

  private uidOf(ref: ActorRef<unknown>): string | null {
    if (ref instanceof RemoteActorRef) return ref.uid;
    return this.system.isLocalAddress(ref.path.address) ? this.selfUid : null;
  }

  private associationFor(address: Address): Association {
    const last = this.lastAssociation;
    if (last !== null && last.address === address && last.state !== "stopped") return last;
    const key = address.hostPort;
    let association = this.associations.get(key);
    if (association === undefined || !association.address.equals(address)) {
      association?.stop();
      association = new Association(this.host, address);
      association.knownUid = this.incarnations.get(key) ?? null;
      this.associations.set(key, association);
    }
    this.lastAssociation = association;
    return association;
  }

  private isStale(address: Address, uid: string): boolean {
    const current = this.incarnations.get(address.hostPort);
    return (current !== undefined && current !== uid) || this.lost.has(`${address}#${uid}`);
  }

  // ---- inbound ----

  private accept(socket: Socket): void {
    if (this.stopped) {
      socket.destroy();
      return;
    }
    const owner: ConnectionOwner = {
      authenticated: (_connection, peer) => this.admit(peer),
      frames: (connection, frames, from) => this.onFrames(connection, frames, from),
      closed: (connection) => {
        this.inbound.delete(connection);
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
      return new HandshakeError("authentication", `incarnation ${peer} is quarantined or gone`);
    }
    const key = peer.address.hostPort;
    const known = this.incarnations.get(key);
    if (known !== undefined && known !== peer.uid) {
      this.incarnationLost(new UniqueAddress(peer.address, known), "uidChanged");
    }
    this.incarnations.set(key, peer.uid);
    const association = this.associations.get(key);
    if (association !== undefined) association.knownUid = peer.uid;
    return null;
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
    for (const [path, entry] of this.remoteWatches) {
      if (entry.ref.path.address.hostPort !== key || (entry.ref.uid !== null && entry.ref.uid !== peer.uid)) continue;
      this.remoteWatches.delete(path);
      for (const watcher of entry.watchers.values()) watcher.sendSystem(new Terminated(entry.ref, true));
    }
    const watched = this.inboundWatches.get(text);
    if (watched !== undefined) {
      this.inboundWatches.delete(text);
      for (const { watchee, watcher } of watched.values()) watchee.sendSystem(new Unwatch(watcher));
    }
    for (const cacheKey of [...this.senders.keys()])
      if (cacheKey.endsWith(`#${peer.uid}`)) this.senders.delete(cacheKey);
    this.system.log.info({ peer: text, reason }, "remote incarnation lost for good");
    this.emit({ kind: "lost", peer, reason });
  }

  /**
   * Handles the frames of one received chunk in order. The bulk of the traffic — a header-compressed user envelope —
   * goes straight to {@link onCompressed}; everything else through {@link onFrame}.
   */
  private onFrames(connection: Connection, frames: readonly Buffer[], from: number): void {
    const peer = connection.peer!;
    for (let i = from; i < frames.length; i++) {
      // Checked before every frame: a delivery (a dead letter's or a rejection's listener) may have closed the
      // connection, e.g. by quarantining the peer, and nothing after that may reach an actor.
      if (!connection.isOpen) return;
      const frame = frames[i]!;
      try {
        if (frame[0] === FrameKind.userCompressed && this.blackholed.size === 0)
          this.onCompressed(connection, peer, frame);
        else this.onFrame(connection, peer, frame);
      } catch (error) {
        if (!(error instanceof EnvelopeDecodeError)) throw error;
        this.rejectedInbound(peer, error);
      }
    }
  }

  private onFrame(connection: Connection, peer: UniqueAddress, frame: Buffer): void {
    const kind = frame[0];
    // Liveness probes are transport, not traffic: a blackholed peer stays connected, like a partitioned-but-open link.
    if (kind === FrameKind.heartbeat) {
      connection.writer.writeFrame(heartbeatReplyFrame);
      return;
    }
    if (kind === FrameKind.heartbeatReply) return;
    if (this.blackholed.size > 0 && this.blackholed.has(peer.address.hostPort)) {
      this.stats_.droppedBlackholed++;
      return;
    }
    if (kind === FrameKind.userCompressed) this.onCompressed(connection, peer, frame);
    else if (kind === FrameKind.user) this.onUser(connection, peer, frame);
    else if (kind === FrameKind.askFailure) this.onAskFailure(frame);
    else if (kind === FrameKind.system) this.onSystem(connection, peer, frame);
    else if (kind === FrameKind.ack) this.onAck(peer, frame);
    else {
      this.stats_.rejected.unexpected++;
      this.connectionContext.warn({ peer: peer.toString(), kind }, "dropped a frame of unknown kind");
    }
  }

  /** Counts, logs and reports an inbound envelope dropped as undecodable; the association stays up. */
  private rejectedInbound(peer: UniqueAddress, error: EnvelopeDecodeError): void {
    this.stats_.rejected[error.reason]++;
    this.connectionContext.warn({ peer: peer.toString(), error }, "dropped an inbound envelope");
    if (this.rejectionListeners.size === 0) return;
    const rejection: InboundRejection = { peer, reason: error.reason, typeName: error.typeName };
    for (const listener of this.rejectionListeners) {
      try {
        listener(rejection);
      } catch (listenerError) {
        // Counting above must not turn into a dropped connection because an observer failed.
        this.connectionContext.warn({ error: listenerError }, "an inbound-rejection listener threw");
      }
    }
  }

  /** A user envelope whose header was defined earlier on this connection: `[8][u16 id][payload]`. */
  private onCompressed(connection: Connection, peer: UniqueAddress, frame: Buffer): void {
    if (frame.length < compressedHeaderBytes) throw new EnvelopeDecodeError("undecodable", "truncated header id");
    const id = (frame[1]! << 8) | frame[2]!;
    const entry = connection.inboundHeaders[id] as InboundHeader | undefined;
    if (entry === undefined) {
      throw new EnvelopeDecodeError(
        "undecodable",
        id === 0 || id > headerTableSize ? `header id ${id} is out of range` : `header id ${id} was never defined`,
      );
    }
    this.deliverUser(entry, peer, frame, compressedHeaderBytes);
  }

  /** A user envelope with its header written out; a non-zero header id defines that id for later frames. */
  private onUser(connection: Connection, peer: UniqueAddress, frame: Buffer): void {
    // A definition replaces what its id meant before even when it is refused below: the sender's following frames with
    // that id belong to the refused header (rejected as never defined), not to the old one (another recipient).
    if (frame.length >= 3) {
      const id = (frame[1]! << 8) | frame[2]!;
      if (id !== 0 && id <= headerTableSize) connection.inboundHeaders[id] = undefined;
    }
    const at = userHeaderEnd(frame);
    const header = readUserHeader(frame);
    if (header.headerId > headerTableSize) {
      throw new EnvelopeDecodeError("undecodable", `header id ${header.headerId} is out of range`, header.typeName);
    }
    const entry: InboundHeader = {
      header,
      registration: this.registry.lookupName(header.typeName),
      sender: header.sender === null ? null : this.senderRef(header.sender, header.senderUid, peer, connection),
      recipient: null,
      direct: null,
    };
    if (header.headerId !== 0) connection.inboundHeaders[header.headerId] = entry;
    this.deliverUser(entry, peer, frame, at);
  }

  private deliverUser(entry: InboundHeader, peer: UniqueAddress, frame: Buffer, at: number): void {
    const header = entry.header;
    const direct = entry.direct;
    let message: unknown;
    if (direct !== null) {
      message = direct.codec.read(frame, at, frame.length, direct.proto);
    } else {
      let registration = entry.registration;
      if (registration === undefined) {
        registration = entry.registration = this.registry.lookupName(header.typeName);
        if (registration === undefined) {
          throw new EnvelopeDecodeError("unknownType", `type "${header.typeName}" is not registered`);
        }
      }
      const binary = header.format === PayloadFormat.binary;
      message = decodePayload(registration, binary, header.fingerprint, frame, at, frame.length);
      if (binary && registration.direct && header.headerId !== 0) {
        entry.direct = { codec: registration.codec!, proto: registration.type.prototype as object };
      }
    }
    let recipient = entry.recipient;
    if (recipient === null || recipient.cell.isTerminated) {
      const found = this.recipientRef(header.recipient);
      if (!(found instanceof LocalActorRef)) {
        if (found === null) {
          this.stats_.deadLetters++;
          this.system.deadLetterOffice.publish(message, entry.sender, `${this.system.address}${header.recipient}`);
        } else {
          this.stats_.delivered++;
          found.tell(message, entry.sender);
        }
        return;
      }
      recipient = found;
      // Only a remembered header is worth remembering its recipient in (an ask's reply actor never repeats).
      if (header.headerId !== 0) entry.recipient = found;
    }
    this.stats_.delivered++;
    recipient.deliver(message, entry.sender, peer);
  }

  private onAskFailure(frame: Buffer): void {
    const envelope = readUserEnvelope(frame);
    const payload = envelope.payload as { remoteClass?: unknown; message?: unknown } | null;
    if (payload === null || typeof payload !== "object" || typeof payload.remoteClass !== "string") {
      throw new EnvelopeDecodeError("undecodable", "ask failure without remoteClass");
    }
    const recipient = this.recipientRef(envelope.recipient);
    if (recipient === null) {
      this.stats_.deadLetters++;
      return;
    }
    this.stats_.delivered++;
    recipient.failAsk?.(
      new RemoteAskError(envelope.sender ?? "remote actor", payload.remoteClass, String(payload.message ?? "")),
    );
  }

  private recipientRef(recipient: string): ActorRef<unknown> | null {
    if (recipient.startsWith("/temp/")) return this.system.findLocal(["temp", recipient.slice(6)]);
    const cached = this.recipients.get(recipient);
    if (cached !== undefined) {
      if (!(cached as LocalActorRef<unknown>).cell.isTerminated) return cached;
      this.recipients.delete(recipient);
    }
    const ref = this.system.findLocal(recipient.slice(1).split("/"));
    if (ref instanceof LocalActorRef) {
      if (this.recipients.size >= senderCacheMax) this.recipients.clear();
      this.recipients.set(recipient, ref);
    }
    return ref;
  }

  private senderRef(
    path: string,
    uid: string | null,
    peer: UniqueAddress,
    connection: Connection,
  ): ActorRef<unknown> | null {
    const peerAddress = peer.address;
    const peerText = peerAddress.toString();
    // Most senders live on the peer itself (every ask's reply actor does): split the path without parsing it.
    if (path.length > peerText.length + 1 && path[peerText.length] === "/" && path.startsWith(peerText)) {
      const elements = path.slice(peerText.length + 1).split("/");
      if (elements[0] === "temp" && elements.length === 2 && elements[1]!.length > 0) {
        const ref = new RemoteActorRef(this, new Path(peerAddress, elements), uid ?? peer.uid);
        // No association yet: replies go over `connection`; one is made only if that closed (see writableAssociation).
        ref.replyConnection = connection;
        return ref;
      }
    }
    const cacheKey = `${path}#${uid ?? ""}`;
    const cached = this.senders.get(cacheKey);
    if (cached !== undefined) return cached;
    let parsed: ActorPath;
    try {
      parsed = Path.parse(path);
    } catch {
      throw new EnvelopeDecodeError("undecodable", `bad sender path "${path}"`);
    }
    if (this.system.isLocalAddress(parsed.address)) return this.system.actorSelection(parsed);
    const boundUid = uid ?? (parsed.address.equals(peer.address) ? peer.uid : null);
    const ref = new RemoteActorRef(this, parsed, boundUid);
    if (parsed.elements[0] !== "temp") {
      if (this.senders.size >= senderCacheMax) this.senders.clear();
      this.senders.set(cacheKey, ref);
    }
    return ref;
  }

  private onSystem(connection: Connection, peer: UniqueAddress, frame: Buffer): void {
    const doc = readControlFrame(frame);
    const seq = doc.seq;
    if (typeof seq !== "number" || !Number.isInteger(seq) || seq < 1 || typeof doc.to !== "string") {
      throw new EnvelopeDecodeError("undecodable", "system message without seq or recipient");
    }
    const text = peer.toString();
    const verdict = this.inbox.accept(text, seq);
    if (verdict === "deliver") {
      this.stats_.systemDelivered++;
      this.applySystem(peer, doc);
    } else if (verdict === "duplicate") {
      this.stats_.systemDuplicates++;
    }
    const ack: Record<string, unknown> = { seq: this.inbox.acked(text) };
    if (verdict === "gap") ack.gap = true;
    connection.writer.writeFrame(encodeControlFrame(FrameKind.ack, ack));
  }

  private applySystem(peer: UniqueAddress, doc: Record<string, unknown>): void {
    const to = doc.to as string;
    if (to[0] !== "/") throw new EnvelopeDecodeError("undecodable", `bad system recipient "${to}"`);
    const elements = to.slice(1).split("/");
    const target = this.system.actorSelection(new Path(this.system.address, elements));
    const refText = typeof doc.ref === "string" ? doc.ref : null;
    const refUid = typeof doc.refUid === "string" ? doc.refUid : null;
    const remoteRef = (): RemoteActorRef => {
      if (refText === null) throw new EnvelopeDecodeError("undecodable", "system message without ref");
      let parsed: ActorPath;
      try {
        parsed = Path.parse(refText);
      } catch {
        throw new EnvelopeDecodeError("undecodable", `bad ref path "${refText}"`);
      }
      return new RemoteActorRef(this, parsed, refUid ?? (parsed.address.equals(peer.address) ? peer.uid : null));
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
        const key = peer.toString();
        let pairs = this.inboundWatches.get(key);
        if (pairs === undefined) this.inboundWatches.set(key, (pairs = new Map()));
        pairs.set(`${target.path}|${watcher.pathText}`, { watchee: target, watcher });
        target.sendSystem(new Watch(watcher));
        return;
      }
      case "unwatch": {
        const watcher = remoteRef();
        this.inboundWatches.get(peer.toString())?.delete(`${target.path}|${watcher.pathText}`);
        target.sendSystem(new Unwatch(watcher));
        return;
      }
      case "terminated": {
        const ref = remoteRef();
        const entry = this.remoteWatches.get(ref.pathText);
        if (entry !== undefined) {
          entry.watchers.delete(target.path.toString());
          if (entry.watchers.size === 0) this.remoteWatches.delete(ref.pathText);
        }
        target.sendSystem(new Terminated(ref, doc.addressTerminated === true));
        return;
      }
      default:
        throw new EnvelopeDecodeError("undecodable", `unknown system message "${String(doc.sys)}"`);
    }
  }

  private onAck(peer: UniqueAddress, frame: Buffer): void {
    const doc = readControlFrame(frame);
    if (typeof doc.seq !== "number") throw new EnvelopeDecodeError("undecodable", "ack without seq");
    const association = this.associations.get(peer.address.hostPort);
    if (association === undefined || association.outboxUid !== peer.uid) return;
    association.outbox.ack(doc.seq);
    if (doc.gap === true) association.resendSystem(doc.seq);
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
const heartbeatReplyFrame = encodeControlFrame(FrameKind.heartbeatReply, {});

/** The extension id under which remoting registers (creating it needs settings, so use enableRemoting). */
export const remotingId: ExtensionId<Remoting> = {
  key: remotingKey,
  create(system: ActorSystem): Remoting {
    throw new RemotingNotEnabledError(system.name);
  },
};

function isTempPath(path: string | null): boolean {
  return path !== null && path.includes("/temp/");
}

function peerKey(peer: UniqueAddress | string): string {
  return typeof peer === "string" ? peer : peer.address.hostPort;
}
