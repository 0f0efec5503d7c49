/** Why an inbound frame or envelope was rejected. */
export type RejectReason =
  | "framing"
  | "oversize"
  | "undecodable"
  | "unknownType"
  | "schemaInvalid"
  | "unexpected"
  /** An unexpected error while handling a connection's bytes: the connection was closed (see `internalErrors`). */
  | "internal";

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
  /** Outbound messages refused at send because their declared `fields` could not carry a value (MessageEncodeError). */
  unencodable: number;
  /** Header ids the outbound header tables took back from one header to give to another (tables were full). */
  headerEvictions: number;
  handshakesOk: number;
  handshakesFailed: number;
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
    },
    droppedWhileDisconnected: 0,
    droppedStaleUid: 0,
    droppedBlackholed: 0,
    droppedOverflow: 0,
    unencodable: 0,
    headerEvictions: 0,
    handshakesOk: 0,
    handshakesFailed: 0,
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
