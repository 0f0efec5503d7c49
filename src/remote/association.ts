import { connect as netConnect, type Socket } from "node:net";
import { connect as tlsConnect } from "node:tls";
import type { Address, Cancellable, UniqueAddress } from "../actor/index.ts";
import { backoffDelayMs } from "./backoff.ts";
import { Connection, type ConnectionContext, type ConnectionOwner } from "./connection.ts";
import { encodeControlFrame, FrameKind } from "./envelope.ts";
import { HandshakeError } from "./errors.ts";
import { FrameWriter } from "./frame-writer.ts";
import { headerTableSize, OutboundHeaderTable } from "./header-table.ts";
import type { ResolvedRemotingSettings } from "./settings.ts";
import type { RemotingStats } from "./stats.ts";
import { ResendLimiter, SystemOutbox } from "./system-channel.ts";

/**
 * Lifecycle of the outbound side of an association:
 *
 *   idle ──first send──▶ connecting ──handshake ok──▶ up ──socket lost──▶ backoff ──timer──▶ connecting …
 *                            └──────── refused / failed ─────────────────────▲
 *
 * While the very first connection is being set up, messages wait for it; after any loss, messages sent while there is
 * no connection are dropped and counted (at-most-once, docs/protocol.md §3.5), and what was queued but not yet written is
 * dropped too, never replayed. System messages are the exception: they sit in the outbox until acknowledged.
 */
export type AssociationState = "idle" | "connecting" | "up" | "backoff" | "stopped";

/** What an association needs from the node that owns it. */
export interface AssociationHost {
  readonly settings: ResolvedRemotingSettings;
  readonly stats: RemotingStats;
  readonly connectionContext: ConnectionContext;
  /** Accepts or refuses an authenticated peer (quarantine, uid change bookkeeping). */
  admit(peer: UniqueAddress, association: Association | null): HandshakeError | null;
  /** A frame from the peer on this association's own socket (acks). */
  frames(connection: Connection, frames: readonly Buffer[], from: number): void;
  /** The association came up or went down. */
  changed(association: Association, event: "connected" | "disconnected"): void;
  /** Whether local actors watch actors at `association`'s address (such an association must not expire). */
  watched(association: Association): boolean;
  /**
   * Stops `association` and forgets it: idle for `associationIdleTimeout` (`"expired"`), or `maxConnectAttempts`
   * attempts failed without ever connecting (`"givenUp"`). The next send makes a new one.
   */
  retire(association: Association, reason: "expired" | "givenUp"): void;
  /** A connection this association dialled closed before its handshake completed, with why (see Remoting.onDialFailed). */
  dialFailed(association: Association, error: Error): void;
}

/** How a message offered to an association is treated right now. */
export type SendMode = "write" | "buffer" | "drop";

/** The outbound half of the link to one peer address: one TCP connection, this node → that node (per direction). */
export class Association implements ConnectionOwner {
  state: AssociationState = "idle";
  /** Uid of the peer incarnation the current (or last) connection reached. */
  uid: string | null = null;
  /** Uid the outbox's system messages are meant for (null: whichever incarnation answers first). */
  outboxUid: string | null = null;
  readonly outbox = new SystemOutbox();
  /** Uid of the newest incarnation known at this address (from either direction's handshake), or null. */
  knownUid: string | null = null;
  /** @internal Header ids of the frames written into {@link writer} (a new writer, a new table: see header-table.ts). */
  headers: OutboundHeaderTable;
  /** @internal The header of the last compressible user envelope written, and its id (senders repeat themselves). */
  lastHeader: {
    readonly id: number;
    readonly recipient: Buffer;
    readonly sender: string | null;
    readonly senderUid: string | null;
    readonly typeName: string;
    /**
     * The target's path, the sender ref and the registration that produced it when the sender was an actor of this
     * system or none (together they imply the header, see SendPath.repeatedOn), else null. An actor of another
     * in-process system is excluded: its path changes when that system enables remoting.
     */
    readonly repeat: {
      readonly targetPath: string;
      readonly sender: object | null;
      readonly registration: object;
    } | null;
  } | null = null;
  writer: FrameWriter;
  private connection: Connection | null = null;
  private lostOnce = false;
  private attempt = 0;
  private timer: Cancellable | null = null;
  private heartbeatTimer: Cancellable | null = null;
  private readonly resendLimiter = new ResendLimiter();
  private resendTimer: Cancellable | null = null;
  private upOnce = false;
  /** Refs whose first messages wait for the first connection; they are bound to the uid that answers. */
  private awaitingUid: { uid: string | null }[] = [];
  /** Scheduler time of the last traffic written here (heartbeats aside), for idle expiry. */
  lastTrafficMs: number;
  /** Heartbeats written into the current {@link writer}, and its other frames seen at the last idle check. */
  private heartbeatsWritten = 0;
  private trafficSeen = 0;

