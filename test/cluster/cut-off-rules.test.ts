// Membership after a node was cut off (paused, partitioned, or its peers crashed) while it left or joined: liveness
// bugs the node simulator (test/sim/node-sim.ts) found, each of which left the cluster unconverged (or a node outside
// it) for good. Each test fails without its fix.
import assert from "node:assert/strict";
import { test } from "node:test";
import { authorizeGossip } from "../../src/cluster/gossip/authorize.ts";
import { memberToJSON } from "../../src/cluster/member.ts";
import { joinRoundsBeforeWidening, step } from "../../src/cluster/membership.ts";
import { ClusterGossip, ClusterLeave } from "../../src/cluster/messages.ts";
import { A, B, C, map, member } from "./fixtures/member-maps.ts";
import { Sim, type SimNode } from "./sim.ts";

function startCluster(sim: Sim, count: number): SimNode[] {
  const nodes: SimNode[] = [];
  for (let i = 0; i < count; i++) nodes.push(sim.start(2551 + i, [2551]));
  assert.ok(
    sim.until(() => sim.allUp(nodes)),
    JSON.stringify(sim.describe()),
  );
  return nodes;
}

const statusIn = (viewer: SimNode, of: SimNode): string | undefined =>
  viewer.state.members.get(String(of.self))?.status;

test("rule: the same transition by another leader (only the author differs) is merged from anyone; other changes are not", () => {
  // A (the leader here) applied C's leave; B applied it too while A was unreachable to it. The two records differ only
  // in their author, and the merge's tie-break picks one of them everywhere.
  const local = map(member(A, "Up"), member(B, "Up"), member(C, "Leaving", { changedBy: A.uid, revision: 3 }));
  const byB = member(C, "Leaving", { changedBy: B.uid, revision: 3 });
  const same = authorizeGossip(local, [byB], B, A);
  assert.deepEqual(same.rejected, []);
  assert.deepEqual(same.accepted, [byB]);
  // Anything more than the author is still the leader's to change: roles, up-number, a later revision.
  for (const changed of [
    member(C, "Leaving", { changedBy: B.uid, revision: 3, roles: ["x"] }),
    member(C, "Leaving", { changedBy: B.uid, revision: 3, upNumber: 9 }),
    member(C, "Leaving", { changedBy: B.uid, revision: 4 }),
    member(C, "Exiting", { changedBy: B.uid, revision: 3 }),
  ]) {
    assert.deepEqual(
      authorizeGossip(local, [changed], B, A).rejected.map((r) => r.reason),
      ["notLeader"],
      JSON.stringify(changed),
    );
  }
});

// Churn seed 671 of the node simulator: C, cut off, applied its own leave (Leaving, revision 2, its own work); a leader
// since removed applied it again (revision 3). The leader now (A) holds the later record, which is not its own work,
// and B refused it from A: the digests differed for good.
test("rule: from the leader, a record that says what the local one says at a later revision passes, whoever wrote it", () => {
  const local = map(member(A, "Up"), member(B, "Up"), member(C, "Leaving", { changedBy: C.uid, revision: 2 }));
  const later = member(C, "Leaving", { changedBy: "u9", revision: 3 });
  assert.deepEqual(authorizeGossip(local, [later], A, A).accepted, [later]);
  // Not from a member that is not the leader, and not when it says anything else.
  assert.deepEqual(
    authorizeGossip(local, [later], B, A).rejected.map((r) => r.reason),
    ["notLeader"],
  );
  for (const other of [
    member(C, "Leaving", { changedBy: "u9", revision: 3, upNumber: 9 }),
    member(C, "Exiting", { changedBy: "u9", revision: 3 }),
  ]) {
    assert.deepEqual(
      authorizeGossip(local, [other], A, A).rejected.map((r) => r.reason),
      ["notLeader"],
      JSON.stringify(other),
    );
  }
});

