import { type Address, UniqueAddress } from "../actor/index.ts";
import { isConverged, leaderOf } from "./convergence.ts";
import {
  checkTimeouts,
  type DetectorState,
  emptyDetector,
  observePeers,
  recordAck,
  unreachableKeys,
} from "./failure-detector.ts";
import { admitsGossipFrom, decideGossip, type GossipRejection } from "./gossip/authorize.ts";
import { membershipDigest } from "./gossip/digest.ts";
import { type MemberMap, mergeMembers } from "./gossip/merge.ts";
import { leaderActions } from "./leader-actions.ts";
import { type Member, type MemberStatus, memberKey, memberToJSON, sortMembers, withStatus } from "./member.ts";
import {
  ClusterDown,
  ClusterGossip,
  ClusterGossipAck,
  ClusterHeartbeat,
  ClusterHeartbeatAck,
  ClusterJoin,
  ClusterLeave,
  type ClusterMessage,
  ClusterWelcome,
  membersOf,
} from "./messages.ts";
import type { ClusterSnapshot } from "./snapshot.ts";
import type { ClusterStatName } from "./stats.ts";

/**
 * The membership protocol of one node as a pure state machine: `step(state, input, nowMs)` returns the next state
 * and the effects (sends, counter increments) for the shell to perform. Timers are inputs (`join-tick`,
 * `gossip-tick`, `heartbeat-tick`) so tests drive time by hand.
 */

/** Fixed facts of one node's membership. */
export interface MembershipConfig {
  readonly self: UniqueAddress;
  readonly clusterName: string;
  /** Seed node addresses (system, host, port). */
  readonly seeds: readonly Address[];
  /** This node's roles, sorted and unique. */
  readonly roles: readonly string[];
  /** The application version this node runs, if it declares one (carried in its record). */
  readonly appVersion?: string;
  readonly gossipFanout: number;
  readonly maxMembers: number;
  readonly heartbeatTimeoutMs: number;
  /** True when remoting has a shared secret, which remote down (and leave of another node) requires. */
  readonly remoteDownAllowed: boolean;
}

/** One node's membership state. */
export interface MembershipState {
  readonly config: MembershipConfig;
  /** Every record known, tombstones included. */
  readonly members: MemberMap;
  /** {@link membershipDigest} of `members`. */
  readonly digest: string;
  /** The last digest each peer is known to hold (from its acks and its own gossip). */
  readonly acks: ReadonlyMap<string, string>;
  readonly detector: DetectorState;
  readonly gossipRound: number;
  readonly heartbeatSeq: number;
  /** Join ticks that sent joins: picks the known member each one also asks, in turn (see `joinTick` below). */
  readonly joinRound: number;
  /** Gracefully removed nodes that still get the final gossip until they acknowledge it. */
  readonly farewell: ReadonlySet<string>;
  /**
   * True while this node, Up, joins again as an orphan (`isOrphan`): the member that admits it afresh promotes it at a
   * higher revision, and this node takes that record of itself from that member (`ownReadmission`), only meanwhile.
   */
  readonly rejoining: boolean;
  /** True once this node asked to leave; the request is repeated every gossip round while it is still Up. */
  readonly leaveRequested: boolean;
  /**
   * Members this node (as leader) downed while they may still be alive: each still gets the gossip that says so,
   * every round, until it acknowledges a round sent after the down or {@link downNoticeRounds} rounds have passed,
   * so a downed node learns it is out (and stops its entities) instead of serving on unaware.
   */
  readonly downNotice: ReadonlyMap<string, DownNotice>;
}

/** One downed member still being told (see {@link MembershipState.downNotice}). */
export interface DownNotice {
  /** The gossip round of the down: an ack of a later round means the member has seen it. */
  readonly sinceRound: number;
  /** Gossip rounds left before the leader gives up telling it. */
  readonly roundsLeft: number;
}

/**
 * Join rounds a joiner asks only its seeds and the leader its records name before it also asks the other members it
 * knows, one per round (a join is normally answered in the first round; each extra one costs a welcome).
 */
export const joinRoundsBeforeWidening = 3;

/** How many gossip rounds a downed member is told it is Down before the leader gives up on it (it may be dead). */
export const downNoticeRounds = 10;

/** What the membership core reacts to. */
export type MembershipInput =
  | { readonly kind: "join-tick" }
  | { readonly kind: "gossip-tick" }
  | { readonly kind: "heartbeat-tick" }
  | {
      readonly kind: "message";
      /** The transport-authenticated sender, null for a message from this process. */
      readonly origin: UniqueAddress | null;
      /** The path of the sending actor; it must be the sender's `/system/cluster`. */
      readonly senderPath: string | null;
      readonly message: ClusterMessage;
    }
  | { readonly kind: "leave"; readonly target: UniqueAddress }
  | { readonly kind: "down"; readonly target: UniqueAddress }
  /**
   * New seeds from seed discovery. Applied only while this node is Joining (the seeds it sends joins to, and from
   * which it accepts a welcome); a member keeps the seeds it joined with, so authorization never widens later.
   */
  | { readonly kind: "seeds"; readonly seeds: readonly Address[] }
  /**
   * A member's node refused this incarnation's handshake as quarantined: it downed (or removed) this node, so
   * this node is out of the cluster even if it never saw the gossip that said so (it was partitioned meanwhile).
   */
  | { readonly kind: "refused-as-gone"; readonly by: Address };