  constructor(
    private readonly host: AssociationHost,
    /** The peer's remoting address (`movie.tcp://system@host:port`). */
    readonly address: Address,
  ) {
    this.writer = new FrameWriter(host.stats);
    this.headers = this.newHeaderTable();
    this.lastTrafficMs = host.connectionContext.scheduler.now();
  }

  /**
   * Whether this association may expire now: nothing but heartbeats written for `associationIdleTimeout`, no system
   * message awaiting its ack, no ref awaiting the first connection, and no local watch of an actor there (whose
   * death only this association's heartbeats and reconnects would notice). Cheap until the timeout has passed.
   */
  private idleExpired(): boolean {
    const now = this.host.connectionContext.scheduler.now();
    // Frames accepted by the writer, less the heartbeats: counted per socket write, so nothing is added per message.
    const traffic = this.writer.framesFlushed + this.writer.pendingFrames - this.heartbeatsWritten;
    if (traffic !== this.trafficSeen) {
      this.trafficSeen = traffic;
      this.lastTrafficMs = now;
      return false;
    }
    if (now - this.lastTrafficMs <= this.host.settings.associationIdleTimeoutMs) return false;
    if (this.outbox.pending.length === 0 && this.awaitingUid.length === 0 && !this.host.watched(this)) return true;
    // Kept: look again only after another idle timeout (the watch lookup is a scan).
    this.lastTrafficMs = now;
    return false;
  }

  private newHeaderTable(): OutboundHeaderTable {
    const stats = this.host.stats;
    return new OutboundHeaderTable(headerTableSize, () => stats.headerEvictions++);
  }

  /** `host:port`, the key associations and blackholes use. */
  get key(): string {
    return this.address.hostPort;
  }

  /** The peer's current incarnation, once connected. */
  get peer(): UniqueAddress | null {
    return this.connection?.peer ?? null;
  }

  /** Scheduler time of the last bytes from the peer on the up connection, or null when not up. */
  get lastHeardMs(): number | null {
    return this.state === "up" && this.connection !== null ? this.connection.lastReceivedMs : null;
  }

  /** Whether a message offered now is written, held for the first connection, or dropped. */
  get sendMode(): SendMode {
    if (this.state === "up") return "write";
    if (this.state === "idle") this.connect();
    return this.state === "connecting" && !this.lostOnce ? "buffer" : "drop";
  }

  /** Binds `ref` to the peer's uid once the first connection is up. */
  bindOnConnect(ref: { uid: string | null }): void {
    if (this.awaitingUid.length < 4096) this.awaitingUid.push(ref);
  }

  /** Starts connecting if nothing is going on yet (system messages need a connection). */
  ensureConnecting(): void {
    if (this.state === "idle") this.connect();
  }

  /** Closes the current connection (it reconnects with backoff). */
  drop(reason: Error): void {
    this.connection?.close(reason);
  }