test("rule: a node cut off from every peer that leaves (as its own leader) is removed once it can reach the cluster", () => {
  const sim = new Sim();
  const [a, b, c] = startCluster(sim, 3) as [SimNode, SimNode, SimNode];
  sim.blackhole(c, a);
  sim.blackhole(c, b);
  assert.ok(
    sim.until(() => sim.snapshot(c).unreachable.length === 2, 5_000),
    JSON.stringify(sim.describe()),
  );
  // Seeing no reachable peer, c leads itself and applies its own leave, which a and b refuse from a non-leader. Its
  // shards hold it at Leaving (the sharding departure guard), as in the simulator's histories.
  for (const n of [a, b, c]) n.departureReady = () => false;
  sim.input(c, { kind: "leave", target: c.self });
  assert.equal(statusIn(c, c), "Leaving");
  assert.equal(c.state.members.get(String(c.self))?.changedBy, c.self.uid);
  sim.unblackhole(c, a);
  sim.unblackhole(c, b);
  assert.ok(
    sim.until(() => statusIn(a, c) === "Leaving" && statusIn(b, c) === "Leaving", 5_000),
    `the leave did not reach the leader: ${JSON.stringify(sim.describe())}`,
  );
  for (const n of [a, b, c]) n.departureReady = () => true;
  assert.ok(
    sim.until(() => statusIn(a, c) === "Removed" && statusIn(b, c) === "Removed", 10_000),
    `c was not removed after the partition healed: ${JSON.stringify(sim.describe())}`,
  );
});

test("rule: a joiner welcomed by a seed that is not the leader, whose join to the leader was lost, asks the leader again", () => {
  const sim = new Sim();
  const [a, b] = startCluster(sim, 2) as [SimNode, SimNode];
  // d's seed is b; its join to the leader a is lost. b welcomes it with the member list (a and b), and d, whom nobody
  // heartbeats yet, soon sees both unreachable.
  const d = sim.start(2554, [2552]);
  sim.blackhole(d, a);
  sim.advance(1_000);
  assert.equal(statusIn(d, d), "Joining");
  assert.equal(statusIn(a, d), undefined);
  sim.unblackhole(d, a);
  assert.ok(
    sim.until(() => sim.allUp([a, b, d]), 10_000),
    `d was not admitted after the partition healed: ${JSON.stringify(sim.describe())}`,
  );
});

test("rule: an Exiting node takes its Removed record from a member that is not its leader", () => {
  const sim = new Sim();
  const [a, b, c] = startCluster(sim, 3) as [SimNode, SimNode, SimNode];
  for (const n of [a, b, c]) n.departureReady = () => false;
  sim.input(c, { kind: "leave", target: c.self });
  assert.ok(
    sim.until(() => statusIn(c, c) === "Leaving", 5_000),
    JSON.stringify(sim.describe()),
  );
  /** The gossip `from` sends c: c's own record moved to `status` by `from`. */
  const gossip = (from: SimNode, status: "Exiting" | "Removed") => {
    const records = [...c.state.members.values()].map((m) =>
      m.uniqueAddress.equals(c.self)
        ? memberToJSON({ ...m, status, revision: m.revision + 1, changedBy: from.self.uid })
        : memberToJSON(m),
    );
    const message = new ClusterGossip("sim-cluster", String(from.self), String(c.self), 9, "0".repeat(64), records);
    return step(
      c.state,
      { kind: "message", origin: from.self, senderPath: `${from.self.address}/system/cluster`, message },
      sim.nowMs,
    );
  };
  // The leader a moves c to Exiting; then b, leading while a was paused, removes it: c's leader is still a.
  [c.state] = gossip(a, "Exiting");
  assert.equal(statusIn(c, c), "Exiting");
  assert.equal(String(sim.snapshot(c).leader), String(a.self));
  const [next, effects] = gossip(b, "Removed");
  assert.equal(next.members.get(String(c.self))?.status, "Removed");
  assert.deepEqual(
    effects.filter((e) => e.kind === "gossip-rejected" || e.kind === "self-downed"),
    [],
    "neither refused nor taken as a downing",
  );
});