/** What the shell must do. */
export type MembershipEffect =
  | { readonly kind: "send"; readonly to: Address; readonly message: ClusterMessage }
  | { readonly kind: "count"; readonly stat: ClusterStatName }
  /** The answer to a `leave` or `down` input: true if applied here or sent to the leader. */
  | { readonly kind: "outcome"; readonly accepted: boolean }
  /**
   * A refused message or request. With `from` and `category`, the shell logs it once per sender and category
   * (bounded); otherwise at debug level.
   */
  | {
      readonly kind: "reject";
      readonly reason: string;
      readonly from?: UniqueAddress;
      readonly category?: string;
    }
  /** Gossip refused for `reason` (`count` records, or 1 for a whole message): counted in `gossipRejected`. */
  | {
      readonly kind: "gossip-rejected";
      readonly reason: GossipRejection;
      readonly from: UniqueAddress;
      readonly count: number;
      readonly detail: string;
    }
  /**
   * This node's own record became Down, or Removed without a graceful leave, by its leader's word: it is out of
   * the cluster for good and must stop its entities (the shell applies `onDowned`).
   */
  | { readonly kind: "self-downed"; readonly status: MemberStatus; readonly by: string };

/** Hooks the shell lends the core for one step. */
export interface StepContext {
  /** True when every departure guard lets `member` go from Leaving to Exiting; default: always. */
  readonly departureReady?: (member: Member) => boolean;
}

const participating = new Set(["Joining", "Up", "Leaving", "Exiting", "Down"]);
const heartbeatTargets = new Set(["Up", "Leaving", "Exiting"]);
const monitoredStatuses = new Set(["Up", "Leaving", "Exiting", "Down"]);
const gossipTargets = new Set(["Up", "Joining", "Leaving"]);
const gossiping = new Set(["Up", "Leaving", "Exiting"]);

/** True when `seed` names the same system, host and port as `self` (the uid is unknown for a seed). */
function isSelfSeed(seed: Address, self: UniqueAddress): boolean {
  return seed.equals(self.address);
}

/**
 * The state of a node that just started. A node whose seed list is empty or contains its own address starts Up as
 * a seed, authoring its own record; any other node starts Joining (docs/protocol.md §4.4).
 */
export function initialMembership(config: MembershipConfig, nowMs: number): MembershipState {
  const seed = config.seeds.length === 0 || config.seeds.some((s) => isSelfSeed(s, config.self));
  const self: Member = {
    uniqueAddress: config.self,
    status: seed ? "Up" : "Joining",
    roles: [...config.roles],
    upNumber: seed ? 1 : 0,
    revision: 1,
    changedBy: config.self.uid,
    ...(config.appVersion === undefined ? {} : { appVersion: config.appVersion }),
  };
  const members = new Map([[memberKey(self), self]]);
  return commit(
    {
      config,
      members,
      digest: membershipDigest(members),
      acks: new Map(),
      detector: emptyDetector,
      gossipRound: 0,
      heartbeatSeq: 0,
      joinRound: 0,
      farewell: new Set(),
      rejoining: false,
      leaveRequested: false,
      downNotice: new Map(),
    },
    members,
    nowMs,
  );
}

/** This node's own record. */
export function selfMember(state: MembershipState): Member {
  return state.members.get(state.config.self.toString())!;
}

/** Keys of non-removed members this node sees as unreachable. */
export function unreachableOf(state: MembershipState): ReadonlySet<string> {
  return unreachableKeys(state.detector);
}

/** The leader by this node's view. */
export function leaderOfState(state: MembershipState): UniqueAddress | null {
  return leaderOf(state.members, unreachableOf(state));
}

/** Convergence by this node's view. */
export function convergedOf(state: MembershipState): boolean {
  return isConverged(state.members, state.config.self, unreachableOf(state), state.acks, state.digest);
}

/** The public view of the state. */
export function snapshotOf(state: MembershipState): ClusterSnapshot {
  const unreachable = unreachableOf(state);
  const live = sortedMembers(state.members).filter((m) => m.status !== "Removed");
  return {
    self: state.config.self,
    selfStatus: selfMember(state).status,
    members: live,
    unreachable: live.filter((m) => unreachable.has(memberKey(m))).map((m) => m.uniqueAddress),
    leader: leaderOf(state.members, unreachable),
    converged: isConverged(state.members, state.config.self, unreachable, state.acks, state.digest),
  };
}

/** Replaces the members, recomputing the digest and pruning what no longer applies to removed nodes. */
function commit(state: MembershipState, members: MemberMap, nowMs: number): MembershipState {
  const selfKey = state.config.self.toString();
  const selfRecord = members.get(selfKey)!;
  const monitored = new Set<string>();
  if (selfRecord.status !== "Removed") {
    for (const [key, m] of members) if (key !== selfKey && monitoredStatuses.has(m.status)) monitored.add(key);
  }
  const digest = members === state.members ? state.digest : membershipDigest(members);
  let acks = state.acks;
  for (const key of acks.keys()) {
    const m = members.get(key);
    if (m === undefined || (m.status === "Removed" && !state.farewell.has(key) && !state.downNotice.has(key))) {
      if (acks === state.acks) acks = new Map(acks);
      (acks as Map<string, string>).delete(key);
    }
  }
  return { ...state, members, digest, acks, detector: observePeers(state.detector, monitored, nowMs) };
}

type Step = [MembershipState, MembershipEffect[]];

/**
 * Advances one node's membership by one input at monotonic time `nowMs`.
 * Never throws for wire input: bad or unauthorised messages become `count`/`reject` effects.
 */
