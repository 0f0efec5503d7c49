import { errorText, isWellFormedText } from "../../actor/untrusted.ts";
import {
  EnvelopeDecodeError,
  MessageEncodeError,
  type MessageRegistry,
  type NestedMessage,
} from "../../remote/index.ts";
import { readUtf8 } from "../../remote/short-text.ts";
import {
  checkedBatchRecord,
  DirectBatch,
  type DirectBatchRecord,
  DirectEnvelope,
  type DirectHeader,
  directBatchMax,
  directGeneration,
  directHeader,
  ReceivedDirectBatch,
  wireNames,
} from "./messages.ts";

/** The binary codec interface remoting's registry takes (`MessageRegistry.registerCodec`). */
type BinaryCodec = Parameters<MessageRegistry["registerCodec"]>[2];

/** A batch entry's nesting codec (remoting's `registerNesting`), which also reads an entry's fields as a record. */
export interface BatchEntryCodec extends BinaryCodec {
  /** The entry's own fields as read (untrusted), its nested message in `message` (remoting's `NestingCodec`). */
  readRecord(buf: Buffer, at: number, end: number): Record<string, unknown>;
  /** The binary codec the entry writes a nested message's payload with, or null (remoting's `NestingCodec`). */
  payloadCodecOf(wire: NestedMessage): BinaryCodec | null;
  /** {@link payloadCodecOf}, a decoded message's value included (remoting's `NestingCodec`). */
  writtenCodecOf(wire: NestedMessage): BinaryCodec | null;
  /** A binary nested message read from its payload's bytes, decoded or kept encoded (remoting's `NestingCodec`). */
  readBinaryPayload(type: string, fingerprint: number, buf: Buffer, at: number, end: number): NestedMessage;
}

/** Whether `codec` reads records ({@link BatchEntryCodec}), as the nesting codec does. */
export function isBatchEntryCodec(codec: BinaryCodec | null): codec is BatchEntryCodec {
  const c = codec as Partial<BatchEntryCodec> | null;
  return (
    c !== null &&
    typeof c.readRecord === "function" &&
    typeof c.payloadCodecOf === "function" &&
    typeof c.writtenCodecOf === "function" &&
    typeof c.readBinaryPayload === "function"
  );
}

/** The byte after a batch's header: its envelopes follow as general entries, or as compact records. */
const generalForm = 0;
const compactForm = 1;
/** Longest nested wire name a compact batch carries, in characters (as the nesting codec's). */
const wireNameMax = 1_024;
/** A compact record's bytes besides its entity id and payload: id length, shard, generation, flags. */
const compactFixedBytes = 4 + 4 + 8 + 1;

/**
 * A compact record as read (internal/direct-batch-codec.ts): a plain tell's fields, the ones a compact batch leaves out
 * at their tell's values. The same fields as the entry codec's record ({@link DirectBatchRecord}).
 */
class CompactRecord implements DirectBatchRecord {
  readonly kind = "User" as const;
  readonly askTimeoutMs = null;
  readonly deliveryAttempt = 0;
  readonly traceparent = null;

  constructor(
    readonly entityId: string,
    readonly shardId: number,
    readonly senderless: boolean,
    readonly generation: number,
    readonly message: NestedMessage,
  ) {}
}

/** Per binary codec: whether it has a `json` field (whose text its measure keeps for the write that follows). */
const jsonFieldCodecs = new WeakMap<object, boolean>();

/**
 * Whether `codec` writes a `json` field. Such a codec keeps the text it measured in one slot for its next write, so a
 * batch, which measures every envelope before it writes the first, measures each of these again right before its
 * write (see {@link DirectBatchCodec.write}).
 */
function hasJsonField(codec: BinaryCodec): boolean {
  let known = jsonFieldCodecs.get(codec);
  if (known === undefined) {
    known = codec.fields.some((f) => f.type === "json");
    jsonFieldCodecs.set(codec, known);
  }
  return known;
}

