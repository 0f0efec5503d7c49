// The membership authorisation rules of docs/protocol.md §4.5, one test per rule: the pure decision on a gossip
// (src/cluster/gossip/authorize.ts) and, on the simulated network, what the core answers (or does not) to
// non-members, and how a downed node learns it was downed.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Address, UniqueAddress } from "../../src/actor/index.ts";
import { admitsGossipFrom, authorizeGossip, decideGossip } from "../../src/cluster/gossip/authorize.ts";
import { compareRecords } from "../../src/cluster/gossip/merge.ts";
import { type Member, memberToJSON } from "../../src/cluster/member.ts";
import { downNoticeRounds, type MembershipEffect, step } from "../../src/cluster/membership.ts";
import { ClusterGossip, ClusterHeartbeat, ClusterLeave, type ClusterMessage } from "../../src/cluster/messages.ts";
import { A, B, C, map, member, ua } from "./fixtures/member-maps.ts";
import { Sim, type SimNode } from "./sim.ts";

const D = ua(2554);
const seeds = [A.address];
const cluster = map(member(A, "Up"), member(B, "Up", { changedBy: A.uid, revision: 2 }), member(C, "Up"));

test("rule: gossip is taken only from live members and configured seeds", () => {
  assert.equal(admitsGossipFrom(cluster, B, seeds), true, "an Up member");
  assert.equal(admitsGossipFrom(map(member(A, "Up"), member(D, "Joining")), D, seeds), true, "a Joining member");
  assert.equal(admitsGossipFrom(cluster, D, seeds), false, "an unknown incarnation");
  assert.equal(admitsGossipFrom(cluster, ua(2551, "restarted"), []), false, "a new uid on a member's address");
  assert.equal(admitsGossipFrom(cluster, ua(2551, "restarted"), seeds), false, "... even on a seed's address");
  assert.equal(admitsGossipFrom(cluster, ua(2559), [ua(2559).address]), true, "an unknown seed that formed alone");
  const oldSeedGone = map(member(A, "Removed", { changedBy: B.uid, revision: 4 }), member(B, "Up"));
  assert.equal(admitsGossipFrom(oldSeedGone, ua(2551, "restarted"), seeds), true, "once the old one is Removed");
  assert.equal(admitsGossipFrom(map(member(D, "Down")), D, [D.address]), false, "a Down member, even a seed");
  assert.equal(admitsGossipFrom(map(member(D, "Removed")), D, []), false, "a Removed member");
  const refused = decideGossip(cluster, [member(D, "Up")], D, A, seeds, 10_000);
  assert.deepEqual(refused, { kind: "refused", reason: "nonMember" });
});

test("rule: the issue's attack (a non-member's own record, a phantom leader at 0.0.0.0:1, 50 phantoms) is refused whole", () => {
  const attacker = ua(40_000, "evil");
  const phantomLeader = new UniqueAddress(Address.tcp("sys", "0.0.0.0", 1), "evil");
  const records = [
    member(attacker, "Up"),
    member(phantomLeader, "Up", { changedBy: "evil" }),
    ...Array.from({ length: 50 }, (_, i) => member(ua(50_000 + i, `p${i}`), "Up", { changedBy: "evil" })),
  ];
  assert.deepEqual(decideGossip(map(member(A, "Up")), records, attacker, A, seeds, 10_000), {
    kind: "refused",
    reason: "nonMember",
  });
  // Even from a member (not the leader), the same records are phantoms, except its own identical record.
  const withAttacker = map(member(A, "Up"), member(attacker, "Up"));
  const decision = decideGossip(withAttacker, records, attacker, A, seeds, 10_000);
  assert.equal(decision.kind, "accepted");
  if (decision.kind !== "accepted") return;
  assert.equal(decision.changed.length, 0, "nothing merged");
  assert.equal(decision.members, withAttacker, "the local map is unchanged");
  assert.equal(decision.rejected.length, 51);
  assert.ok(decision.rejected.every((r) => r.reason === "phantom"));
});

