// A node downed while it was partitioned away never receives the gossip that downs it: by the time the partition
// heals, the others have quarantined its incarnation and refuse its handshakes. The refusal itself is the news:
// the node must learn it was downed (SelfDowned, stats.selfDowned, onDowned carried out) instead of staying a
// member in its own eyes forever (without the refusal turned into SelfDowned this test times out with the victim
// "Up" in a cluster that removed it). Real loopback TCP; the partition is remoting's blackhole on both sides.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Address, UniqueAddress } from "../../src/actor/index.ts";
import { type Member, memberKey } from "../../src/cluster/member.ts";
import { initialMembership, step } from "../../src/cluster/membership.ts";
import { eventually } from "../fixtures/eventually.ts";
import {
  allUp,
  type ClusterNode,
  describe,
  startClusterNode,
  startClusterNodes,
  terminateAll,
} from "./fixtures/nodes.ts";

test("a node downed while partitioned learns it from the quarantine refusal, not from gossip it never got", async () => {
  const nodes = await startClusterNodes(2, { secret: "s3cret" });
  const victim = await startClusterNode([nodes[0]!], { secret: "s3cret", settings: { onDowned: "leave" } });
  nodes.push(victim);
  try {
    await eventually(() => nodes.every((n) => allUp(n, 3)), { what: "3 nodes Up", describe: describe(nodes) });
    const [a, b] = nodes as [ClusterNode, ClusterNode, ClusterNode];
    const victimAddress = victim.cluster.selfAddress;
    for (const peer of [a, b]) {
      peer.remoting.blackhole(victimAddress);
      victim.remoting.blackhole(peer.cluster.selfAddress);
    }
    await eventually(() => [a, b].every((n) => n.cluster.snapshot().unreachable.length === 1), {
      what: "the victim unreachable on both others",
      describe: describe(nodes),
    });
    const leader = [a, b].find((n) => n.cluster.isLeader) ?? a;
    assert.equal(leader.cluster.down(victimAddress), true);
    await eventually(() => [a, b].every((n) => allUp(n, 2)), {
      what: "the victim downed and removed on the others",
      describe: describe(nodes),
    });
    // The leader keeps telling a downed node for a few gossip rounds (downNotice), then quarantines it; only a
    // partition that outlasts the notice leaves the refusal as the one way to learn. Wait for the quarantine.
    await eventually(() => [a, b].every((n) => n.remoting.stats.associationsLost >= 1), {
      what: "both others quarantined the victim's incarnation",
      describe: () => [a, b].map((n) => n.remoting.stats.associationsLost),
    });
    // No gossip reached the victim, so it never saw its Down record. (remoting's blackhole drops messages, not
    // handshakes: the victim's redials are refused as quarantined already now, where a real partition would delay
    // that refusal until it heals; either way the refusal is the only news it gets.)

    for (const peer of [a, b]) {
      peer.remoting.unblackhole(victimAddress);
      victim.remoting.unblackhole(peer.cluster.selfAddress);
    }
    await eventually(() => victim.cluster.stats.selfDowned === 1, {
      what: "the healed victim learns from the refusal that it was downed",
      describe: () => ({ victim: describe([victim])(), remoting: victim.remoting.stats.handshakesFailed }),
    });
    const selfDowned = victim.events.find((e) => e.type === "SelfDowned");
    assert.ok(selfDowned !== undefined && selfDowned.type === "SelfDowned");
    assert.equal(selfDowned.action, "leave");
    assert.equal(victim.system.isTerminated, false, "onDowned leave keeps the actor system running");
    assert.ok(
      [a, b].every((n) => allUp(n, 2)),
      "the others are unaffected",
    );
  } finally {
    await terminateAll(nodes);
  }
});

test("membership core: a quarantine refusal counts only from a member, and only once this node is a member", () => {
  const self = new UniqueAddress(Address.tcp("movie", "127.0.0.1", 2553), "victim");
  const stranger = Address.tcp("movie", "127.0.0.1", 9999);
  const joining = initialMembership(
    {
      self,
      clusterName: "c",
      seeds: [Address.tcp("movie", "127.0.0.1", 2551)],
      roles: [],
      gossipFanout: 3,
      maxMembers: 100,
      heartbeatTimeoutMs: 1_000,
      remoteDownAllowed: true,
    },
    0,
  );
  // A joining incarnation has a fresh uid that nobody quarantined: a refusal cannot mean it was downed.
  const [afterJoining, joiningEffects] = step(joining, { kind: "refused-as-gone", by: stranger }, 1);
  assert.equal(afterJoining.members.get(self.toString())?.status, "Joining");
  assert.deepEqual(
    joiningEffects.filter((e) => e.kind === "self-downed"),
    [],
  );

  // An Up member (a seed of its own here) with one other member at 2551.
  const otherAddress = Address.tcp("movie", "127.0.0.1", 2551);
  const other: Member = {
    uniqueAddress: new UniqueAddress(otherAddress, "other"),
    status: "Up",
    roles: [],
    upNumber: 1,
    revision: 1,
    changedBy: "other",
  };
  const alone = initialMembership({ ...joining.config, seeds: [] }, 0);
  const up = { ...alone, members: new Map(alone.members).set(memberKey(other), other) };
  assert.equal(up.members.get(self.toString())?.status, "Up");

  const [afterStranger, strangerEffects] = step(up, { kind: "refused-as-gone", by: stranger }, 2);
  assert.equal(afterStranger.members.get(self.toString())?.status, "Up", "a stranger cannot speak for the cluster");
  assert.equal(strangerEffects.filter((e) => e.kind === "self-downed").length, 0);

  const [afterMember, memberEffects] = step(up, { kind: "refused-as-gone", by: otherAddress }, 3);
  assert.equal(afterMember.members.get(self.toString())?.status, "Down");
  assert.deepEqual(
    memberEffects.filter((e) => e.kind === "self-downed"),
    [{ kind: "self-downed", status: "Down", by: "other" }],
  );
  // Once Down, a second refusal changes nothing and reports nothing again.
  const [again, againEffects] = step(afterMember, { kind: "refused-as-gone", by: otherAddress }, 4);
  assert.equal(again.members.get(self.toString())?.status, "Down");
  assert.equal(againEffects.filter((e) => e.kind === "self-downed").length, 0);
});