/** Scratch for a big-endian double (JavaScript is single-threaded). */
const doubleView = new Float64Array(1);
const doubleBytes = new Uint8Array(doubleView.buffer);
const littleEndian = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** Longest entity type name or coordinator uid a batch header may carry, in bytes. */
const headerTextMax = 4_096;

/**
 * The binary codec of {@link DirectBatch} (docs/protocol.md §8.8 "Batches"). What every envelope of a batch shares is
 * written once, in a header; the rest per envelope. Every number of the batch's own is big-endian:
 *
 * `[u16 count 1..256][u32 a][entityType: a bytes UTF-8][f64 settingsDigest][u32 b][coordinatorUid: b bytes UTF-8]`
 * (`a` and `b` at most 4,096), then a form byte and the envelopes:
 * - `0`, general: per envelope `[u32 n][n bytes]` in the batch entry's layout (`directBatchEntryLayout`, remoting's
 *   nesting codec: the nested message first, `[u32 m][u16 name length][name][u8 format][u32 fingerprint, binary only]
 *   [payload]`, then the entry's fields: kind, entity id, shard, ask timeout, senderless flag, delivery attempt, trace
 *   context, generation, in the compiled codec's encoding);
 * - `1`, compact, when every envelope is a first-attempt plain tell whose payload one binary codec writes:
 *   `[u16 name length][wire name][u32 fingerprint]` once, then per envelope `[u32 n]` and `[u32 k][entity id: k bytes
 *   UTF-8][i32 shard][f64 generation][u8 senderless][payload in its codec's layout]`.
 *
 * The header is validated once ({@link directHeader}), each envelope's own fields as a single direct envelope's are
 * ({@link DirectEnvelope.fromBatchRecord}): together exactly the checks a single direct envelope passes. One malformed
 * envelope refuses the whole frame, as a malformed single one refuses its own. A payload codec with a `json` field
 * keeps the text it measured for its next write, so such an envelope is measured again right before it is written
 * (a batch measures all its envelopes first), within what the batch measured.
 */
export class DirectBatchCodec implements BinaryCodec {
  readonly fields = [{ name: "envelopes", type: "json" as const, optional: false }];
  /** The entry layout's fingerprint, marked: a receiver with another entry layout refuses the batch too. */
  readonly fingerprint: number;

  constructor(
    /** The nesting codec of a batch entry (registered as `wireNames.directBatchEntry`). */
    private readonly entry: BatchEntryCodec,
  ) {
    // Marked with the batch layout's version (3: the form byte), so a node of another layout refuses the batch too.
    this.fingerprint = (entry.fingerprint ^ 0x6261_7433) >>> 0;
  }

  // The batch measured last, for the write right after: the payload codec of its compact form (null: general), its
  // bytes, and whether a payload's codec has a `json` field (each such envelope is measured again before its write).
  private measured: object | null = null;
  private measuredCodec: BinaryCodec | null = null;
  private measuredBytes = 0;
  private measuredJson = false;

  measure(batch: object): number {
    const envelopes = this.envelopesOf(batch);
    const first = envelopes[0]!;
    // Checked here, not in checkText: a repeated send skips checkText, and the header is not written by a codec that
    // finds a lone surrogate. A header the receiver would refuse (read below) is refused at send instead, so the
    // shell writes the envelopes one by one, which carry any entity type a single direct envelope carries.
    checkHeaderText(first.entityType, "envelopes[0].entityType");
    checkHeaderText(first.coordinatorUid, "envelopes[0].coordinatorUid");
    let bytes = 2 + 4 + 3 * first.entityType.length + 8 + 4 + 3 * first.coordinatorUid.length + 1;
    const codec = this.compactCodecOf(envelopes);
    let json = false;
    if (codec === null) {
      for (let i = 0; i < envelopes.length; i++) {
        const e = envelopes[i]!;
        bytes += 4 + this.entry.measure(e);
        if (!json && e.message !== null && e.message !== undefined) {
          const written = this.entry.writtenCodecOf(e.message);
          json = written !== null && hasJsonField(written);
        }
      }
    } else {
      json = hasJsonField(codec);
      bytes += 2 + 3 * first.message!.type.length + 4;
      for (let i = 0; i < envelopes.length; i++) {
        const e = envelopes[i]!;
        bytes += 4 + compactFixedBytes + 3 * e.entityId.length + codec.measure(e.message!.payload as object);
      }
    }
    // Kept once the whole batch measured (a payload's own measure may measure another batch meanwhile).
    this.measured = batch;
    this.measuredCodec = codec;
    this.measuredBytes = bytes;
    this.measuredJson = json;
    return bytes;
  }