test("rule: an unknown Up record via gossip passes from a non-leader only as the sender's own self-authored record", () => {
  // A seed that formed a cluster on its own gossips its own record: accepted.
  const selfSeed = ua(2555);
  assert.equal(authorizeGossip(map(member(A, "Up")), [member(selfSeed, "Up")], selfSeed, A).accepted.length, 1);
  // Its own record, but authored by someone else: refused.
  const foreignAuthor = member(selfSeed, "Up", { changedBy: C.uid });
  assert.deepEqual(reasons(map(member(A, "Up")), [foreignAuthor], selfSeed, A), ["phantom"]);
  // Authored by the sender, but describing a third node (the phantom bug): refused.
  assert.deepEqual(reasons(cluster, [member(D, "Up", { changedBy: C.uid })], C, A), ["phantom"]);
  // An unknown Down or Removed record from a non-leader: refused too, whoever authored it (no member but the leader
  // may bar an incarnation this node never knew).
  assert.deepEqual(reasons(cluster, [member(D, "Down", { changedBy: C.uid })], C, A), ["phantom"]);
  assert.deepEqual(reasons(cluster, [member(D, "Removed", { changedBy: C.uid })], C, A), ["phantom"]);
  assert.deepEqual(reasons(cluster, [member(D, "Removed", { changedBy: B.uid })], C, A), ["phantom"]);
});

test("rule: members appear only through the leader: its own records of members it admitted pass", () => {
  // D joined through the leader A, which promoted it (re-authored by A); A's gossip carries D to C.
  const admitted = member(D, "Up", { changedBy: A.uid, revision: 2, upNumber: 4 });
  assert.equal(authorizeGossip(cluster, [admitted], A, A).accepted.length, 1);
  // The same record relayed by a non-leader is not taken from it (it arrives from the leader itself).
  assert.deepEqual(reasons(cluster, [admitted], C, A), ["phantom"]);
});

test("rule: status changes come from the leader and are authored by it", () => {
  const downC = member(C, "Down", { changedBy: A.uid, revision: 2 });
  assert.equal(authorizeGossip(cluster, [downC], A, A).accepted.length, 1, "the leader's own change");
  assert.deepEqual(reasons(cluster, [downC], B, A), ["notLeader"], "relayed by a non-leader");
  assert.deepEqual(reasons(cluster, [{ ...downC, changedBy: B.uid }], B, A), ["notLeader"], "authored by a non-leader");
  assert.deepEqual(reasons(cluster, [{ ...downC, changedBy: B.uid }], A, A), ["notLeader"], "not the leader's own");
  assert.deepEqual(reasons(cluster, [member(C, "Down")], C, A), ["notLeader"], "a member downing itself");
});

test("rule: a Joining record never passes via gossip, not even from the leader", () => {
  assert.deepEqual(reasons(cluster, [member(D, "Joining", { changedBy: A.uid })], A, A), ["joining"]);
});

test("rule: an identical record passes from any admitted sender", () => {
  assert.equal(authorizeGossip(cluster, [cluster.get(String(B))!], C, A).accepted.length, 1);
});

test("rule: capacity counts tombstones and an overflowing merge is rejected whole", () => {
  const withTombstone = map(member(A, "Up"), member(B, "Removed", { changedBy: A.uid, revision: 3 }));
  const newcomers = [member(C, "Up", { changedBy: A.uid }), member(D, "Up", { changedBy: A.uid })];
  assert.deepEqual(decideGossip(withTombstone, newcomers, A, A, seeds, 3), { kind: "refused", reason: "overCapacity" });
  const fits = decideGossip(withTombstone, newcomers, A, A, seeds, 4);
  assert.equal(fits.kind === "accepted" && fits.members.size, 4);
});

function reasons(...args: Parameters<typeof authorizeGossip>): string[] {
  return authorizeGossip(...args).rejected.map((r) => r.reason);
}

/** True when `a` and `b` differ at most in their author. */
function sameButAuthor(a: Member, b: Member): boolean {
  return (
    JSON.stringify(memberToJSON({ ...a, changedBy: "" })) === JSON.stringify(memberToJSON({ ...b, changedBy: "" }))
  );
}

