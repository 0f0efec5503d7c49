// A handoff aborted after its prepare (docs/protocol.md §9.3) leaves the next owner holding a preparation, and so the
// shard's lease, which it would renew for as long as the same coordinator stays: the plan's owner is fenced out of
// its own shard (node simulator, operator-move seed 754: not live after healing). The rules: a member's plan request
// lists what the coordinator prepared there; the coordinator cancels each listed preparation it no longer stands by
// (no handoff of the shard to that member runs, and its plan does not place the shard there); the member forgets a
// cancelled preparation and stops retaining the shard; a coordinator forgets its own stale preparations at plan sync.
// A preparation is cancelled only once it has not been stood by for a grace (half the type's lease duration: 5 s at the default 10 s lease): an aborted
// handoff is usually started again to the same node, whose lease then serves again (one transfer, one epoch).
import assert from "node:assert/strict";
import { test } from "node:test";
import { NoRebalance } from "../../../src/sharding/index.ts";
import { CancelPreparations, PlanRequest } from "../../../src/sharding/internal/index.ts";
import type { NodeEffect } from "../../../src/sharding/node/node-core.ts";
import {
  a,
  abortedAfterPrepare,
  b,
  c,
  cancels,
  coordinatorWithPlan,
  follower,
  member,
  ofKind,
  schedules,
  sends,
  type,
  view,
} from "./node-harness.ts";

const ask = { kind: "ask" as const, replyTo: null };

const retained = (effects: NodeEffect[]) => {
  const retains = ofKind(effects, "retainShards");
  assert.equal(retains.length, 1, "one retain");
  return [...retains[0]!.shards].sort((x, y) => x - y);
};

test("a member's plan request lists the shards its coordinator prepared there, and only that coordinator's", () => {
  const n = coordinatorWithPlan();
  const f = follower(b, n.update());
  const byA = f.shardOn(c);
  const byC = f.shardOn(a);
  f.feed({ kind: "prepared", type, shard: byA, coordinator: a.toString(), waiter: ask, error: null }, 2_000);
  f.t.prepared.set(byC, c.toString());
  const effects = f.feed({ kind: "timer", timer: { kind: "planSync", type } }, 2_250);
  const requests = sends(effects).filter((s) => s.message instanceof PlanRequest);
  assert.equal(requests.length, 1);
  assert.equal(requests[0]!.to.toString(), a.toString());
  assert.deepEqual((requests[0]!.message as PlanRequest).prepared, [byA]);
});

test("the coordinator cancels a listed preparation it no longer stands by, and keeps a running handoff's and a planned one's", () => {
  const n = coordinatorWithPlan();
  const moving = n.shardOn(b);
  n.feed({ kind: "moveShard", type, shard: moving, to: c }, 2_000);
  assert.equal(n.t.handoffs.get(moving)?.state.next?.toString(), c.toString(), "a handoff of the shard to c runs");
  const onA = n.shardOn(a);
  const onC = n.shardOn(c);
  const request = (requester: typeof b, prepared: number[]) =>
    new PlanRequest(type, n.settings.key, requester.toString(), a.toString(), n.t.plan.generation, prepared);
  // c: the running handoff's shard and a shard placed on c are stood by; a shard on a (no handoff) is not, and is
  // cancelled once it has not been for 5 s (first seen at 2,010 ms; not at 7,009, at 7,010).
  const fromC = (at: number) =>
    cancels(n.feed({ kind: "control", message: request(c, [moving, onA, onC]), replyTo: null, origin: c }, at));
  assert.deepEqual(fromC(2_010), [], "within the grace");
  assert.deepEqual(fromC(7_009), [], "within the grace");
  assert.deepEqual(fromC(7_010), [{ to: c.toString(), shards: [onA] }]);
  // b: shards placed on a and on c, with no handoff to b (b is the moving shard's current owner: its plan keeps it).
  const fromB = (at: number) =>
    cancels(n.feed({ kind: "control", message: request(b, [onA, onC]), replyTo: null, origin: b }, at));
  assert.deepEqual(fromB(2_020), []);
  assert.deepEqual(fromB(7_020), [{ to: b.toString(), shards: [onA, onC].sort((x, y) => x - y) }]);
  // Nothing listed, nothing cancelled; a request that lists only stood-by preparations gets no cancel.
  assert.deepEqual(cancels(n.feed({ kind: "control", message: request(b, []), replyTo: null, origin: b }, 2_030)), []);
  assert.deepEqual(
    cancels(n.feed({ kind: "control", message: request(c, [moving]), replyTo: null, origin: c }, 2_040)),
    [],
  );
});

