import { compileCodec, fnv1a, type PayloadCodec } from "../remote/codec.ts";
import { PayloadFormat } from "../remote/envelope.ts";
import { EnvelopeDecodeError, MessageEncodeError } from "../remote/errors.ts";
import { decodePayload, type MessageRegistration, type MessageRegistry } from "../remote/message-registry.ts";
import { ShardingEnvelope, type WireMessage, wireNames } from "./coordinator/messages.ts";

/**
 * A user message that arrived inside an envelope from another node, still encoded: it is decoded where it is
 * delivered ({@link decodeEncodedMessage}) and, when the envelope is forwarded, written on as the same bytes.
 */
export class EncodedMessage {
  constructor(
    /** `PayloadFormat.json` or `PayloadFormat.binary`. */
    readonly format: number,
    /** The sender's codec fingerprint for the binary format, else 0. */
    readonly fingerprint: number,
    /** The payload bytes (a private copy, so a queued envelope never pins a whole received chunk). */
    readonly bytes: Buffer,
  ) {}
}

/** Longest wire name a nested message may carry (the registry's own limit). */
const typeNameMax = 1024;

/** The envelope's own fields, in wire order; the nested message goes before them (see {@link ShardingEnvelopeCodec}). */
const fixed = compileCodec(wireNames.envelope, {
  kind: "string",
  entityType: "string",
  entityId: "string",
  shardId: "int32",
  settingsKey: "string",
  hopCount: "int32",
  coordinator: "string?",
  askTimeoutMs: "number?",
  senderless: "boolean",
  deliveryAttempt: "int32",
});

/**
 * The binary codec of {@link ShardingEnvelope}: the envelope and the user message inside it are written into the
 * outgoing frame in one pass, and read back without JSON. Layout (big-endian lengths):
 *
 * `[u32 n][nested message: n bytes][envelope fields]`, the nested message being absent (n = 0) for control kinds, else
 * `[u16 m][wire name: m bytes UTF-8][u8 format][u32 fingerprint, binary format only][payload]`.
 *
 * The payload is the message's own registration: its binary fields when it declares them, else its JSON. A payload
 * that is not an instance of the class registered under the wire name (a hand-built envelope) is sent as JSON, so the
 * receiver validates it exactly as it would any JSON payload. Decoding leaves the payload encoded
 * ({@link EncodedMessage}): the coordinator forwards it as it came, and the node that delivers it decodes it once,
 * where an invalid payload is counted as such (`malformedEnvelopes.payload`) rather than dropping the whole envelope.
 */
export class ShardingEnvelopeCodec implements PayloadCodec {
  readonly fields = [...fixed.fields, { name: "message", type: "json" as const, optional: true }];
  readonly fingerprint = fnv1a(`nested-message-first/1,${fixed.fingerprint}`);
  // The JSON text measured for the envelope about to be written (measure runs right before write).
  private measuredFor: object | null = null;
  private measuredText = "";
  // The last wire name looked up, and the last decoded (a stream of envelopes repeats them).
  private lastName = "";
  private lastEntry: MessageRegistration | undefined;
  private lastDecodedBytes: Buffer | null = null;
  private lastDecodedName = "";

  constructor(private readonly registry: MessageRegistry) {}

  measure(message: object): number {
    const envelope = message as ShardingEnvelope;
    const bound = 4 + fixed.measure(envelope);
    const wire = envelope.message;
    if (wire === null || wire === undefined) return bound;
    const name = checkedName(wire);
    const head = bound + 2 + 3 * name.length + 1 + 4;
    const payload = wire.payload;
    if (payload instanceof EncodedMessage) return head + payload.bytes.length;
    const codec = this.binaryCodec(name, payload);
    if (codec !== null) return head + codec.measure(payload as object);
    const text = JSON.stringify(payload) ?? "null";
    this.measuredFor = envelope;
    this.measuredText = text;
    return head + 3 * text.length;
  }

  checkText(message: object): void {
    const envelope = message as ShardingEnvelope;
    fixed.checkText(envelope);
    const wire = envelope.message;
    if (wire === null || wire === undefined || wire.payload instanceof EncodedMessage) return;
    this.binaryCodec(wire.type, wire.payload)?.checkText(wire.payload as object);
  }