// Node simulator seed 176 (persistent histories): a leaving node, cut off, led itself; the member that moved it on
// and removed it was not its leader, so it refused its own Removed record and stayed Leaving for good.
test("rule: a Leaving node takes its Exiting or Removed record from a member that is not its leader", () => {
  for (const status of ["Exiting", "Removed"] as const) {
    const sim = new Sim();
    const [a, b, c] = startCluster(sim, 3) as [SimNode, SimNode, SimNode];
    for (const n of [a, b, c]) n.departureReady = () => false;
    sim.input(c, { kind: "leave", target: c.self });
    assert.ok(
      sim.until(() => statusIn(c, c) === "Leaving", 5_000),
      JSON.stringify(sim.describe()),
    );
    assert.equal(String(sim.snapshot(c).leader), String(a.self));
    const records = [...c.state.members.values()].map((m) =>
      m.uniqueAddress.equals(c.self)
        ? memberToJSON({ ...m, status, revision: m.revision + 1, changedBy: b.self.uid })
        : memberToJSON(m),
    );
    const message = new ClusterGossip("sim-cluster", String(b.self), String(c.self), 9, "0".repeat(64), records);
    const [next, effects] = step(
      c.state,
      { kind: "message", origin: b.self, senderPath: `${b.self.address}/system/cluster`, message },
      sim.nowMs,
    );
    assert.equal(next.members.get(String(c.self))?.status, status);
    assert.deepEqual(
      effects.filter((e) => e.kind === "gossip-rejected" || e.kind === "self-downed"),
      [],
      `${status}: neither refused nor taken as a downing`,
    );
    // Only about itself: b's word about a third member is still refused.
    const other = [...c.state.members.values()].map((m) =>
      m.uniqueAddress.equals(a.self)
        ? memberToJSON({ ...m, status: "Leaving", revision: m.revision + 1, changedBy: b.self.uid })
        : memberToJSON(m),
    );
    const [, otherEffects] = step(
      c.state,
      {
        kind: "message",
        origin: b.self,
        senderPath: `${b.self.address}/system/cluster`,
        message: new ClusterGossip("sim-cluster", String(b.self), String(c.self), 10, "0".repeat(64), other),
      },
      sim.nowMs,
    );
    assert.ok(otherEffects.some((e) => e.kind === "gossip-rejected" && e.reason === "notLeader"));
  }
});

// Node simulator seed 1471: a leaving node, paused, led itself and applied its own leave; the leader came to hold that
// record, and the third member refused it (not its leader's work). The leaver kept asking and the leader, seeing it
// Leaving already, did nothing: the cluster never converged again.
test("rule: the leader makes a Leaving record applied elsewhere its own when the leaver asks again", () => {
  const sim = new Sim();
  const [a, , c] = startCluster(sim, 3) as [SimNode, SimNode, SimNode];
  const record = a.state.members.get(String(c.self))!;
  const selfApplied = { ...record, status: "Leaving" as const, revision: record.revision + 1, changedBy: c.self.uid };
  a.state = { ...a.state, members: new Map(a.state.members).set(String(c.self), selfApplied) };
  const [next] = step(
    a.state,
    {
      kind: "message",
      origin: c.self,
      senderPath: `${c.self.address}/system/cluster`,
      message: new ClusterLeave("sim-cluster", String(c.self), String(c.self)),
    },
    sim.nowMs,
  );
  const now = next.members.get(String(c.self))!;
  assert.deepEqual([now.status, now.changedBy, now.revision], ["Leaving", a.self.uid, selfApplied.revision + 1]);
  // A record of its own work is left as it is: a repeated request changes nothing.
  const [again] = step(
    next,
    {
      kind: "message",
      origin: c.self,
      senderPath: `${c.self.address}/system/cluster`,
      message: new ClusterLeave("sim-cluster", String(c.self), String(c.self)),
    },
    sim.nowMs,
  );
  assert.equal(again.members.get(String(c.self))!.revision, now.revision);
});

// Node simulator seeds 7003 and 8426: d's seed c welcomed it with the member list but was not the leader; d's join to
// the leader a was lost, then a and c crashed. d kept asking only its seed and the leader its records name, both dead,
// and the live leader b never heard of it.
test("rule: a joiner whose seed and records' leader are dead asks the other members it knows, one per round", () => {
  const sim = new Sim();
  const [a, b, c] = startCluster(sim, 3) as [SimNode, SimNode, SimNode];
  const d = sim.start(2554, [2553]);
  sim.blackhole(d, a);
  assert.ok(
    sim.until(() => statusIn(d, b) === "Up", 2_000),
    JSON.stringify(sim.describe()),
  );
  sim.crash(a);
  sim.crash(c);
  sim.unblackhole(d, a);
  assert.ok(
    sim.until(() => sim.snapshot(b).unreachable.length === 2, 5_000),
    JSON.stringify(sim.describe()),
  );
  sim.input(b, { kind: "down", target: a.self });
  sim.input(b, { kind: "down", target: c.self });
  assert.ok(
    sim.until(() => sim.allUp([b, d]), 10_000),
    `d was never admitted by the live leader: ${JSON.stringify(sim.describe([b, d]))}`,
  );
});

