// The remote ceiling shared by the benchmarks: length-prefixed frames carrying Movie's own envelope bytes over a
// plain socket, with no actor runtime in the way. A sink counts frames and acknowledges every `ackEvery`; an echo
// sends every frame straight back. Loopback only; every listener binds port 0.
import { connect, createServer, type Server, type Socket } from "node:net";
import { RealScheduler } from "../../src/actor/index.ts";
import {
  compressedHeaderBytes,
  FrameKind,
  PayloadFormat,
  userHeaderBytesBound,
  writeCompressedHeader,
  writeUserHeader,
} from "../../src/remote/envelope.ts";
import { FrameDecoder, type MessageRegistration } from "../../src/remote/index.ts";

/** The wall clock of every benchmark measurement (ms). */
export const clock = new RealScheduler();

/** The 64-byte payload of the standard lane. */
export const payloadText = "x".repeat(64);

/**
 * The exact bytes (length prefix included) Movie writes for one user message of a registered class: with `headerId`
 * above 0 the header-compressed frame (`[8][id][payload]`, what every tell after the first carries), else the header
 * written out with id 0 (what an ask with its one-off reply actor carries). The payload is the class's binary codec
 * when it declared fields, else its JSON.
 */
export function envelopeFrame(
  registration: MessageRegistration,
  message: object,
  header: { headerId: number; recipient: string; sender: string; senderUid: string },
): Buffer {
  const recipientBytes = Buffer.from(header.recipient);
  const codec = registration.codec;
  const json = codec === null ? JSON.stringify(message) : "";
  const payloadBound = codec === null ? 3 * json.length : codec.measure(message);
  const buf = Buffer.alloc(
    userHeaderBytesBound(recipientBytes, header.sender, header.senderUid, registration.name) + payloadBound,
  );
  let o = 4;
  if (header.headerId > 0) {
    o = writeCompressedHeader(buf, o, header.headerId);
  } else {
    o = writeUserHeader(
      buf,
      o,
      FrameKind.user,
      0,
      recipientBytes,
      header.sender,
      header.senderUid,
      registration.name,
      codec === null ? PayloadFormat.json : PayloadFormat.binary,
      codec === null ? 0 : codec.fingerprint,
    );
  }
  o = codec === null ? o + buf.write(json, o, "utf8") : codec.write(buf, o, message);
  buf.writeUInt32BE(o - 4, 0);
  return Buffer.from(buf.subarray(0, o));
}

/**
 * A sink that counts frames and writes the running count (u32 BE) every `ackEvery` frames. With `parse`, it also
 * parses each payload as JSON, the serialization floor any JSON wire format pays.
 */
export function rawSinkServer(parse: boolean, ackEvery: number): Server {
  return createServer((socket) => {
    socket.setNoDelay(true);
    const decoder = new FrameDecoder();
    let count = 0;
    socket.on("data", (chunk: Buffer) => {
      for (const frame of decoder.push(chunk)) {
        if (parse) JSON.parse(frame.toString("utf8", compressedHeaderBytes));
        if (++count % ackEvery === 0) {
          const out = Buffer.allocUnsafe(4);
          out.writeUInt32BE(count);
          socket.write(out);
        }
      }
    });
  });
}

/** An echo that sends every frame straight back (the raw round trip). */
export function rawEchoServer(): Server {
  return createServer((socket) => {
    socket.setNoDelay(true);
    const decoder = new FrameDecoder();
    socket.on("data", (chunk: Buffer) => {
      const frames = decoder.push(chunk);
      if (frames.length === 0) return;
      const out: Buffer[] = [];
      for (const frame of frames) {
        const header = Buffer.allocUnsafe(4);
        header.writeUInt32BE(frame.length);
        out.push(header, Buffer.from(frame));
      }
      socket.write(Buffer.concat(out));
    });
  });
}

/** Starts `server` on an ephemeral loopback port and returns the port. */
export async function listenLoopback(server: Server): Promise<number> {
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return (server.address() as { port: number }).port;
}

/** A connected loopback socket with Nagle off. */
export async function openSocket(port: number): Promise<Socket> {
  const socket = connect({ host: "127.0.0.1", port });
  socket.setNoDelay(true);
  await new Promise<void>((r) => socket.once("connect", () => r()));
  return socket;
}