test("a coordinator that aborted a handoff after its prepare cancels that preparation at the next plan request", () => {
  // c prepared, but the completion finds another plan author (it throws and the handoff aborts), as in seed 754;
  // then this node's plan is authoritative again.
  const { n, moving } = abortedAfterPrepare();
  assert.equal(n.t.handoffs.has(moving), false, "aborted");
  assert.equal(n.t.plan.allocations.get(moving)?.toString(), b.toString(), "the plan still places it on b");
  const request = new PlanRequest(type, n.settings.key, c.toString(), a.toString(), n.t.plan.generation, [moving]);
  assert.deepEqual(cancels(n.feed({ kind: "control", message: request, replyTo: null, origin: c }, 2_300)), []);
  // The grace runs from the abort (2,020 ms), not from the first request that listed it (2,300).
  assert.deepEqual(cancels(n.feed({ kind: "control", message: request, replyTo: null, origin: c }, 7_019)), []);
  const effects = n.feed({ kind: "control", message: request, replyTo: null, origin: c }, 7_020);
  assert.deepEqual(cancels(effects), [{ to: c.toString(), shards: [moving] }]);
});

test("an aborted handoff started again to the same node within the grace keeps that node's preparation (one epoch)", () => {
  const n = coordinatorWithPlan({ rebalance: new NoRebalance() });
  const moving = n.shardOn(b);
  n.feed({ kind: "moveShard", type, shard: moving, to: c }, 2_000);
  const token = n.t.handoffs.get(moving)!.token;
  n.feed({ kind: "handoffReply", type, shard: moving, token, step: "passivated", error: null }, 2_010);
  const plan = n.t.plan;
  n.t.plan = { ...plan, author: b };
  n.feed({ kind: "handoffReply", type, shard: moving, token, step: "prepared", error: null }, 2_020);
  n.t.plan = plan;
  const request = new PlanRequest(type, n.settings.key, c.toString(), a.toString(), n.t.plan.generation, [moving]);
  // c's poll finds no handoff to it: stale since 2,300.
  assert.deepEqual(cancels(n.feed({ kind: "control", message: request, replyTo: null, origin: c }, 2_300)), []);
  // The move starts again to c before the grace ends; its later polls find it stood by, and the clock starts over.
  n.feed({ kind: "moveShard", type, shard: moving, to: c }, 2_400);
  assert.equal(n.t.handoffs.get(moving)?.state.next?.toString(), c.toString());
  assert.deepEqual(cancels(n.feed({ kind: "control", message: request, replyTo: null, origin: c }, 7_400)), []);
  assert.equal(n.t.staleSince.get(c.toString()), undefined, "nothing stale is remembered for c");
});