export function step(state: MembershipState, input: MembershipInput, nowMs: number, context: StepContext = {}): Step {
  const effects: MembershipEffect[] = [];
  let next: MembershipState;
  switch (input.kind) {
    case "join-tick":
      next = joinTick(state, effects);
      break;
    case "gossip-tick":
      next = gossipTick(state, effects, nowMs);
      break;
    case "heartbeat-tick":
      next = heartbeatTick(state, effects, nowMs);
      break;
    case "message":
      next = receive(state, input, effects, nowMs, context);
      break;
    case "leave":
      next = requestLeave(state, input.target, effects, nowMs);
      break;
    case "down":
      next = requestDown(state, input.target, effects, nowMs);
      break;
    case "seeds":
      next =
        selfMember(state).status === "Joining"
          ? { ...state, config: { ...state.config, seeds: [...input.seeds] } }
          : state;
      break;
    case "refused-as-gone":
      next = refusedAsGone(state, input.by, nowMs);
      break;
  }
  next = runLeaderActions(next, nowMs, context);
  const was = selfMember(state).status;
  const now = selfMember(next);
  if (isDowning(was, now.status, next.leaveRequested)) {
    effects.push({ kind: "self-downed", status: now.status, by: now.changedBy });
  }
  return [next, effects];
}

/**
 * Peers quarantine an incarnation only once membership downed it (a graceful departure is not quarantined, and a
 * restarted node is a new incarnation), so a refusal "quarantined" from a node this one counts as a member means this
 * incarnation was downed while it could not hear the gossip: it takes its own record to Down, which the caller turns
 * into `self-downed`. A refusal from an address that is no member here (a stranger, or one already Removed) changes
 * nothing: it cannot speak for the cluster.
 */
function refusedAsGone(state: MembershipState, by: Address, nowMs: number): MembershipState {
  const self = selfMember(state);
  if (self.status === "Down" || self.status === "Removed" || self.status === "Joining") return state;
  let refuser: Member | null = null;
  for (const member of state.members.values()) {
    if (member.uniqueAddress.equals(state.config.self) || member.status === "Removed") continue;
    if (member.uniqueAddress.address.equals(by)) refuser = member;
  }
  if (refuser === null) return state;
  const members = new Map(state.members).set(memberKey(self), withStatus(self, "Down", refuser.uniqueAddress.uid));
  return commit(state, members, nowMs);
}

/**
 * True when this node's own status moving from `was` to `now` means it was put out of the cluster rather than
 * leaving: it became Down, or Removed from a status a graceful departure never skips from (Exiting or Down).
 */
function isDowning(was: MemberStatus, now: MemberStatus, leaveRequested: boolean): boolean {
  if (was === "Down" || was === "Removed" || was === now) return false;
  if (now === "Down") return true;
  return now === "Removed" && was !== "Exiting" && !(leaveRequested && was === "Leaving");
}

function clusterAddressOf(member: Member): Address {
  return member.uniqueAddress.address;
}

function joinTick(state: MembershipState, effects: MembershipEffect[]): MembershipState {
  const { self, seeds, clusterName } = state.config;
  const me = selfMember(state);
  let targets: Address[] = [];
  let record = me;
  if (me.status === "Joining" || isOrphan(state, me)) {
    targets = seeds.filter((s) => !isSelfSeed(s, self));
    // The leader by the records alone: members that do not know this node yet send it no heartbeats, so it sees them
    // all unreachable. Judged by reachability, a joiner whose seed is not the leader and whose first join to the
    // leader was lost never asked the leader again, and stayed Joining for good.
    const leader = leaderOf(state.members, new Set());
    if (leader !== null && !leader.equals(self) && !targets.some((t) => t.equals(leader.address))) {
      targets.push(leader.address);
    }
    // That leader, and the seed, may be dead (a seed that welcomed this node and crashed, leaving a live member it
    // listed that is now the leader): once the first rounds went unanswered, each round also asks one other known
    // member in turn, so the live leader hears a join within as many rounds as there are members (node simulator,
    // seeds 7003 and 8426).
    if (state.joinRound >= joinRoundsBeforeWidening || me.status !== "Joining") {
      const candidates = sortedMembers(state.members).filter(
        (m) => (m.status === "Up" || m.status === "Leaving") && !m.uniqueAddress.equals(self),
      );
      const turn = candidates[state.joinRound % Math.max(1, candidates.length)];
      if (turn !== undefined && !targets.some((t) => t.equals(turn.uniqueAddress.address))) {
        targets.push(turn.uniqueAddress.address);
      }
    }
    // An orphan asks to be admitted afresh, as a joiner, with a record the leader's promotion will supersede.
    if (me.status !== "Joining") record = { ...me, status: "Joining", upNumber: 0, changedBy: self.uid };
  } else if (me.status === "Up") {
    const known = new Set<string>();
    for (const m of state.members.values()) if (m.status !== "Removed") known.add(m.uniqueAddress.address.toString());
    targets = seeds.filter((s) => !isSelfSeed(s, self) && !known.has(s.toString()));
  }
  for (const to of targets) {
    effects.push({ kind: "send", to, message: new ClusterJoin(clusterName, self.toString(), memberToJSON(record)) });
    effects.push({ kind: "count", stat: "joinAttempts" });
  }
  const rejoining = me.status === "Up" && record !== me;
  const next = rejoining === state.rejoining ? state : { ...state, rejoining };
  return targets.length > 0 ? { ...next, joinRound: next.joinRound + 1 } : next;
}

/**
 * True when this node is Up but, it seems, a member of nobody's cluster: every other Up or Leaving member it knows is
 * unreachable, and none of them but the leader that promoted it (its record's author) ever exchanged gossip with it. That leader may
 * have admitted and promoted it, then crashed before its gossip reached anyone else (the promotion runs at once, and
 * gossip never carries Joining records); the others then drop this node's heartbeats and gossip as a stranger's, and
 * it waited for good (node simulator, seed 8780). A member merely cut off by a partition has gossiped with the others
 * before; in a cluster of two, its joins are lost on the way, or answered with a welcome by a leader that knows it.
 */