  /**
   * The payload codec a batch of `envelopes` is written compact with, or null when it is written as general entries.
   * Compact when every envelope is a plain tell (no ask, no trace context, first attempt) of a well-typed entity id,
   * shard and generation, and every payload is written binary by the same codec under the first one's wire name.
   */
  private compactCodecOf(envelopes: readonly DirectEnvelope[]): BinaryCodec | null {
    const wire = envelopes[0]!.message;
    if (wire === null || wire === undefined) return null;
    const type = wire.type;
    if (typeof type !== "string" || type.length === 0 || type.length > wireNameMax) return null;
    const codec = this.entry.payloadCodecOf(wire);
    if (codec === null) return null;
    for (let i = 0; i < envelopes.length; i++) {
      const e = envelopes[i]!;
      const m = e.message;
      if (
        e.kind !== "User" ||
        (e.askTimeoutMs !== null && e.askTimeoutMs !== undefined) ||
        (e.traceparent !== null && e.traceparent !== undefined) ||
        e.deliveryAttempt !== 0 ||
        Object.is(e.deliveryAttempt, -0) ||
        typeof e.entityId !== "string" ||
        e.entityId.length === 0 ||
        typeof e.shardId !== "number" ||
        (e.shardId | 0) !== e.shardId ||
        e.shardId < 0 ||
        Object.is(e.shardId, -0) ||
        typeof e.generation !== "number" ||
        typeof e.senderless !== "boolean" ||
        m === null ||
        m === undefined ||
        m.type !== type ||
        (i > 0 && this.entry.payloadCodecOf(m) !== codec)
      ) {
        return null;
      }
    }
    return codec;
  }

  checkText(batch: object): void {
    const envelopes = this.envelopesOf(batch);
    for (let i = 0; i < envelopes.length; i++) this.entry.checkText(envelopes[i]!);
  }

  write(buf: Buffer, at: number, batch: object): number {
    const envelopes = (batch as DirectBatch).envelopes;
    const first = envelopes[0]!;
    buf[at] = envelopes.length >>> 8;
    buf[at + 1] = envelopes.length & 0xff;
    let o = writeText(buf, at + 2, first.entityType);
    o = buf.writeDoubleBE(first.settingsDigest, o);
    o = writeText(buf, o, first.coordinatorUid);
    // Written as it was measured (a batch written without its measure right before is measured now).
    const bound = this.measured === batch ? this.measuredBytes : this.measure(batch);
    const codec = this.measuredCodec;
    const json = this.measuredJson;
    this.measured = null;
    this.measuredCodec = null;
    if (codec === null) {
      buf[o++] = generalForm;
      for (let i = 0; i < envelopes.length; i++) {
        const e = envelopes[i]!;
        // A payload codec with a `json` field writes the text it measured last: this envelope's is measured again
        // here, and the batch never grows past what was measured (a toJSON whose text grows is refused, typed).
        if (json && at + bound - o < 4 + this.entry.measure(e)) throw changedSinceMeasured();
        const end = this.entry.write(buf, o + 4, e);
        buf.writeUInt32BE(end - o - 4, o);
        o = end;
      }
      return o;
    }
    buf[o++] = compactForm;
    const nameBytes = buf.write(first.message!.type, o + 2, "utf8");
    buf[o] = nameBytes >>> 8;
    buf[o + 1] = nameBytes & 0xff;
    o = writeU32(buf, o + 2 + nameBytes, codec.fingerprint);
    for (let i = 0; i < envelopes.length; i++) {
      const e = envelopes[i]!;
      const start = o;
      o = writeId(buf, o + 4, e.entityId);
      o = writeU32(buf, o, e.shardId);
      o = writeF64(buf, o, e.generation);
      buf[o++] = e.senderless ? 1 : 0;
      const payload = e.message!.payload as object;
      if (json && at + bound - o < codec.measure(payload)) throw changedSinceMeasured();
      o = codec.write(buf, o, payload);
      writeU32(buf, start, o - start - 4);
    }
    return o;
  }

