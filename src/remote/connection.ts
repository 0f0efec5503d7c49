import { randomBytes } from "node:crypto";
import type { Socket } from "node:net";
import type { Cancellable, Scheduler, UniqueAddress } from "../actor/index.ts";
import { errorName, errorText } from "../actor/untrusted.ts";
import { encodeControlFrame, FrameKind, readControlFrame } from "./envelope.ts";
import { ConnectionBoundError, type EnvelopeDecodeError, FramingError, HandshakeError } from "./errors.ts";
import { FrameDecoder } from "./frame.ts";
import type { FrameWriter } from "./frame-writer.ts";
import {
  answerChallenge,
  answerHello,
  type Challenge,
  checkAccepted,
  checkConfirm,
  type HandshakeIdentity,
  type Hello,
  handshakeFrameBytesMax,
  makeHello,
} from "./handshake.ts";
import { certificateMismatch } from "./peer-identity.ts";
import type { ReadGate } from "./read-gate.ts";
import { countInternalError, type RemotingStats } from "./stats.ts";

/** A heartbeat reply written unasked to the peer of a connection whose reading is paused. */
const keepAliveFrame = encodeControlFrame(FrameKind.heartbeatReply, {});

/** Milliseconds a shut-down connection's peer has to read what was queued before the socket is destroyed. */
export const shutdownGraceMs = 500;

/** What a connection tells its owner. */
export interface ConnectionOwner {
  /** The peer passed the handshake; return an error to refuse it anyway (a quarantined incarnation). */
  authenticated(connection: Connection, peer: UniqueAddress): HandshakeError | null;
  /**
   * `frames[from…]` arrived after the handshake (views, valid during the call), in order. The owner handles them in
   * order and stops early once the connection is no longer open.
   */
  frames(connection: Connection, frames: readonly Buffer[], from: number): void;
  /** The socket closed; `opened` says whether the handshake had completed. */
  closed(connection: Connection, opened: boolean): void;
}

/** Fixed inputs of every connection of one node. */
export interface ConnectionContext {
  readonly identity: HandshakeIdentity;
  readonly secret: string | null;
  readonly handshakeTimeoutMs: number;
  readonly maxFrameBytes: number;
  /** Milliseconds without a whole frame after which an inbound connection is closed (the heartbeat timeout). */
  readonly idleTimeoutMs: number;
  /** Milliseconds between idle checks of an inbound connection (the heartbeat interval). */
  readonly idleCheckMs: number;
  readonly scheduler: Scheduler;
  readonly stats: RemotingStats;
  /** Read backpressure of inbound connections, looked at once per received chunk. */
  readonly readGate: ReadGate;
  warn(context: object, message: string): void;
}

/**
 * One TCP (or TLS) socket, either direction: framing, the handshake, then frames for the owner. A framing error or a
 * failed handshake closes the socket (the stream cannot be trusted) and is counted; nothing before a completed
 * handshake ever reaches the owner's frame handler, so it never reaches an actor. Until then frames are capped at
 * `handshakeFrameBytesMax`. Every byte the peer sends is handled under one guard: an unexpected error anywhere below
 * (a bug, or input a check missed) closes this connection and is counted in `rejected.internal`, never thrown out of
 * the socket's listener (which would end the process).
 */
export class Connection {
  private readonly decoder: FrameDecoder;
  private state: "connecting" | "handshaking" | "open" | "closed" = "connecting";
  private timer: Cancellable | null = null;
  private hello: Hello | null = null;
  private challenge: Challenge | null = null;
  private readonly nonce = randomBytes(16).toString("hex");
  /** The authenticated peer once open. */
  peer: UniqueAddress | null = null;
  /** Why the connection closed, if it failed. */
  failure: Error | null = null;
  /** @internal The receive path's header table of this connection: id → what that header decoded to (header-table.ts). */
  readonly inboundHeaders: unknown[] = [];
  /**
   * Scheduler time of the last whole frame received (heartbeats and the idle check watch it). Bytes of a frame still
   * incomplete do not count: a peer that sends half a frame and stalls is as silent as one that sends nothing.
   */
  lastReceivedMs: number;
  /** True while the read gate holds this connection's reading. */
  private readPaused = false;

