/** Why an inbound frame or envelope was rejected. */
export type RejectReason =
  | "framing"
  | "oversize"
  | "undecodable"
  | "unknownType"
  | "schemaInvalid"
  | "unexpected"
  /** An unexpected error while handling a connection's bytes: the connection was closed (see `internalErrors`). */
  | "internal"
  /** Inbound sockets closed at accept: over `maxInboundConnections`, `maxUnauthenticatedConnections` or `maxUnauthenticatedPerIp`. */
  | "connectionLimit"
  /** Remote system messages refused by system-authorization.ts (STOP of a system actor, watch from a non-member…). */
  | "unauthorizedSystem";

/** Counters of one node's remoting (a snapshot from `remoting.stats`). */
export interface RemotingStats {
  framesIn: number;
  framesOut: number;
  bytesIn: number;
  bytesOut: number;
  /** Socket writes (each carries many frames under load). */
  writes: number;
  /** Inbound user messages handed to a local actor or ask. */
  delivered: number;
  /** Inbound user messages whose recipient does not exist (published as dead letters). */
  deadLetters: number;
  /** Inbound frames or envelopes refused, by reason. */
  rejected: Record<RejectReason, number>;
  /** Outbound messages dropped because the peer had no connection (at-most-once, never replayed). */
  droppedWhileDisconnected: number;
  /** Outbound messages dropped because the target ref belongs to an older incarnation (uid) of the peer. */
  droppedStaleUid: number;
  /** Messages dropped by the blackhole test hook, both directions. */
  droppedBlackholed: number;
  /** Outbound messages dropped because the peer's write buffer was over `maxBufferedBytes`. */
  droppedOverflow: number;
  /**
   * Outbound messages refused at send because their declared `fields` could not carry a value, or JSON.stringify
   * could not encode a message without fields (MessageEncodeError).
   */
  unencodable: number;
  /** Header ids the outbound header tables took back from one header to give to another (tables were full). */
  headerEvictions: number;
  handshakesOk: number;
  handshakesFailed: number;
  /** Handshakes refused because the peer's TLS certificate does not name the address it claims (also in handshakesFailed). */
  identityMismatches: number;
  /** Handshakes refused because they claimed the host:port of a live incarnation with another uid (also in handshakesFailed). */
  incarnationClaimsRefused: number;
  /** TLS connections closed after the handshake because a record failed its integrity check (or another TLS error). */
  integrityFailures: number;
  /** Outbound connection attempts. */
  connectAttempts: number;
  /** Associations re-established after a loss. */
  reconnects: number;
  /** Outbound connections closed because the peer sent nothing within `heartbeatTimeout`. */
  heartbeatTimeouts: number;
  /** Peer incarnations lost for good (uid changed or quarantined). */
  associationsLost: number;
  systemSent: number;
  systemResent: number;
  systemDelivered: number;
  systemDuplicates: number;
  /**
   * `rejected.internal` by the error's `name` ("NonError" for a thrown non-Error; at most 32 names, the rest under
   * "other"): what to report as a bug, since every expected refusal has its own counter.
   */
  internalErrors: Record<string, number>;
  /** Handshake frames above `handshakeFrameBytesMax` (4 KiB): the connection was closed before buffering them. */
  handshakeOversize: number;
  /** Authenticated connections closed because no whole frame arrived within `heartbeatTimeout` (silent or half a frame). */
  idleTimeouts: number;
  /** Connections closed because the peer did not read: control replies to it were over `maxBufferedBytes`. */
  overflowClosed: number;
  /** Bytes still unsent when a connection's shutdown grace (500 ms) ran out and the socket was destroyed. */
  droppedAtShutdownBytes: number;
  /** Frames accepted for a connection that was shut down before its handshake completed (never sent). */
  droppedAtShutdownFrames: number;
  /** Associations removed after `associationIdleTimeout` without traffic (no unacknowledged system message, no watch). */
  associationsExpired: number;
  /** Associations given up after `maxConnectAttempts` failed attempts without ever connecting. */
  associationsGivenUp: number;
  /** Sends refused because they would dial an address learnt only from a peer's claim (a sender or watcher path). */
  droppedUnknownAddress: number;
  /** Sends refused because `maxAssociations` associations exist and none could be expired. */
  droppedAssociationLimit: number;
  /** Times a socket stopped reading because inbound messages queued in local mailboxes exceeded `maxInboundBacklog`. */
  readPauses: number;
  /** System streams this node abandoned because a peer left more than 1,024 messages unacknowledged (a partition). */
  systemStreamResets: number;
  /** System streams a peer abandoned and restarted towards this node (its pending bound was reached). */
  systemStreamRestarts: number;
  /** Gap reports not answered by an immediate resend (at most one resend per 200 ms per association). */
  systemResendsThrottled: number;
  /** Remote watches refused because the peer already held 100,000 watches on this node's actors. */
  systemWatchesRefused: number;
}

/** A zeroed counter set. */
export function emptyStats(): RemotingStats {
  return {
    framesIn: 0,
    framesOut: 0,
    bytesIn: 0,
    bytesOut: 0,
    writes: 0,
    delivered: 0,
    deadLetters: 0,
    rejected: {
      framing: 0,
      oversize: 0,
      undecodable: 0,
      unknownType: 0,
      schemaInvalid: 0,
      unexpected: 0,
      internal: 0,
      connectionLimit: 0,
      unauthorizedSystem: 0,
    },
    droppedWhileDisconnected: 0,
    droppedStaleUid: 0,
    droppedBlackholed: 0,
    droppedOverflow: 0,
    unencodable: 0,
    headerEvictions: 0,
    handshakesOk: 0,
    handshakesFailed: 0,
    identityMismatches: 0,
    incarnationClaimsRefused: 0,
    integrityFailures: 0,
    connectAttempts: 0,
    reconnects: 0,
    heartbeatTimeouts: 0,
    associationsLost: 0,
    systemSent: 0,
    systemResent: 0,
    systemDelivered: 0,
    systemDuplicates: 0,
    internalErrors: Object.create(null) as Record<string, number>,
    handshakeOversize: 0,
    idleTimeouts: 0,
    overflowClosed: 0,
    droppedAtShutdownBytes: 0,
    droppedAtShutdownFrames: 0,
    associationsExpired: 0,
    associationsGivenUp: 0,
    droppedUnknownAddress: 0,
    droppedAssociationLimit: 0,
    readPauses: 0,
    systemStreamResets: 0,
    systemStreamRestarts: 0,
    systemResendsThrottled: 0,
    systemWatchesRefused: 0,
  };
}

/** Most distinct error names `internalErrors` keeps apart. */
const internalErrorNamesMax = 32;

/** Counts one unexpected error named `name` in `rejected.internal` and `internalErrors`; returns its new count. */
export function countInternalError(stats: RemotingStats, name: string): number {
  stats.rejected.internal++;
  const counts = stats.internalErrors;
  const key = Object.hasOwn(counts, name) || Object.keys(counts).length < internalErrorNamesMax ? name : "other";
  counts[key] = (counts[key] ?? 0) + 1;
  return counts[key];
}
