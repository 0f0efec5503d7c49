import { errorText, isWellFormedText } from "../../actor/untrusted.ts";
import { EnvelopeDecodeError, MessageEncodeError, type MessageRegistry } from "../../remote/index.ts";
import {
  checkedBatchRecord,
  DirectBatch,
  type DirectBatchRecord,
  DirectEnvelope,
  type DirectHeader,
  directBatchMax,
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
}

/** Whether `codec` reads records ({@link BatchEntryCodec}), as the nesting codec does. */
export function isBatchEntryCodec(codec: BinaryCodec | null): codec is BatchEntryCodec {
  return codec !== null && typeof (codec as Partial<BatchEntryCodec>).readRecord === "function";
}

/** Longest entity type name or coordinator uid a batch header may carry, in bytes. */
const headerTextMax = 4_096;

/**
 * The binary codec of {@link DirectBatch} (docs/protocol.md §8.8 "Batches"). What every envelope of a batch shares is
 * written once, in a header; the rest per envelope. Every number is big-endian:
 *
 * `[u16 count 1..256][u32 a][entityType: a bytes UTF-8][f64 settingsDigest][u32 b][coordinatorUid: b bytes UTF-8]`
 * (`a` and `b` at most 4,096), then per envelope `[u32 n][n bytes]` in the batch entry's layout
 * (`directBatchEntryLayout`, remoting's nesting codec: the nested message first, `[u32 m][u16 name length][name]
 * [u8 format][u32 fingerprint, binary only][payload]`, then the entry's fields: kind, entity id, shard, ask timeout,
 * senderless flag, delivery attempt, trace context, generation, in the compiled codec's encoding).
 *
 * The header is validated once ({@link directHeader}), each entry's own fields as a single direct envelope's are
 * ({@link DirectEnvelope.fromBatchRecord}): together exactly the checks a single direct envelope passes. One malformed
 * envelope refuses the whole frame, as a malformed single one refuses its own.
 */
export class DirectBatchCodec implements BinaryCodec {
  readonly fields = [{ name: "envelopes", type: "json" as const, optional: false }];
  /** The entry layout's fingerprint, marked: a receiver with another entry layout refuses the batch too. */
  readonly fingerprint: number;

  constructor(
    /** The nesting codec of a batch entry (registered as `wireNames.directBatchEntry`). */
    private readonly entry: BatchEntryCodec,
  ) {
    this.fingerprint = (entry.fingerprint ^ 0x6261_7432) >>> 0;
  }

  measure(batch: object): number {
    const envelopes = this.envelopesOf(batch);
    const first = envelopes[0]!;
    // Checked here, not in checkText: a repeated send skips checkText, and the header is not written by a codec that
    // finds a lone surrogate. A header the receiver would refuse (read below) is refused at send instead, so the
    // shell writes the envelopes one by one, which carry any entity type a single direct envelope carries.
    checkHeaderText(first.entityType, "envelopes[0].entityType");
    checkHeaderText(first.coordinatorUid, "envelopes[0].coordinatorUid");
    let bytes = 2 + 4 + 3 * first.entityType.length + 8 + 4 + 3 * first.coordinatorUid.length;
    for (let i = 0; i < envelopes.length; i++) bytes += 4 + this.entry.measure(envelopes[i]!);
    return bytes;
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
    for (let i = 0; i < envelopes.length; i++) {
      const end = this.entry.write(buf, o + 4, envelopes[i]!);
      buf.writeUInt32BE(end - o - 4, o);
      o = end;
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
  const text = buf.toString("utf8", reader.o + 4, reader.o + 4 + n);
  reader.o += 4 + n;
  return text;
}

function readDouble(buf: Buffer, reader: { o: number }, end: number, what: string): number {
  if (end - reader.o < 8) throw undecodable(`truncated ${what}`);
  const value = buf.readDoubleBE(reader.o);
  reader.o += 8;
  return value;
}

function refused(field: string, expected: string, value: unknown): MessageEncodeError {
  const actual = Array.isArray(value) ? `an array of ${value.length}` : value === null ? "null" : typeof value;
  return new MessageEncodeError(wireNames.directBatch, field, expected, actual);
}

function undecodable(detail: string): EnvelopeDecodeError {
  return new EnvelopeDecodeError("undecodable", `${wireNames.directBatch}: ${detail}`, wireNames.directBatch);
}