  constructor(
    readonly socket: Socket,
    readonly role: "client" | "server",
    private readonly context: ConnectionContext,
    private readonly owner: ConnectionOwner,
    readonly writer: FrameWriter,
    /** For a client: the system name the server must run. */
    private readonly expectedSystem: string | null,
  ) {
    this.decoder = new FrameDecoder(Math.min(handshakeFrameBytesMax, context.maxFrameBytes));
    this.lastReceivedMs = context.scheduler.now();
    socket.setNoDelay(true);
    this.timer = context.scheduler.scheduleOnce(context.handshakeTimeoutMs, () => {
      if (this.state === "connecting" || this.state === "handshaking") {
        this.failHandshake(new HandshakeError("timeout", `no handshake within ${context.handshakeTimeoutMs} ms`));
      }
    });
    socket.on("data", (chunk: Buffer) => this.onData(chunk));
    socket.on("error", (error: Error) => {
      if (this.failure === null) this.failure = error;
      // A TLS record that fails its integrity check errors the socket without closing it: the stream cannot be
      // trusted from there on, so close it (for a plain socket the close follows anyway).
      if (this.state === "open" && isTlsError(error)) {
        this.context.stats.integrityFailures++;
        this.context.warn({ peer: this.describePeer(), error }, "closing a TLS connection after a record error");
      }
      this.close(error);
    });
    socket.on("close", () => this.onClose());
    if (role === "server") this.state = "handshaking";
  }

  /** True once the handshake completed and until the socket closes. */
  get isOpen(): boolean {
    return this.state === "open";
  }

  /** Client side: the socket connected; say hello. */
  start(): void {
    if (this.state !== "connecting") return;
    this.state = "handshaking";
    this.hello = makeHello(this.context.identity, this.expectedSystem ?? "", this.nonce);
    this.socket.write(encodeControlFrame(FrameKind.handshake, this.hello));
  }

  /** Closes the socket (idempotent). */
  close(failure?: Error): void {
    if (failure !== undefined && this.failure === null) this.failure = failure;
    if (this.state === "closed") return;
    const opened = this.state === "open";
    this.state = "closed";
    this.timer?.cancel();
    this.timer = null;
    this.socket.destroy();
    this.owner.closed(this, opened);
  }

  /**
   * Hands what is queued to the socket and closes gracefully (FIN after the data). The peer gets
   * {@link shutdownGraceMs} to read it; then the socket is destroyed and the bytes it still holds are dropped, counted
   * in `stats.droppedAtShutdownBytes`. Frames queued before the handshake completed never go out
   * (`stats.droppedAtShutdownFrames`).
   */
  shutdown(): void {
    if (this.state === "closed") return;
    const opened = this.state === "open";
    const stats = this.context.stats;
    if (opened) this.writer.flush();
    else stats.droppedAtShutdownFrames += this.writer.discard();
    this.state = "closed";
    this.timer?.cancel();
    this.timer = null;
    const socket = this.socket;
    socket.end();
    this.context.scheduler.scheduleOnce(shutdownGraceMs, () => {
      if (socket.destroyed) return;
      // A peer that did not read in time: what the socket still buffers is lost with it.
      stats.droppedAtShutdownBytes += socket.writableLength;
      socket.destroy();
    });
    this.owner.closed(this, opened);
  }

  /** The guard around everything the peer's bytes cause (see the class comment). */
  private onData(chunk: Buffer): void {
    try {
      this.receive(chunk);
    } catch (error) {
      this.internalFailure(error);
    }
  }

  /** Closes the connection after an unexpected error while handling its bytes; counts it, logs each kind once. */
  private internalFailure(error: unknown): void {
    try {
      const name = errorName(error);
      const count = countInternalError(this.context.stats, name);
      if (count === 1) {
        this.context.warn(
          { peer: this.describePeer(), role: this.role, errorName: name, error: errorText(error) },
          "closing a connection after an unexpected error while handling its input (counted in rejected.internal; later ones of this kind are only counted)",
        );
      }
      const failure = new Error(`unexpected ${errorText(error)} while handling input`);
      if (this.state === "open" || this.state === "closed") this.close(failure);
      else this.failHandshake(new HandshakeError("malformed", failure.message));
    } catch {
      // The bookkeeping itself failed: still never let the error out of the socket's listener.
      this.socket.destroy();
    }
  }

