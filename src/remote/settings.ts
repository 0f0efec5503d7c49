import { isIP } from "node:net";
import type { SecureContextOptions } from "node:tls";
import { InvalidArgumentError } from "../actor/index.ts";
import { checkSettingKeys, type SettingsShapeOf } from "../actor/settings-keys.ts";
import { describe } from "../actor/untrusted.ts";
import { RemotingConfigurationError } from "./errors.ts";
import { defaultMaxFrameBytes } from "./frame.ts";
import type { MessageRegistry } from "./message-registry.ts";
import type { RemoteStopPolicy } from "./system-authorization.ts";

/** Options of `system.enableRemoting`. */
export interface RemotingSettings {
  /** Host to bind and to advertise in this node's address (use a name peers can reach; `127.0.0.1` for tests). */
  host: string;
  /** TCP port; 0 picks a free one (read it from `remoting.selfAddress`). */
  port: number;
  /** Shared secret proven with HMAC-SHA256 in every handshake (never sent). Without it any peer may connect. */
  secret?: string;
  /**
   * TLS material (key, cert, ca, …) for mutual-certificate TLS on every association; both sides need it. It is the
   * integrity and confidentiality option (every frame rides in TLS records), and it binds identity: a peer's
   * certificate must name the address it claims (an IP or DNS subjectAltName for its host, or the URI
   * `movie.tcp://system@host:port`).
   */
  tls?: SecureContextOptions;
  /**
   * Allows binding a non-loopback host with neither `secret` nor `tls` (anyone who reaches the port can message every
   * actor); default false, which refuses such settings with RemotingConfigurationError.
   */
  insecure?: boolean;
  /** Largest frame payload in bytes, in and out; default 4 MiB. */
  maxFrameBytes?: number;
  /** Cluster name exchanged in the handshake; peers with another name are refused. Default "". */
  clusterName?: string;
  /** Milliseconds a handshake may take before the connection is closed; default 2,000 (docs/protocol.md §3.2). */
  handshakeTimeout?: number;
  /** Bytes that may wait for one peer's socket before new messages to it are dropped (counted); default 64 MiB. */
  maxBufferedBytes?: number;
  /** Milliseconds between liveness probes on an idle or busy outbound connection; default 1,000 (docs/protocol.md §3.5). */
  heartbeatInterval?: number;
  /** Milliseconds without any frame from the peer after which its connection is closed and re-dialled; default 5,000. */
  heartbeatTimeout?: number;
  /**
   * Whether peers may STOP or DrainAndStop this node's `/user` actors: "allow" (default) or "deny". Peers can never
   * stop `/system` or `/temp` actors; once the cluster is enabled only members may (see `remoting.setPeerAuthorizer`).
   */
  remoteStop?: RemoteStopPolicy;
  /** Registry for this system (falls back to the process-wide default); default a fresh one over the default. */
  registry?: MessageRegistry;
  /**
   * Inbound connections open at once, authenticated or not; a socket past it is closed at accept (counted in
   * `stats.rejected.connectionLimit`). Default 1,024: one per peer node, so room for a large cluster, and well under
   * a process's usual 1,024–65,536 file descriptors.
   */
  maxInboundConnections?: number;
  /**
   * Inbound connections still in their handshake at once; past it a new socket is closed at accept (counted).
   * Default 128: honest handshakes take milliseconds, so this only binds under a connection flood, which then costs
   * at most this many sockets for `handshakeTimeout` each.
   */
  maxUnauthenticatedConnections?: number;
  /**
   * Inbound connections in their handshake at once from one remote IP; past it a new socket from that IP is closed at
   * accept (counted). Default 16: a host runs a few nodes, each dialling once per peer, so one flooding host cannot
   * use up `maxUnauthenticatedConnections` for everyone.
   */
  maxUnauthenticatedPerIp?: number;
  /**
   * Milliseconds an outbound association may carry no traffic (heartbeats aside) before it is closed and forgotten
   * (counted in `stats.associationsExpired`); one with unacknowledged system messages or watches is kept. Default
   * 300,000 (5 minutes); the next send dials again.
   */
  associationIdleTimeout?: number;
  /**
   * Outbound associations kept at once; a send that needs one more when none can be expired is dropped (counted in
   * `stats.droppedAssociationLimit`). Default 4,096.
   */
  maxAssociations?: number;
  /**
   * Failed connection attempts after which an association that never connected is given up (counted in
   * `stats.associationsGivenUp`; watchers of actors there get `Terminated`); the next send starts afresh. Default 20
   * (about 30 s of backoff). An association that connected once keeps redialling until it expires.
   */
  maxConnectAttempts?: number;
  /**
   * Inbound messages delivered to local mailboxes and not yet processed above which remoting stops reading its
   * sockets until half of them are processed (TCP then slows the senders, whose own `maxBufferedBytes` applies).
   * Checked once per received chunk, so it may be exceeded by one chunk's messages. Default 100,000.
   */
  maxInboundBacklog?: number;
}

