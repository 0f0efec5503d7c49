/** Why an inbound frame or envelope was rejected. */
export type RejectReason =
  | "framing"
  | "oversize"
  | "undecodable"
  | "unknownType"
  | "schemaInvalid"
  | "unexpected"
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
    connectAttempts: 0,
    reconnects: 0,
    heartbeatTimeouts: 0,
    associationsLost: 0,
    systemSent: 0,
    systemResent: 0,
    systemDelivered: 0,
    systemDuplicates: 0,
    systemStreamResets: 0,
    systemStreamRestarts: 0,
    systemResendsThrottled: 0,
    systemWatchesRefused: 0,
  };
}
