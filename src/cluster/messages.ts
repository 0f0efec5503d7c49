import { UniqueAddress } from "../actor/index.ts";
import { InvalidClusterMessageError } from "./errors.ts";
import { type Member, type MemberJSON, memberFromJSON } from "./member.ts";

/**
 * The cluster daemons' wire protocol, one class per message (`/system/cluster` to `/system/cluster`). Fields are
 * plain JSON; `from` is the claimed sender, which the receiver checks against the transport identity; `to` (where
 * present) is the receiver's unique address, so a message meant for an earlier incarnation on the same host and
 * port is refused. Every `fromJSON` validates and throws {@link InvalidClusterMessageError}.
 */

type Json = Record<string, unknown>;

function object(type: string, json: unknown): Json {
  if (typeof json !== "object" || json === null || Array.isArray(json)) {
    throw new InvalidClusterMessageError(type, "not a JSON object");
  }
  return json as Json;
}

function str(type: string, j: Json, field: string): string {
  const v = j[field];
  if (typeof v !== "string" || v.length === 0) throw new InvalidClusterMessageError(type, `${field} is not a string`);
  return v;
}

function uniqueAddress(type: string, j: Json, field: string): string {
  const v = str(type, j, field);
  try {
    if (!UniqueAddress.parse(v).address.isRemote) throw new Error("local");
  } catch {
    throw new InvalidClusterMessageError(type, `${field} "${v}" is not a remote unique address`);
  }
  return v;
}

function int(type: string, j: Json, field: string): number {
  const v = j[field];
  if (!Number.isSafeInteger(v) || (v as number) < 0) {
    throw new InvalidClusterMessageError(type, `${field} is not an integer >= 0`);
  }
  return v as number;
}

function hexDigest(type: string, j: Json, field: string): string {
  const v = str(type, j, field);
  if (!/^[0-9a-f]{64}$/.test(v)) throw new InvalidClusterMessageError(type, `${field} is not a SHA-256 hex digest`);
  return v;
}

const parsedMembers = new WeakMap<object, readonly Member[]>();

/** The records of `j[field]`, validated and parsed once: {@link membersOf} then returns the parsed ones for free. */
function memberList(type: string, j: Json, field: string, maxCount: number): [MemberJSON[], Member[]] {
  const v = j[field];
  if (!Array.isArray(v)) throw new InvalidClusterMessageError(type, `${field} is not an array`);
  if (v.length > maxCount) throw new InvalidClusterMessageError(type, `${field} has more than ${maxCount} records`);
  const parsed: Member[] = new Array(v.length);
  for (let i = 0; i < v.length; i++) {
    const member = memberFromJSON(v[i]);
    if (typeof member === "string") throw new InvalidClusterMessageError(type, member);
    parsed[i] = member;
  }
  return [v as MemberJSON[], parsed];
}

/** `message` with its decoded records remembered for {@link membersOf}. */
function withMembers<M extends ClusterWelcome | ClusterGossip>(message: M, parsed: readonly Member[]): M {
  parsedMembers.set(message, parsed);
  return message;
}

function memberJson(type: string, m: unknown): MemberJSON {
  const parsed = memberFromJSON(m);
  if (typeof parsed === "string") throw new InvalidClusterMessageError(type, parsed);
  return m as MemberJSON;
}

/** The parsed records of a welcome or gossip (parsed once, by `fromJSON` for a received one; cached per message). */
export function membersOf(message: ClusterWelcome | ClusterGossip): readonly Member[] {
  let members = parsedMembers.get(message);
  if (members === undefined) {
    members = message.members.map((m) => {
      const parsed = memberFromJSON(m);
      if (typeof parsed === "string") throw new InvalidClusterMessageError("members", parsed);
      return parsed;
    });
    parsedMembers.set(message, members);
  }
  return members;
}

/** Upper bound on records accepted in one message, whatever `maxMembers` says: a wire sanity limit. */
export const wireMembersMax = 100_000;

/** A node asks a seed (or the leader) to let it in; `member` is its own record. Reply: {@link ClusterWelcome}. */
export class ClusterJoin {
  static readonly wireName = "movie.cluster.join.v1";
  constructor(
    readonly clusterName: string,
    readonly from: string,
    readonly member: MemberJSON,
  ) {}
  /** Rebuilds the message from its decoded wire JSON, checking every field. */
  static fromJSON(json: unknown): ClusterJoin {
    const t = ClusterJoin.wireName;
    const j = object(t, json);
    return new ClusterJoin(str(t, j, "clusterName"), uniqueAddress(t, j, "from"), memberJson(t, j.member));
  }
}

/** A seed's answer to a join: its full membership, tombstones included. */
export class ClusterWelcome {
  static readonly wireName = "movie.cluster.welcome.v1";
  constructor(
    readonly clusterName: string,
    readonly from: string,
    readonly to: string,
    readonly members: readonly MemberJSON[],
  ) {}
  /** Rebuilds the message from its decoded wire JSON, checking every field. */
  static fromJSON(json: unknown): ClusterWelcome {
    const t = ClusterWelcome.wireName;
    const j = object(t, json);
    const clusterName = str(t, j, "clusterName");
    const from = uniqueAddress(t, j, "from");
    const to = uniqueAddress(t, j, "to");
    const [members, parsed] = memberList(t, j, "members", wireMembersMax);
    return withMembers(new ClusterWelcome(clusterName, from, to, members), parsed);
  }
}