  read(buf: Buffer, at: number, end: number, _proto?: object): Record<string, unknown> {
    if (end - at < 2) throw undecodable("truncated envelope count");
    const count = (buf[at]! << 8) | buf[at + 1]!;
    if (count === 0 || count > directBatchMax) throw undecodable(`${count} envelopes (1 to ${directBatchMax})`);
    const reader = { o: at + 2 };
    const entityType = readText(buf, reader, end, "entity type");
    const settingsDigest = readDouble(buf, reader, end, "settings digest");
    const coordinatorUid = readText(buf, reader, end, "coordinator uid");
    let header: DirectHeader;
    try {
      header = directHeader(entityType, settingsDigest, coordinatorUid);
    } catch (error) {
      throw undecodable(`header: ${errorText(error)}`);
    }
    if (end - reader.o < 1) throw undecodable("truncated batch form");
    const form = buf[reader.o]!;
    reader.o++;
    if (form === compactForm) {
      const compact = new ReceivedDirectBatch(header, this.readCompact(buf, reader.o, end, count));
      return compact as unknown as Record<string, unknown>;
    }
    if (form !== generalForm) throw undecodable(`unknown batch form ${form}`);
    const records: DirectBatchRecord[] = new Array(count);
    let o = reader.o;
    for (let i = 0; i < count; i++) {
      if (end - o < 4) throw undecodable(`truncated length of envelope ${i}`);
      const n = buf.readUInt32BE(o);
      o += 4;
      if (n > end - o) throw undecodable(`envelope ${i} runs past the frame`);
      // The entry's own fields as read (untrusted), validated as a single direct envelope's, with the header's.
      const record = this.entry.readRecord(buf, o, o + n);
      try {
        records[i] = checkedBatchRecord(record);
      } catch (error) {
        // Built from the peer's fields: described, never converted with String().
        throw undecodable(`envelope ${i}: ${errorText(error)}`);
      }
      o += n;
    }
    if (o !== end) throw undecodable("trailing bytes after the last envelope");
    return new ReceivedDirectBatch(header, records) as unknown as Record<string, unknown>;
  }

