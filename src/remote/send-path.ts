import {
  type ActorRef,
  type ActorSystem,
  type Address,
  InvalidMessageError,
  LocalActorRef,
  type SystemMessage,
  Terminated,
  Watch,
} from "../actor/index.ts";
import { errorName } from "../actor/untrusted.ts";
import { Association, type AssociationHost } from "./association.ts";
import type { PayloadCodec } from "./codec.ts";
import type { Connection } from "./connection.ts";
import {
  compressedHeaderBytes,
  FrameKind,
  type FrameKindValue,
  PayloadFormat,
  userHeaderBytesBound,
  writeCompressedHeader,
  writeFrameLength,
  writeUserHeader,
} from "./envelope.ts";
import { MessageEncodeError, MessageTooLargeError, RemoteDeliveryError } from "./errors.ts";
import { frameHeaderBytes } from "./frame.ts";
import type { FrameWriter } from "./frame-writer.ts";
import type { MessageRegistration, MessageRegistry } from "./message-registry.ts";
import { RemoteActorRef } from "./remote-actor-ref.ts";
import type { Remoting } from "./remoting.ts";
import type { ResolvedRemotingSettings } from "./settings.ts";
import type { RemotingStats } from "./stats.ts";
import { SystemMessages } from "./system-messages.ts";

/** Takes back header id `defined` (0: none) of a frame that was refused: its definition never reaches the peer. */
function forgetDefinition(association: Association, defined: number): void {
  if (defined === 0) return;
  association.headers.release(defined);
  association.lastHeader = null;
}

/**
 * The send path of one node's remoting: encodes user messages and ask failures into the output chunk of the
 * association to their target (or of the connection an ask came on), and queues system messages on the association's
 * sequenced channel. The association maps and sets it reads are Remoting's, which keeps their lifecycle.
 */
export class SendPath {
  /** Set when remoting stops: nothing is sent afterwards. */
  stopped = false;
  private readonly system: ActorSystem;
  private readonly settings: ResolvedRemotingSettings;
  private readonly stats: RemotingStats;
  private readonly registry: MessageRegistry;
  private readonly selfUid: string;
  /** The association found last, keyed by Address identity (replies to one peer reuse its Address object). */
  private lastAssociation: Association | null = null;

  constructor(
    remoting: Remoting,
    private readonly host: AssociationHost,
    /** Outbound associations by `host:port`. */
    private readonly associations: Map<string, Association>,
    /** Uid of the incarnation last seen at each `host:port`. */
    private readonly incarnations: ReadonlyMap<string, string>,
    /** Lost incarnations (UniqueAddress text). */
    private readonly lost: ReadonlySet<string>,
    /** Blackholed peers (`host:port`). */
    private readonly blackholed: ReadonlySet<string>,
    private readonly systemMessages: SystemMessages,
  ) {
    this.system = remoting.system;
    this.settings = remoting.settings;
    this.stats = remoting.stats_;
    this.registry = remoting.registry;
    this.selfUid = remoting.selfAddress.uid;
  }

