// Safety rules of the membership core that a mutation audit found untested: each test here fails when the rule it
// names is dropped from src/cluster. Pure cores and the simulated network only (virtual time, no sockets).
import assert from "node:assert/strict";
import { test } from "node:test";
import { UniqueAddress } from "../../src/actor/index.ts";
import { isConverged } from "../../src/cluster/convergence.ts";
import { authorizeGossip } from "../../src/cluster/gossip/authorize.ts";
import { type MemberStatus, memberToJSON } from "../../src/cluster/member.ts";
import { snapshotOf } from "../../src/cluster/membership.ts";
import { ClusterDown, ClusterGossip, ClusterJoin, ClusterLeave, ClusterWelcome } from "../../src/cluster/messages.ts";
import { A, B, C, map, member } from "./fixtures/member-maps.ts";
import { Sim, type SimNode, address as simAddress } from "./sim.ts";

function startCluster(sim: Sim, count: number): SimNode[] {
  const nodes: SimNode[] = [];
  for (let i = 0; i < count; i++) nodes.push(sim.start(2551 + i, [2551]));
  return nodes;
}

function statusOn(viewer: SimNode, subject: SimNode): MemberStatus | undefined {
  return viewer.state.members.get(String(subject.self))?.status;
}

function from(node: SimNode) {
  return { origin: node.self, senderPath: `${node.self.address}/system/cluster` };
}

test("a non-leader's change to a known record is refused even when the sender authored it", () => {
  const local = map(member(A, "Up"), member(B, "Up"), member(C, "Up", { changedBy: A.uid, revision: 2 }));
  // B (not the leader, A is) re-authors C's Up record with a higher revision and another up-number.
  const rewritten = member(C, "Up", { changedBy: B.uid, revision: 3, upNumber: 9 });
  assert.deepEqual(
    authorizeGossip(local, [rewritten], B, A).rejected.map((r) => r.reason),
    ["notLeader"],
  );
  // Nor may B bump its own known Up record (new roles) without being the leader.
  const ownBump = member(B, "Up", { revision: 2, roles: ["admin"] });
  assert.deepEqual(
    authorizeGossip(local, [ownBump], B, A).rejected.map((r) => r.reason),
    ["notLeader"],
  );
  assert.equal(authorizeGossip(local, [ownBump], B, B).accepted.length, 1, "the same change from the leader passes");
});

test("convergence counts only Up members: a Joining member without an ack does not block it", () => {
  const members = map(member(A, "Up"), member(B, "Up"), member(C, "Joining", { upNumber: 0 }));
  const digest = "d";
  assert.equal(isConverged(members, A, new Set(), new Map([[String(B), digest]]), digest), true);
  assert.equal(isConverged(members, A, new Set(), new Map(), digest), false, "B (Up) has not acked");
});

test("leader actions wait for convergence: a reachable Up member that has not acked holds Leaving and Joining", () => {
  // A long detector timeout: the crashed node stays reachable (and unacknowledging) for 5 s of virtual time.
  const sim = new Sim({ heartbeatTimeoutMs: 5_000 });
  const nodes = startCluster(sim, 3);
  assert.ok(sim.until(() => sim.allUp(nodes)));
  const [a, b, c] = nodes as [SimNode, SimNode, SimNode];
  sim.crash(c);
  assert.equal(sim.input(a, { kind: "leave", target: b.self }), true, "the leader accepts the leave");
  assert.equal(statusOn(a, b), "Leaving");
  const d = sim.start(2554, [2551]);
  sim.advance(2_000);
  assert.equal(sim.snapshot(a).converged, false, "c has not acknowledged the new digest");
  assert.equal(sim.snapshot(a).unreachable.length, 0, "c is not yet unreachable");
  assert.equal(statusOn(a, b), "Leaving", "no Leaving → Exiting before convergence");
  assert.equal(statusOn(a, d), "Joining", "no Joining → Up before convergence");
  assert.equal(sim.snapshot(d).selfStatus, "Joining");
  // Once c is unreachable it no longer blocks convergence, and the leader acts.
  assert.ok(
    sim.until(() => statusOn(a, b) === "Removed" && statusOn(a, d) === "Up"),
    JSON.stringify(sim.describe()),
  );
  assert.equal(statusOn(a, c), "Up", "reachability never changes a status");
});

