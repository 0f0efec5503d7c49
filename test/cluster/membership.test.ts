// The membership core driven through a simulated network with virtual time (no sockets, no sleeps).
import assert from "node:assert/strict";
import { test } from "node:test";
import { memberToJSON } from "../../src/cluster/member.ts";
import { snapshotOf } from "../../src/cluster/membership.ts";
import { ClusterGossip, ClusterJoin } from "../../src/cluster/messages.ts";
import { Sim, type SimNode } from "./sim.ts";

function startCluster(sim: Sim, count: number, firstPort = 2551): SimNode[] {
  const nodes: SimNode[] = [];
  for (let i = 0; i < count; i++) nodes.push(sim.start(firstPort + i, [firstPort]));
  return nodes;
}

function statusOf(sim: Sim, viewer: SimNode, subject: SimNode): string | undefined {
  return sim.snapshot(viewer).members.find((m) => m.uniqueAddress.equals(subject.self))?.status;
}

test("three and five nodes join through the first seed and converge Up with one leader", () => {
  for (const count of [3, 5]) {
    const sim = new Sim();
    const nodes = startCluster(sim, count);
    assert.ok(
      sim.until(() => sim.allUp(nodes)),
      JSON.stringify(sim.describe()),
    );
    const snap = sim.snapshot(nodes[2]!);
    assert.equal(String(snap.leader), String(nodes[0]!.self), "the lowest address leads");
    const upNumbers = snap.members.map((m) => m.upNumber).sort();
    assert.equal(new Set(upNumbers).size, count, "each member got its own up-number");
    assert.equal(snap.members.find((m) => m.uniqueAddress.equals(nodes[0]!.self))!.upNumber, 1);
  }
});

test("random delivery orders still converge (seeded)", () => {
  for (let seed = 1; seed <= 20; seed++) {
    const sim = new Sim({ seed, fanout: 2 });
    const nodes = startCluster(sim, 5);
    assert.ok(
      sim.until(() => sim.allUp(nodes)),
      `seed ${seed}: ${JSON.stringify(sim.describe())}`,
    );
  }
});

test("graceful leave: Leaving, Exiting, then Removed everywhere, and the leaver sees itself Removed", () => {
  const sim = new Sim();
  const nodes = startCluster(sim, 3);
  assert.ok(sim.until(() => sim.allUp(nodes)));
  const [a, b, c] = nodes as [SimNode, SimNode, SimNode];
  assert.equal(sim.input(c, { kind: "leave", target: c.self }), true);
  assert.ok(
    sim.until(() => sim.snapshot(c).selfStatus === "Removed" && sim.allUp([a, b], 2)),
    JSON.stringify(sim.describe()),
  );
  assert.equal(statusOf(sim, a, c), undefined, "a Removed member leaves the snapshot");
  assert.equal(a.state.members.get(String(c.self))?.status, "Removed", "but stays as a tombstone");
});

test("the leader can leave too; leadership passes to the next lowest", () => {
  const sim = new Sim();
  const nodes = startCluster(sim, 3);
  assert.ok(sim.until(() => sim.allUp(nodes)));
  const [a, b, c] = nodes as [SimNode, SimNode, SimNode];
  sim.input(a, { kind: "leave", target: a.self });
  assert.ok(sim.until(() => sim.snapshot(a).selfStatus === "Removed" && sim.allUp([b, c], 2)));
  assert.equal(String(sim.snapshot(c).leader), String(b.self));
});

test("a departure guard holds a member in Leaving until it passes", () => {
  const sim = new Sim();
  const nodes = startCluster(sim, 3);
  assert.ok(sim.until(() => sim.allUp(nodes)));
  const [a, , c] = nodes as [SimNode, SimNode, SimNode];
  let ready = false;
  a.departureReady = () => ready;
  sim.input(c, { kind: "leave", target: c.self });
  assert.ok(sim.until(() => statusOf(sim, a, c) === "Leaving"));
  sim.advance(1_000);
  assert.equal(statusOf(sim, a, c), "Leaving");
  ready = true;
  assert.ok(sim.until(() => sim.snapshot(c).selfStatus === "Removed"));
});