/** One gossip round's full-state push; `digest` is the sender's digest of that state. Reply: {@link ClusterGossipAck}. */
export class ClusterGossip {
  static readonly wireName = "movie.cluster.gossip.v1";
  constructor(
    readonly clusterName: string,
    readonly from: string,
    readonly to: string,
    readonly round: number,
    readonly digest: string,
    readonly members: readonly MemberJSON[],
  ) {}
  /** Rebuilds the message from its decoded wire JSON, checking every field. */
  static fromJSON(json: unknown): ClusterGossip {
    const t = ClusterGossip.wireName;
    const j = object(t, json);
    const clusterName = str(t, j, "clusterName");
    const from = uniqueAddress(t, j, "from");
    const to = uniqueAddress(t, j, "to");
    const round = int(t, j, "round");
    const digest = hexDigest(t, j, "digest");
    const [members, parsed] = memberList(t, j, "members", wireMembersMax);
    return withMembers(new ClusterGossip(clusterName, from, to, round, digest, members), parsed);
  }
}

/** The receiver's digest after merging gossip `round`. */
export class ClusterGossipAck {
  static readonly wireName = "movie.cluster.gossip-ack.v1";
  constructor(
    readonly clusterName: string,
    readonly from: string,
    readonly to: string,
    readonly round: number,
    readonly digest: string,
  ) {}
  /** Rebuilds the message from its decoded wire JSON, checking every field. */
  static fromJSON(json: unknown): ClusterGossipAck {
    const t = ClusterGossipAck.wireName;
    const j = object(t, json);
    return new ClusterGossipAck(
      str(t, j, "clusterName"),
      uniqueAddress(t, j, "from"),
      uniqueAddress(t, j, "to"),
      int(t, j, "round"),
      hexDigest(t, j, "digest"),
    );
  }
}

/** A failure-detector probe. Reply: {@link ClusterHeartbeatAck} with the same `seq`. */
export class ClusterHeartbeat {
  static readonly wireName = "movie.cluster.heartbeat.v1";
  constructor(
    readonly clusterName: string,
    readonly from: string,
    readonly to: string,
    readonly seq: number,
  ) {}
  /** Rebuilds the message from its decoded wire JSON, checking every field. */
  static fromJSON(json: unknown): ClusterHeartbeat {
    const t = ClusterHeartbeat.wireName;
    const j = object(t, json);
    return new ClusterHeartbeat(
      str(t, j, "clusterName"),
      uniqueAddress(t, j, "from"),
      uniqueAddress(t, j, "to"),
      int(t, j, "seq"),
    );
  }
}

/** The answer to a heartbeat. */
export class ClusterHeartbeatAck {
  static readonly wireName = "movie.cluster.heartbeat-ack.v1";
  constructor(
    readonly clusterName: string,
    readonly from: string,
    readonly to: string,
    readonly seq: number,
  ) {}
  /** Rebuilds the message from its decoded wire JSON, checking every field. */
  static fromJSON(json: unknown): ClusterHeartbeatAck {
    const t = ClusterHeartbeatAck.wireName;
    const j = object(t, json);
    return new ClusterHeartbeatAck(
      str(t, j, "clusterName"),
      uniqueAddress(t, j, "from"),
      uniqueAddress(t, j, "to"),
      int(t, j, "seq"),
    );
  }
}

/** Asks the leader to move `target` to Leaving; valid only when target is the sender. */
export class ClusterLeave {
  static readonly wireName = "movie.cluster.leave.v1";
  constructor(
    readonly clusterName: string,
    readonly from: string,
    readonly target: string,
  ) {}
  /** Rebuilds the message from its decoded wire JSON, checking every field. */
  static fromJSON(json: unknown): ClusterLeave {
    const t = ClusterLeave.wireName;
    const j = object(t, json);
    return new ClusterLeave(str(t, j, "clusterName"), uniqueAddress(t, j, "from"), uniqueAddress(t, j, "target"));
  }
}

/** Asks the leader to mark `target` Down; honoured only when both nodes have a remoting shared secret. */
export class ClusterDown {
  static readonly wireName = "movie.cluster.down.v1";
  constructor(
    readonly clusterName: string,
    readonly from: string,
    readonly target: string,
  ) {}
  /** Rebuilds the message from its decoded wire JSON, checking every field. */
  static fromJSON(json: unknown): ClusterDown {
    const t = ClusterDown.wireName;
    const j = object(t, json);
    return new ClusterDown(str(t, j, "clusterName"), uniqueAddress(t, j, "from"), uniqueAddress(t, j, "target"));
  }
}

/** Any message of the cluster protocol. */
export type ClusterMessage =
  | ClusterJoin
  | ClusterWelcome
  | ClusterGossip
  | ClusterGossipAck
  | ClusterHeartbeat
  | ClusterHeartbeatAck
  | ClusterLeave
  | ClusterDown;

/** Every wire class of the protocol, for registration with the message registry. */
export const clusterMessageClasses = [
  ClusterJoin,
  ClusterWelcome,
  ClusterGossip,
  ClusterGossipAck,
  ClusterHeartbeat,
  ClusterHeartbeatAck,
  ClusterLeave,
  ClusterDown,
] as const;

/** True for an instance of one of the protocol's classes. */
export function isClusterMessage(message: unknown): message is ClusterMessage {
  return clusterMessageClasses.some((c) => message instanceof c);
}
