import { InvalidMessageError } from "../actor/index.ts";
import { describe, errorText } from "../actor/untrusted.ts";
import { compileCodec, type FieldList, fnv1a, type PayloadCodec } from "./codec.ts";
import { PayloadFormat } from "./envelope.ts";
import { EnvelopeDecodeError, MessageEncodeError } from "./errors.ts";
import {
  decodePayload,
  type MessageClass,
  type MessageRegistration,
  type MessageRegistry,
} from "./message-registry.ts";

/**
 * A registered message carried inside another one (a layer's envelope), as its registry tag and payload. On the
 * sending side the payload is the message itself (see {@link encodeNested}); after a hop it is an
 * {@link EncodedMessage} until {@link decodeNested} turns it back into an instance.
 */
export interface NestedMessage {
  readonly type: string;
  readonly payload: unknown;
}

/**
 * A nested message that arrived from another node, still encoded. Opaque to the layer that carries it: it is decoded
 * where it is delivered ({@link decodeNested}) and, when its envelope is sent on, written out again as the same bytes.
 */
export class EncodedMessage {
  /** @internal Made only by the nesting codec when it reads an envelope. */
  constructor(
    /** `PayloadFormat.json` or `PayloadFormat.binary`. */
    readonly format: number,
    /** The sender's codec fingerprint for the binary format, else 0. */
    readonly fingerprint: number,
    /** The payload bytes (a private copy, so a queued envelope never pins a whole received chunk). */
    readonly bytes: Buffer,
  ) {}
}

/**
 * A nested message decoded as it was read, because the node that read its envelope is where it is delivered (see
 * {@link NestingLayout.decodeHere}): {@link decodeNested} returns the instance, and sending the envelope on writes it
 * out again from the instance.
 */
export class DecodedMessage {
  /** @internal Made only by the nesting codec when it reads an envelope. */
  constructor(readonly value: unknown) {}
}

/**
 * A nested message decoded as its envelope was read, in one object: its wire name, and its payload, which is this same
 * object (a {@link DecodedMessage}). What the nesting codec reads where the message is delivered, so an envelope that
 * waits there (in a mailbox) keeps one object beside its message, not a pair.
 */
class DecodedNestedMessage extends DecodedMessage implements NestedMessage {
  constructor(
    readonly type: string,
    value: unknown,
  ) {
    super(value);
  }

  get payload(): DecodedMessage {
    return this;
  }
}

/** How an envelope class that nests one registered message is laid out: its own fields, and the nested one's name. */
export interface NestingLayout {
  /** The envelope's own fields, in wire order (the types of `RegisterOptions.fields`). */
  readonly fields: FieldList;
  /** The field that holds the {@link NestedMessage} (or null / undefined when the envelope carries none). */
  readonly nestedField: string;
  /**
   * Whether the node reading an envelope with these own fields (as read, not yet validated: untrusted) is where its
   * nested message is delivered. The message is then decoded at once, straight from the frame, instead of kept
   * encoded in a private copy of its bytes for a later {@link decodeNested}; one that does not decode is kept encoded,
   * so that decodeNested refuses it where it is delivered, as it would otherwise. Absent: never.
   */
  readonly decodeHere?: (fields: Readonly<Record<string, unknown>>) => boolean;
}

/** An envelope class whose `fromJSON` validates its fields and builds it (the nested field holds a NestedMessage). */
export type NestingClass = MessageClass & {
  /** Validates the decoded fields (untrusted) and builds the envelope; throws on anything malformed. */
  fromJSON(json: unknown): unknown;
};

/**
 * Registers `type` under `name` with a binary codec that writes the envelope and the message nested in it into the
 * outgoing frame in one pass. Decoding leaves the nested payload encoded ({@link EncodedMessage}), so a node that only
 * forwards the envelope never decodes it. Idempotent like `registerCodec`.
 * @throws MessageRegistrationError on the same conflicts as {@link MessageRegistry.register}
 */
export function registerNesting(
  registry: MessageRegistry,
  type: NestingClass,
  name: string,
  layout: NestingLayout,
): MessageRegistration {
  return registry.registerCodec(type, name, new NestingCodec(registry, type, name, layout));
}

