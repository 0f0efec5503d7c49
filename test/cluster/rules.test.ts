import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { test } from "node:test";
import type { UniqueAddress } from "../../src/actor/index.ts";
import { isConverged, leaderOf } from "../../src/cluster/convergence.ts";
import { diffSnapshots } from "../../src/cluster/events.ts";
import {
  checkTimeouts,
  emptyDetector,
  observePeers,
  recordAck,
  unreachableKeys,
} from "../../src/cluster/failure-detector.ts";
import { authorizeGossip } from "../../src/cluster/gossip/authorize.ts";
import { membershipDigest } from "../../src/cluster/gossip/digest.ts";
import { leaderActions } from "../../src/cluster/leader-actions.ts";
import { type Member, memberKey } from "../../src/cluster/member.ts";
import type { ClusterSnapshot } from "../../src/cluster/snapshot.ts";
import { A, B, C, map, member, ua } from "./fixtures/member-maps.ts";

test("digest is SHA-256 over sorted records: address, status number, revision, author, roles, NUL-separated", () => {
  const members = map(member(B, "Down", { revision: 3, changedBy: "x", roles: ["r1", "r2"] }), member(A, "Up"));
  const expected = createHash("sha256")
    .update(`${A}\x001\x001\x00${A.uid}\n`)
    .update(`${B}\x004\x003\x00x\x00r1\x00r2\n`)
    .digest("hex");
  assert.equal(membershipDigest(members), expected);
  assert.equal(
    membershipDigest(map(member(A, "Up"), member(B, "Down", { revision: 3, changedBy: "x", roles: ["r1", "r2"] }))),
    expected,
  );
  assert.notEqual(membershipDigest(map(member(A, "Leaving"))), membershipDigest(map(member(A, "Up"))));
  // Joining records are not part of the digest (gossip never carries them).
  assert.equal(membershipDigest(map(member(A, "Up"), member(C, "Joining"))), membershipDigest(map(member(A, "Up"))));
});

test("leader is the lowest reachable Up or Leaving member", () => {
  const members = map(member(A, "Joining"), member(B, "Leaving"), member(C, "Up"));
  assert.equal(String(leaderOf(members, new Set())), String(B));
  assert.equal(String(leaderOf(members, new Set([memberKey(member(B, "Up"))]))), String(C));
  assert.equal(leaderOf(map(member(A, "Exiting"), member(B, "Down")), new Set()), null);
});

test("convergence needs every reachable Up member other than self to ack the current digest", () => {
  const members = map(member(A, "Up"), member(B, "Up"), member(C, "Up"));
  const digest = membershipDigest(members);
  const acks = new Map([[String(B), digest]]);
  assert.equal(isConverged(members, A, new Set(), acks, digest), false, "C has not acked");
  assert.equal(isConverged(members, A, new Set([String(C)]), acks, digest), true, "unreachable C does not block");
  assert.equal(isConverged(members, A, new Set(), new Map([...acks, [String(C), "old"]]), digest), false);
  const leaving = map(member(A, "Up"), member(B, "Up"), member(C, "Leaving"));
  assert.equal(isConverged(leaving, A, new Set(), acks, digest), true, "a Leaving member does not block");
});

test("leader actions: Joining→Up with fresh up-numbers, Leaving→Exiting when guards pass, Exiting/Down→Removed", () => {
  const members = map(
    member(A, "Up", { upNumber: 4 }),
    member(B, "Joining", { upNumber: 0 }),
    member(C, "Leaving"),
    member(ua(2554), "Exiting"),
    member(ua(2555), "Down"),
  );
  const { members: next, changed } = leaderActions(members, A, true, () => true);
  assert.equal(changed.length, 4);
  const get = (who: UniqueAddress) => next.get(String(who))!;
  assert.equal(get(B).status, "Up");
  assert.equal(get(B).upNumber, 5);
  assert.equal(get(B).changedBy, A.uid);
  assert.equal(get(B).revision, 2);
  assert.equal(get(C).status, "Exiting");
  assert.equal(get(ua(2554)).status, "Removed");
  assert.equal(get(ua(2555)).status, "Removed");

  const guarded = leaderActions(members, A, true, (m) => !m.uniqueAddress.equals(C));
  assert.equal(guarded.members.get(String(C))!.status, "Leaving", "a guard that says no holds Leaving");
  const throwing = leaderActions(members, A, true, () => {
    throw new Error("guard broke");
  });
  assert.equal(throwing.members.get(String(C))!.status, "Leaving", "a throwing guard counts as not ready");
  const noLeader = leaderActions(members, A, false, () => true);
  assert.equal(noLeader.members.get(String(B))!.status, "Joining", "only a leader promotes joiners");
});