function isOrphan(state: MembershipState, me: Member): boolean {
  if (me.status !== "Up") return false;
  const unreachable = unreachableOf(state);
  let others = 0;
  for (const [key, m] of state.members) {
    if ((m.status !== "Up" && m.status !== "Leaving") || m.uniqueAddress.equals(state.config.self)) continue;
    if (!unreachable.has(key)) return false;
    others++;
    // A member other than the one that promoted it exchanged gossip with it: it is known, merely cut off. (Counting
    // any one member as the admitting leader made the last member of a cluster of two an orphan too, and, now that an
    // orphan promotes nobody, a member whose only peer was cut off could not admit a joiner: orphan-rules.test.ts.)
    if (state.acks.has(key) && m.uniqueAddress.uid !== me.changedBy) return false;
  }
  return others > 0;
}

function gossipRecords(state: MembershipState) {
  const records = [];
  for (const m of state.members.values()) if (m.status !== "Joining") records.push(memberToJSON(m));
  return records;
}

function gossipTick(state: MembershipState, effects: MembershipEffect[], nowMs: number): MembershipState {
  const { self, clusterName, gossipFanout } = state.config;
  const me = selfMember(state);
  if (!gossiping.has(me.status)) return state;
  let next: MembershipState = { ...state, gossipRound: state.gossipRound + 1 };
  effects.push({ kind: "count", stat: "gossipRounds" });
  const selfKey = self.toString();
  const peers = sortedMembers(state.members).filter((m) => memberKey(m) !== selfKey && gossipTargets.has(m.status));
  const targets: Member[] = [];
  const count = Math.min(gossipFanout, peers.length);
  for (let i = 0; i < count; i++) targets.push(peers[(next.gossipRound - 1 + i) % peers.length]!);
  let farewell = state.farewell;
  for (const key of state.farewell) {
    const m = state.members.get(key);
    if (m !== undefined && state.acks.get(key) !== state.digest) targets.push(m);
    else {
      if (farewell === state.farewell) farewell = new Set(farewell);
      (farewell as Set<string>).delete(key);
    }
  }
  let downNotice = state.downNotice;
  if (downNotice.size > 0) {
    const remaining = new Map<string, DownNotice>();
    for (const [key, notice] of state.downNotice) {
      const m = state.members.get(key);
      if (m === undefined || notice.roundsLeft <= 0) continue;
      if (!targets.includes(m)) targets.push(m);
      remaining.set(key, { ...notice, roundsLeft: notice.roundsLeft - 1 });
    }
    downNotice = remaining;
  }
  next = { ...next, farewell, downNotice };
  if (targets.length > 0) {
    const records = gossipRecords(state);
    for (const m of targets) {
      const message = new ClusterGossip(clusterName, selfKey, memberKey(m), next.gossipRound, state.digest, records);
      effects.push({ kind: "send", to: clusterAddressOf(m), message });
      effects.push({ kind: "count", stat: "gossipSent" });
    }
  }
  if (state.leaveRequested && (me.status === "Up" || leavingOnlyByItself(state, me))) {
    const retry: MembershipEffect[] = [];
    next = requestLeave(next, self, retry, nowMs);
    effects.push(...retry.filter((e) => e.kind !== "outcome"));
  }
  return next;
}

/**
 * True when this node's Leaving (or Exiting) record is its own work as a leader that others may not recognise: cut off
 * (paused, or partitioned) it saw every peer unreachable, led itself, and applied its own leave. The leader refuses that record
 * from a non-leader, and this node stopped asking once it saw itself Leaving: the cluster never converged again. So
 * it repeats the request to the leader it sees now until a record of its leave comes from elsewhere.
 */
function leavingOnlyByItself(state: MembershipState, me: Member): boolean {
  return (
    (me.status === "Leaving" || me.status === "Exiting") && me.changedBy === state.config.self.uid && !isLeader(state)
  );
}

function heartbeatTick(state: MembershipState, effects: MembershipEffect[], nowMs: number): MembershipState {
  const { self, clusterName, heartbeatTimeoutMs } = state.config;
  if (!participating.has(selfMember(state).status)) return state;
  const before = unreachableKeys(state.detector);
  const detector = checkTimeouts(state.detector, nowMs, heartbeatTimeoutMs);
  for (const key of unreachableKeys(detector))
    if (!before.has(key)) effects.push({ kind: "count", stat: "heartbeatTimeouts" });
  const seq = state.heartbeatSeq + 1;
  const selfKey = self.toString();
  for (const [key, m] of state.members) {
    if (key === selfKey || !heartbeatTargets.has(m.status)) continue;
    effects.push({
      kind: "send",
      to: clusterAddressOf(m),
      message: new ClusterHeartbeat(clusterName, selfKey, key, seq),
    });
    effects.push({ kind: "count", stat: "heartbeatsSent" });
  }
  return { ...state, detector, heartbeatSeq: seq };
}

/**
 * Why an inbound message is refused before it reaches the protocol (docs/protocol.md §4.3 "Protocol authentication"), or
 * null when it passes: it must carry this cluster's name, come over an authenticated association whose identity is
 * the claimed sender, from that sender's `/system/cluster`, and (if it names a receiver) name this incarnation.
 */
export function authenticate(
  message: ClusterMessage,
  origin: UniqueAddress | null,
  senderPath: string | null,
  clusterName: string,
  self: UniqueAddress,
): string | null {
  if (message.clusterName !== clusterName) {
    return `cluster name "${message.clusterName}" is not "${clusterName}"`;
  }
  if (origin === null) return "not received over an authenticated association";
  if (origin.toString() !== message.from)
    return `claimed sender ${message.from} is not the transport identity ${origin}`;
  if (senderPath !== `${origin.address}/system/cluster`) {
    return `sender path ${senderPath ?? "(none)"} is not ${origin.address}/system/cluster`;
  }
  if ("to" in message && message.to !== self.toString()) return `addressed to ${message.to}, not to ${self}`;
  return null;
}