  stop(): void {
    this.state = "stopped";
    this.timer?.cancel();
    this.timer = null;
    this.heartbeatTimer?.cancel();
    this.heartbeatTimer = null;
    this.cancelResend();
    // What was accepted before stopping still goes out if the peer reads it within the shutdown grace (a leaving
    // node's last gossip, for one); what it did not read by then is dropped and counted (Connection.shutdown).
    this.connection?.shutdown();
    this.host.stats.droppedAtShutdownFrames += this.writer.discard();
  }

  private connect(): void {
    if (this.state === "stopped") return;
    this.state = "connecting";
    this.host.stats.connectAttempts++;
    const { host, port } = this.address;
    const tls = this.host.settings.tls;
    let socket: Socket;
    if (tls !== null) {
      // The chain is always verified; the name check is the handshake's (peer-identity.ts: the certificate must name
      // the address the server claims, which must be the one dialled), so URI subjectAltNames work too.
      const secure = tlsConnect({
        ...tls,
        host: host!,
        port: port!,
        servername: undefined,
        rejectUnauthorized: true,
        checkServerIdentity: () => undefined,
      });
      secure.once("secureConnect", () => connection.start());
      socket = secure;
    } else {
      socket = netConnect({ host: host!, port: port! });
      socket.once("connect", () => connection.start());
    }
    const connection = new Connection(
      socket,
      "client",
      this.host.connectionContext,
      this,
      this.writer,
      this.address.system,
    );
    this.connection = connection;
  }

  // ---- ConnectionOwner ----

  authenticated(connection: Connection, peer: UniqueAddress): HandshakeError | null {
    if (connection !== this.connection || this.state === "stopped") return null;
    if (!peer.address.equals(this.address)) {
      this.host.connectionContext.warn(
        { expected: this.address.toString(), peer: peer.toString() },
        "peer advertises another address than the one dialled; refusing it",
      );
      return new HandshakeError("malformed", `dialled ${this.address}, the peer is ${peer.address}`);
    }
    const refused = this.host.admit(peer, this);
    if (refused !== null) return refused;
    this.uid = peer.uid;
    this.state = "up";
    this.attempt = 0;
    if (this.upOnce) this.host.stats.reconnects++;
    this.upOnce = true;
    if (this.outboxUid !== null && this.outboxUid !== peer.uid) this.outbox.reset();
    this.outboxUid = peer.uid;
    for (const ref of this.awaitingUid) if (ref.uid === null) ref.uid = peer.uid;
    this.awaitingUid = [];
    this.resendSystem();
    this.armHeartbeat(connection);
    this.host.changed(this, "connected");
    return null;
  }

  /**
   * Probes the peer every heartbeat interval; a peer that sent nothing for the heartbeat timeout (paused, half-open
   * socket) has its connection closed, so the association reconnects with backoff (docs/protocol.md §3.5: 1 s / 5 s).
   */
  private armHeartbeat(connection: Connection): void {
    const { heartbeatIntervalMs, heartbeatTimeoutMs } = this.host.settings;
    const scheduler = this.host.connectionContext.scheduler;
    this.heartbeatTimer = scheduler.scheduleOnce(heartbeatIntervalMs, () => {
      this.heartbeatTimer = null;
      if (connection !== this.connection || this.state !== "up") return;
      // While the read gate holds this connection the peer's heartbeat replies wait unread: not the peer's silence.
      if (!connection.isReadPaused && scheduler.now() - connection.lastReceivedMs > heartbeatTimeoutMs) {
        // Timers run before the event loop polls sockets: after a long stall of this process the peer's bytes may be
        // waiting unread. Look again once the loop has polled before calling the peer silent.
        this.heartbeatTimer = scheduler.scheduleOnce(0, () => {
          this.heartbeatTimer = null;
          if (connection !== this.connection || this.state !== "up") return;
          if (!connection.isReadPaused && scheduler.now() - connection.lastReceivedMs > heartbeatTimeoutMs) {
            this.host.stats.heartbeatTimeouts++;
            connection.close(new Error(`no frame from ${connection.peer} within ${heartbeatTimeoutMs} ms`));
          } else {
            this.armHeartbeat(connection);
          }
        });
        return;
      }
      if (this.idleExpired()) {
        this.host.retire(this, "expired");
        return;
      }
      this.heartbeatsWritten++;
      this.writer.writeFrame(heartbeatFrame);
      this.armHeartbeat(connection);
    });
  }