test("a welcome is accepted only from a configured seed", () => {
  const sim = new Sim();
  const [a, b] = startCluster(sim, 2) as [SimNode, SimNode];
  assert.ok(sim.until(() => sim.allUp([a, b])));
  const joiner = sim.start(2560, [2599]); // its only seed never answers
  const records = [...b.state.members.values()].map(memberToJSON);
  const welcome = new ClusterWelcome("sim-cluster", String(b.self), String(joiner.self), records);
  sim.input(joiner, { kind: "message", ...from(b), message: welcome });
  assert.equal(joiner.stats.welcomesIgnored, 1);
  assert.equal(joiner.stats.welcomesReceived, 0);
  assert.equal(joiner.state.members.size, 1, "nothing from a non-seed was merged");
  assert.equal(statusOn(joiner, b), undefined);
});

test("a join is refused when its record is not the sender's own, or is Up but authored by another node", () => {
  const sim = new Sim();
  const [a, b] = startCluster(sim, 2) as [SimNode, SimNode];
  assert.ok(sim.until(() => sim.allUp([a, b])));
  const x = new UniqueAddress(simAddress(2560), "x1");
  const y = new UniqueAddress(simAddress(2561), "y1");
  const xFrom = { origin: x, senderPath: `${x.address}/system/cluster` };
  const record = (who: UniqueAddress, status: MemberStatus, changedBy: string) =>
    memberToJSON({ uniqueAddress: who, status, roles: [], upNumber: status === "Up" ? 1 : 0, revision: 5, changedBy });
  const before = a.stats.protocolRejections;
  // x asks to join on behalf of y.
  sim.input(a, {
    kind: "message",
    ...xFrom,
    message: new ClusterJoin("sim-cluster", String(x), record(y, "Joining", "y1")),
  });
  // x joins with an Up record someone else authored (only a seed's self-authored Up record may come in Up).
  sim.input(a, {
    kind: "message",
    ...xFrom,
    message: new ClusterJoin("sim-cluster", String(x), record(x, "Up", "forger")),
  });
  assert.equal(a.stats.protocolRejections, before + 2);
  assert.equal(a.state.members.has(String(x)), false);
  assert.equal(a.state.members.has(String(y)), false);
  assert.equal(snapshotOf(a.state).members.length, 2);
});

test("a message whose claimed sender is another incarnation of the transport's address is refused", () => {
  const sim = new Sim();
  const [a, b] = startCluster(sim, 2) as [SimNode, SimNode];
  assert.ok(sim.until(() => sim.allUp([a, b])));
  const otherIncarnation = new UniqueAddress(b.self.address, "not-b-uid");
  const before = a.stats.protocolRejections;
  const received = a.stats.gossipReceived;
  const gossip = new ClusterGossip("sim-cluster", String(otherIncarnation), String(a.self), 1, a.state.digest, []);
  sim.input(a, { kind: "message", ...from(b), message: gossip });
  assert.equal(a.stats.protocolRejections, before + 1);
  assert.equal(a.stats.gossipReceived, received, "it never reached the protocol");
  assert.ok(a.rejects.at(-1)?.includes("is not the transport identity"));
});

test("leave and down requests: only the leader acts; a leave request must name its sender", () => {
  const sim = new Sim({ remoteDownAllowed: false });
  const [a, b, c] = startCluster(sim, 3) as [SimNode, SimNode, SimNode];
  assert.ok(sim.until(() => sim.allUp([a, b, c])));
  // b may not ask the leader to make c leave (docs/protocol.md §4.9: a leave request is valid only when target == sender).
  sim.input(a, {
    kind: "message",
    ...from(b),
    message: new ClusterLeave("sim-cluster", String(b.self), String(c.self)),
  });
  assert.equal(a.stats.leaveRequestsRejected, 1);
  assert.equal(statusOn(a, c), "Up");
  // A non-leader ignores a leave request, even the sender's own.
  sim.input(b, {
    kind: "message",
    ...from(c),
    message: new ClusterLeave("sim-cluster", String(c.self), String(c.self)),
  });
  assert.equal(b.stats.leaveRequestsRejected, 1);
  assert.equal(statusOn(b, c), "Up");

  const secret = new Sim({ remoteDownAllowed: true });
  const [p, q, r] = startCluster(secret, 3) as [SimNode, SimNode, SimNode];
  assert.ok(secret.until(() => secret.allUp([p, q, r])));
  // Even with a secret, a non-leader ignores a down request: down goes through the leader only.
  secret.input(q, {
    kind: "message",
    ...from(r),
    message: new ClusterDown("sim-cluster", String(r.self), String(p.self)),
  });
  assert.equal(q.stats.downRequestsRejected, 1);
  assert.equal(q.stats.downRequestsAccepted, 0);
  assert.equal(statusOn(q, p), "Up");
});