/** Settings with every default filled in. */
export interface ResolvedRemotingSettings {
  readonly host: string;
  readonly port: number;
  readonly secret: string | null;
  readonly tls: SecureContextOptions | null;
  readonly maxFrameBytes: number;
  readonly clusterName: string;
  readonly handshakeTimeoutMs: number;
  readonly maxBufferedBytes: number;
  readonly heartbeatIntervalMs: number;
  readonly heartbeatTimeoutMs: number;
  readonly maxInboundConnections: number;
  readonly maxUnauthenticatedConnections: number;
  readonly maxUnauthenticatedPerIp: number;
  readonly associationIdleTimeoutMs: number;
  readonly maxAssociations: number;
  readonly maxConnectAttempts: number;
  readonly maxInboundBacklog: number;
  readonly remoteStop: RemoteStopPolicy;
}

/**
 * `value` when it is an integer of at least 1, `fallback` when undefined.
 * @throws InvalidArgumentError naming `field` otherwise
 */
function positiveInteger(field: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1) {
    throw new InvalidArgumentError(field, "use an integer of at least 1 or leave it out for the default");
  }
  return value;
}

/** Every key of {@link RemotingSettings}; `tls` is Node's own options object and is not looked into. */
const remotingSettingsShape = {
  host: true,
  port: true,
  secret: true,
  tls: true,
  insecure: true,
  maxFrameBytes: true,
  clusterName: true,
  handshakeTimeout: true,
  maxBufferedBytes: true,
  heartbeatInterval: true,
  heartbeatTimeout: true,
  remoteStop: true,
  registry: true,
  maxInboundConnections: true,
  maxUnauthenticatedConnections: true,
  maxUnauthenticatedPerIp: true,
  associationIdleTimeout: true,
  maxAssociations: true,
  maxConnectAttempts: true,
  maxInboundBacklog: true,
} as const satisfies SettingsShapeOf<RemotingSettings>;

/**
 * Validates `settings` and fills in defaults.
 * @throws InvalidArgumentError naming the first invalid field (UnknownSettingError for a key no setting has)
 * @throws RemotingConfigurationError for a non-loopback host with neither `secret` nor `tls` (unless `insecure`)
 */