test("gossip authorisation rules", () => {
  const local = map(member(A, "Up"), member(B, "Up"), member(C, "Up", { changedBy: A.uid, revision: 2 }));
  const d = ua(2554);
  // identical records pass from anyone
  assert.equal(authorizeGossip(local, [local.get(String(C))!], B, A).accepted.length, 1);
  // a Joining record never passes, not even from the leader
  assert.deepEqual(
    authorizeGossip(local, [member(d, "Joining", { changedBy: A.uid })], A, A).rejected.map((r) => r.reason),
    ["joining"],
  );
  // an unknown Up record passes from a non-leader only when it is the sender's own, self-authored record
  assert.equal(authorizeGossip(map(member(A, "Up")), [member(B, "Up")], B, A).accepted.length, 1);
  assert.deepEqual(
    authorizeGossip(local, [member(d, "Up", { changedBy: B.uid })], B, A).rejected.map((r) => r.reason),
    ["phantom"],
    "authored by the sender, but it describes another node",
  );
  assert.deepEqual(
    authorizeGossip(local, [member(d, "Up")], B, A).rejected.map((r) => r.reason),
    ["phantom"],
  );
  // other changes (terminal ones included) only from the leader, authored by it
  const down = member(C, "Down", { changedBy: B.uid, revision: 3 });
  assert.equal(authorizeGossip(local, [down], B, A).rejected.length, 1, "B is not the leader");
  assert.equal(authorizeGossip(local, [down], B, B).accepted.length, 1, "B is the leader and authored it");
  assert.equal(authorizeGossip(local, [{ ...down, changedBy: C.uid }], B, B).rejected.length, 1, "not authored by B");
});

test("failure detector: timeout on the monotonic clock since the last ack; an ack restores reachability", () => {
  const key = String(B);
  let d = observePeers(emptyDetector, new Set([key]), 1_000);
  d = checkTimeouts(d, 1_500, 500);
  assert.equal(unreachableKeys(d).size, 0, "exactly the timeout is not yet too late");
  d = checkTimeouts(d, 1_501, 500);
  assert.deepEqual([...unreachableKeys(d)], [key]);
  d = recordAck(d, key, 1_600);
  assert.equal(unreachableKeys(d).size, 0);
  assert.equal(observePeers(d, new Set(), 1_700).size, 0, "forgotten when no longer monitored");
  assert.equal(recordAck(emptyDetector, key, 1), emptyDetector, "acks from unknown peers are ignored");
});

function snap(members: Member[], extra: Partial<ClusterSnapshot> = {}): ClusterSnapshot {
  return { self: A, selfStatus: "Up", members, unreachable: [], leader: A, converged: true, ...extra };
}

test("events derived from two snapshots", () => {
  const before = snap([member(A, "Up"), member(B, "Joining"), member(C, "Up")]);
  const after = snap([member(A, "Up"), member(B, "Up"), member(C, "Leaving"), member(ua(2554), "Down")], {
    unreachable: [A],
    leader: B,
    converged: false,
  });
  const types = diffSnapshots(before, after).map((e) => e.type);
  assert.deepEqual(types, [
    "MemberUp",
    "MemberLeft",
    "MemberDowned",
    "UnreachableMember",
    "LeaderChanged",
    "ConvergenceChanged",
  ]);
  const removed = diffSnapshots(
    after,
    snap([member(A, "Up"), member(B, "Up"), member(C, "Exiting")], { unreachable: [], leader: B, converged: false }),
  );
  assert.deepEqual(
    removed.map((e) => e.type),
    ["MemberExited", "MemberRemoved", "ReachableMember"],
  );
  const gone = removed.find((e) => e.type === "MemberRemoved");
  assert.ok(gone?.type === "MemberRemoved" && gone.previousStatus === "Down" && gone.member.status === "Removed");
  assert.deepEqual(diffSnapshots(before, before), []);
});