test("stale preparations are remembered only for what a member's last request listed, and for members still listed", () => {
  const n = coordinatorWithPlan();
  const onA = n.shardOn(a);
  const request = (prepared: number[]) =>
    new PlanRequest(type, n.settings.key, c.toString(), a.toString(), n.t.plan.generation, prepared);
  n.feed({ kind: "control", message: request([onA]), replyTo: null, origin: c }, 2_000);
  assert.deepEqual([...n.t.staleSince.get(c.toString())!], [[onA, 2_000]]);
  // A request that no longer lists it forgets it: listed again later, its clock starts then.
  n.feed({ kind: "control", message: request([]), replyTo: null, origin: c }, 2_250);
  assert.equal(n.t.staleSince.has(c.toString()), false);
  n.feed({ kind: "control", message: request([onA]), replyTo: null, origin: c }, 3_000);
  assert.deepEqual(cancels(n.feed({ kind: "control", message: request([onA]), replyTo: null, origin: c }, 4_500)), []);
  // A member that left the view is forgotten.
  n.feed({ kind: "membershipChanged", snapshot: view(a, [member(a), member(b)]) }, 4_600);
  assert.equal(n.t.staleSince.has(c.toString()), false);
});

test("a member forgets a cancelled preparation of its coordinator and stops retaining the shard", () => {
  const n = coordinatorWithPlan();
  const f = follower(b, n.update());
  const prepared = f.shardOn(c);
  const planned = f.shardOn(b);
  const byC = f.shardOn(a);
  f.feed({ kind: "prepared", type, shard: prepared, coordinator: a.toString(), waiter: ask, error: null }, 2_000);
  f.t.prepared.set(byC, c.toString());
  const cancel = new CancelPreparations(type, f.settings.key, a.toString(), [prepared, planned, byC]);
  const effects = f.feed({ kind: "control", message: cancel, replyTo: null, origin: a }, 2_100);
  assert.equal(f.t.prepared.has(prepared), false, "forgotten");
  assert.equal(f.t.prepared.get(byC), c.toString(), "another coordinator's preparation is not a's to cancel");
  const mine = [...f.t.plan.allocations].filter(([, o]) => o.equals(b)).map(([s]) => s);
  assert.deepEqual(
    retained(effects),
    mine.sort((x, y) => x - y),
    "the lease of the cancelled shard is released",
  );
  assert.ok(mine.includes(planned));
  // A cancel that finds nothing to forget changes nothing.
  assert.deepEqual(
    ofKind(f.feed({ kind: "control", message: cancel, replyTo: null, origin: a }, 2_200), "retainShards"),
    [],
  );
});

test("a cancel not sent by the coordinator is refused and forgets nothing", () => {
  const n = coordinatorWithPlan();
  const f = follower(b, n.update());
  const prepared = f.shardOn(c);
  f.feed({ kind: "prepared", type, shard: prepared, coordinator: a.toString(), waiter: ask, error: null }, 2_000);
  const before = f.stats.rejectedEnvelopes;
  // Claims a's authority from c's connection; and c's own (c is not the coordinator).
  for (const cancel of [
    new CancelPreparations(type, f.settings.key, a.toString(), [prepared]),
    new CancelPreparations(type, f.settings.key, c.toString(), [prepared]),
  ]) {
    const effects = f.feed({ kind: "control", message: cancel, replyTo: null, origin: c }, 2_100);
    assert.equal(ofKind(effects, "refused").length, 1);
    assert.deepEqual(ofKind(effects, "retainShards"), []);
  }
  assert.equal(f.t.prepared.get(prepared), a.toString());
  assert.equal(f.stats.rejectedEnvelopes, before + 2);
});

test("a coordinator forgets its own preparation of a handoff that no longer runs at its next plan sync", () => {
  const n = coordinatorWithPlan({ rebalance: new NoRebalance() });
  const stale = n.shardOn(b);
  const running = n.shardOn(c);
  n.feed({ kind: "moveShard", type, shard: running, to: a }, 2_000);
  n.t.prepared.set(stale, a.toString());
  n.t.prepared.set(running, a.toString());
  assert.deepEqual(ofKind(n.feed({ kind: "timer", timer: { kind: "planSync", type } }, 2_250), "retainShards"), []);
  assert.equal(n.t.prepared.has(stale), true, "within the grace");
  const effects = n.feed({ kind: "timer", timer: { kind: "planSync", type } }, 7_250);
  assert.equal(n.t.prepared.has(stale), false, "no handoff of it to a runs");
  assert.equal(n.t.prepared.get(running), a.toString(), "the running handoff's preparation stays");
  const mine = [...n.t.plan.allocations].filter(([, o]) => o.equals(a)).map(([s]) => s);
  assert.deepEqual(
    retained(effects),
    [...mine, running].sort((x, y) => x - y),
  );
});