  private receive(chunk: Buffer): void {
    if (this.state === "closed") return;
    const stats = this.context.stats;
    stats.bytesIn += chunk.length;
    let frames: Buffer[];
    try {
      frames = this.decoder.push(chunk);
    } catch (error) {
      if (error instanceof FramingError) {
        if (error.frameBytes === 0) stats.rejected.framing++;
        else stats.rejected.oversize++;
        if (this.state !== "open") {
          if (error.frameBytes > 0) stats.handshakeOversize++;
          this.failHandshake(
            new HandshakeError(
              "malformed",
              error.frameBytes === 0
                ? error.message
                : `handshake frame of ${error.frameBytes} bytes exceeds ${error.maxFrameBytes}; closed before reading it (a Movie node of this protocol version never sends one that large)`,
            ),
          );
        } else {
          this.context.warn({ peer: this.describePeer(), error }, "closing a connection after a framing error");
          this.close(error);
        }
        return;
      }
      throw error;
    }
    if (frames.length === 0) return;
    stats.framesIn += frames.length;
    this.lastReceivedMs = this.context.scheduler.now();
    for (let i = 0; i < frames.length; i++) {
      if (this.state === "open") {
        // Everything from here on is traffic: the owner takes the rest of the chunk in one call.
        this.owner.frames(this, frames, i);
        // Once per chunk, not per message: a slow node stops reading a fast peer (read-gate.ts), in either direction
        // (a peer this node dialled may write traffic on that connection too).
        this.context.readGate.afterChunk(this);
        return;
      }
      if (this.state === "handshaking") this.onHandshakeFrame(frames[i]!);
      if ((this.state as string) === "closed") return;
    }
  }

  private onHandshakeFrame(frame: Buffer): void {
    if (frame[0] !== FrameKind.handshake) {
      this.failHandshake(new HandshakeError("malformed", `expected a handshake frame, got kind ${frame[0]}`));
      return;
    }
    let doc: Record<string, unknown>;
    try {
      doc = readControlFrame(frame);
    } catch (error) {
      this.failHandshake(new HandshakeError("malformed", (error as EnvelopeDecodeError).message));
      return;
    }
    const { identity, secret } = this.context;
    if (this.role === "server") {
      if (this.hello === null) {
        const result = answerHello(identity, secret, doc, this.nonce);
        if (!result.ok) {
          this.reject(result.reply, result.error);
          return;
        }
        if (this.refuseUncertified(result.peer)) return;
        this.hello = doc as unknown as Hello;
        this.challenge = result.next;
        this.peer = result.peer;
        this.socket.write(encodeControlFrame(FrameKind.handshake, result.next));
        return;
      }
      const checked = checkConfirm(identity, secret, this.hello, this.challenge!, doc);
      if (!checked.ok) {
        this.reject(checked.reply, checked.error);
        return;
      }
      const refused = this.owner.authenticated(this, this.peer!);
      if (refused !== null) {
        this.reject({ step: "reject", reason: refused.reason, detail: refused.message }, refused);
        return;
      }
      this.socket.write(encodeControlFrame(FrameKind.handshake, { step: "accepted" }));
      this.open();
      return;
    }
    // client
    if (this.peer === null) {
      const result = answerChallenge(identity, secret, this.expectedSystem ?? "", this.hello!, doc);
      if (!result.ok) {
        this.reject(result.reply, result.error);
        return;
      }
      if (this.refuseUncertified(result.peer)) return;
      this.peer = result.peer;
      this.socket.write(encodeControlFrame(FrameKind.handshake, result.next));
      return;
    }
    const accepted = checkAccepted(doc);
    if (!accepted.ok) {
      // The server has decided (a refusal carries its reason); nothing to answer.
      this.failHandshake(accepted.error);
      return;
    }
    const refused = this.owner.authenticated(this, this.peer);
    if (refused !== null) {
      this.failHandshake(refused);
      return;
    }
    this.open();
  }

  /** With TLS: refuses (and counts) a peer whose certificate does not name the address it claims. */
  private refuseUncertified(claimed: UniqueAddress): boolean {
    const detail = certificateMismatch(this.socket, claimed.address);
    if (detail === null) return false;
    this.context.stats.identityMismatches++;
    this.reject({ step: "reject", reason: "identity", detail }, new HandshakeError("identity", detail));
    return true;
  }

