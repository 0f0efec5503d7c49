import { EnvelopeDecodeError } from "./errors.ts";
import { frameHeaderBytes } from "./frame.ts";
import { bytesNestTooDeep, jsonNestingMax } from "./json-nesting.ts";

/**
 * The first payload byte of every frame says what it carries. User envelopes and ask failures have a binary header
 * (so routing needs no JSON) followed by the payload (binary for classes that declared `fields`, else the message's
 * own JSON); control frames are small JSON documents.
 */
export const FrameKind = {
  /** A user message with its header written out: recipient, sender, type name, payload format; then the payload. */
  user: 1,
  /** "Your ask failed": recipient is the asker's reply actor, payload `{ remoteClass, message }` (JSON). */
  askFailure: 2,
  /** A sequenced system message (JSON). */
  system: 3,
  /** A cumulative acknowledgement of system messages (JSON). */
  ack: 4,
  /** A handshake step (JSON). */
  handshake: 5,
  /** Liveness probe and its reply (no body). */
  heartbeat: 6,
  heartbeatReply: 7,
  /** A user message whose header was sent before on this connection: `[8][u16 header id][payload]`. */
  userCompressed: 8,
} as const;

/** The kinds a frame may carry. */
export type FrameKindValue = (typeof FrameKind)[keyof typeof FrameKind];

/** How a user payload is encoded, as the header's format byte says. */
export const PayloadFormat = {
  /** The instance's JSON text. */
  json: 0,
  /** The registered class's binary codec; a 4-byte codec fingerprint follows the format byte. */
  binary: 1,
} as const;

/** The payload formats a header may name. */
export type PayloadFormatValue = (typeof PayloadFormat)[keyof typeof PayloadFormat];

/** Longest path, type name or uid a header can carry, in UTF-8 bytes. */
export const headerStringBytesMax = 0xffff;

/** Bytes before the payload of a {@link FrameKind.userCompressed} frame: kind and header id. */
export const compressedHeaderBytes = 3;

/** Writes the kind and header id of a {@link FrameKind.userCompressed} frame at `at`; returns where its payload starts. */
export function writeCompressedHeader(buf: Buffer, at: number, id: number): number {
  buf[at] = FrameKind.userCompressed;
  buf[at + 1] = id >>> 8;
  buf[at + 2] = id & 0xff;
  return at + compressedHeaderBytes;
}

/** Fills in the 4-byte big-endian length of the frame that starts at `start` and ends at `end` (plain byte stores). */
export function writeFrameLength(buf: Buffer, start: number, end: number): number {
  const length = end - start - frameHeaderBytes;
  buf[start] = length >>> 24;
  buf[start + 1] = length >>> 16;
  buf[start + 2] = length >>> 8;
  buf[start + 3] = length;
  return length;
}

/**
 * Upper bound of the bytes of a written-out user envelope header (length prefix included, payload excluded), from
 * string lengths alone: UTF-8 needs at most 3 bytes per UTF-16 code unit.
 */
export function userHeaderBytesBound(
  recipient: Buffer,
  sender: string | null,
  senderUid: string | null,
  typeName: string,
): number {
  return (
    frameHeaderBytes +
    1 +
    2 +
    2 +
    recipient.length +
    2 +
    3 * (sender?.length ?? 0) +
    1 +
    3 * (senderUid?.length ?? 0) +
    2 +
    3 * typeName.length +
    1 +
    4
  );
}

/** Upper bound of the frame bytes of a user envelope with a JSON payload (see {@link userHeaderBytesBound}). */
export function userEnvelopeBytesBound(
  recipient: Buffer,
  sender: string | null,
  senderUid: string | null,
  typeName: string,
  payload: string,
): number {
  return userHeaderBytesBound(recipient, sender, senderUid, typeName) + 3 * payload.length;
}

/**
 * Writes one framed user envelope with a JSON payload into `buf` at `at` in a single pass (length prefix back-filled)
 * and returns the end offset. `buf` must have {@link userEnvelopeBytesBound} bytes free. The payload is the message's
 * JSON text written as raw bytes, never re-quoted inside another document. `headerId` 0 means "do not remember".
 */