  /**
   * The `count` compact records at `buf[at, end)`: the wire name and fingerprint their payloads share, then per record
   * `[u32 n]` and its n bytes: `[u32 k][entity id: k bytes UTF-8][i32 shard][f64 generation][u8 senderless][payload]`.
   * Each is validated as a single direct envelope's fields are; a payload that does not decode is kept encoded, as the
   * entry codec keeps it.
   */
  private readCompact(buf: Buffer, at: number, end: number, count: number): DirectBatchRecord[] {
    let o = at;
    if (end - o < 2) throw undecodable("truncated wire name");
    const nameBytes = (buf[o]! << 8) | buf[o + 1]!;
    o += 2;
    if (nameBytes === 0 || nameBytes > end - o - 4) throw undecodable(`wire name of ${nameBytes} bytes`);
    const type = readUtf8(buf, o, nameBytes);
    if (type.length > wireNameMax) throw undecodable(`wire name of ${type.length} characters`);
    o += nameBytes;
    const fingerprint = readU32(buf, o);
    o += 4;
    const records: DirectBatchRecord[] = new Array(count);
    for (let i = 0; i < count; i++) {
      if (end - o < 4) throw undecodable(`truncated length of envelope ${i}`);
      const n = readU32(buf, o);
      o += 4;
      if (n > end - o) throw undecodable(`envelope ${i} runs past the frame`);
      const recordEnd = o + n;
      if (n < 4 + compactFixedBytes - 4) throw undecodable(`envelope ${i} of ${n} bytes`);
      const idBytes = readU32(buf, o);
      o += 4;
      if (idBytes === 0 || idBytes > recordEnd - o - (compactFixedBytes - 4)) {
        throw undecodable(`envelope ${i}: entity id of ${idBytes} bytes`);
      }
      const entityId = readUtf8(buf, o, idBytes);
      o += idBytes;
      const shardId = readU32(buf, o) | 0;
      o += 4;
      if (shardId < 0) throw undecodable(`envelope ${i}: shard ${shardId}`);
      const wireGeneration = readF64(buf, o);
      o += 8;
      let generation: number;
      try {
        generation = directGeneration(wireGeneration);
      } catch (error) {
        throw undecodable(`envelope ${i}: ${errorText(error)}`);
      }
      const flags = buf[o++]!;
      if (flags > 1) throw undecodable(`envelope ${i}: flags ${flags}`);
      const message = this.entry.readBinaryPayload(type, fingerprint, buf, o, recordEnd);
      records[i] = new CompactRecord(entityId, shardId, flags === 1, generation, message);
      o = recordEnd;
    }
    if (o !== end) throw undecodable("trailing bytes after the last envelope");
    return records;
  }

  /**
   * The batch's envelopes, checked as a sender's own value: 1 to {@link directBatchMax} direct envelopes that share
   * what the header carries (a hand-built batch that does not is refused, not miswritten).
   */
  private envelopesOf(batch: object): readonly DirectEnvelope[] {
    const envelopes = (batch as { envelopes?: unknown }).envelopes;
    if (!Array.isArray(envelopes) || envelopes.length === 0 || envelopes.length > directBatchMax) {
      throw refused("envelopes", `an array of 1 to ${directBatchMax} direct envelopes`, envelopes);
    }
    const first: unknown = envelopes[0];
    if (!(first instanceof DirectEnvelope)) throw refused("envelopes[0]", "a direct envelope", first);
    // Checked as it was built (the caller's batches): not again for every frame.
    if (batch instanceof DirectBatch && batch.sameHeader) return envelopes as readonly DirectEnvelope[];
    for (let i = 1; i < envelopes.length; i++) {
      const e: unknown = envelopes[i];
      if (
        !(e instanceof DirectEnvelope) ||
        e.entityType !== first.entityType ||
        e.settingsDigest !== first.settingsDigest ||
        e.coordinatorUid !== first.coordinatorUid
      ) {
        throw refused(`envelopes[${i}]`, "a direct envelope of the first one's type, settings and coordinator", e);
      }
    }
    return envelopes as readonly DirectEnvelope[];
  }
}

/**
 * Whether a header text can be written so that a receiver reads it back as written: at most {@link headerTextMax}
 * bytes of UTF-8 (read refuses more) and no lone surrogate (UTF-8 cannot carry one: it would arrive as U+FFFD).
 */
export function fitsBatchHeader(text: string): boolean {
  return (
    (text.length * 3 <= headerTextMax || Buffer.byteLength(text, "utf8") <= headerTextMax) && isWellFormedText(text)
  );
}

/** Refuses a header text {@link fitsBatchHeader} refuses, naming why. */
function checkHeaderText(text: string, field: string): void {
  if (text.length * 3 > headerTextMax && Buffer.byteLength(text, "utf8") > headerTextMax) {
    throw new MessageEncodeError(
      wireNames.directBatch,
      field,
      `at most ${headerTextMax} bytes of UTF-8`,
      `a string of ${text.length} characters`,
    );
  }
  if (!isWellFormedText(text)) {
    throw new MessageEncodeError(wireNames.directBatch, field, "well-formed UTF-16 (no lone surrogates)", "a string");
  }
}

/** `[u32 BE byte length][UTF-8]`; returns the offset after it (room for 3 bytes per unit was measured). */
function writeText(buf: Buffer, at: number, text: string): number {
  const n = buf.write(text, at + 4, "utf8");
  buf.writeUInt32BE(n, at);
  return at + 4 + n;
}