function receive(
  state: MembershipState,
  input: Extract<MembershipInput, { kind: "message" }>,
  effects: MembershipEffect[],
  nowMs: number,
  context: StepContext,
): MembershipState {
  const { self, clusterName } = state.config;
  const { message } = input;
  const refusal = authenticate(message, input.origin, input.senderPath, clusterName, self);
  if (refusal !== null) {
    effects.push({ kind: "count", stat: "protocolRejections" });
    effects.push({ kind: "reject", reason: refusal });
    return state;
  }
  const from = input.origin!;
  if (message instanceof ClusterJoin) return receiveJoin(state, from, message, effects, nowMs, context);
  const fromRemoved = state.members.get(from.toString())?.status === "Removed";
  if (
    fromRemoved &&
    (message instanceof ClusterGossip || message instanceof ClusterLeave || message instanceof ClusterDown)
  ) {
    // A removed incarnation is out for good: its view and requests no longer count. Heartbeats are still answered
    // and acks still read, so a leaver that has not yet seen its removal keeps its leader reachable until the final
    // gossip reaches it.
    effects.push({ kind: "count", stat: "messagesFromRemovedDropped" });
    if (message instanceof ClusterGossip && selfMember(state).status !== "Removed") {
      // It still gossips, so it has not heard of its removal: only the member that removed it sends it the final
      // gossip (`farewell`), and that one may be gone (a leaving leader that removed it and then left itself). This
      // node's gossip carries the tombstone, which a departing node takes from any member: without it, it stayed
      // Exiting until its leave timed out (node simulator, seed 7024).
      const gossip = new ClusterGossip(
        state.config.clusterName,
        state.config.self.toString(),
        message.from,
        state.gossipRound,
        state.digest,
        gossipRecords(state),
      );
      effects.push({ kind: "send", to: from.address, message: gossip });
    }
    return state;
  }
  if (message instanceof ClusterWelcome) return receiveWelcome(state, from, message, effects, nowMs);
  if (message instanceof ClusterGossip) return receiveGossip(state, from, message, effects, nowMs);
  const probe =
    message instanceof ClusterGossipAck ||
    message instanceof ClusterHeartbeat ||
    message instanceof ClusterHeartbeatAck;
  if (probe && !state.members.has(from.toString())) {
    // Acks and heartbeats of an incarnation this node never admitted are neither stored (they would grow `acks`
    // per forged sender) nor answered (an answer would dial an address learned only from the sender's claim).
    effects.push({ kind: "count", stat: "nonMemberMessagesDropped" });
    effects.push({
      kind: "reject",
      reason: `${probeName(message)} from ${from}, which is not a member here; dropped unanswered`,
      from,
      category: "nonMember",
    });
    return state;
  }
  if (message instanceof ClusterGossipAck) {
    effects.push({ kind: "count", stat: "gossipAcksReceived" });
    const key = from.toString();
    let next: MembershipState =
      state.acks.get(key) === message.digest ? state : { ...state, acks: new Map(state.acks).set(key, message.digest) };
    const notice = state.downNotice.get(key);
    if (notice !== undefined && message.round > notice.sinceRound) {
      // The downed node answered a round that carried its Down record: it knows.
      const downNotice = new Map(state.downNotice);
      downNotice.delete(key);
      next = { ...next, downNotice };
    }
    return next;
  }
  if (message instanceof ClusterHeartbeat) {
    effects.push({ kind: "count", stat: "heartbeatsReceived" });
    if (selfMember(state).status !== "Removed") {
      const ack = new ClusterHeartbeatAck(clusterName, self.toString(), from.toString(), message.seq);
      effects.push({ kind: "send", to: from.address, message: ack });
    }
    return state;
  }
  if (message instanceof ClusterHeartbeatAck) {
    const key = from.toString();
    const was = state.detector.get(key);
    if (was?.unreachable === true) effects.push({ kind: "count", stat: "reachabilityRestorations" });
    effects.push({ kind: "count", stat: "heartbeatAcksReceived" });
    return { ...state, detector: recordAck(state.detector, key, nowMs) };
  }
  if (message instanceof ClusterLeave) return receiveLeave(state, from, message, effects, nowMs);
  return receiveDown(state, from, message, effects, nowMs);
}

function probeName(message: ClusterMessage): string {
  if (message instanceof ClusterGossipAck) return "gossip ack";
  return message instanceof ClusterHeartbeat ? "heartbeat" : "heartbeat ack";
}

function isLeader(state: MembershipState): boolean {
  return leaderOfState(state)?.equals(state.config.self) === true;
}