  /** Writes every unacknowledged system message again (after a reconnect, an unblackhole, or a gap report). */
  resendSystem(): void {
    if (this.state !== "up") return;
    for (const message of this.outbox.pending) {
      this.host.stats.systemResent++;
      this.writeSystem(message.seq, message.body);
    }
  }

  /**
   * The peer reported a gap in the system stream: resend what it has not acknowledged, at most once per
   * systemResendIntervalMs (one deferred resend covers the reports in between). Every frame of a resend that arrives
   * out of order is reported again, so unthrottled resends multiplied (millions of frames a second), and a hostile
   * peer could turn one small ack into 1,024 frames at will.
   */
  gapReported(): void {
    if (this.state !== "up") return;
    const scheduler = this.host.connectionContext.scheduler;
    const decision = this.resendLimiter.request(scheduler.now());
    if (decision === "now") {
      this.resendSystem();
      return;
    }
    this.host.stats.systemResendsThrottled++;
    if (decision === null) return;
    this.resendTimer = scheduler.scheduleOnce(decision, () => {
      this.resendTimer = null;
      this.resendLimiter.fired(scheduler.now());
      this.resendSystem();
    });
  }

  private cancelResend(): void {
    this.resendTimer?.cancel();
    this.resendTimer = null;
    this.resendLimiter.cancelled();
  }

  /** @internal Writes one sequenced system message of the outbox's current stream on the live connection. */
  writeSystem(seq: number, body: Record<string, unknown>): void {
    this.writer.writeFrame(systemFrame(this.outbox.epoch, seq, body));
  }

  frames(connection: Connection, frames: readonly Buffer[], from: number): void {
    this.host.frames(connection, frames, from);
  }

  closed(connection: Connection, opened: boolean): void {
    this.host.connectionContext.readGate.forget(connection);
    if (connection !== this.connection) return;
    if (!opened && connection.failure !== null) this.host.dialFailed(this, connection.failure);
    this.connection = null;
    this.heartbeatTimer?.cancel();
    this.heartbeatTimer = null;
    // The next connection resends everything on its own.
    this.cancelResend();
    // The old writer's traffic is the last this association carried: note it before the writer goes.
    this.idleExpired();
    const dropped = this.writer.discard();
    this.host.stats.droppedWhileDisconnected += dropped;
    this.writer = new FrameWriter(this.host.stats);
    this.heartbeatsWritten = 0;
    this.trafficSeen = 0;
    // The peer's table for this connection died with it: the next connection defines every header afresh.
    this.headers = this.newHeaderTable();
    this.lastHeader = null;
    this.awaitingUid = [];
    if (this.state === "stopped") return;
    this.lostOnce = true;
    this.state = "backoff";
    if (opened) this.host.changed(this, "disconnected");
    // An address that never answered is not dialled forever (it may have been a typo, or a node long gone).
    if (!this.upOnce && this.attempt + 1 >= this.host.settings.maxConnectAttempts) {
      this.host.retire(this, "givenUp");
      return;
    }
    const delayMs = backoffDelayMs(this.attempt++, Math.random());
    this.timer = this.host.connectionContext.scheduler.scheduleOnce(delayMs, () => {
      this.timer = null;
      if (this.state !== "backoff") return;
      // One that connected once redials until it carried no traffic for the idle timeout.
      if (this.idleExpired()) this.host.retire(this, "expired");
      else this.connect();
    });
  }
}

const heartbeatFrame = encodeControlFrame(FrameKind.heartbeat, {});

function systemFrame(epoch: number, seq: number, body: Record<string, unknown>): Buffer {
  // The first stream's frames carry no epoch (it is 0), as before epochs existed.
  return encodeControlFrame(FrameKind.system, epoch === 0 ? { seq, ...body } : { seq, epoch, ...body });
}