test("rule: a joiner asks only its seeds and its records' leader in its first rounds", () => {
  const sim = new Sim();
  const [a, b, c] = startCluster(sim, 3) as [SimNode, SimNode, SimNode];
  const d = sim.start(2554, [2553]);
  sim.blackhole(d, a);
  assert.ok(
    sim.until(() => statusIn(d, b) === "Up", 2_000),
    JSON.stringify(sim.describe()),
  );
  const targets = (state = d.state) =>
    step(state, { kind: "join-tick" }, sim.nowMs)[1].flatMap((e) => (e.kind === "send" ? [e.to.port] : []));
  const early = { ...d.state, joinRound: joinRoundsBeforeWidening - 1 };
  assert.deepEqual(targets(early), [c.self.address.port, a.self.address.port], "seed, then the records' leader");
  const asked = new Set<number | null>();
  for (let round = joinRoundsBeforeWidening; round < joinRoundsBeforeWidening + 3; round++) {
    for (const port of targets({ ...d.state, joinRound: round })) asked.add(port);
  }
  assert.deepEqual([...asked].sort(), [2551, 2552, 2553], "later rounds reach b too");
});

// Node simulator seed 8780: the leader a admitted d and promoted it at once (its welcome said Up), then crashed before
// its gossip reached b or c. d was Up in its own view and a stranger to b and c, which dropped its heartbeats and
// gossip: it waited for good, routing nothing.
test("rule: an Up node no other member answers asks to join again, and the live leader admits it", () => {
  const sim = new Sim();
  const [a, b, c] = startCluster(sim, 3) as [SimNode, SimNode, SimNode];
  sim.blackhole(a, b);
  sim.blackhole(a, c);
  const d = sim.start(2554, [2551]);
  assert.ok(
    sim.until(() => statusIn(d, d) === "Up", 2_000),
    JSON.stringify(sim.describe()),
  );
  sim.crash(a);
  assert.equal(statusIn(b, d), undefined, "b never heard of d");
  assert.ok(
    sim.until(() => sim.snapshot(b).unreachable.length === 1, 5_000),
    JSON.stringify(sim.describe()),
  );
  sim.input(b, { kind: "down", target: a.self });
  assert.ok(
    sim.until(() => sim.allUp([b, c, d]), 10_000),
    `the orphan d was never admitted: ${JSON.stringify(sim.describe([b, c, d]))}`,
  );
  assert.equal(d.selfDowned, null);
});

// Node simulator seed 7024: the leader that removed a departing node c (and so sent it the final gossip) left the
// cluster itself; the member left dropped c's gossip as a removed incarnation's, and c stayed Exiting until its leave
// timed out.
test("rule: a member answers gossip from an incarnation it removed with gossip that carries its tombstone", () => {
  const sim = new Sim();
  const [a, b, c] = startCluster(sim, 3) as [SimNode, SimNode, SimNode];
  for (const n of [a, b, c]) n.departureReady = () => false;
  sim.input(c, { kind: "leave", target: c.self });
  assert.ok(
    sim.until(() => statusIn(c, c) === "Leaving", 5_000),
    JSON.stringify(sim.describe()),
  );
  // Cut off, c does not hear its removal; a removed it, and only a would have sent it the final gossip.
  sim.blackhole(c, a);
  sim.blackhole(c, b);
  a.departureReady = () => true;
  assert.ok(
    sim.until(() => statusIn(a, c) === "Removed" && statusIn(b, c) === "Removed", 5_000),
    JSON.stringify(sim.describe()),
  );
  assert.equal(statusIn(c, c), "Leaving");
  sim.crash(a);
  sim.unblackhole(c, b);
  assert.ok(
    sim.until(() => statusIn(c, c) === "Removed", 5_000),
    `c never learned its removal: ${JSON.stringify(sim.describe())}`,
  );
  assert.equal(c.selfDowned, null, "a graceful departure, not a downing");
});