/**
 * The nested form of `message`: its registered wire name, and the message itself as payload (the nesting codec
 * serializes it inside the envelope in the same pass, so no intermediate payload is built).
 * @throws UnknownMessageTypeError when the message's class is not registered
 * @throws InvalidMessageError when it is a protocol container (an envelope, a batch): no message carries one
 */
export function encodeNested(registry: MessageRegistry, message: unknown): NestedMessage {
  const entry = registry.registrationOf(message);
  if (entry.container) {
    throw new InvalidMessageError(
      `${entry.name} is one of Movie's protocol envelopes and cannot be sent inside another message; send the message it carries`,
    );
  }
  return { type: entry.name, payload: message };
}

/**
 * The instance a nested message stands for: an {@link EncodedMessage} is decoded with the registration of its wire
 * name, in the format its sender wrote; any other payload is taken as the message's JSON. A wire name of a protocol
 * container (an envelope, a batch of them) is refused: nesting one would deliver the container as a message, and
 * containers nested in containers cost a reader work (and stack) per level.
 * @throws EnvelopeDecodeError (reason `unknownType`, `schemaInvalid` or `undecodable`)
 */
export function decodeNested(registry: MessageRegistry, nested: NestedMessage): unknown {
  const payload = nested.payload;
  // Made only by the nesting codec's read, which never decodes a container (decodedOrNull).
  if (payload instanceof DecodedMessage) return payload.value;
  const type = nested.type;
  const entry = registry.lookupName(type);
  if (entry === undefined) throw new EnvelopeDecodeError("unknownType", `type "${type}" is not registered`, type);
  if (entry.container) throw nestedContainer(type);
  if (!(payload instanceof EncodedMessage)) return registry.decode(type, payload);
  const bytes = payload.bytes;
  return decodePayload(entry, payload.format === PayloadFormat.binary, payload.fingerprint, bytes, 0, bytes.length);
}

/** The refusal of a nested message whose wire name is a protocol container's. */
function nestedContainer(type: string): EnvelopeDecodeError {
  return new EnvelopeDecodeError(
    "undecodable",
    `nested message "${type}" is a protocol envelope, which no message may carry`,
    type,
  );
}

/** Longest wire name a nested message may carry (the registry's own limit). */
const typeNameMax = 1024;

/**
 * The binary codec of an envelope that nests a registered message. Layout (big-endian lengths):
 *
 * `[u32 n][nested message: n bytes][envelope fields]`, the nested message being absent (n = 0) when the envelope
 * carries none, else `[u16 m][wire name: m bytes UTF-8][u8 format][u32 fingerprint, binary format only][payload]`.
 *
 * The payload is the message's own registration: its binary fields when it declares them, else its JSON. A payload
 * that is not an instance of the class registered under the wire name (a hand-built envelope) is sent as JSON, so the
 * receiver validates it exactly as it would any JSON payload. Reading leaves the payload encoded, and builds the
 * envelope with its class's `fromJSON`: an invalid payload is found by whoever decodes it, not here.
 */
export class NestingCodec implements PayloadCodec {
  readonly fields: PayloadCodec["fields"];
  readonly fingerprint: number;
  private readonly fixed: PayloadCodec;
  // The JSON text measured for each envelope about to be written (measure runs before write), so that a payload is
  // serialized once and written exactly as measured, even by a toJSON whose output changes between calls. The last
  // envelope measured keeps its text here (one envelope: measure, then write); when another is measured before it is
  // written (a batch of envelopes, measured all, then written all), its text moves to `measuredTexts`. Only payloads
  // sent as JSON touch either. (One envelope object measured twice before it is written keeps its last text: the
  // sharding shell never puts an envelope in a batch twice, it builds one per delivery.)
  private measuredFor: object | null = null;
  private measuredText = "";
  private readonly measuredTexts = new WeakMap<object, string>();
  // The last wire name looked up, and the last decoded (a stream of envelopes repeats them).
  private lastName = "";
  private lastEntry: MessageRegistration | undefined;
  private lastDecodedBytes: Buffer | null = null;
  private lastDecodedName = "";
  // The last wire name written and its UTF-8 bytes (a stream of envelopes repeats it; copying bytes beats encoding).
  private lastWrittenName = "";
  private lastWrittenBytes = new Uint8Array(0);