// Operator-move seed 2490 (coordinator routing): the prepared node kept the lease renewed until its next plan request
// after the grace (every 250 ms), and the plan's owner, fenced out meanwhile, had only its retry barrier's window (a
// lease and a renewal) to take the lease once released: the window ended first and its deliveries were rejected.
test("a coordinator that aborted a handoff after its prepare cancels that preparation when the grace ends, without waiting for a plan request", () => {
  const { n, moving, aborted } = abortedAfterPrepare({ leaseDuration: 300, leaseRenewInterval: 100 });
  assert.equal(n.t.handoffs.has(moving), false, "aborted");
  const [grace] = schedules(aborted, "preparationGrace");
  assert.ok(grace !== undefined, "the grace is timed");
  assert.equal(grace.afterMs, 150, "half the lease duration");
  const fired = n.feed({ kind: "timer", timer: grace.timer }, 2_170);
  assert.deepEqual(cancels(fired), [{ to: c.toString(), shards: [moving] }]);
  assert.equal(n.t.staleSince.get(c.toString()), undefined, "nothing stale is remembered for c");
});

test("the grace's timer cancels nothing when the move started again to the same node meanwhile, or this node no longer coordinates", () => {
  const { n, moving, aborted } = abortedAfterPrepare({
    rebalance: new NoRebalance(),
    leaseDuration: 300,
    leaseRenewInterval: 100,
  });
  const [grace] = schedules(aborted, "preparationGrace");
  n.feed({ kind: "moveShard", type, shard: moving, to: c }, 2_100);
  assert.equal(n.t.handoffs.get(moving)?.state.next?.toString(), c.toString(), "the move runs again, to c");
  assert.deepEqual(cancels(n.feed({ kind: "timer", timer: grace!.timer }, 2_170)), [], "stood by again");
  // Another coordinator took over: this node cancels nothing of its own accord.
  n.t.handoffs.delete(moving);
  n.feed(
    { kind: "membershipChanged", snapshot: view(a, [member(a), member(b), member(c)], { unreachable: [b] }) },
    2_200,
  );
  assert.deepEqual(cancels(n.feed({ kind: "timer", timer: grace!.timer }, 2_210)), []);
});

test("a completed handoff starts no grace for its next owner's preparation (an aborted one does): a later abort to that node is timed from the abort", () => {
  for (const outcome of ["done", "aborted"] as const) {
    const n = coordinatorWithPlan();
    const moving = n.shardOn(b);
    n.feed({ kind: "moveShard", type, shard: moving, to: c }, 2_000);
    const token = n.t.handoffs.get(moving)!.token;
    n.feed({ kind: "handoffReply", type, shard: moving, token, step: "passivated", error: null }, 2_010);
    if (outcome === "done") {
      n.feed({ kind: "handoffReply", type, shard: moving, token, step: "prepared", error: null }, 2_020);
      assert.ok(n.t.plan.allocations.get(moving)?.equals(c), "moved to c");
    } else {
      n.feed({ kind: "membershipChanged", snapshot: view(a, [member(a), member(b), member(c, "Down")]) }, 2_020);
    }
    assert.equal(n.t.handoffs.has(moving), false, outcome);
    assert.deepEqual(
      [...(n.t.staleSince.get(c.toString()) ?? new Map()).entries()],
      outcome === "done" ? [] : [[moving, 2_020]],
      outcome,
    );
  }
});
