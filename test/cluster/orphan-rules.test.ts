// Orphans (docs/protocol.md §4.4): an Up node whose admitting leader crashed before its gossip reached anyone else,
// so the other members never heard of it. Liveness bugs the node simulator's coordinator-churn histories found
// (test/sim/node-sim.ts; the joiner there has the lowest address, so it takes over as leader), each of which left the
// membership unconverged for good. Each test fails without its fix.
import assert from "node:assert/strict";
import { test } from "node:test";
import { authorizeGossip } from "../../src/cluster/gossip/authorize.ts";
import { A, B, C, map, member } from "./fixtures/member-maps.ts";
import { Sim, type SimNode } from "./sim.ts";

const statusIn = (viewer: SimNode, of: SimNode): string | undefined =>
  viewer.state.members.get(String(of.self))?.status;

/**
 * a (2552, the seed), b (2553) and c (2554) Up; d (2551, the lowest address) joins through a, which promotes it and
 * then crashes before its gossip reached b; c heard it (unless `cHears` is false) but never exchanged gossip with d.
 * b, leading b and c, downs a (and removes it). Returns the nodes once a is crashed.
 */
function orphanedLowest(sim: Sim, cHears: boolean): { a: SimNode; b: SimNode; c: SimNode; d: SimNode } {
  const a = sim.start(2552, [2552]);
  const b = sim.start(2553, [2552]);
  const c = sim.start(2554, [2552]);
  assert.ok(
    sim.until(() => sim.allUp([a, b, c])),
    JSON.stringify(sim.describe()),
  );
  sim.blackhole(a, b);
  if (!cHears) sim.blackhole(a, c);
  const d = sim.start(2551, [2552]);
  sim.blackhole(d, c);
  assert.ok(
    sim.until(() => statusIn(d, d) === "Up" && (!cHears || statusIn(c, d) === "Up"), 2_000),
    JSON.stringify(sim.describe()),
  );
  // c, which heard d's first promotion, is cut off (paused, in the simulator) until d has been admitted afresh.
  if (cHears) sim.blackhole(b, c);
  sim.crash(a);
  assert.equal(statusIn(b, d), undefined, "b never heard of d");
  assert.ok(
    sim.until(() => sim.snapshot(b).unreachable.length === 1, 5_000),
    JSON.stringify(sim.describe()),
  );
  sim.input(b, { kind: "down", target: a.self });
  return { a, b, c, d };
}

/**
 * Waits until b re-admitted d, lets c reach both again, and once d sees b and c reachable (it is their leader now, or e
 * is: the lowest addresses), the operator downs the crashed a through that leader, as the node simulator's operator
 * does: b's removal of a was no leader's word at d, which still held a Up.
 */
function readmittedThenDowns(sim: Sim, a: SimNode, b: SimNode, c: SimNode, d: SimNode): void {
  assert.ok(
    sim.until(() => statusIn(b, d) === "Up", 5_000),
    `d was not re-admitted: ${JSON.stringify(sim.describe())}`,
  );
  sim.unblackhole(d, c);
  sim.unblackhole(b, c);
  assert.ok(
    sim.until(() => sim.snapshot(d).unreachable.length === 1, 5_000),
    `d does not reach b and c: ${JSON.stringify(sim.describe())}`,
  );
  const leader = sim.live().find((n) => n.self.equals(sim.snapshot(d).leader!))!;
  sim.input(leader, { kind: "down", target: a.self });
}

// Churn seeds 667 and 1204: the orphan d joined again and b admitted and promoted it afresh (Up, a higher revision,
// authored by b). d, the lowest address it sees, is its own leader and refused that record as no leader's work; c,
// which held d's first promotion and sees d as its leader, refused it from b and refused it from d, which did not
// author it. Three digests, and nobody converged again.
test("rule: an orphan with the lowest address takes its re-admission, and a member that knew its first promotion does too", () => {
  for (const cHears of [false, true]) {
    const sim = new Sim();
    const { a, b, c, d } = orphanedLowest(sim, cHears);
    readmittedThenDowns(sim, a, b, c, d);
    assert.ok(
      sim.until(() => sim.allUp([b, c, d]), 10_000),
      `c ${cHears ? "heard" : "never heard"} d's first promotion; not converged: ${JSON.stringify(sim.describe([b, c, d]))}`,
    );
    const records = [b, c, d].map((n) => JSON.stringify(n.state.members.get(String(d.self))));
    assert.ok(
      records.every((r) => r === records[0]),
      `one record of d everywhere: ${records.join(" ")}`,
    );
    assert.equal(d.selfDowned, null);
  }
});

// Churn seed 461: the orphan d, its admitting leader crashed and the other members strangers to it, led itself and
// promoted a joiner e that asked it: d and e formed a cluster of their own, with b and c unreachable for good (they
// drop a stranger's heartbeats), while b and c went on without them.
test("rule: an orphan promotes no joiner; re-admitted, it does", () => {
  const sim = new Sim();
  const { a, b, c, d } = orphanedLowest(sim, false);
  const e = sim.start(2550, [2551]);
  assert.ok(
    sim.until(() => statusIn(d, e) === "Joining" && sim.snapshot(d).unreachable.length === 3, 2_000),
    JSON.stringify(sim.describe()),
  );
  // Every member it knows unreachable, d is an orphan: it recorded e, and does not promote it.
  sim.advance(1_000);
  assert.equal(statusIn(d, e), "Joining", `the orphan d promoted e: ${JSON.stringify(sim.describe())}`);
  readmittedThenDowns(sim, a, b, c, d);
  assert.ok(
    sim.until(() => sim.allUp([b, c, d, e]), 10_000),
    `d and e formed a cluster of their own: ${JSON.stringify(sim.describe([b, c, d, e]))}`,
  );
});

test("rule: a member's own re-admission passes from itself only, never making it older nor changing its roles", () => {
  const local = map(member(A, "Up"), member(B, "Up", { changedBy: A.uid, revision: 2, upNumber: 2 }));
  const readmitted = member(B, "Up", { changedBy: "u9", revision: 3, upNumber: 4 });
  // From B itself (A is the leader here, and did not author it): passes.
  assert.equal(authorizeGossip(local, [readmitted], B, A).accepted.length, 1);
  // Relayed by C, which neither is B nor authored it: refused.
  const withC = map(member(A, "Up"), member(B, "Up", { changedBy: A.uid, revision: 2, upNumber: 2 }), member(C, "Up"));
  assert.deepEqual(
    authorizeGossip(withC, [readmitted], C, A).rejected.map((r) => r.reason),
    ["notLeader"],
  );
  // Older (a lower up-number: the oldest member hosts the singletons), other roles, not newer, or another status:
  // refused from B.
  for (const changed of [
    member(B, "Up", { changedBy: "u9", revision: 3, upNumber: 1 }),
    member(B, "Up", { changedBy: "u9", revision: 3, upNumber: 4, roles: ["admin"] }),
    member(B, "Up", { changedBy: "u9", revision: 2, upNumber: 4 }),
    member(B, "Leaving", { changedBy: B.uid, revision: 3, upNumber: 2 }),
  ]) {
    assert.deepEqual(
      authorizeGossip(local, [changed], B, A).rejected.map((r) => r.reason),
      ["notLeader"],
      JSON.stringify(changed),
    );
  }
});