test("a down request for a removed member never turns its tombstone back into Down", () => {
  const sim = new Sim({ remoteDownAllowed: true, heartbeatTimeoutMs: 300 });
  const [a, b, c] = startCluster(sim, 3) as [SimNode, SimNode, SimNode];
  assert.ok(sim.until(() => sim.allUp([a, b, c])));
  sim.crash(c);
  assert.ok(sim.until(() => sim.snapshot(a).unreachable.length === 1));
  assert.equal(sim.input(a, { kind: "down", target: c.self }), true);
  assert.ok(sim.until(() => statusOn(a, c) === "Removed" && statusOn(b, c) === "Removed"));
  const record = a.state.members.get(String(c.self));
  sim.input(a, {
    kind: "message",
    ...from(b),
    message: new ClusterDown("sim-cluster", String(b.self), String(c.self)),
  });
  assert.equal(statusOn(a, c), "Removed");
  assert.equal(a.state.members.get(String(c.self)), record, "the tombstone is untouched");
  sim.advance(500);
  for (const n of [a, b]) assert.equal(statusOn(n, c), "Removed");
});

test("a leave request never moves a Down member back to Leaving", () => {
  // c crashed but is not yet unreachable, so the leader is not converged and keeps d in Down (not yet Removed).
  const sim = new Sim({ heartbeatTimeoutMs: 5_000 });
  const [a, b, c, d] = startCluster(sim, 4) as [SimNode, SimNode, SimNode, SimNode];
  assert.ok(sim.until(() => sim.allUp([a, b, c, d])));
  sim.crash(c);
  assert.equal(sim.input(a, { kind: "down", target: d.self }), true);
  assert.equal(statusOn(a, d), "Down");
  assert.equal(sim.input(a, { kind: "leave", target: d.self }), true, "already gone counts as accepted");
  assert.equal(statusOn(a, d), "Down");
  sim.input(a, {
    kind: "message",
    ...from(d),
    message: new ClusterLeave("sim-cluster", String(d.self), String(d.self)),
  });
  assert.equal(statusOn(a, d), "Down");
  assert.equal(statusOn(b, d) === "Leaving", false);
});

test("the leader refuses a down request that targets the leader itself", () => {
  const sim = new Sim({ remoteDownAllowed: true });
  const [a, b, c] = startCluster(sim, 3) as [SimNode, SimNode, SimNode];
  assert.ok(sim.until(() => sim.allUp([a, b, c])));
  sim.input(a, {
    kind: "message",
    ...from(b),
    message: new ClusterDown("sim-cluster", String(b.self), String(a.self)),
  });
  assert.equal(a.stats.downRequestsRejected, 1);
  assert.equal(a.stats.downRequestsAccepted, 0);
  assert.equal(sim.snapshot(a).selfStatus, "Up");
  sim.advance(500);
  for (const n of [a, b, c]) assert.equal(statusOn(n, a), "Up");
});

test("reachability restorations count only an unreachable peer answering again, once per recovery", () => {
  const sim = new Sim({ heartbeatTimeoutMs: 300 });
  const [a, b, c] = startCluster(sim, 3) as [SimNode, SimNode, SimNode];
  assert.ok(sim.until(() => sim.allUp([a, b, c])));
  sim.advance(500);
  assert.ok(a.stats.heartbeatAcksReceived > 0);
  assert.equal(a.stats.reachabilityRestorations, 0, "acks from reachable peers restore nothing");
  sim.blackhole(a, c);
  assert.ok(sim.until(() => sim.snapshot(a).unreachable.length === 1 && sim.snapshot(c).unreachable.length === 1));
  sim.unblackhole(a, c);
  assert.ok(sim.until(() => sim.allUp([a, b, c])));
  sim.advance(500);
  assert.equal(a.stats.reachabilityRestorations, 1);
  assert.equal(c.stats.reachabilityRestorations, 1);
  assert.equal(b.stats.reachabilityRestorations, 0);
  assert.equal(a.stats.heartbeatTimeouts, 1);
});

test("a leave request lost on the way to the leader is repeated every gossip round until it lands", () => {
  const sim = new Sim({ heartbeatTimeoutMs: 5_000 });
  const [a, b, c] = startCluster(sim, 3) as [SimNode, SimNode, SimNode];
  assert.ok(sim.until(() => sim.allUp([a, b, c])));
  sim.blackhole(a, b); // the first request to the leader is dropped
  assert.equal(sim.input(b, { kind: "leave", target: b.self }), true, "sent to the leader");
  sim.advance(200);
  assert.equal(statusOn(a, b), "Up", "the leader never heard of it");
  sim.unblackhole(a, b);
  assert.ok(
    sim.until(() => sim.snapshot(b).selfStatus === "Removed" && sim.allUp([a, c], 2), 3_000),
    JSON.stringify(sim.describe()),
  );
});
