/**
 * The fuzzer's side of one TCP connection to (or from) the target: frames in and out, the handshake as client or
 * server (with or without the shared secret), and what the target wrote back (heartbeat replies, acks with a gap,
 * Pongs, asks whose reply actor can then be attacked).
 */
import { connect, type Socket } from "node:net";
import { UniqueAddress } from "../../src/actor/index.ts";
import { FrameKind, PayloadFormat, readUserHeader, userHeaderEnd } from "../../src/remote/envelope.ts";
import { FrameDecoder } from "../../src/remote/frame.ts";
import {
  answerChallenge,
  answerHello,
  type Challenge,
  checkConfirm,
  type HandshakeIdentity,
  type Hello,
  makeHello,
} from "../../src/remote/handshake.ts";
import { controlFrame } from "./frames.ts";

/** What a connection saw from the target. */
export class PeerSocket {
  readonly decoder = new FrameDecoder(64 * 1024 * 1024);
  heartbeatReplies = 0;
  gapAcks = 0;
  readonly pongs: number[] = [];
  /** Local parts (`/temp/…`) of the reply actors of asks the target sent here. */
  readonly askSenders: string[] = [];
  readonly handshakeDocs: Record<string, unknown>[] = [];
  closed = false;
  /** Whether to answer the node's heartbeats. */
  answerHeartbeats = false;
  /** For a connection the node dialled: the fake server's system name and port. */
  server: { system: string; port: number } | null = null;
  private readonly headers = new Map<number, { typeName: string; sender: string | null }>();
  private waiters: (() => void)[] = [];
  readonly whenClosed: Promise<void>;

  constructor(readonly socket: Socket) {
    socket.on("error", () => {});
    this.whenClosed = new Promise((resolve) =>
      socket.on("close", () => {
        this.closed = true;
        resolve();
        this.wake();
      }),
    );
    socket.on("data", (chunk: Buffer) => {
      let frames: Buffer[];
      try {
        frames = this.decoder.push(chunk);
      } catch {
        socket.destroy();
        return;
      }
      for (const f of frames) this.onFrame(f);
      this.wake();
    });
  }

  private wake(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }

  /** Frames received, by kind. */
  readonly received: Record<number, number> = {};
  /** Frames received in total. */
  receivedFrames = 0;

  private onFrame(f: Buffer): void {
    const kind = f[0]!;
    this.received[kind] = (this.received[kind] ?? 0) + 1;
    this.receivedFrames++;
    if (kind === FrameKind.heartbeatReply) this.heartbeatReplies++;
    else if (kind === FrameKind.heartbeat) {
      // Answered only where the node would otherwise time the connection out (it dialled this side): an answer is
      // a frame the node counts, at a moment the batch accounting cannot see.
      if (this.answerHeartbeats) this.write(controlFrame(FrameKind.heartbeatReply, Buffer.from("{}")));
    } else if (kind === FrameKind.handshake) {
      try {
        this.handshakeDocs.push(JSON.parse(f.toString("utf8", 1)) as Record<string, unknown>);
      } catch {
        this.handshakeDocs.push({});
      }
    } else if (kind === FrameKind.ack) {
      try {
        if ((JSON.parse(f.toString("utf8", 1)) as { gap?: unknown }).gap === true) this.gapAcks++;
      } catch {}
    } else if (kind === FrameKind.user || kind === FrameKind.userCompressed) {
      let typeName: string;
      let sender: string | null;
      let at: number;
      if (kind === FrameKind.user) {
        at = userHeaderEnd(f);
        const h = readUserHeader(f);
        typeName = h.typeName;
        sender = h.sender;
        if (h.headerId !== 0) this.headers.set(h.headerId, { typeName, sender });
        if (h.format !== PayloadFormat.json) return;
      } else {
        const entry = this.headers.get((f[1]! << 8) | f[2]!);
        if (entry === undefined) return;
        ({ typeName, sender } = entry);
        at = 3;
      }
      if (typeName === "test.pong") {
        const n = (JSON.parse(f.toString("utf8", at)) as { n: number }).n;
        this.pongs.push(n);
      } else if (typeName === "test.ping" && sender !== null) {
        const slash = sender.indexOf("/temp/");
        if (slash > 0) this.askSenders.push(sender.slice(slash));
      }
    }
  }