  constructor(
    private readonly registry: MessageRegistry,
    private readonly type: NestingClass,
    private readonly name: string,
    private readonly layout: NestingLayout,
  ) {
    this.fixed = compileCodec(name, layout.fields, Object.prototype, layout.nestedField);
    this.fields = [...this.fixed.fields, { name: layout.nestedField, type: "json" as const, optional: true }];
    this.fingerprint = fnv1a(`nested-message-first/1,${this.fixed.fingerprint}`);
  }

  private nestedOf(envelope: object): NestedMessage | null | undefined {
    return (envelope as Record<string, NestedMessage | null | undefined>)[this.layout.nestedField];
  }

  measure(envelope: object): number {
    const bound = 4 + this.fixed.measure(envelope);
    const wire = this.nestedOf(envelope);
    if (wire === null || wire === undefined) return bound;
    const name = this.checkedName(wire);
    const head = bound + 2 + 3 * name.length + 1 + 4;
    let payload = wire.payload;
    if (payload instanceof EncodedMessage) return head + payload.bytes.length;
    let codec = this.binaryCodec(name, payload);
    // A decoded message (rarely sent on) is written from its instance; checked only off the hot path of a binary one.
    if (codec === null && payload instanceof DecodedMessage) {
      payload = payload.value;
      codec = this.binaryCodec(name, payload);
    }
    if (codec !== null) return head + codec.measure(payload as object);
    const text = JSON.stringify(payload) ?? "null";
    if (this.measuredFor !== null && this.measuredFor !== envelope) {
      this.measuredTexts.set(this.measuredFor, this.measuredText);
    }
    this.measuredFor = envelope;
    this.measuredText = text;
    return head + 3 * text.length;
  }

  checkText(envelope: object): void {
    this.fixed.checkText(envelope);
    const wire = this.nestedOf(envelope);
    if (wire === null || wire === undefined || wire.payload instanceof EncodedMessage) return;
    let payload = wire.payload;
    let codec = this.binaryCodec(wire.type, payload);
    if (codec === null && payload instanceof DecodedMessage) {
      payload = payload.value;
      codec = this.binaryCodec(wire.type, payload);
    }
    codec?.checkText(payload as object);
  }

  write(buf: Buffer, at: number, envelope: object): number {
    const wire = this.nestedOf(envelope);
    let o = at + 4;
    if (wire !== null && wire !== undefined) {
      const name = wire.type;
      const nameBytes = this.writeName(buf, o + 2, name);
      buf[o] = nameBytes >>> 8;
      buf[o + 1] = nameBytes & 0xff;
      o += 2 + nameBytes;
      let payload = wire.payload;
      if (payload instanceof EncodedMessage) {
        buf[o++] = payload.format;
        if (payload.format === PayloadFormat.binary) o = writeU32(buf, o, payload.fingerprint);
        o += payload.bytes.copy(buf, o);
      } else {
        let codec = this.binaryCodec(name, payload);
        if (codec === null && payload instanceof DecodedMessage) {
          payload = payload.value;
          codec = this.binaryCodec(name, payload);
        }
        if (codec !== null) {
          buf[o++] = PayloadFormat.binary;
          o = codec.write(buf, writeU32(buf, o, codec.fingerprint), payload as object);
        } else {
          let text: string | undefined;
          if (this.measuredFor === envelope) {
            text = this.measuredText;
            this.measuredFor = null;
            this.measuredText = "";
          } else {
            text = this.measuredTexts.get(envelope);
            if (text === undefined) text = JSON.stringify(payload) ?? "null";
            else this.measuredTexts.delete(envelope);
          }
          buf[o++] = PayloadFormat.json;
          o += buf.write(text, o, "utf8");
        }
      }
    }
    writeU32(buf, at, o - at - 4);
    return this.fixed.write(buf, o, envelope);
  }

  /**
   * Builds the envelope itself (its class validates its own fields), so the prototype argument is not used. Its own
   * fields are read first: they say whether the nested message is decoded here ({@link NestingLayout.decodeHere}).
   */
  read(buf: Buffer, at: number, end: number, _proto?: object): Record<string, unknown> {
    const record = this.readRecord(buf, at, end);
    try {
      return this.type.fromJSON(record) as Record<string, unknown>;
    } catch (error) {
      // What fromJSON throws may be built from the peer's fields (a value whose toString throws): described, never
      // converted with String().
      throw this.undecodable(`fromJSON threw ${errorText(error)}`);
    }
  }