function receiveJoin(
  state: MembershipState,
  from: UniqueAddress,
  message: ClusterJoin,
  effects: MembershipEffect[],
  nowMs: number,
  context: StepContext,
): MembershipState {
  const { self, clusterName, maxMembers } = state.config;
  effects.push({ kind: "count", stat: "joinsReceived" });
  const me = selfMember(state);
  if (me.status !== "Up" && me.status !== "Leaving") return state;
  const candidate = membersOfJoin(message);
  const key = from.toString();
  if (!candidate.uniqueAddress.equals(from)) {
    effects.push({ kind: "count", stat: "protocolRejections" });
    effects.push({ kind: "reject", reason: `join for ${candidate.uniqueAddress} sent by ${from}` });
    return state;
  }
  const existing = state.members.get(key);
  if (existing !== undefined && (existing.status === "Down" || existing.status === "Removed")) {
    // A removed or downed incarnation never comes back; the node must restart (new uid) to rejoin.
    effects.push({ kind: "count", stat: "joinRejections" });
    effects.push({ kind: "reject", reason: `${from} was ${existing.status} and cannot rejoin with the same uid` });
    return state;
  }
  let next = state;
  if (existing === undefined && isLeader(state)) {
    const previous = [...state.members.values()].find(
      (m) => m.status !== "Removed" && m.uniqueAddress.address.equals(from.address) && m.uniqueAddress.uid !== from.uid,
    );
    if (previous !== undefined) {
      // An earlier incarnation on the same host and port is still a member: it leaves only by leave or by an explicit
      // down, never implicitly; the new one keeps retrying its join until then.
      effects.push({ kind: "count", stat: "joinRejections" });
      effects.push({
        kind: "reject",
        reason: `${previous.uniqueAddress} still holds ${from.address} (${previous.status})`,
      });
      return state;
    }
    const acceptable =
      candidate.status === "Joining" || (candidate.status === "Up" && candidate.changedBy === from.uid);
    if (!acceptable) {
      effects.push({ kind: "count", stat: "protocolRejections" });
      effects.push({ kind: "reject", reason: `join carries a ${candidate.status} record not authored by ${from}` });
      return state;
    }
    const merged = mergeMembers(state.members, [candidate], maxMembers);
    if (merged.overflow) {
      effects.push({ kind: "count", stat: "capacityRejections" });
      return state;
    }
    next = commit(state, merged.members, nowMs);
    // Promote at once when converged, so the welcome usually already says Up.
    next = runLeaderActions(next, nowMs, context);
  }
  const records = [...next.members.values()].map(memberToJSON);
  effects.push({
    kind: "send",
    to: from.address,
    message: new ClusterWelcome(clusterName, self.toString(), key, records),
  });
  return next;
}

const joinMembers = new WeakMap<ClusterJoin, Member>();
function membersOfJoin(message: ClusterJoin): Member {
  let m = joinMembers.get(message);
  if (m === undefined) {
    m = membersOf(new ClusterWelcome(message.clusterName, message.from, message.from, [message.member]))[0]!;
    joinMembers.set(message, m);
  }
  return m;
}

function receiveWelcome(
  state: MembershipState,
  from: UniqueAddress,
  message: ClusterWelcome,
  effects: MembershipEffect[],
  nowMs: number,
): MembershipState {
  if (!state.config.seeds.some((s) => s.equals(from.address))) {
    effects.push({ kind: "count", stat: "welcomesIgnored" });
    effects.push({ kind: "reject", reason: `welcome from ${from}, which is not a configured seed` });
    return state;
  }
  effects.push({ kind: "count", stat: "welcomesReceived" });
  const merged = mergeMembers(state.members, membersOf(message), state.config.maxMembers);
  if (merged.overflow) {
    effects.push({ kind: "count", stat: "capacityRejections" });
    return state;
  }
  if (merged.changed.length > 0) effects.push({ kind: "count", stat: "membershipMerges" });
  return commit(state, merged.members, nowMs);
}

function receiveGossip(
  state: MembershipState,
  from: UniqueAddress,
  message: ClusterGossip,
  effects: MembershipEffect[],
  nowMs: number,
): MembershipState {
  const { self, clusterName, maxMembers, seeds } = state.config;
  effects.push({ kind: "count", stat: "gossipReceived" });
  let next = state;
  if (selfMember(state).status !== "Removed") {
    // Admission first, so a stranger's records (validated once, at decode) are never merged or compared.
    const decision = admitsGossipFrom(state.members, from, seeds)
      ? decideGossip(state.members, membersOf(message), from, leaderOfState(state), seeds, maxMembers)
      : ({ kind: "refused", reason: "nonMember" } as const);
    if (decision.kind === "refused") {
      effects.push({
        kind: "gossip-rejected",
        reason: decision.reason,
        from,
        count: 1,
        detail:
          decision.reason === "nonMember"
            ? "the sender is neither a member nor a configured seed; gossip dropped unanswered"
            : `merging it would exceed maxMembers (${maxMembers}, tombstones included); gossip rejected whole`,
      });
      if (decision.reason === "overCapacity") effects.push({ kind: "count", stat: "capacityRejections" });
      // A non-member gets no ack: answering would dial an address known only from its own claim.
      if (decision.reason === "nonMember") return state;
    } else {
      // A departing node takes the word about the end of its own departure, its Exiting or Removed record, from any
      // member: the member that moved it on may not be the leader it sees (leadership moved while it was cut off or
      // paused; or, Leaving and cut off, it led itself), and refusing it kept this node Leaving or Exiting for good
      // while the others had forgotten it. It asked to leave, so nobody can make it leave this way.
      const selfStatus = selfMember(state).status;
      const ownRemoval =
        selfStatus === "Exiting" || selfStatus === "Leaving"
          ? decision.rejected.find(
              (r) =>
                (r.member.status === "Removed" || r.member.status === "Exiting") && r.member.uniqueAddress.equals(self),
            )
          : undefined;
      const ownWord = ownRemoval ?? ownReadmission(state, from, decision.rejected);
      const rejected = ownWord === undefined ? decision.rejected : decision.rejected.filter((r) => r !== ownWord);
      const merged = ownWord === undefined ? null : mergeMembers(decision.members, [ownWord.member], maxMembers);
      const members = merged === null ? decision.members : merged.members;
      const changed = decision.changed.length + (merged?.changed.length ?? 0);
      const byReason = new Map<GossipRejection, number>();
      for (const r of rejected) byReason.set(r.reason, (byReason.get(r.reason) ?? 0) + 1);
      for (const [reason, count] of byReason) {
        for (let i = 0; i < count; i++) effects.push({ kind: "count", stat: "gossipRecordsRejected" });
        const example = rejected.find((r) => r.reason === reason)!.member;
        effects.push({
          kind: "gossip-rejected",
          reason,
          from,
          count,
          detail: `${count} record(s) refused, e.g. ${example.status} record of ${example.uniqueAddress}`,
        });
      }
      if (changed > 0) {
        effects.push({ kind: "count", stat: "membershipMerges" });
        next = commit(state, members, nowMs);
      }
    }
  } else {
    // A removed node takes only the final word about itself (so that leave() completes), nothing else.
    const own = membersOf(message).find((m) => m.uniqueAddress.equals(self));
    if (own !== undefined) next = commit(state, mergeMembers(state.members, [own]).members, nowMs);
  }
  // Gossip in a settled cluster carries the digest its sender was known to hold: the acks stay the same map.
  const fromKey = from.toString();
  if (next.acks.get(fromKey) !== message.digest)
    next = { ...next, acks: new Map(next.acks).set(fromKey, message.digest) };
  const ack = new ClusterGossipAck(clusterName, self.toString(), from.toString(), message.round, next.digest);
  effects.push({ kind: "send", to: from.address, message: ack });
  return next;
}