  /** Encodes and queues a user message for `target` (see RemoteActorRef.tell). */
  sendUser(target: RemoteActorRef, message: unknown, sender: ActorRef<unknown> | null): void {
    if (message === undefined || message === null) {
      throw new InvalidMessageError("tell needs a message value, got " + message);
    }
    const registration = this.registry.registrationOf(message);
    const codec = registration.codec;
    if (codec === null) {
      const via = this.writableAssociation(target, message, sender);
      if (via === null) return;
      let payload: string;
      try {
        payload = JSON.stringify(message);
      } catch (error) {
        // Too deep to serialize (RangeError), a cycle or a BigInt (TypeError), a throwing toJSON: refused typed and
        // counted like a declared field's value, not thrown out of tell untyped. A message that came from a peer can
        // be this deep (JSON.parse takes more depth than JSON.stringify gives back).
        this.stats.unencodable++;
        throw new MessageEncodeError(
          registration.name,
          "(message)",
          "a value JSON.stringify encodes",
          errorName(error),
        );
      }
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
      if (error instanceof MessageEncodeError) this.stats.unencodable++;
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

  /** Sends "your ask failed" to a remote asker's reply actor. */
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
          this.stats.droppedBlackholed++;
          return null;
        }
        if (reply.writer.bufferedBytes > this.settings.maxBufferedBytes) {
          this.stats.droppedOverflow++;
          this.dropped(target, message, sender, "overflow");
          return null;
        }
        return reply;
      }
      target.replyConnection = null;
    }
    let association = target.association;
    if (association === null || association.state === "stopped") {
      const found = this.associationFor(target);
      if (typeof found === "string") {
        this.refusedAssociation(found);
        this.dropped(target, message, sender, found);
        return null;
      }
      association = found;
      target.association = association;
    }
    if (this.blackholed.size > 0 && this.blackholed.has(association.key)) {
      this.stats.droppedBlackholed++;
      return null;
    }
    if (
      target.uid !== null &&
      ((association.knownUid !== null && association.knownUid !== target.uid) ||
        (this.lost.size > 0 && this.lost.has(`${target.path.address}#${target.uid}`)))
    ) {
      this.stats.droppedStaleUid++;
      this.dropped(target, message, sender, "staleUid");
      return null;
    }
    const mode = association.sendMode;
    if (mode === "drop") {
      this.stats.droppedWhileDisconnected++;
      this.dropped(target, message, sender, "disconnected");
      return null;
    }
    if (target.uid === null && !target.anyIncarnation) {
      if (mode === "write") target.uid = association.uid;
      else association.bindOnConnect(target);
    }
    if (association.writer.bufferedBytes > this.settings.maxBufferedBytes) {
      this.stats.droppedOverflow++;
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
        if (error instanceof MessageEncodeError) this.stats.unencodable++;
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
      if (error instanceof MessageEncodeError) this.stats.unencodable++;
      throw error;
    }
    const frameBytes = end - start - frameHeaderBytes;
    const max = this.settings.maxFrameBytes;
    if (frameBytes > max) throw new MessageTooLargeError(typeName, frameBytes, max);
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

  /** Sends a system message over the sequenced channel (RemoteActorRef.sendSystem). */
  sendSystemMessage(target: RemoteActorRef, message: SystemMessage): void {
    if (this.stopped || !SystemMessages.crossesWire(message)) return;
    const association = this.associationFor(target);
    if (typeof association === "string") {
      this.refusedAssociation(association);
      // Nothing will ever report on an actor this node cannot reach: its watcher learns now.
      if (message instanceof Watch) message.watcher.sendSystem(new Terminated(target, true));
      return;
    }
    // Before the message's own bookkeeping (a watch it registers belongs to the new stream).
    if (association.outbox.full) this.restartStream(association);
    const body = this.systemMessages.bodyOf(target, message);
    if (body === null) return;
    if (target.uid === null && !target.anyIncarnation) {
      if (association.state === "up") target.uid = association.uid;
      else association.bindOnConnect(target);
    }
    if (target.uid !== null && this.isStale(target.path.address, target.uid)) {
      this.stats.droppedStaleUid++;
      if (message instanceof Watch) message.watcher.sendSystem(new Terminated(target, true));
      return;
    }
    const sequenced = association.outbox.enqueue(body);
    this.stats.systemSent++;
    association.ensureConnecting();
    if (association.state === "up" && !this.blackholed.has(association.key)) {
      association.writeSystem(sequenced.seq, sequenced.body);
    }
  }

  /**
   * The peer left 1,024 system messages unacknowledged (a partition, a peer that never acks): abandons the stream and
   * starts the next epoch, ending every watch with the peer as if its incarnation were lost (see system-channel.ts).
   */
  private restartStream(association: Association): void {
    const abandoned = association.outbox.restartStream();
    this.stats.systemStreamResets++;
    const uid = association.outboxUid ?? association.knownUid;
    this.systemMessages.streamLost(association.address, uid);
    this.system.log.warn(
      { peer: association.key, abandoned, epoch: association.outbox.epoch },
      "a peer left too many system messages unacknowledged; the system stream was restarted and its watches ended",
    );
  }

  /**
   * The association to `target`'s address, made when there is none, or why none may be made: the address was only
   * named in a peer's frames (`target.learned`) and no authenticated handshake showed a node there ("unknownAddress":
   * a forged sender path must not make this node dial arbitrary hosts), or `maxAssociations` exist and none could be
   * expired ("associationLimit").
   */
  private associationFor(target: RemoteActorRef): Association | "unknownAddress" | "associationLimit" {
    const address = target.path.address;
    const last = this.lastAssociation;
    if (last !== null && last.address === address && last.state !== "stopped") return last;
    const key = address.hostPort;
    let association = this.associations.get(key);
    if (association === undefined || !association.address.equals(address)) {
      // A claim never replaces an association either (another system name at a known host:port).
      if (target.learned && (association !== undefined || !this.incarnations.has(key))) return "unknownAddress";
      if (association === undefined && this.associations.size >= this.settings.maxAssociations && !this.evictOne()) {
        return "associationLimit";
      }
      association?.stop();
      association = new Association(this.host, address);
      association.knownUid = this.incarnations.get(key) ?? null;
      this.associations.set(key, association);
    }
    this.lastAssociation = association;
    return association;
  }

  /**
   * Makes room for one association at `maxAssociations`: retires, among those with no unacknowledged system message
   * and no local watch, one that is not connected if any (addresses that do not answer go first, so a flood of them
   * cannot push out live peers), else the one that carried traffic least recently. Returns false when none
   * qualifies. A scan, on the rare path of a new association at the limit.
   */
  private evictOne(): boolean {
    let oldest: Association | null = null;
    for (const association of this.associations.values()) {
      if (association.outbox.pending.length > 0 || this.host.watched(association)) continue;
      if (
        oldest === null ||
        (oldest.state === "up" && association.state !== "up") ||
        ((oldest.state === "up") === (association.state === "up") && association.lastTrafficMs < oldest.lastTrafficMs)
      ) {
        oldest = association;
      }
    }
    if (oldest === null) return false;
    this.host.retire(oldest, "expired");
    return true;
  }

  private refusedAssociation(reason: "unknownAddress" | "associationLimit"): void {
    if (reason === "unknownAddress") this.stats.droppedUnknownAddress++;
    else this.stats.droppedAssociationLimit++;
  }

  private isStale(address: Address, uid: string): boolean {
    const current = this.incarnations.get(address.hostPort);
    return (current !== undefined && current !== uid) || this.lost.has(`${address}#${uid}`);
  }
}

function isTempPath(path: string | null): boolean {
  return path?.includes("/temp/") === true;
}
