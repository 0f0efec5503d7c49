import type { GossipRejection } from "./gossip/authorize.ts";

/** Counters of one node's membership (docs/protocol.md §4.10 "ClusterStats"), all starting at 0. */
export interface ClusterStats {
  /** Join requests sent to seeds or the leader. */
  joinAttempts: number;
  /** Join requests received. */
  joinsReceived: number;
  /** Joins refused: a Down or Removed uid, or an earlier incarnation still holding the address. */
  joinRejections: number;
  welcomesReceived: number;
  /** Welcomes from a node that is not a configured seed. */
  welcomesIgnored: number;
  gossipRounds: number;
  gossipSent: number;
  gossipReceived: number;
  gossipAcksReceived: number;
  /** Gossiped records refused by the authorisation rules (the record-level part of `gossipRejected`). */
  gossipRecordsRejected: number;
  /**
   * Gossip refused, by reason: whole messages from non-members (`nonMember`) or that would overflow `maxMembers`
   * (`overCapacity`), and single records (`phantom`, `notLeader`, `joining`). See `GossipRejection`.
   */
  gossipRejected: Record<GossipRejection, number>;
  /** Heartbeats, heartbeat acks and gossip acks from an incarnation that is not a member here (dropped, unanswered). */
  nonMemberMessagesDropped: number;
  /** Leave and down requests from a sender that is not a live member here (also counted in `*RequestsRejected`). */
  requestsFromNonMembersRejected: number;
  /** 1 once this node learned from its leader that it was downed (or removed without leaving); see `onDowned`. */
  selfDowned: number;
  /** Merges that changed the local state. */
  membershipMerges: number;
  /** Merges refused whole because they would exceed `maxMembers`. */
  capacityRejections: number;
  heartbeatsSent: number;
  heartbeatsReceived: number;
  heartbeatAcksReceived: number;
  /** Peers that became unreachable. */
  heartbeatTimeouts: number;
  /** Unreachable peers that answered again. */
  reachabilityRestorations: number;
  /** Inbound messages refused: wrong cluster name, unauthenticated, identity mismatch, malformed, misaddressed. */
  protocolRejections: number;
  /** Gossip, leave and down requests from a node whose record here is Removed (dropped). */
  messagesFromRemovedDropped: number;
  leaveRequestsAccepted: number;
  leaveRequestsRejected: number;
  downRequestsAccepted: number;
  downRequestsRejected: number;
  /** Bytes of gossip payload (JSON) this node sent. */
  gossipBytesSent: number;
  /** Current number of subscribers. */
  subscribers: number;
}

/** The name of one plain counter (the nested `gossipRejected` is counted through its own effect). */
export type ClusterStatName = Exclude<keyof ClusterStats, "gossipRejected">;

/** All counters at zero. */
export function emptyClusterStats(): ClusterStats {
  return {
    joinAttempts: 0,
    joinsReceived: 0,
    joinRejections: 0,
    welcomesReceived: 0,
    welcomesIgnored: 0,
    gossipRounds: 0,
    gossipSent: 0,
    gossipReceived: 0,
    gossipAcksReceived: 0,
    gossipRecordsRejected: 0,
    gossipRejected: { nonMember: 0, phantom: 0, notLeader: 0, joining: 0, overCapacity: 0 },
    nonMemberMessagesDropped: 0,
    requestsFromNonMembersRejected: 0,
    selfDowned: 0,
    membershipMerges: 0,
    capacityRejections: 0,
    heartbeatsSent: 0,
    heartbeatsReceived: 0,
    heartbeatAcksReceived: 0,
    heartbeatTimeouts: 0,
    reachabilityRestorations: 0,
    protocolRejections: 0,
    messagesFromRemovedDropped: 0,
    leaveRequestsAccepted: 0,
    leaveRequestsRejected: 0,
    downRequestsAccepted: 0,
    downRequestsRejected: 0,
    gossipBytesSent: 0,
    subscribers: 0,
  };
}
