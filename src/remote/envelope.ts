import { EnvelopeDecodeError } from "./errors.ts";
import { frameHeaderBytes } from "./frame.ts";

/**
 * The first payload byte of every frame says what it carries. User envelopes and ask failures have a binary header
 * (so routing needs no JSON) followed by the message's own JSON; control frames are small JSON documents.
 */
export const FrameKind = {
  /** A user message: recipient, sender, type name, payload. */
  user: 1,
  /** "Your ask failed": recipient is the asker's reply actor, payload `{ remoteClass, message }`. */
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
} as const;

/** The kinds a frame may carry. */
export type FrameKindValue = (typeof FrameKind)[keyof typeof FrameKind];

/** Longest path, type name or uid a header can carry, in UTF-8 bytes. */
export const headerStringBytesMax = 0xffff;

/**
 * Upper bound of the frame bytes (header included) of a user envelope, from string lengths alone: UTF-8 needs at
 * most 3 bytes per UTF-16 code unit.
 */
export function userEnvelopeBytesBound(
  recipient: Buffer,
  sender: string | null,
  senderUid: string | null,
  typeName: string,
  payload: string,
): number {
  return (
    frameHeaderBytes +
    1 +
    2 +
    recipient.length +
    2 +
    3 * (sender?.length ?? 0) +
    1 +
    3 * (senderUid?.length ?? 0) +
    2 +
    3 * typeName.length +
    3 * payload.length
  );
}

/**
 * Writes one framed user envelope into `buf` at `at` in a single pass (length prefix back-filled) and returns the end
 * offset. `buf` must have {@link userEnvelopeBytesBound} bytes free. The payload is the message's JSON text written
 * as raw bytes, never re-quoted inside another document.
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
): number {
  let o = writeUserHeader(buf, at + frameHeaderBytes, kind, recipient, sender, senderUid, typeName);
  o += buf.write(payload, o, "utf8");
  buf.writeUInt32BE(o - at - frameHeaderBytes, at);
  return o;
}

/** Writes the binary header of a user envelope (no length prefix) at `at`; returns its end. */
export function writeUserHeader(
  buf: Buffer,
  at: number,
  kind: FrameKindValue,
  recipient: Buffer,
  sender: string | null,
  senderUid: string | null,
  typeName: string,
): number {
  let o = at;
  buf[o++] = kind;
  buf.writeUInt16BE(recipient.length, o);
  o += 2;
  o += recipient.copy(buf, o);
  o = writeString16(buf, o, sender ?? "");
  const uidBytes = senderUid === null ? 0 : buf.write(senderUid, o + 1, "latin1");
  buf[o] = uidBytes;
  o += 1 + uidBytes;
  return writeString16(buf, o, typeName);
}

function writeString16(buf: Buffer, at: number, text: string): number {
  const n = text.length === 0 ? 0 : buf.write(text, at + 2, "utf8");
  if (n > headerStringBytesMax) throw new RangeError(`header string of ${n} bytes is longer than 65535`);
  buf.writeUInt16BE(n, at);
  return at + 2 + n;
}

/** A decoded user envelope or ask failure (the payload parsed once, not yet rebuilt into a class). */
export interface DecodedEnvelope {
  readonly kind: FrameKindValue;
  /** The recipient's path below the root, e.g. `/user/orders`. */
  readonly recipient: string;
  /** The sender's full path, or null when the message had no sender. */
  readonly sender: string | null;
  /** The node uid the sender's path belongs to, when the encoder knew it. */
  readonly senderUid: string | null;
  readonly typeName: string;
  readonly payload: unknown;
}

/**
 * Offset where the payload of a user or ask-failure frame starts (the header is everything before it). No strings are
 * decoded, so a receiver can compare the header bytes with the previous frame's and reuse what it decoded then.
 * @throws EnvelopeDecodeError (reason `undecodable`) for a truncated header
 */
export function userHeaderEnd(frame: Buffer): number {
  const end = frame.length;
  let o = 1;
  if (o + 2 > end) throw truncated();
  o += 2 + frame.readUInt16BE(o);
  if (o + 2 > end) throw truncated();
  o += 2 + frame.readUInt16BE(o);
  if (o + 1 > end) throw truncated();
  o += 1 + frame[o]!;
  if (o + 2 > end) throw truncated();
  o += 2 + frame.readUInt16BE(o);
  if (o > end) throw truncated();
  return o;
}

/** The strings of a user envelope header (see {@link userHeaderEnd}). */
export interface EnvelopeHeader {
  readonly kind: FrameKindValue;
  /** The recipient's path below the root, e.g. `/user/orders`. */
  readonly recipient: string;
  /** The sender's full path, or null when the message had no sender. */
  readonly sender: string | null;
  /** The node uid the sender's path belongs to, when the encoder knew it. */
  readonly senderUid: string | null;
  readonly typeName: string;
}

/**
 * Decodes the header strings of a frame whose header was validated by {@link userHeaderEnd}.
 * @throws EnvelopeDecodeError (reason `undecodable`) for a recipient that is not a path
 */
export function readUserHeader(frame: Buffer): EnvelopeHeader {
  const kind = frame[0] as FrameKindValue;
  let o = 1;
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
  if (recipient.length === 0 || recipient[0] !== "/") throw new EnvelopeDecodeError("undecodable", "bad recipient");
  return { kind, recipient, sender, senderUid, typeName };
}

/**
 * Parses the payload JSON of a frame from `at` (the header end).
 * @throws EnvelopeDecodeError (reason `undecodable`) for invalid JSON
 */
export function readPayload(frame: Buffer, at: number, typeName: string): unknown {
  try {
    return JSON.parse(frame.toString("utf8", at, frame.length));
  } catch {
    throw new EnvelopeDecodeError("undecodable", `payload of "${typeName}" is not valid JSON`);
  }
}

/** A decoded user envelope or ask failure (the payload parsed once, not yet rebuilt into a class). */
export interface DecodedEnvelope extends EnvelopeHeader {
  readonly payload: unknown;
}

/**
 * Parses a user or ask-failure frame payload (the bytes after the length prefix).
 * @throws EnvelopeDecodeError (reason `undecodable`) for a truncated header or invalid JSON
 */
export function readUserEnvelope(frame: Buffer): DecodedEnvelope {
  const at = userHeaderEnd(frame);
  const header = readUserHeader(frame);
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
