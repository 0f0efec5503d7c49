// The CPU cost of receiving membership messages in one node's membership core (src/cluster/membership.ts), without
// sockets: what every node pays for each gossip and heartbeat ack it receives. A receiver that knows `members` Up
// members takes, in a loop, the leader's steady-state gossip (the same records it holds, as the wire brings them:
// JSON text, parsed, decoded by ClusterGossip.fromJSON with every record validated, then stepped) and a heartbeat
// ack. The ceiling is JSON.parse of the same gossip text, which no receiver can skip.
import { Address, UniqueAddress } from "../../src/actor/index.ts";
import { memberToJSON } from "../../src/cluster/member.ts";
import { initialMembership, type MembershipState, step } from "../../src/cluster/membership.ts";
import { ClusterGossip, ClusterHeartbeatAck, ClusterWelcome } from "../../src/cluster/messages.ts";
import { clock } from "./raw-frames.ts";

export interface ReceiveCost {
  readonly members: number;
  /** µs per gossip: JSON.parse, ClusterGossip.fromJSON and the membership step. */
  readonly gossipUs: number;
  /** µs per gossip for JSON.parse alone (the ceiling). */
  readonly parseUs: number;
  /** µs per heartbeat ack step. */
  readonly heartbeatAckUs: number;
}

const clusterName = "bench";
const address = (i: number): UniqueAddress =>
  new UniqueAddress(Address.tcp(clusterName, "10.0.0.1", 2551 + i), `uid-${String(i).padStart(6, "0")}`);

/** A receiver (member 1) that knows `members` Up members, all authored by the leader (member 0). */
function receiver(members: number): {
  state: MembershipState;
  leader: UniqueAddress;
  records: ReturnType<typeof memberToJSON>[];
} {
  const leader = address(0);
  const self = address(1);
  let state = initialMembership(
    {
      self,
      clusterName,
      seeds: [leader.address],
      roles: [],
      gossipFanout: 3,
      maxMembers: 10_000,
      heartbeatTimeoutMs: 5_000,
      remoteDownAllowed: false,
    },
    0,
  );
  const records = Array.from({ length: members }, (_, i) =>
    memberToJSON({
      uniqueAddress: address(i),
      status: "Up",
      roles: [],
      upNumber: i + 1,
      revision: 2,
      changedBy: leader.uid,
    }),
  );
  const welcome = ClusterWelcome.fromJSON(
    JSON.parse(JSON.stringify(new ClusterWelcome(clusterName, String(leader), String(self), records))),
  );
  [state] = step(
    state,
    { kind: "message", origin: leader, senderPath: `${leader.address}/system/cluster`, message: welcome },
    0,
  );
  return { state, leader, records };
}

/** Runs `body` `count` times and returns µs per run, the best of `rounds` rounds (the least disturbed by the host). */
function timeUs(count: number, rounds: number, body: (i: number) => void): number {
  let best = Number.POSITIVE_INFINITY;
  for (let r = 0; r < rounds; r++) {
    const start = clock.now();
    for (let i = 0; i < count; i++) body(i);
    best = Math.min(best, ((clock.now() - start) * 1000) / count);
  }
  return best;
}

/** Measures the receive cost at `members` members, `count` messages per round. */
export function gossipReceiveCost(members: number, count: number, rounds = 5): ReceiveCost {
  const built = receiver(members);
  const { leader } = built;
  let state = built.state;
  if (state.members.size !== members)
    throw new Error(`the receiver knows ${state.members.size} members, not ${members}`);
  const senderPath = `${leader.address}/system/cluster`;
  const text = JSON.stringify(
    new ClusterGossip(clusterName, String(leader), String(state.config.self), 1, state.digest, built.records),
  );
  const parseUs = timeUs(count, rounds, () => {
    if (JSON.parse(text) === null) throw new Error("unreachable");
  });
  const gossipUs = timeUs(count, rounds, (i) => {
    const message = ClusterGossip.fromJSON(JSON.parse(text));
    const [next] = step(state, { kind: "message", origin: leader, senderPath, message }, i);
    state = next;
  });
  if (state.members.size !== members) throw new Error("the steady-state gossip changed the members");
  const ack = new ClusterHeartbeatAck(clusterName, String(leader), String(state.config.self), 1);
  const heartbeatAckUs = timeUs(count, rounds, (i) => {
    const [next] = step(state, { kind: "message", origin: leader, senderPath, message: ack }, i);
    state = next;
  });
  return { members, gossipUs, parseUs, heartbeatAckUs };
}