  write(buf: Buffer, at: number, message: object): number {
    const envelope = message as ShardingEnvelope;
    const wire = envelope.message;
    let o = at + 4;
    if (wire !== null && wire !== undefined) {
      const name = wire.type;
      const nameBytes = writeName(buf, o + 2, name);
      buf[o] = nameBytes >>> 8;
      buf[o + 1] = nameBytes & 0xff;
      o += 2 + nameBytes;
      const payload = wire.payload;
      if (payload instanceof EncodedMessage) {
        buf[o++] = payload.format;
        if (payload.format === PayloadFormat.binary) o = writeU32(buf, o, payload.fingerprint);
        o += payload.bytes.copy(buf, o);
      } else {
        const codec = this.binaryCodec(name, payload);
        if (codec !== null) {
          buf[o++] = PayloadFormat.binary;
          o = codec.write(buf, writeU32(buf, o, codec.fingerprint), payload as object);
        } else {
          const text = this.measuredFor === envelope ? this.measuredText : (JSON.stringify(payload) ?? "null");
          buf[o++] = PayloadFormat.json;
          o += buf.write(text, o, "utf8");
        }
      }
    }
    this.measuredFor = null;
    this.measuredText = "";
    writeU32(buf, at, o - at - 4);
    return fixed.write(buf, o, envelope);
  }

  /** Builds the envelope itself (it validates its own fields), so the prototype argument is not used. */
  read(buf: Buffer, at: number, end: number, _proto?: object): Record<string, unknown> {
    if (end - at < 4) throw undecodable("truncated nested message length");
    const n = readU32(buf, at);
    const nestedEnd = at + 4 + n;
    if (nestedEnd > end) throw undecodable("nested message runs past the frame");
    let message: WireMessage | null = null;
    if (n > 0) {
      let o = at + 4;
      if (o + 2 > nestedEnd) throw undecodable("truncated nested message name");
      const m = (buf[o]! << 8) | buf[o + 1]!;
      o += 2;
      if (o + m + 1 > nestedEnd) throw undecodable("truncated nested message name");
      const type = this.readName(buf, o, o + m);
      // A name no registration can have would be refused only when the envelope is sent on (MessageEncodeError).
      if (type.length === 0 || type.length > typeNameMax)
        throw undecodable("nested wire name is not 1-1024 characters");
      o += m;
      const format = buf[o++]!;
      let fingerprint = 0;
      if (format === PayloadFormat.binary) {
        if (o + 4 > nestedEnd) throw undecodable("truncated nested message fingerprint");
        fingerprint = readU32(buf, o);
        o += 4;
      } else if (format !== PayloadFormat.json) {
        throw undecodable(`unknown nested message format ${format}`);
      }
      const bytes = Buffer.allocUnsafe(nestedEnd - o);
      buf.copy(bytes, 0, o, nestedEnd);
      message = { type, payload: new EncodedMessage(format, fingerprint, bytes) };
    }
    const record = fixed.read(buf, nestedEnd, end, Object.prototype);
    record.message = message;
    try {
      return ShardingEnvelope.fromJSON(record) as unknown as Record<string, unknown>;
    } catch (error) {
      throw undecodable(error instanceof Error ? error.message : String(error));
    }
  }

  /** The binary codec of the registration named `name`, if it has one and `payload` is exactly its class. */
  private binaryCodec(name: string, payload: unknown): PayloadCodec | null {
    let entry = this.lastEntry;
    if (name !== this.lastName || entry === undefined) {
      entry = this.registry.lookupName(name);
      if (entry === undefined) return null;
      this.lastName = name;
      this.lastEntry = entry;
    }
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
}

/**
 * Decodes a user message that arrived encoded inside an envelope, with the registration of its wire name.
 * @throws EnvelopeDecodeError (reason `unknownType`, `schemaInvalid` or `undecodable`)
 */
export function decodeEncodedMessage(registry: MessageRegistry, type: string, message: EncodedMessage): unknown {
  const entry = registry.lookupName(type);
  if (entry === undefined) throw new EnvelopeDecodeError("unknownType", `type "${type}" is not registered`, type);
  const bytes = message.bytes;
  return decodePayload(entry, message.format === PayloadFormat.binary, message.fingerprint, bytes, 0, bytes.length);
}

function checkedName(wire: WireMessage): string {
  const name = wire.type;
  if (typeof name !== "string" || name.length === 0 || name.length > typeNameMax) {
    throw new MessageEncodeError(wireNames.envelope, "message.type", "a wire name of 1-1024 characters", String(name));
  }
  return name;
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

function undecodable(detail: string): EnvelopeDecodeError {
  return new EnvelopeDecodeError("undecodable", `${wireNames.envelope}: ${detail}`, wireNames.envelope);
}