export function resolveRemotingSettings(settings: RemotingSettings): ResolvedRemotingSettings {
  if (settings === null || typeof settings !== "object") {
    throw new InvalidArgumentError("remoting settings", "expected { host, port }");
  }
  checkSettingKeys("enableRemoting", settings, remotingSettingsShape);
  const { host, port } = settings;
  if (typeof host !== "string" || host.length === 0 || /[\s/@#]/.test(host)) {
    throw new InvalidArgumentError("remoting host", `${describe(host)}; use a host name or IP such as 127.0.0.1`);
  }
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new InvalidArgumentError("remoting port", `${describe(port)}; use 0-65535 (0 picks a free port)`);
  }
  if (settings.secret !== undefined && (typeof settings.secret !== "string" || settings.secret.length === 0)) {
    throw new InvalidArgumentError("remoting secret", "use a non-empty string or leave it out");
  }
  const maxFrameBytes = settings.maxFrameBytes ?? defaultMaxFrameBytes;
  if (!Number.isInteger(maxFrameBytes) || maxFrameBytes < 1024 || maxFrameBytes > 0xffffffff) {
    throw new InvalidArgumentError("maxFrameBytes", `${describe(maxFrameBytes)}; use an integer from 1024 to 2^32-1`);
  }
  const handshakeTimeoutMs = settings.handshakeTimeout ?? 2_000;
  if (typeof handshakeTimeoutMs !== "number" || !(handshakeTimeoutMs > 0) || !Number.isFinite(handshakeTimeoutMs)) {
    throw new InvalidArgumentError("handshakeTimeout", `${describe(handshakeTimeoutMs)} ms; use a positive number`);
  }
  const maxBufferedBytes = settings.maxBufferedBytes ?? 64 * 1024 * 1024;
  if (!Number.isInteger(maxBufferedBytes) || maxBufferedBytes < maxFrameBytes) {
    throw new InvalidArgumentError("maxBufferedBytes", `${describe(maxBufferedBytes)}; use at least maxFrameBytes`);
  }
  const heartbeatIntervalMs = settings.heartbeatInterval ?? 1_000;
  const heartbeatTimeoutMs = settings.heartbeatTimeout ?? 5_000;
  if (!(heartbeatIntervalMs > 0) || !Number.isFinite(heartbeatIntervalMs)) {
    throw new InvalidArgumentError("heartbeatInterval", `${describe(heartbeatIntervalMs)} ms; use a positive number`);
  }
  if (!(heartbeatTimeoutMs > heartbeatIntervalMs) || !Number.isFinite(heartbeatTimeoutMs)) {
    throw new InvalidArgumentError(
      "heartbeatTimeout",
      `${describe(heartbeatTimeoutMs)} ms; use more than heartbeatInterval`,
    );
  }
  const remoteStop = settings.remoteStop ?? "allow";
  if (remoteStop !== "allow" && remoteStop !== "deny") {
    throw new InvalidArgumentError("remoteStop", 'use "allow" or "deny"');
  }
  const clusterName = settings.clusterName ?? "";
  if (typeof clusterName !== "string") throw new InvalidArgumentError("clusterName", "use a string");
  if (settings.tls !== undefined && (settings.tls === null || typeof settings.tls !== "object")) {
    throw new InvalidArgumentError("tls", "use Node SecureContextOptions ({ key, cert, ca }) or leave it out");
  }
  const minVersion = settings.tls?.minVersion;
  if (minVersion === "TLSv1" || minVersion === "TLSv1.1") {
    throw new InvalidArgumentError("tls.minVersion", `${minVersion}; use TLSv1.2 or TLSv1.3 (the default is TLSv1.2)`);
  }
  if (settings.insecure !== undefined && typeof settings.insecure !== "boolean") {
    throw new InvalidArgumentError("insecure", "use true or false, or leave it out");
  }
  if (settings.secret === undefined && settings.tls === undefined && settings.insecure !== true) {
    if (!isLoopbackHost(host)) {
      throw new RemotingConfigurationError(
        "secret",
        `host ${host} is reachable from other machines and neither secret nor tls is set, so anyone who reaches the port could message every actor; set enableRemoting({ secret }) and tls on every node, bind 127.0.0.1, or set insecure: true to accept an open node`,
      );
    }
  }
  return {
    host,
    port,
    secret: settings.secret ?? null,
    tls: settings.tls ?? null,
    maxFrameBytes,
    clusterName,
    handshakeTimeoutMs,
    maxBufferedBytes,
    heartbeatIntervalMs,
    heartbeatTimeoutMs,
    maxInboundConnections: positiveInteger("maxInboundConnections", settings.maxInboundConnections, 1024),
    maxUnauthenticatedConnections: positiveInteger(
      "maxUnauthenticatedConnections",
      settings.maxUnauthenticatedConnections,
      128,
    ),
    maxUnauthenticatedPerIp: positiveInteger("maxUnauthenticatedPerIp", settings.maxUnauthenticatedPerIp, 16),
    associationIdleTimeoutMs: positiveInteger("associationIdleTimeout", settings.associationIdleTimeout, 300_000),
    maxAssociations: positiveInteger("maxAssociations", settings.maxAssociations, 4096),
    maxConnectAttempts: positiveInteger("maxConnectAttempts", settings.maxConnectAttempts, 20),
    maxInboundBacklog: positiveInteger("maxInboundBacklog", settings.maxInboundBacklog, 100_000),
    remoteStop,
  };
}

/**
 * What to log once when remoting binds with `settings`, or null: a loud warning for a non-loopback host opened with
 * `insecure: true`, a note at info for a loopback host without a secret (any local process may connect).
 */
export function bindingNotice(settings: ResolvedRemotingSettings): { level: "warn" | "info"; message: string } | null {
  if (settings.secret !== null || settings.tls !== null) return null;
  if (isLoopbackHost(settings.host)) {
    return {
      level: "info",
      message: `remoting bound to loopback ${settings.host} without a secret: any process on this machine can message every actor; set enableRemoting({ secret }) to require one`,
    };
  }
  return {
    level: "warn",
    message: `REMOTING IS OPEN: bound to ${settings.host} with insecure: true and neither secret nor tls; any host that reaches this port can send to every actor. Set enableRemoting({ secret }) and tls on every node.`,
  };
}

/** True for hosts that only this machine can reach (no secret needed there). */
export function isLoopbackHost(host: string): boolean {
  // 127/8 only as an IPv4 literal: a host name such as "127.example.com" resolves wherever its owner wants.
  return host === "localhost" || host === "::1" || (isIP(host) === 4 && host.startsWith("127."));
}