export function writeUserEnvelope(
  buf: Buffer,
  at: number,
  kind: FrameKindValue,
  recipient: Buffer,
  sender: string | null,
  senderUid: string | null,
  typeName: string,
  payload: string,
  headerId = 0,
): number {
  let o = writeUserHeader(
    buf,
    at + frameHeaderBytes,
    kind,
    headerId,
    recipient,
    sender,
    senderUid,
    typeName,
    PayloadFormat.json,
    0,
  );
  o += buf.write(payload, o, "utf8");
  buf.writeUInt32BE(o - at - frameHeaderBytes, at);
  return o;
}

/**
 * Writes the binary header of a user envelope (no length prefix) at `at`; returns its end:
 * `[kind][u16 header id][u16 n][recipient][u16 n][sender][u8 n][sender uid][u16 n][type][u8 format][u32 fingerprint]?`
 * (big-endian; the fingerprint only for the binary format). A non-zero `headerId` asks the receiver to remember this
 * header under that id for later {@link FrameKind.userCompressed} frames on the same connection.
 */
export function writeUserHeader(
  buf: Buffer,
  at: number,
  kind: FrameKindValue,
  headerId: number,
  recipient: Buffer,
  sender: string | null,
  senderUid: string | null,
  typeName: string,
  format: PayloadFormatValue,
  fingerprint: number,
): number {
  let o = at;
  buf[o++] = kind;
  buf.writeUInt16BE(headerId, o);
  o += 2;
  buf.writeUInt16BE(recipient.length, o);
  o += 2;
  o += recipient.copy(buf, o);
  o = writeString16(buf, o, sender ?? "");
  const uidBytes = senderUid === null ? 0 : buf.write(senderUid, o + 1, "latin1");
  buf[o] = uidBytes;
  o += 1 + uidBytes;
  o = writeString16(buf, o, typeName);
  buf[o++] = format;
  if (format === PayloadFormat.binary) {
    buf.writeUInt32BE(fingerprint, o);
    o += 4;
  }
  return o;
}

function writeString16(buf: Buffer, at: number, text: string): number {
  const n = text.length === 0 ? 0 : buf.write(text, at + 2, "utf8");
  if (n > headerStringBytesMax) throw new RangeError(`header string of ${n} bytes is longer than 65535`);
  buf.writeUInt16BE(n, at);
  return at + 2 + n;
}

/**
 * Offset where the payload of a user or ask-failure frame starts (the header is everything before it).
 * @throws EnvelopeDecodeError (reason `undecodable`) for a truncated header or an unknown payload format
 */
export function userHeaderEnd(frame: Buffer): number {
  const end = frame.length;
  let o = 3;
  if (o + 2 > end) throw truncated();
  o += 2 + frame.readUInt16BE(o);
  if (o + 2 > end) throw truncated();
  o += 2 + frame.readUInt16BE(o);
  if (o + 1 > end) throw truncated();
  o += 1 + frame[o]!;
  if (o + 2 > end) throw truncated();
  o += 2 + frame.readUInt16BE(o);
  if (o + 1 > end) throw truncated();
  const format = frame[o++];
  if (format === PayloadFormat.binary) o += 4;
  else if (format !== PayloadFormat.json)
    throw new EnvelopeDecodeError("undecodable", `unknown payload format ${format}`);
  if (o > end) throw truncated();
  return o;
}

/** The fields of a user envelope header (see {@link writeUserHeader}). */
export interface EnvelopeHeader {
  readonly kind: FrameKindValue;
  /** Id under which the receiver remembers this header (0: not remembered). */
  readonly headerId: number;
  /** The recipient's path below the root, e.g. `/user/orders`. */
  readonly recipient: string;
  /** The sender's full path, or null when the message had no sender. */
  readonly sender: string | null;
  /** The node uid the sender's path belongs to, when the encoder knew it. */
  readonly senderUid: string | null;
  readonly typeName: string;
  readonly format: PayloadFormatValue;
  /** The sender's codec fingerprint for the binary format, else 0. */
  readonly fingerprint: number;
}

/**
 * Decodes a header validated by {@link userHeaderEnd}.
 * @throws EnvelopeDecodeError (reason `undecodable`) for a recipient that is not a path
 */