/**
 * Raw ceiling for tells (msg/s): `count` frames packed into 64 KiB writes to a {@link rawSinkServer}, respecting
 * socket backpressure, until the sink acknowledged all. With `json`, every frame is `header` plus a freshly built
 * payload `json(seq)` (the JSON floor) instead of `frame`.
 */
export async function rawTell(
  port: number,
  frame: Buffer,
  count: number,
  json: { header: Buffer; payload: (seq: number) => string } | null = null,
): Promise<number> {
  const socket = await openSocket(port);
  let acked = 0;
  let waiter: (() => void) | null = null;
  let pendingAck = Buffer.alloc(0);
  socket.on("data", (chunk: Buffer) => {
    pendingAck = Buffer.concat([pendingAck, chunk]);
    while (pendingAck.length >= 4) {
      acked = pendingAck.readUInt32BE(0);
      pendingAck = pendingAck.subarray(4);
    }
    waiter?.();
  });
  // Bytes one frame may take: the JSON variant's are built per message, so bound them (UTF-8: 3 bytes per unit).
  const unit = json === null ? frame.length : 4 + json.header.length + 3 * json.payload(count).length;
  const perChunk = Math.max(1, Math.floor((64 * 1024) / unit));
  // The ceiling's frames are all the same bytes, so one prebuilt chunk is written again and again: the sender spends
  // nothing per message but its share of the socket writes (the strongest raw sender there is; the socket only ever
  // reads the chunk, so queueing it many times is safe).
  const prebuilt = json === null ? Buffer.concat(Array.from({ length: perChunk }, () => frame)) : null;
  const started = clock.now();
  let sent = 0;
  while (sent < count) {
    const n = Math.min(perChunk, count - sent);
    let out: Buffer;
    if (json === null) {
      out = (prebuilt as Buffer).subarray(0, n * unit);
    } else {
      const chunk = Buffer.allocUnsafe(n * unit + 1024);
      let o = 0;
      for (let i = 0; i < n; i++) {
        const at = o;
        o += 4;
        o += json.header.copy(chunk, o);
        o += chunk.write(json.payload(sent + i), o, "utf8");
        chunk.writeUInt32BE(o - at - 4, at);
      }
      out = chunk.subarray(0, o);
    }
    sent += n;
    if (!socket.write(out)) await new Promise<void>((r) => socket.once("drain", () => r()));
  }
  while (acked < count) await new Promise<void>((r) => (waiter = r));
  const elapsedMs = clock.now() - started;
  socket.destroy();
  return (count / elapsedMs) * 1000;
}

/** One socket to a {@link rawEchoServer}: {@link roundTrip} sends a frame and waits for it to come back. */
export class RawRoundTripper {
  private readonly decoder = new FrameDecoder();
  private resolve: (() => void) | null = null;

  private constructor(private readonly socket: Socket) {
    socket.on("data", (chunk: Buffer) => {
      if (this.decoder.push(chunk).length > 0) this.resolve?.();
    });
  }

  static async open(port: number): Promise<RawRoundTripper> {
    return new RawRoundTripper(await openSocket(port));
  }

  /** One frame out, the same frame back; ms. */
  async roundTrip(frame: Buffer): Promise<number> {
    const t0 = clock.now();
    const done = new Promise<void>((r) => (this.resolve = r));
    this.socket.write(frame);
    await done;
    return clock.now() - t0;
  }

  close(): void {
    this.socket.destroy();
  }
}

/** Raw round trips to a {@link rawEchoServer}: one frame out, the same frame back, in series. Sorted ms. */
export async function rawRoundTrips(port: number, frame: Buffer, count: number): Promise<number[]> {
  const raw = await RawRoundTripper.open(port);
  const latencies: number[] = [];
  for (let i = 0; i < count; i++) latencies.push(await raw.roundTrip(frame));
  raw.close();
  return latencies.sort((x, y) => x - y);
}

/** The `p`th percentile of ascending `sorted` (nearest rank, NaN when empty). */
export function pct(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}
