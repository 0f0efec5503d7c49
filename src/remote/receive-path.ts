import {
  type ActorPath,
  type ActorRef,
  type ActorSystem,
  LocalActorRef,
  ActorPath as Path,
  type UniqueAddress,
} from "../actor/index.ts";
import { describe } from "../actor/untrusted.ts";
import type { Association } from "./association.ts";
import type { PayloadCodec } from "./codec.ts";
import type { Connection, ConnectionContext } from "./connection.ts";
import {
  compressedHeaderBytes,
  type EnvelopeHeader,
  encodeControlFrame,
  FrameKind,
  PayloadFormat,
  readControlFrame,
  readUserEnvelope,
  readUserHeader,
  userHeaderEnd,
} from "./envelope.ts";
import { ConnectionBoundError, EnvelopeDecodeError, RemoteAskError } from "./errors.ts";
import { headerTableSize } from "./header-table.ts";
import { decodePayload, type MessageRegistration, type MessageRegistry } from "./message-registry.ts";
import { RemoteActorRef } from "./remote-actor-ref.ts";
import type { InboundRejection, Remoting } from "./remoting.ts";
import type { RemotingStats } from "./stats.ts";
import type { InboxVerdict, SystemInbox } from "./system-channel.ts";
import type { SystemMessages } from "./system-messages.ts";

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

/** Inbound sender refs cached by path and uid (temp refs of asks are not cached). */
const senderCacheMax = 10_000;
const heartbeatReplyFrame = encodeControlFrame(FrameKind.heartbeatReply, {});

/**
 * The receive path of one node's remoting: decodes the frames of authenticated connections (inbound ones and the
 * associations' own) and delivers each envelope stamped with the sending peer, applies system messages in sequence
 * and acknowledges them, and takes acknowledgements of this node's own.
 */
export class ReceivePath {
  private readonly system: ActorSystem;
  private readonly registry: MessageRegistry;
  private readonly stats: RemotingStats;
  private readonly connectionContext: ConnectionContext;
  private readonly recipients = new Map<string, ActorRef<unknown>>();
  private readonly senders = new Map<string, ActorRef<unknown>>();

  constructor(
    private readonly remoting: Remoting,
    /** Outbound associations by `host:port` (acks are for their system messages). */
    private readonly associations: ReadonlyMap<string, Association>,
    /** Blackholed peers (`host:port`). */
    private readonly blackholed: ReadonlySet<string>,
    private readonly inbox: SystemInbox,
    private readonly rejectionListeners: ReadonlySet<(rejection: InboundRejection) => void>,
    private readonly systemMessages: SystemMessages,
  ) {
    this.system = remoting.system;
    this.registry = remoting.registry;
    this.stats = remoting.stats_;
    this.connectionContext = remoting.connectionContext;
  }

  /** Forgets the cached sender refs bound to the lost incarnation `uid`. */
  forgetSenders(uid: string): void {
    for (const cacheKey of [...this.senders.keys()]) if (cacheKey.endsWith(`#${uid}`)) this.senders.delete(cacheKey);
  }