test("a crashed node is unreachable with its status unchanged until downed through the leader, then Removed", () => {
  const sim = new Sim({ heartbeatTimeoutMs: 500 });
  const nodes = startCluster(sim, 3);
  assert.ok(sim.until(() => sim.allUp(nodes)));
  const [a, b, c] = nodes as [SimNode, SimNode, SimNode];
  sim.crash(c);
  assert.ok(sim.until(() => [a, b].every((n) => sim.snapshot(n).unreachable.some((u) => u.equals(c.self)))));
  sim.advance(3_000);
  for (const n of [a, b]) assert.equal(statusOf(sim, n, c), "Up", "reachability never changes a status");
  assert.equal(b.stats.heartbeatTimeouts, 1);
  assert.equal(sim.input(b, { kind: "down", target: b.self }), false, "down of self is refused");
  assert.equal(sim.input(a, { kind: "down", target: c.self }), true);
  assert.ok(
    sim.until(() => sim.allUp([a, b], 2)),
    JSON.stringify(sim.describe()),
  );
  assert.equal(sim.snapshot(b).unreachable.length, 0, "the removed member is pruned from reachability");
});

test("down from a non-leader goes through the leader only when both have a shared secret", () => {
  for (const secret of [false, true]) {
    const sim = new Sim({ remoteDownAllowed: secret });
    const nodes = startCluster(sim, 3);
    assert.ok(sim.until(() => sim.allUp(nodes)));
    const [a, b, c] = nodes as [SimNode, SimNode, SimNode];
    sim.crash(c);
    assert.ok(sim.until(() => sim.snapshot(b).unreachable.length === 1));
    assert.equal(sim.input(b, { kind: "down", target: c.self }), true, "sent to the leader");
    sim.advance(500);
    if (secret) {
      assert.equal(a.stats.downRequestsAccepted, 1);
      assert.ok(sim.until(() => sim.allUp([a, b], 2)));
    } else {
      assert.equal(a.stats.downRequestsRejected, 1);
      assert.equal(statusOf(sim, a, c), "Up");
    }
  }
});

test("a blackholed peer becomes unreachable, then reachable again, with no status change", () => {
  const sim = new Sim({ heartbeatTimeoutMs: 500 });
  const nodes = startCluster(sim, 3);
  assert.ok(sim.until(() => sim.allUp(nodes)));
  const [a, b, c] = nodes as [SimNode, SimNode, SimNode];
  const before = JSON.stringify(sim.snapshot(a).members);
  sim.blackhole(a, c);
  sim.blackhole(b, c);
  assert.ok(sim.until(() => sim.snapshot(a).unreachable.length === 1 && sim.snapshot(c).unreachable.length === 2));
  assert.equal(String(sim.snapshot(c).leader), String(c.self), "each side of a partition sees its own leader");
  sim.unblackhole(a, c);
  sim.unblackhole(b, c);
  assert.ok(sim.until(() => sim.allUp(nodes)));
  assert.equal(JSON.stringify(sim.snapshot(a).members), before, "no record changed");
  assert.ok(a.stats.reachabilityRestorations >= 1);
});

test("a restarted node on the same port joins with a new uid; the old uid cannot rejoin", () => {
  const sim = new Sim();
  const nodes = startCluster(sim, 3);
  assert.ok(sim.until(() => sim.allUp(nodes)));
  const [a, b, c] = nodes as [SimNode, SimNode, SimNode];
  sim.crash(c);
  assert.ok(sim.until(() => sim.snapshot(a).unreachable.length === 1));
  const c2 = sim.start(2553, [2551]);
  sim.advance(1_000);
  assert.ok(a.stats.joinRejections > 0, "the new incarnation waits while the old one is still a member");
  assert.equal(sim.snapshot(c2).selfStatus, "Joining");
  sim.input(a, { kind: "down", target: c.self });
  assert.ok(
    sim.until(() => sim.allUp([a, b, c2])),
    JSON.stringify(sim.describe()),
  );
  assert.notEqual(c2.self.uid, c.self.uid);
  // The old incarnation comes back (say it was only paused): its uid is a tombstone and its join is refused.
  assert.equal(a.state.members.get(String(c.self))?.status, "Removed");
  const rejectsBefore = a.stats.joinRejections;
  const join = new ClusterJoin("sim-cluster", String(c.self), memberToJSON(c.state.members.get(String(c.self))!));
  sim.input(a, { kind: "message", origin: c.self, senderPath: `${c.self.address}/system/cluster`, message: join });
  assert.equal(a.stats.joinRejections, rejectsBefore + 1);
  assert.ok(a.rejects.at(-1)?.includes("cannot rejoin with the same uid"));
  assert.equal(a.state.members.get(String(c.self))?.status, "Removed");
});