function startCluster(sim: Sim, count: number): SimNode[] {
  const nodes: SimNode[] = [];
  for (let i = 0; i < count; i++) nodes.push(sim.start(2551 + i, [2551]));
  assert.ok(
    sim.until(() => sim.allUp(nodes)),
    JSON.stringify(sim.describe()),
  );
  return nodes;
}

function message(node: SimNode, from: UniqueAddress, msg: ClusterMessage) {
  return step(
    node.state,
    { kind: "message", origin: from, senderPath: `${from.address}/system/cluster`, message: msg },
    0,
  );
}

function sends(effects: MembershipEffect[]): MembershipEffect[] {
  return effects.filter((e) => e.kind === "send");
}

test("core: a non-member's gossip and heartbeat change nothing and are not answered (nothing to dial)", () => {
  const sim = new Sim();
  const [a] = startCluster(sim, 2) as [SimNode, SimNode];
  const stranger = new UniqueAddress(Address.tcp("sim", "127.0.0.1", 4000), "stranger");
  const gossip = new ClusterGossip("sim-cluster", String(stranger), String(a.self), 1, "0".repeat(64), [
    memberToJSON(member(stranger, "Up")),
  ]);
  const [afterGossip, gossipEffects] = message(a, stranger, gossip);
  assert.equal(afterGossip.members, a.state.members, "no record merged");
  assert.deepEqual(sends(gossipEffects), [], "no gossip ack");
  assert.ok(gossipEffects.some((e) => e.kind === "gossip-rejected" && e.reason === "nonMember"));
  const [afterBeat, beatEffects] = message(
    a,
    stranger,
    new ClusterHeartbeat("sim-cluster", String(stranger), String(a.self), 1),
  );
  assert.deepEqual(sends(beatEffects), [], "no heartbeat ack");
  assert.equal(afterBeat.acks, a.state.acks);
  assert.ok(beatEffects.some((e) => e.kind === "count" && e.stat === "nonMemberMessagesDropped"));
});

test("core: a leave request for another member is refused, even with a secret", () => {
  const sim = new Sim({ remoteDownAllowed: true });
  const [a, b, c] = startCluster(sim, 3) as [SimNode, SimNode, SimNode];
  const [next, effects] = message(a, b.self, new ClusterLeave("sim-cluster", String(b.self), String(c.self)));
  assert.equal(next.members.get(String(c.self))?.status, "Up");
  assert.ok(effects.some((e) => e.kind === "count" && e.stat === "leaveRequestsRejected"));
});

test("core: the leader tells a downed node it is Down until it acknowledges; the node learns it (self-downed)", () => {
  const sim = new Sim();
  const [a, , c] = startCluster(sim, 3) as [SimNode, SimNode, SimNode];
  assert.equal(sim.input(a, { kind: "down", target: c.self }), true);
  assert.equal(a.state.downNotice.get(String(c.self))?.roundsLeft, downNoticeRounds);
  assert.ok(
    sim.until(() => c.selfDowned !== null, 2_000),
    JSON.stringify(sim.describe()),
  );
  assert.ok(c.selfDowned === "Down" || c.selfDowned === "Removed");
  assert.ok(
    sim.until(() => !a.state.downNotice.has(String(c.self)), 2_000),
    "the notice ends once acknowledged",
  );
});

test("core: a dead downed node is told at most downNoticeRounds times", () => {
  const sim = new Sim();
  const [a, , c] = startCluster(sim, 3) as [SimNode, SimNode, SimNode];
  sim.crash(c);
  sim.input(a, { kind: "down", target: c.self });
  assert.ok(sim.until(() => !a.state.downNotice.has(String(c.self)), 5_000));
  assert.equal(c.selfDowned, null);
});

test("core: a graceful leave is not a downing", () => {
  const sim = new Sim();
  const [, , c] = startCluster(sim, 3) as [SimNode, SimNode, SimNode];
  sim.input(c, { kind: "leave", target: c.self });
  assert.ok(sim.until(() => c.state.members.get(String(c.self))?.status === "Removed", 5_000));
  assert.equal(c.selfDowned, null);
});

