import { FramingError } from "./errors.ts";

/** Bytes of the big-endian length that precedes every frame; the length counts the payload only. */
export const frameHeaderBytes = 4;

/** Default largest frame payload (4 MiB, issue 4); the original allows 16 MiB (docs/protocol.md §3.1). */
export const defaultMaxFrameBytes = 4 * 1024 * 1024;

/**
 * Frames `payload` as `[4-byte big-endian length][payload]`.
 * @throws FramingError for an empty payload or one above `maxFrameBytes`
 */
export function encodeFrame(payload: Uint8Array, maxFrameBytes = defaultMaxFrameBytes): Buffer {
  if (payload.length === 0 || payload.length > maxFrameBytes) throw new FramingError(payload.length, maxFrameBytes);
  const out = Buffer.allocUnsafe(frameHeaderBytes + payload.length);
  out.writeUInt32BE(payload.length, 0);
  out.set(payload, frameHeaderBytes);
  return out;
}

/**
 * Splits a byte stream into frame payloads. TCP may cut anywhere, so partial bytes are kept across chunks; a large
 * frame arriving in many chunks is joined once, when it is complete (no quadratic re-copying).
 * After a {@link FramingError} the decoder refuses further input: the stream cannot be trusted any more.
 */
export class FrameDecoder {
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  /** Header plus payload bytes of the frame at the head of `pending`, or -1 while its header is incomplete. */
  private neededBytes = -1;
  private failed: FramingError | null = null;

  /**
   * Largest frame payload accepted from now on, in bytes; a connection starts with the handshake's small cap and
   * raises it once authenticated. A lower value applies to the length of the next frame header read.
   */
  maxFrameBytes: number;

  constructor(maxFrameBytes = defaultMaxFrameBytes) {
    this.maxFrameBytes = maxFrameBytes;
  }

  /** Bytes held back waiting for the rest of a frame. */
  get bufferedBytes(): number {
    return this.pendingBytes;
  }

  /**
   * Feeds `chunk` and returns the complete frame payloads in it, in order (views into the received bytes, valid until
   * the next call).
   * @throws FramingError for a zero length or a length above `maxFrameBytes`
   */
  push(chunk: Buffer): Buffer[] {
    if (this.failed !== null) throw this.failed;
    const frames: Buffer[] = [];
    let buf = chunk;
    if (this.pendingBytes > 0) {
      // Complete the held frame with just the bytes it lacks; the rest of the chunk is parsed in place.
      if (this.neededBytes < 0) {
        const take = Math.min(frameHeaderBytes - this.pendingBytes, buf.length);
        this.pending.push(buf.subarray(0, take));
        this.pendingBytes += take;
        buf = buf.subarray(take);
        if (this.pendingBytes < frameHeaderBytes) return frames;
        const head = Buffer.concat(this.pending, this.pendingBytes);
        this.pending = [head];
        this.neededBytes = frameHeaderBytes + this.readLength(head, 0);
      }
      const take = Math.min(this.neededBytes - this.pendingBytes, buf.length);
      if (take > 0) {
        this.pending.push(buf.subarray(0, take));
        this.pendingBytes += take;
        buf = buf.subarray(take);
      }
      if (this.pendingBytes < this.neededBytes) return frames;
      const whole = Buffer.concat(this.pending, this.pendingBytes);
      frames.push(whole.subarray(frameHeaderBytes));
      this.pending = [];
      this.pendingBytes = 0;
      this.neededBytes = -1;
    }
    let at = 0;
    const end = buf.length;
    while (end - at >= frameHeaderBytes) {
      const length = this.readLength(buf, at);
      const frameEnd = at + frameHeaderBytes + length;
      if (frameEnd > end) {
        this.neededBytes = frameHeaderBytes + length;
        break;
      }
      frames.push(buf.subarray(at + frameHeaderBytes, frameEnd));
      at = frameEnd;
    }
    if (at < end) {
      // Copy the tail so a small remainder does not pin a large receive buffer.
      const rest = Buffer.from(buf.subarray(at, end));
      this.pending.push(rest);
      this.pendingBytes = rest.length;
    }
    return frames;
  }

  private readLength(buf: Buffer, at: number): number {
    const length = buf.readUInt32BE(at);
    if (length === 0 || length > this.maxFrameBytes) {
      this.failed = new FramingError(length, this.maxFrameBytes);
      this.pending = [];
      this.pendingBytes = 0;
      throw this.failed;
    }
    return length;
  }
}