  /**
   * The envelope's own fields as read (untrusted), with the nested message in the layout's nested field: what
   * {@link read} gives the class's `fromJSON`. Only the nested field is the codec's own ({@link NestedMessage}, or null
   * when the envelope carries none). For a codec that nests envelopes in its own frame (a batch of them), which
   * validates each one itself instead of through a class per envelope.
   * @throws EnvelopeDecodeError (reason `undecodable`) for truncated, trailing or malformed bytes
   */
  readRecord(buf: Buffer, at: number, end: number): Record<string, unknown> {
    if (end - at < 4) throw this.undecodable("truncated nested message length");
    const n = readU32(buf, at);
    const nestedEnd = at + 4 + n;
    if (nestedEnd > end) throw this.undecodable("nested message runs past the frame");
    const record = this.fixed.read(buf, nestedEnd, end, Object.prototype);
    let message: NestedMessage | null = null;
    if (n > 0) {
      let o = at + 4;
      if (o + 2 > nestedEnd) throw this.undecodable("truncated nested message name");
      const m = (buf[o]! << 8) | buf[o + 1]!;
      o += 2;
      if (o + m + 1 > nestedEnd) throw this.undecodable("truncated nested message name");
      const type = this.readName(buf, o, o + m);
      // A name no registration can have would be refused only when the envelope is sent on (MessageEncodeError).
      if (type.length === 0 || type.length > typeNameMax)
        throw this.undecodable("nested wire name is not 1-1024 characters");
      o += m;
      const format = buf[o++]!;
      let fingerprint = 0;
      if (format === PayloadFormat.binary) {
        if (o + 4 > nestedEnd) throw this.undecodable("truncated nested message fingerprint");
        fingerprint = readU32(buf, o);
        o += 4;
      } else if (format !== PayloadFormat.json) {
        throw this.undecodable(`unknown nested message format ${format}`);
      }
      const decoded =
        this.layout.decodeHere?.(record) === true
          ? this.decodedOrNull(type, format, fingerprint, buf, o, nestedEnd)
          : null;
      if (decoded !== null) message = decoded;
      else {
        const bytes = Buffer.allocUnsafe(nestedEnd - o);
        buf.copy(bytes, 0, o, nestedEnd);
        message = { type, payload: new EncodedMessage(format, fingerprint, bytes) };
      }
    }
    record[this.layout.nestedField] = message;
    return record;
  }

  /**
   * The binary codec that writes `wire`'s payload as this codec writes it nested (the registration of `wire.type`, whose
   * class the payload is exactly), or null when it is written otherwise (JSON, kept encoded, decoded and sent on). For
   * a codec that writes many envelopes' payloads under one shared wire name (a batch of them).
   */
  payloadCodecOf(wire: NestedMessage): PayloadCodec | null {
    return this.binaryCodec(wire.type, wire.payload);
  }

  /**
   * The binary codec {@link write} writes `wire`'s payload with, a decoded message's value included, or null when it
   * writes it otherwise (JSON, kept encoded).
   */
  writtenCodecOf(wire: NestedMessage): PayloadCodec | null {
    const payload = wire.payload;
    if (payload instanceof EncodedMessage) return null;
    const codec = this.binaryCodec(wire.type, payload);
    if (codec !== null || !(payload instanceof DecodedMessage)) return codec;
    return this.binaryCodec(wire.type, payload.value);
  }

  /**
   * A binary nested message of wire name `type` whose payload is `buf[at, end)`, read as {@link readRecord} reads one:
   * decoded at once, or, when it does not decode (an unknown name, another fingerprint, a payload its class refuses),
   * kept encoded in a private copy of its bytes, refused by decodeNested where it is delivered and counted there. For a
   * codec that writes the wire name and fingerprint of many envelopes' payloads once (a batch of them); `type` is the
   * text it read, 1 to 1,024 characters.
   */
  readBinaryPayload(type: string, fingerprint: number, buf: Buffer, at: number, end: number): NestedMessage {
    const decoded = this.decodedOrNull(type, PayloadFormat.binary, fingerprint, buf, at, end);
    if (decoded !== null) return decoded;
    const bytes = Buffer.allocUnsafe(end - at);
    buf.copy(bytes, 0, at, end);
    return { type, payload: new EncodedMessage(PayloadFormat.binary, fingerprint, bytes) };
  }