function readText(buf: Buffer, reader: { o: number }, end: number, what: string): string {
  if (end - reader.o < 4) throw undecodable(`truncated ${what}`);
  const n = buf.readUInt32BE(reader.o);
  if (n > headerTextMax || n > end - reader.o - 4) throw undecodable(`${what} of ${n} bytes`);
  const text = readUtf8(buf, reader.o + 4, n);
  reader.o += 4 + n;
  return text;
}

function readDouble(buf: Buffer, reader: { o: number }, end: number, what: string): number {
  if (end - reader.o < 8) throw undecodable(`truncated ${what}`);
  const value = buf.readDoubleBE(reader.o);
  reader.o += 8;
  return value;
}

/** A batch whose payloads' texts grew between its measure and its write (a toJSON that is not a pure function). */
function changedSinceMeasured(): MessageEncodeError {
  return new MessageEncodeError(
    wireNames.directBatch,
    "envelopes[].message",
    "payloads whose JSON fields serialize alike when measured and when written",
    "a text that grew between the two",
  );
}

function refused(field: string, expected: string, value: unknown): MessageEncodeError {
  const actual = Array.isArray(value) ? `an array of ${value.length}` : value === null ? "null" : typeof value;
  return new MessageEncodeError(wireNames.directBatch, field, expected, actual);
}

function undecodable(detail: string): EnvelopeDecodeError {
  return new EnvelopeDecodeError("undecodable", `${wireNames.directBatch}: ${detail}`, wireNames.directBatch);
}

/** `[f64 big-endian]` at `at` (plain byte stores through the scratch); returns the offset after it. */
function writeF64(buf: Buffer, at: number, value: number): number {
  doubleView[0] = value;
  if (littleEndian) for (let k = 0; k < 8; k++) buf[at + k] = doubleBytes[7 - k]!;
  else for (let k = 0; k < 8; k++) buf[at + k] = doubleBytes[k]!;
  return at + 8;
}

function readF64(buf: Buffer, at: number): number {
  if (littleEndian) for (let k = 0; k < 8; k++) doubleBytes[7 - k] = buf[at + k]!;
  else for (let k = 0; k < 8; k++) doubleBytes[k] = buf[at + k]!;
  return doubleView[0]!;
}

/** `[u32 big-endian]` at `at` (plain byte stores); returns the offset after it. */
function writeU32(buf: Buffer, at: number, value: number): number {
  buf[at] = value >>> 24;
  buf[at + 1] = value >>> 16;
  buf[at + 2] = value >>> 8;
  buf[at + 3] = value;
  return at + 4;
}

function readU32(buf: Buffer, at: number): number {
  return ((buf[at]! << 24) | (buf[at + 1]! << 16) | (buf[at + 2]! << 8) | buf[at + 3]!) >>> 0;
}

/**
 * An entity id as `[u32 byte length][UTF-8]` at `at`; returns the offset after it. Short ASCII is copied inline (a
 * native call costs more below a few dozen characters). An id with a lone surrogate is refused: UTF-8 cannot carry it
 * (it would arrive as U+FFFD, another id), and a repeated send skips the text check, so the write makes it.
 */
function writeId(buf: Buffer, at: number, id: string): number {
  const length = id.length;
  if (length <= 32) {
    let i = 0;
    for (; i < length; i++) {
      const c = id.charCodeAt(i);
      if (c >= 0x80) break;
      buf[at + 4 + i] = c;
    }
    if (i === length) return writeU32(buf, at, length) + length;
  }
  const bytes = buf.write(id, at + 4, "utf8");
  if (bytes !== length && !isWellFormedText(id)) {
    throw new MessageEncodeError(
      wireNames.directBatch,
      "envelopes[].entityId",
      "well-formed UTF-16 (no lone surrogates)",
      "a string",
    );
  }
  return writeU32(buf, at, bytes) + bytes;
}