  private open(): void {
    this.timer?.cancel();
    this.timer = null;
    this.state = "open";
    // Traffic may use the full frame size. A peer sends none before its last handshake frame is answered (a client
    // waits for accepted; a server writes on an inbound connection only in answer to traffic), so no honest frame
    // shares a chunk with the handshake and was measured against the small cap.
    this.decoder.maxFrameBytes = this.context.maxFrameBytes;
    this.context.stats.handshakesOk++;
    this.writer.attach(this.socket);
    if (this.role === "server") this.armIdleCheck();
  }

  /** @internal The read gate stops reading this connection; the peer is kept from timing out meanwhile. */
  pauseReading(): void {
    if (this.state !== "open") return;
    this.readPaused = true;
    this.socket.pause();
  }

  /** @internal True while the read gate holds this connection's reading (its peer's frames wait unread). */
  get isReadPaused(): boolean {
    return this.readPaused;
  }

  /** @internal The read gate lets this connection read again. */
  resumeReading(): void {
    if (!this.readPaused) return;
    this.readPaused = false;
    if (this.state !== "open") return;
    // Its heartbeats waited unread in the socket: the pause was this node's, not the peer's silence.
    this.lastReceivedMs = this.context.scheduler.now();
    this.socket.resume();
  }

  /**
   * Inbound side: the peer's association sends a heartbeat every interval, so a connection without a whole frame for
   * the heartbeat timeout (a silent peer, or one that sent half a frame and stalled) is closed and counted in
   * `stats.idleTimeouts`. The outbound side has the association's heartbeat check, which reads the same
   * {@link lastReceivedMs}.
   */
  private armIdleCheck(): void {
    const { scheduler, idleCheckMs, idleTimeoutMs } = this.context;
    this.timer = scheduler.scheduleOnce(idleCheckMs, () => {
      this.timer = null;
      if (this.state !== "open") return;
      if (this.readPaused) {
        // This node is not reading the peer's heartbeats, so it does not answer them: a reply unasked keeps the
        // peer's association from timing out while the backlog drains.
        this.writer.writeFrame(keepAliveFrame);
        this.armIdleCheck();
        return;
      }
      if (scheduler.now() - this.lastReceivedMs <= idleTimeoutMs) {
        this.armIdleCheck();
        return;
      }
      // Timers run before the event loop polls sockets: after a stall of this process the peer's bytes may be waiting
      // unread. Look again once the loop has polled before calling the peer idle.
      this.timer = scheduler.scheduleOnce(0, () => {
        this.timer = null;
        if (this.state !== "open") return;
        if (this.readPaused || scheduler.now() - this.lastReceivedMs <= idleTimeoutMs) {
          this.armIdleCheck();
          return;
        }
        this.context.stats.idleTimeouts++;
        const peer = this.describePeer();
        const error = new ConnectionBoundError("idle", peer, `no whole frame within ${idleTimeoutMs} ms`);
        this.context.warn({ peer, error }, "closing an idle inbound connection");
        this.close(error);
      });
    });
  }

  /** Sends `reply` (none when the peer's own refusal is being logged) and fails the handshake with `error`. */
  private reject(reply: object | null, error: HandshakeError): void {
    if (reply !== null && !this.socket.destroyed) this.socket.write(encodeControlFrame(FrameKind.handshake, reply));
    this.failHandshake(error);
  }

  private failHandshake(error: HandshakeError): void {
    if (this.state === "closed" || this.state === "open") return;
    this.context.stats.handshakesFailed++;
    this.context.warn({ peer: this.describePeer(), role: this.role, error }, "remoting handshake failed");
    this.failure = error;
    this.state = "closed";
    this.timer?.cancel();
    this.timer = null;
    // end() lets a queued reject reach the peer before the socket closes.
    this.socket.end();
    const socket = this.socket;
    this.context.scheduler.scheduleOnce(200, () => socket.destroy());
    this.owner.closed(this, false);
  }

  private onClose(): void {
    this.timer?.cancel();
    this.timer = null;
    if (this.state === "closed") return;
    const opened = this.state === "open";
    this.state = "closed";
    this.owner.closed(this, opened);
  }

  private describePeer(): string {
    return this.peer?.toString() ?? `${this.socket.remoteAddress}:${this.socket.remotePort}`;
  }
}

/** OpenSSL's errors (a bad record MAC, a decryption failure, an alert), as opposed to the socket's (ECONNRESET). */
function isTlsError(error: Error): boolean {
  const code = (error as { code?: unknown }).code;
  return typeof code === "string" && code.startsWith("ERR_SSL_");
}