  /**
   * The nested message decoded from the frame, or null when it does not decode (an unknown name, a payload its class
   * refuses): kept encoded then, it is refused by decodeNested where it is delivered, and counted there.
   */
  private decodedOrNull(
    type: string,
    format: number,
    fingerprint: number,
    buf: Buffer,
    at: number,
    end: number,
  ): DecodedNestedMessage | null {
    const entry = this.entryNamed(type);
    // A container is never decoded nested: kept encoded, decodeNested refuses it where it is delivered.
    if (entry === undefined || entry.container) return null;
    try {
      const value = decodePayload(entry, format === PayloadFormat.binary, fingerprint, buf, at, end);
      return new DecodedNestedMessage(type, value);
    } catch {
      return null;
    }
  }

  /** The registration of wire name `name` (the last one looked up is kept: a stream of envelopes repeats it). */
  private entryNamed(name: string): MessageRegistration | undefined {
    if (name === this.lastName && this.lastEntry !== undefined) return this.lastEntry;
    const entry = this.registry.lookupName(name);
    if (entry !== undefined) {
      this.lastName = name;
      this.lastEntry = entry;
    }
    return entry;
  }

  /** The binary codec of the registration named `name`, if it has one and `payload` is exactly its class. */
  private binaryCodec(name: string, payload: unknown): PayloadCodec | null {
    const entry = this.entryNamed(name);
    if (entry === undefined) return null;
    if (payload === null || typeof payload !== "object" || payload.constructor !== entry.type) return null;
    return entry.codec;
  }

  private readName(buf: Buffer, start: number, end: number): string {
    const last = this.lastDecodedBytes;
    if (last !== null && last.length === end - start) {
      let same = true;
      for (let i = 0; i < last.length; i++) {
        if (last[i] !== buf[start + i]) {
          same = false;
          break;
        }
      }
      if (same) return this.lastDecodedName;
    }
    const name = buf.toString("utf8", start, end);
    this.lastDecodedBytes = Buffer.from(buf.subarray(start, end));
    this.lastDecodedName = name;
    return name;
  }

  /** Writes `name` as UTF-8 at `at` (room for 3 bytes per unit was measured); returns the bytes written. */
  private writeName(buf: Buffer, at: number, name: string): number {
    if (name !== this.lastWrittenName) {
      const length = writeName(buf, at, name);
      this.lastWrittenName = name;
      // A copy: the frame's buffer is reused.
      this.lastWrittenBytes = new Uint8Array(buf.subarray(at, at + length));
      return length;
    }
    const bytes = this.lastWrittenBytes;
    buf.set(bytes, at);
    return bytes.length;
  }

  private checkedName(wire: NestedMessage): string {
    const name = wire.type;
    if (typeof name !== "string" || name.length === 0 || name.length > typeNameMax) {
      throw new MessageEncodeError(
        this.name,
        `${this.layout.nestedField}.type`,
        "a wire name of 1-1024 characters",
        describe(name),
      );
    }
    return name;
  }

  private undecodable(detail: string): EnvelopeDecodeError {
    return new EnvelopeDecodeError("undecodable", `${this.name}: ${detail}`, this.name);
  }
}

/** Writes `name` as UTF-8 at `at` (room for 3 bytes per unit was measured); returns the bytes written. */
function writeName(buf: Buffer, at: number, name: string): number {
  const length = name.length;
  for (let i = 0; i < length; i++) {
    const c = name.charCodeAt(i);
    if (c >= 0x80) return buf.write(name, at, "utf8");
    buf[at + i] = c;
  }
  return length;
}

/** The big-endian u32 at `at` (the caller checked the bounds). */
function readU32(buf: Buffer, at: number): number {
  return ((buf[at]! << 24) | (buf[at + 1]! << 16) | (buf[at + 2]! << 8) | buf[at + 3]!) >>> 0;
}

function writeU32(buf: Buffer, at: number, value: number): number {
  buf[at] = value >>> 24;
  buf[at + 1] = (value >>> 16) & 0xff;
  buf[at + 2] = (value >>> 8) & 0xff;
  buf[at + 3] = value & 0xff;
  return at + 4;
}