export function readUserHeader(frame: Buffer): EnvelopeHeader {
  const kind = frame[0] as FrameKindValue;
  const headerId = frame.readUInt16BE(1);
  let o = 3;
  const recipientBytes = frame.readUInt16BE(o);
  o += 2;
  const recipient = frame.toString("utf8", o, o + recipientBytes);
  o += recipientBytes;
  const senderBytes = frame.readUInt16BE(o);
  o += 2;
  const sender = senderBytes === 0 ? null : frame.toString("utf8", o, o + senderBytes);
  o += senderBytes;
  const uidBytes = frame[o]!;
  o += 1;
  const senderUid = uidBytes === 0 ? null : frame.toString("latin1", o, o + uidBytes);
  o += uidBytes;
  const typeBytes = frame.readUInt16BE(o);
  o += 2;
  const typeName = frame.toString("utf8", o, o + typeBytes);
  o += typeBytes;
  const format = frame[o++] as PayloadFormatValue;
  const fingerprint = format === PayloadFormat.binary ? frame.readUInt32BE(o) : 0;
  if (recipient.length === 0 || recipient[0] !== "/") throw new EnvelopeDecodeError("undecodable", "bad recipient");
  return { kind, headerId, recipient, sender, senderUid, typeName, format, fingerprint };
}

/**
 * Parses the payload JSON of `frame[at, end)` (from the header end to the frame's end unless `end` says otherwise).
 * @throws EnvelopeDecodeError (reason `undecodable`) for invalid JSON
 */
export function readPayload(frame: Buffer, at: number, typeName: string, end = frame.length): unknown {
  if (bytesNestTooDeep(frame, at, end)) {
    throw new EnvelopeDecodeError("undecodable", `payload nests deeper than ${jsonNestingMax} levels`, typeName);
  }
  try {
    return JSON.parse(frame.toString("utf8", at, end));
  } catch (error) {
    throw new EnvelopeDecodeError(
      "undecodable",
      `payload of "${typeName}" is not JSON: ${(error as Error).message}`,
      typeName,
    );
  }
}

/** A decoded user envelope or ask failure with a JSON payload (parsed once, not yet rebuilt into a class). */
export interface DecodedEnvelope extends EnvelopeHeader {
  readonly payload: unknown;
}

/**
 * Parses a user or ask-failure frame with a JSON payload (the bytes after the length prefix).
 * @throws EnvelopeDecodeError (reason `undecodable`) for a truncated header, a binary payload or invalid JSON
 */
export function readUserEnvelope(frame: Buffer): DecodedEnvelope {
  const at = userHeaderEnd(frame);
  const header = readUserHeader(frame);
  if (header.format !== PayloadFormat.json) throw new EnvelopeDecodeError("undecodable", "expected a JSON payload");
  return { ...header, payload: readPayload(frame, at, header.typeName) };
}

function truncated(): EnvelopeDecodeError {
  return new EnvelopeDecodeError("undecodable", "truncated envelope header");
}

/** Frames a control document: `[length][kind][JSON]`. */
export function encodeControlFrame(kind: FrameKindValue, body: unknown): Buffer {
  const text = body === undefined ? "" : JSON.stringify(body);
  const bytes = Buffer.byteLength(text);
  const out = Buffer.allocUnsafe(frameHeaderBytes + 1 + bytes);
  out.writeUInt32BE(1 + bytes, 0);
  out[frameHeaderBytes] = kind;
  out.write(text, frameHeaderBytes + 1, "utf8");
  return out;
}

/**
 * Parses the JSON of a control frame payload.
 * @throws EnvelopeDecodeError (reason `undecodable`) for invalid JSON or a non-object
 */
export function readControlFrame(frame: Buffer): Record<string, unknown> {
  if (bytesNestTooDeep(frame, 1, frame.length)) {
    throw new EnvelopeDecodeError("undecodable", `control frame nests deeper than ${jsonNestingMax} levels`);
  }
  let value: unknown;
  try {
    value = JSON.parse(frame.toString("utf8", 1));
  } catch {
    throw new EnvelopeDecodeError("undecodable", "control frame is not valid JSON");
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new EnvelopeDecodeError("undecodable", "control frame is not a JSON object");
  }
  return value as Record<string, unknown>;
}