  /** Resolves when `condition` holds or the socket closed; rejects after `timeoutMs`. */
  async until(condition: () => boolean, timeoutMs: number, what: string): Promise<void> {
    const started = Date.now();
    while (!condition() && !this.closed) {
      const left = timeoutMs - (Date.now() - started);
      if (left <= 0) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.min(left, 250));
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  write(bytes: Buffer): void {
    if (!this.closed && !this.socket.destroyed) this.socket.write(bytes);
  }

  /** The next handshake document, or null when the socket closed first. */
  async nextHandshake(timeoutMs: number): Promise<Record<string, unknown> | null> {
    await this.until(() => this.handshakeDocs.length > 0, timeoutMs, "a handshake frame");
    return this.handshakeDocs.shift() ?? null;
  }

  destroy(): void {
    this.socket.destroy();
  }
}

/** Opens a raw connection to `host:port`. */
export async function openPeer(host: string, port: number): Promise<PeerSocket> {
  const socket = connect({ host, port });
  const peer = new PeerSocket(socket);
  await new Promise<void>((resolve, reject) => {
    socket.once("connect", () => resolve());
    socket.once("close", () => reject(new Error(`could not connect to ${host}:${port}`)));
  });
  return peer;
}

/**
 * A fuzzer identity `raw@<host>:<port>#<uid>`: a loopback host (127.0.0.1 unless given) and a port nothing listens on,
 * so the node cannot reach what it claims. Successive connections take distinct hosts, so none looks like a new
 * incarnation of an earlier one (whose connection may not yet count as gone).
 */
export function fuzzIdentity(port: number, uid: string, host = "127.0.0.1"): HandshakeIdentity {
  return {
    system: "raw",
    cluster: "",
    uniqueAddress: UniqueAddress.parse(`movie.tcp://raw@${host}:${port}#${uid}`),
  };
}

/** Completes a valid client handshake with `system` on `peer`; throws when refused. */
export async function clientHandshake(
  peer: PeerSocket,
  identity: HandshakeIdentity,
  system: string,
  secret: string | null,
): Promise<void> {
  const hello = makeHello(identity, system, `n${Math.floor(Math.random() * 1e9)}`);
  peer.write(controlFrame(FrameKind.handshake, Buffer.from(JSON.stringify(hello))));
  const challenge = await peer.nextHandshake(5000);
  if (challenge === null) throw new Error("closed before the challenge");
  const confirm = answerChallenge(identity, secret, system, hello, challenge);
  if (!confirm.ok) throw confirm.error;
  peer.write(controlFrame(FrameKind.handshake, Buffer.from(JSON.stringify(confirm.next))));
  const accepted = await peer.nextHandshake(5000);
  if (accepted?.step !== "accepted") throw new Error(`handshake refused: ${JSON.stringify(accepted)}`);
}

/**
 * Server side of a valid handshake up to the challenge: checks the client's hello and returns the challenge to send
 * (null when the hello is not valid).
 */
export function serverChallenge(
  identity: HandshakeIdentity,
  secret: string | null,
  hello: Record<string, unknown>,
): { challenge: Challenge; hello: Hello } | null {
  const result = answerHello(identity, secret, hello, `s${Math.floor(Math.random() * 1e9)}`);
  return result.ok ? { challenge: result.next, hello: hello as unknown as Hello } : null;
}

/** Whether the client's confirm is valid for `challenge`. */
export function confirmValid(
  identity: HandshakeIdentity,
  secret: string | null,
  hello: Hello,
  challenge: Challenge,
  confirm: Record<string, unknown>,
): boolean {
  return checkConfirm(identity, secret, hello, challenge, confirm).ok;
}