/**
 * While this node joins again as an orphan (`rejoining`), its promotion by the member that admitted it afresh: Up at a
 * higher revision, authored by the sender, with its roles and version unchanged. This node may be the lowest address
 * it sees, and so its own leader, which refused the record as no leader's work: its digest and everyone else's
 * differed for good, and nobody converged again (node simulator, churn seeds 667 and 1204). Only meanwhile, so no
 * member can re-author this node's record (and so its age) at any other time.
 */
function ownReadmission(
  state: MembershipState,
  from: UniqueAddress,
  rejected: readonly { readonly member: Member; readonly reason: GossipRejection }[],
): { readonly member: Member; readonly reason: GossipRejection } | undefined {
  if (!state.rejoining) return undefined;
  const me = selfMember(state);
  return rejected.find(
    ({ member: r }) =>
      r.uniqueAddress.equals(state.config.self) &&
      me.status === "Up" &&
      r.status === "Up" &&
      r.revision > me.revision &&
      r.changedBy === from.uid &&
      r.appVersion === me.appVersion &&
      r.roles.length === me.roles.length &&
      r.roles.every((role, i) => role === me.roles[i]),
  );
}

function applyLeave(state: MembershipState, target: UniqueAddress, nowMs: number): MembershipState | null {
  const record = state.members.get(target.toString());
  if (record === undefined || record.status !== "Up") return null;
  const members = new Map(state.members).set(memberKey(record), withStatus(record, "Leaving", state.config.self.uid));
  return commit(state, members, nowMs);
}

function applyDown(state: MembershipState, target: UniqueAddress, nowMs: number): MembershipState | null {
  const record = state.members.get(target.toString());
  if (record === undefined || record.status === "Down" || record.status === "Removed") return null;
  const key = memberKey(record);
  const members = new Map(state.members).set(key, withStatus(record, "Down", state.config.self.uid));
  // The downed node may be alive: keep telling it for a few rounds (see `downNotice`).
  const downNotice = new Map(state.downNotice).set(key, {
    sinceRound: state.gossipRound,
    roundsLeft: downNoticeRounds,
  });
  return commit({ ...state, downNotice }, members, nowMs);
}

/** Statuses of a member whose leave or down requests count (docs/protocol.md §4.9: requests come from members). */
const requestingStatuses = new Set(["Joining", "Up", "Leaving", "Exiting"]);

/** Why a leave or down request from `from` is refused because of who sent it, or null when the sender may ask. */
function nonMemberRequest(state: MembershipState, from: UniqueAddress): string | null {
  const status = state.members.get(from.toString())?.status;
  if (status !== undefined && requestingStatuses.has(status)) return null;
  return `${from} is ${status === undefined ? "not a member" : status} here`;
}

function requestLeave(
  state: MembershipState,
  target: UniqueAddress,
  effects: MembershipEffect[],
  nowMs: number,
): MembershipState {
  const { self, clusterName } = state.config;
  const base = target.equals(self) ? { ...state, leaveRequested: true } : state;
  if (isLeader(base)) {
    const applied = applyLeave(base, target, nowMs);
    effects.push({ kind: "outcome", accepted: applied !== null || isLeavingOrGone(base, target) });
    return applied ?? base;
  }
  const leader = leaderOfState(base);
  if (leader === null) {
    effects.push({ kind: "outcome", accepted: false });
    return base;
  }
  const message = new ClusterLeave(clusterName, self.toString(), target.toString());
  effects.push({ kind: "send", to: leader.address, message });
  effects.push({ kind: "outcome", accepted: true });
  return base;
}

function isLeavingOrGone(state: MembershipState, target: UniqueAddress): boolean {
  const status = state.members.get(target.toString())?.status;
  return status !== undefined && status !== "Joining" && status !== "Up";
}

function requestDown(
  state: MembershipState,
  target: UniqueAddress,
  effects: MembershipEffect[],
  nowMs: number,
): MembershipState {
  const { self, clusterName } = state.config;
  const record = state.members.get(target.toString());
  if (target.equals(self) || record === undefined || record.status === "Removed") {
    effects.push({ kind: "outcome", accepted: false });
    return state;
  }
  if (isLeader(state)) {
    const applied = applyDown(state, target, nowMs);
    effects.push({ kind: "outcome", accepted: applied !== null || record.status === "Down" });
    return applied ?? state;
  }
  const leader = leaderOfState(state);
  if (leader === null) {
    effects.push({ kind: "outcome", accepted: false });
    return state;
  }
  effects.push({
    kind: "send",
    to: leader.address,
    message: new ClusterDown(clusterName, self.toString(), target.toString()),
  });
  effects.push({ kind: "outcome", accepted: true });
  return state;
}