test("messages with a wrong cluster name, a forged sender or another incarnation are rejected and counted", () => {
  const sim = new Sim();
  const [a, b] = startCluster(sim, 2) as [SimNode, SimNode];
  assert.ok(sim.until(() => sim.allUp([a, b])));
  const other = sim.start(2600, [2551], { clusterName: "other-cluster" });
  sim.advance(500);
  assert.ok(a.stats.protocolRejections > 0);
  assert.ok(a.rejects.some((r) => r.includes('cluster name "other-cluster"')));
  assert.equal(sim.snapshot(other).selfStatus, "Joining");
  assert.equal(sim.snapshot(a).members.length, 2);
  const gossip = new ClusterGossip("sim-cluster", String(b.self), String(a.self), 1, a.state.digest, []);
  const rejectsBefore = a.stats.protocolRejections;
  sim.input(a, {
    kind: "message",
    origin: other.self,
    senderPath: `${other.self.address}/system/cluster`,
    message: gossip,
  });
  sim.input(a, { kind: "message", origin: null, senderPath: null, message: gossip });
  sim.input(a, { kind: "message", origin: b.self, senderPath: `${b.self.address}/user/x`, message: gossip });
  const stale = new ClusterGossip("sim-cluster", String(b.self), `${a.self.address}#olduid`, 1, a.state.digest, []);
  sim.input(a, { kind: "message", origin: b.self, senderPath: `${b.self.address}/system/cluster`, message: stale });
  sim.input(a, { kind: "message", origin: b.self, senderPath: null, message: gossip });
  assert.equal(a.stats.protocolRejections, rejectsBefore + 5);
  assert.equal(snapshotOf(a.state).members.length, 2);
});

test("two seeds that each formed a cluster merge into one through their joins", () => {
  for (let seed = 1; seed <= 10; seed++) {
    const sim = new Sim({ seed });
    const a = sim.start(2551, [2551, 2552]);
    const b = sim.start(2552, [2551, 2552]);
    assert.equal(sim.snapshot(a).selfStatus, "Up", "a seed listing itself starts Up");
    assert.equal(sim.snapshot(b).selfStatus, "Up");
    const c = sim.start(2553, [2552]);
    const d = sim.start(2554, [2551]);
    assert.ok(
      sim.until(() => sim.allUp([a, b, c, d])),
      `seed ${seed}: ${JSON.stringify(sim.describe())}`,
    );
  }
});

test("a removed member's record is never resurrected by delayed or repeated gossip (seeded histories)", () => {
  for (let seed = 1; seed <= 10; seed++) {
    const sim = new Sim({ seed, fanout: 2 });
    const nodes = startCluster(sim, 4);
    assert.ok(sim.until(() => sim.allUp(nodes)));
    const [a, b, , d] = nodes as [SimNode, SimNode, SimNode, SimNode];
    // Gossip captured before the removal, replayed afterwards.
    const stale = new ClusterGossip(
      "sim-cluster",
      String(b.self),
      String(a.self),
      1,
      b.state.digest,
      [...b.state.members.values()].map(memberToJSON),
    );
    sim.crash(d);
    assert.ok(sim.until(() => sim.snapshot(a).unreachable.length === 1));
    sim.input(a, { kind: "down", target: d.self });
    assert.ok(
      sim.until(() => sim.allUp([a, b, nodes[2]!], 3)),
      `seed ${seed}`,
    );
    sim.input(a, { kind: "message", origin: b.self, senderPath: `${b.self.address}/system/cluster`, message: stale });
    assert.equal(a.state.members.get(String(d.self))?.status, "Removed");
    // The removed node itself comes back (it was only paused): its gossip is dropped, not merged.
    const fromRemoved = new ClusterGossip("sim-cluster", String(d.self), String(a.self), 9, d.state.digest, [
      ...[...d.state.members.values()].map(memberToJSON),
    ]);
    const dropped = a.stats.messagesFromRemovedDropped;
    sim.input(a, {
      kind: "message",
      origin: d.self,
      senderPath: `${d.self.address}/system/cluster`,
      message: fromRemoved,
    });
    assert.equal(a.stats.messagesFromRemovedDropped, dropped + 1);
    assert.equal(a.state.members.get(String(d.self))?.status, "Removed");
    sim.advance(500);
    for (const n of sim.live()) assert.equal(n.state.members.get(String(d.self))?.status, "Removed");
  }
});

test("a join that would exceed maxMembers is refused whole and counted", () => {
  const sim = new Sim({ maxMembers: 2 });
  const [a, b] = startCluster(sim, 2) as [SimNode, SimNode];
  assert.ok(sim.until(() => sim.allUp([a, b])));
  const c = sim.start(2560, [2551]);
  sim.advance(500);
  assert.ok(a.stats.capacityRejections > 0);
  assert.equal(sim.snapshot(c).selfStatus, "Joining");
  assert.equal(sim.snapshot(a).members.length, 2);
});