  /**
   * Handles the frames of one received chunk in order. The bulk of the traffic — a header-compressed user envelope —
   * goes straight to {@link onCompressed}; everything else through {@link onFrame}.
   */
  onFrames(connection: Connection, frames: readonly Buffer[], from: number): void {
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
        // Anything else is unexpected: the connection's guard closes the connection and counts it (connection.ts).
        if (!(error instanceof EnvelopeDecodeError)) throw error;
        this.rejectedInbound(peer, error);
      }
    }
  }

  private onFrame(connection: Connection, peer: UniqueAddress, frame: Buffer): void {
    const kind = frame[0];
    // Liveness probes are transport, not traffic: a blackholed peer stays connected, like a partitioned-but-open link.
    if (kind === FrameKind.heartbeat) {
      this.reply(connection, heartbeatReplyFrame);
      return;
    }
    if (kind === FrameKind.heartbeatReply) return;
    if (this.blackholed.size > 0 && this.blackholed.has(peer.address.hostPort)) {
      this.stats.droppedBlackholed++;
      // The hook loses frames on an open connection, which a real link never does: a header the frame defines is
      // still recorded, or the sender's later frames with that id (it counts it defined) would be undecodable forever.
      if (kind === FrameKind.user) this.onUser(connection, peer, frame, false);
      return;
    }
    if (kind === FrameKind.userCompressed) this.onCompressed(connection, peer, frame);
    else if (kind === FrameKind.user) this.onUser(connection, peer, frame);
    else if (kind === FrameKind.askFailure) this.onAskFailure(frame);
    else if (kind === FrameKind.system) this.onSystem(connection, peer, frame);
    else if (kind === FrameKind.ack) this.onAck(peer, frame);
    else {
      this.stats.rejected.unexpected++;
      this.connectionContext.warn({ peer: peer.toString(), kind }, "dropped a frame of unknown kind");
    }
  }

  /** Counts, logs and reports an inbound envelope dropped as undecodable; the association stays up. */
  private rejectedInbound(peer: UniqueAddress, error: EnvelopeDecodeError): void {
    this.stats.rejected[error.reason]++;
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

  /**
   * A user envelope with its header written out; a non-zero header id defines that id for later frames. `deliver`
   * false: only the definition is kept (a frame the blackhole hook drops).
   */
  private onUser(connection: Connection, peer: UniqueAddress, frame: Buffer, deliver = true): void {
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
    if (deliver) this.deliverUser(entry, peer, frame, at);
  }

  /**
   * Decodes and delivers the payload at `frame[at..]` of a user envelope with header `entry`. Kept small, its rare
   * cases in {@link decodeUser} and {@link liveRecipient}: it is every user envelope's path.
   */
  private deliverUser(entry: InboundHeader, peer: UniqueAddress, frame: Buffer, at: number): void {
    const direct = entry.direct;
    const message =
      direct === null ? this.decodeUser(entry, frame, at) : direct.codec.read(frame, at, frame.length, direct.proto);
    let recipient = entry.recipient;
    if (recipient === null || recipient.cell.isTerminated) {
      recipient = this.liveRecipient(entry, message);
      if (recipient === null) return;
    }
    this.stats.delivered++;
    recipient.deliver(message, entry.sender, peer);
  }

  /** Decodes a payload with all the checks (and makes the header direct when its type allows, see InboundHeader). */
  private decodeUser(entry: InboundHeader, frame: Buffer, at: number): unknown {
    const header = entry.header;
    let registration = entry.registration;
    if (registration === undefined) {
      registration = entry.registration = this.registry.lookupName(header.typeName);
      if (registration === undefined) {
        throw new EnvelopeDecodeError("unknownType", `type "${header.typeName}" is not registered`);
      }
    }
    const binary = header.format === PayloadFormat.binary;
    const message = decodePayload(registration, binary, header.fingerprint, frame, at, frame.length);
    if (binary && registration.direct && header.headerId !== 0) {
      entry.direct = { codec: registration.codec!, proto: registration.type.prototype as object };
    }
    return message;
  }

  /**
   * Looks up the recipient of `entry` anew: returns it when it is a live local actor, else hands `message` to what
   * the path names (a dead letter when nothing) and returns null.
   */
  private liveRecipient(entry: InboundHeader, message: unknown): LocalActorRef<unknown> | null {
    const header = entry.header;
    const found = this.recipientRef(header.recipient);
    if (!(found instanceof LocalActorRef)) {
      if (found === null) {
        this.stats.deadLetters++;
        this.system.deadLetterOffice.publish(message, entry.sender, `${this.system.address}${header.recipient}`);
      } else {
        this.stats.delivered++;
        found.tell(message, entry.sender);
      }
      return null;
    }
    // Only a remembered header is worth remembering its recipient in (an ask's reply actor never repeats).
    if (header.headerId !== 0) entry.recipient = found;
    return found;
  }

  private onAskFailure(frame: Buffer): void {
    const envelope = readUserEnvelope(frame);
    const payload = envelope.payload as { remoteClass?: unknown; message?: unknown } | null;
    if (payload === null || typeof payload !== "object" || typeof payload.remoteClass !== "string") {
      throw new EnvelopeDecodeError("undecodable", "ask failure without remoteClass");
    }
    const recipient = this.recipientRef(envelope.recipient);
    if (recipient === null) {
      this.stats.deadLetters++;
      return;
    }
    this.stats.delivered++;
    // The message is the peer's text: a string as it is, anything else only named (never its own toString).
    const message = payload.message;
    const text = typeof message === "string" ? message : message === undefined ? "" : describe(message);
    recipient.failAsk?.(new RemoteAskError(envelope.sender ?? "remote actor", payload.remoteClass, text));
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
        const ref = new RemoteActorRef(this.remoting, new Path(peerAddress, elements), uid ?? peer.uid);
        // No association yet: replies go over `connection`; one is made only if that closed (see writableAssociation).
        ref.replyConnection = connection;
        ref.learned = true;
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
      throw new EnvelopeDecodeError("undecodable", `bad sender path ${describe(path)}`);
    }
    if (this.system.isLocalAddress(parsed.address)) return this.system.actorSelection(parsed);
    const boundUid = uid ?? (parsed.address.equals(peer.address) ? peer.uid : null);
    const ref = new RemoteActorRef(this.remoting, parsed, boundUid);
    ref.learned = true;
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
    const epoch = streamEpoch(doc);
    const text = peer.toString();
    const placed = this.inbox.observe(text, epoch);
    let verdict: InboxVerdict = "duplicate";
    if (placed === "stale") {
      this.stats.systemDuplicates++;
    } else {
      if (placed === "restarted") {
        // The peer abandoned its stream (its pending bound was reached): some watches, unwatches or Terminated of the
        // lost messages were for this pair, so every watch between the two ends, as for a lost incarnation.
        this.stats.systemStreamRestarts++;
        this.systemMessages.streamLost(peer.address, peer.uid);
      }
      verdict = this.inbox.accept(text, seq);
      if (verdict === "deliver") {
        this.stats.systemDelivered++;
        this.systemMessages.apply(peer, doc);
      } else if (verdict === "duplicate") {
        this.stats.systemDuplicates++;
      }
    }
    const ack: Record<string, unknown> = { seq: this.inbox.acked(text) };
    // Like system frames, acks of the first stream carry no epoch.
    const ackEpoch = this.inbox.epochOf(text);
    if (ackEpoch !== 0) ack.epoch = ackEpoch;
    if (verdict === "gap") ack.gap = true;
    this.reply(connection, encodeControlFrame(FrameKind.ack, ack));
  }

  /**
   * Writes a control reply (heartbeat reply, ack) on the connection the request came on, unless the peer has left
   * more than `maxBufferedBytes` unread there: such a peer is not reading (or is hostile), and its requests would grow
   * this node's heap without bound, so the connection is closed (counted in `stats.overflowClosed`). Dropping the
   * reply alone would keep what is already buffered alive for as long as the peer holds the connection open.
   */
  private reply(connection: Connection, frame: Buffer): void {
    const buffered = connection.writer.bufferedBytes;
    if (buffered > this.remoting.settings.maxBufferedBytes) {
      this.stats.overflowClosed++;
      const peer = connection.peer?.toString() ?? "unknown peer";
      const error = new ConnectionBoundError(
        "overflow",
        peer,
        `${buffered} bytes of replies unread, over maxBufferedBytes; the peer must read its socket`,
      );
      this.connectionContext.warn({ peer, error }, "closing a connection whose peer does not read");
      connection.close(error);
      return;
    }
    connection.writer.writeFrame(frame);
  }

  private onAck(peer: UniqueAddress, frame: Buffer): void {
    const doc = readControlFrame(frame);
    if (typeof doc.seq !== "number") throw new EnvelopeDecodeError("undecodable", "ack without seq");
    const epoch = streamEpoch(doc);
    const association = this.associations.get(peer.address.hostPort);
    if (association === undefined || association.outboxUid !== peer.uid) return;
    association.outbox.ack(doc.seq, epoch);
    if (doc.gap === true && epoch === association.outbox.epoch) association.gapReported();
  }
}

/**
 * The system stream epoch a system frame or ack names: absent means 0 (the first stream's frames carry none).
 * @throws EnvelopeDecodeError for anything but a non-negative safe integer
 */
function streamEpoch(doc: Record<string, unknown>): number {
  const epoch = doc.epoch;
  if (epoch === undefined) return 0;
  if (typeof epoch !== "number" || !Number.isSafeInteger(epoch) || epoch < 0) {
    throw new EnvelopeDecodeError("undecodable", "system stream epoch is not a non-negative integer");
  }
  return epoch;
}