function receiveLeave(
  state: MembershipState,
  from: UniqueAddress,
  message: ClusterLeave,
  effects: MembershipEffect[],
  nowMs: number,
): MembershipState {
  const target = UniqueAddress.parse(message.target);
  const notMember = nonMemberRequest(state, from);
  if (notMember !== null) {
    effects.push({ kind: "count", stat: "leaveRequestsRejected" });
    effects.push({ kind: "count", stat: "requestsFromNonMembersRejected" });
    effects.push({ kind: "reject", reason: `leave request refused: ${notMember}`, from, category: "leaveNonMember" });
    return state;
  }
  if (!target.equals(from)) {
    // docs/protocol.md §4.9: a leave request is valid only when target == sender (a member leaves only itself).
    effects.push({ kind: "count", stat: "leaveRequestsRejected" });
    effects.push({
      kind: "reject",
      reason: `leave of ${target} requested by ${from}: a node may only ask to leave itself`,
      from,
      category: "leaveOther",
    });
    return state;
  }
  if (!isLeader(state)) {
    effects.push({ kind: "count", stat: "leaveRequestsRejected" });
    effects.push({ kind: "reject", reason: "leave request received by a node that is not the leader" });
    return state;
  }
  effects.push({ kind: "count", stat: "leaveRequestsAccepted" });
  const record = state.members.get(target.toString());
  if (record?.status === "Leaving" && record.changedBy !== state.config.self.uid) {
    // The leave was applied elsewhere: by the leaver itself, leading while it was cut off, or by a leader of the other
    // side of a partition. Members refuse that record from anyone but their leader's hand, and the leaver keeps
    // asking: the leader makes the record its own (revision + 1), so that it spreads and the departure can go on.
    const members = new Map(state.members).set(memberKey(record), withStatus(record, "Leaving", state.config.self.uid));
    return commit(state, members, nowMs);
  }
  return applyLeave(state, target, nowMs) ?? state;
}

function receiveDown(
  state: MembershipState,
  from: UniqueAddress,
  message: ClusterDown,
  effects: MembershipEffect[],
  nowMs: number,
): MembershipState {
  const notMember = nonMemberRequest(state, from);
  if (notMember !== null) {
    effects.push({ kind: "count", stat: "downRequestsRejected" });
    effects.push({ kind: "count", stat: "requestsFromNonMembersRejected" });
    effects.push({ kind: "reject", reason: `down request refused: ${notMember}`, from, category: "downNonMember" });
    return state;
  }
  if (!state.config.remoteDownAllowed) {
    effects.push({ kind: "count", stat: "downRequestsRejected" });
    effects.push({
      kind: "reject",
      reason: `down request from ${from} ignored: this node has no remoting shared secret`,
    });
    return state;
  }
  if (!isLeader(state)) {
    effects.push({ kind: "count", stat: "downRequestsRejected" });
    effects.push({ kind: "reject", reason: "down request received by a node that is not the leader" });
    return state;
  }
  const target = UniqueAddress.parse(message.target);
  if (target.equals(state.config.self)) {
    effects.push({ kind: "count", stat: "downRequestsRejected" });
    return state;
  }
  effects.push({ kind: "count", stat: "downRequestsAccepted" });
  return applyDown(state, target, nowMs) ?? state;
}

/** Runs the leader actions when this node may (leader, or nobody is) and membership has converged. */
function runLeaderActions(state: MembershipState, nowMs: number, context: StepContext): MembershipState {
  // Most steps (heartbeats, acks, gossip that changed nothing) find every member Up or Removed: nothing to do, and
  // the leader, convergence and the sorted pass below would be computed for nothing on every step.
  if (!hasLeaderWork(state.members)) return state;
  const { self } = state.config;
  const unreachable = unreachableOf(state);
  const leader = leaderOf(state.members, unreachable);
  const leading = leader?.equals(self) === true;
  if (!leading && leader !== null) return state;
  if (!isConverged(state.members, self, unreachable, state.acks, state.digest)) return state;
  // An orphan promotes nobody: it may be a member of nobody's cluster, and a joiner it promoted would make a cluster
  // of the two that the members it knows never heard of (node simulator, churn seed 461: the joiners formed a cluster
  // of their own with the old members unreachable for good). It still downs and removes, so the last member of a
  // cluster whose others crashed, which looks the same, can clear them away; once it is re-admitted, or the
  // unreachable members are gone, it promotes the joiner it recorded.
  const promotes = leading && !isOrphan(state, selfMember(state));
  const result = leaderActions(state.members, self, promotes, context.departureReady ?? (() => true));
  if (result.changed.length === 0) return state;
  let farewell = state.farewell;
  for (const m of result.changed) {
    const key = memberKey(m);
    if (m.status === "Removed" && state.members.get(key)?.status === "Exiting" && key !== self.toString()) {
      farewell = new Set(farewell).add(key);
    }
  }
  return commit({ ...state, farewell }, result.members, nowMs);
}

/** Whether a members map (immutable: every change makes a new one) has a record leader actions may move. */
const leaderWork = new WeakMap<MemberMap, boolean>();

/** True when some record is Joining, Leaving, Exiting or Down: the only statuses {@link leaderActions} changes. */
function hasLeaderWork(members: MemberMap): boolean {
  let work = leaderWork.get(members);
  if (work === undefined) {
    work = false;
    for (const m of members.values()) {
      if (m.status !== "Up" && m.status !== "Removed") {
        work = true;
        break;
      }
    }
    leaderWork.set(members, work);
  }
  return work;
}

/** Every record of a members map in unique-address order, sorted once per map (maps are never changed in place). */
const sortedOfMap = new WeakMap<MemberMap, readonly Member[]>();

/** The records of `members` sorted by unique address (gossip targets, snapshots and join targets all need them). */
function sortedMembers(members: MemberMap): readonly Member[] {
  let sorted = sortedOfMap.get(members);
  if (sorted === undefined) {
    sorted = sortMembers(members.values());
    sortedOfMap.set(members, sorted);
  }
  return sorted;
}