test("property (seeded): whatever a non-leader gossips, only its own unknown Up record, its own re-admission or a tombstone it authored of a node leaving here can enter", () => {
  let rng = 7;
  const random = () => {
    rng = (rng + 0x6d2b79f5) | 0;
    let t = Math.imul(rng ^ (rng >>> 15), rng | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
  const pool = [A, B, C, D, ua(2555), ua(2551, "other-uid"), new UniqueAddress(Address.tcp("sys", "0.0.0.0", 1), "x")];
  const statuses = ["Joining", "Up", "Leaving", "Exiting", "Down", "Removed"] as const;
  for (let round = 0; round < 2_000; round++) {
    const local = map(
      member(A, "Up"),
      ...pool.slice(1, 1 + Math.floor(random() * 4)).map((who) => member(who, pick(statuses), { changedBy: A.uid })),
    );
    const sender = pick(pool);
    const leader = random() < 0.5 ? A : null;
    const incoming = Array.from({ length: 1 + Math.floor(random() * 4) }, () =>
      member(pick(pool), pick(statuses), {
        changedBy: pick([sender.uid, A.uid, "someone"]),
        revision: 1 + Math.floor(random() * 5),
      }),
    );
    const decision = decideGossip(local, incoming, sender, leader, seeds, 6);
    if (!admitsGossipFrom(local, sender, seeds)) {
      assert.deepEqual(decision, { kind: "refused", reason: "nonMember" });
      continue;
    }
    if (decision.kind !== "accepted") continue;
    assert.ok(decision.members.size <= 6, "capacity holds");
    for (const record of decision.changed) {
      assert.notEqual(record.status, "Joining", "no Joining record via gossip");
      const before = local.get(String(record.uniqueAddress));
      // The same change by another author (two leaders in turn): the merge's tie-break, from anyone.
      if (before !== undefined && sameButAuthor(before, record)) continue;
      if (before?.status === "Up" && record.status === "Up" && record.uniqueAddress.equals(sender)) {
        // The sender's re-admission as an orphan, from anyone, the leader too: newer, never older, same roles and version.
        assert.ok(record.revision > before.revision && record.upNumber >= before.upNumber);
        assert.deepEqual([record.roles, record.appVersion], [before.roles, before.appVersion]);
      } else if (record.status === "Removed" && !record.uniqueAddress.equals(sender)) {
        // A tombstone of a third node: from the leader, whoever removed it; else from the member that removed it, of a
        // node on its way out here (never of one unknown here).
        if (leader?.equals(sender) !== true) {
          assert.ok(before?.status === "Down" || before?.status === "Exiting", "leaving here");
          assert.equal(record.changedBy, sender.uid);
        }
      } else if (leader?.equals(sender) === true) {
        // The leader's changes are its own, or say what the local record says at a later revision.
        if (record.changedBy !== sender.uid) {
          assert.ok(before !== undefined && record.revision > before.revision, "the leader's relayed record is later");
          assert.ok(sameButAuthor(before, { ...record, revision: before.revision }), "and says the same");
        }
      } else {
        assert.ok(record.uniqueAddress.equals(sender), `a non-leader added ${record.uniqueAddress}`);
        assert.equal(before, undefined, "only an unknown record");
        assert.equal(record.status, "Up");
        assert.equal(record.changedBy, sender.uid);
      }
    }
  }
});

test("rule: a record older than the local one is harmless and not refused; a newer one from a non-leader still is", () => {
  // B has started leaving here (the leader's Leaving record, revision 3); C's gossip crossed that change and still
  // carries B's Up record (revision 2). Refusing it only raised a false "refused" alarm on every graceful leave.
  const local = map(member(A, "Up"), member(B, "Leaving", { changedBy: A.uid, revision: 3 }), member(C, "Up"));
  const stale = member(B, "Up", { changedBy: A.uid, revision: 2 });
  const { accepted, rejected } = authorizeGossip(local, [stale], C, A);
  assert.deepEqual(rejected, []);
  assert.deepEqual(accepted, [stale]);
  const decided = decideGossip(local, [stale], C, A, seeds, 10_000);
  assert.ok(decided.kind === "accepted");
  assert.equal(decided.members.get(B.toString())?.status, "Leaving", "the merge keeps the newer local record");
  assert.deepEqual(decided.changed, []);
  assert.deepEqual(decided.rejected, []);

  const newer = member(B, "Exiting", { changedBy: C.uid, revision: 4 });
  assert.deepEqual(authorizeGossip(local, [newer], C, A).rejected, [{ member: newer, reason: "notLeader" }]);
});

test("rule: a member's own re-admission passes from itself: Up again at a higher revision, an up-number not lower, the same roles and version", () => {
  // B, promoted by the leader A (up-number 2), joined again as an orphan and was promoted afresh by its own side's
  // leader u9 (docs/protocol.md §4.4). Roles and a version, so that comparing them is not comparing nothing.
  const known = { changedBy: A.uid, revision: 2, upNumber: 2, roles: ["backend", "frontend"], appVersion: "1.0.0" };
  const local = map(member(A, "Up"), member(B, "Up", known), member(C, "Up"));
  const readmitted = member(B, "Up", { ...known, changedBy: "u9", revision: 3, upNumber: 4 });
  assert.deepEqual(authorizeGossip(local, [readmitted], B, A), { accepted: [readmitted], rejected: [] });
  const sameAge = member(B, "Up", { ...known, changedBy: "u9", revision: 3 });
  assert.deepEqual(authorizeGossip(local, [sameAge], B, A), { accepted: [sameAge], rejected: [] }, "up-number kept");
  // The same record relayed by C, which it does not describe: a change only the leader makes.
  assert.deepEqual(authorizeGossip(local, [readmitted], C, A).rejected, [{ member: readmitted, reason: "notLeader" }]);
  // Each of these, from B itself, is newer than the local record but no re-admission: refused.
  const refused: [string, Member][] = [
    ["older (a lower up-number)", { ...readmitted, upNumber: 1 }],
    ["at the same revision", { ...readmitted, revision: 2 }],
    ["another app version", { ...readmitted, appVersion: "2.0.0" }],
    ["a role dropped", { ...readmitted, roles: ["backend"] }],
    ["a role added", { ...readmitted, roles: ["backend", "frontend", "web"] }],
    ["a role replaced", { ...readmitted, roles: ["backend", "web"] }],
    ["another status", { ...readmitted, status: "Leaving" }],
  ];
  for (const [what, record] of refused) {
    assert.ok(compareRecords(record, local.get(B.toString())!) > 0, `${what}: newer than the local record`);
    assert.deepEqual(authorizeGossip(local, [record], B, A).rejected, [{ member: record, reason: "notLeader" }], what);
  }
});

test("rule: a record that differs from the local one only where the former tie-break string could not tell is ordered: an older one passes as harmless, a newer one is judged as a change", () => {
  // The former tie-break joined the roles with NUL, so a role with a NUL inside tied with two roles; the merge now
  // orders them (the role "a" before "a\0b"), and the authorisation follows that order (docs/protocol.md §4.5). The
  // wire refuses such a role (memberFromJSON); the pure rules must not depend on that.
  const withNul = { changedBy: A.uid, revision: 2, roles: ["a\u0000b"] };
  const twoRoles = { ...withNul, roles: ["a", "b"] };
  const local = map(member(A, "Up"), member(B, "Up", withNul), member(C, "Up"));
  const older = member(B, "Up", twoRoles);
  assert.equal(compareRecords(older, local.get(B.toString())!), -1, "older than the local record");
  assert.deepEqual(authorizeGossip(local, [older], C, A), { accepted: [older], rejected: [] });
  const decision = decideGossip(local, [older], C, A, seeds, 10_000);
  assert.ok(decision.kind === "accepted");
  assert.equal(decision.members, local, "the merge keeps the local record");
  // The other way round, the record is newer: from a member that is not the leader, a change it may not make.
  const local2 = map(member(A, "Up"), member(B, "Up", twoRoles), member(C, "Up"));
  const newer = member(B, "Up", withNul);
  assert.deepEqual(authorizeGossip(local2, [newer], C, A).rejected, [{ member: newer, reason: "notLeader" }]);
});
