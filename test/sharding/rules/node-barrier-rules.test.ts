// The per-shard retry barrier as the node core drives it (docs/protocol.md §10), fed by hand: a transient failure
// opens one queue per shard, every later delivery of the shard waits behind it, one tick every 25 ms retries the head,
// and an emptied barrier lets a waiting drain start. (The barrier's own arithmetic: retry-barrier-rules.test.ts.)
import assert from "node:assert/strict";
import { test } from "node:test";
import { NoShardOwnerError, ShardLeaseUnavailableError } from "../../../src/sharding/index.ts";
import {
  a,
  b,
  c,
  coordinatorWithPlan,
  delivers,
  follower,
  member,
  rejects,
  schedules,
  type,
  view,
} from "./node-harness.ts";

function owner() {
  const coordinator = coordinatorWithPlan({ leaseDuration: 1_000, leaseRenewInterval: 500 });
  const n = follower(b, coordinator.update(), { leaseDuration: 1_000, leaseRenewInterval: 500 });
  const shard = n.shardOn(b);
  const id = n.entityIn((s) => s === shard);
  return { n, shard, id };
}

test("barrier: a transient failure opens the shard's barrier; later deliveries of the shard wait behind it, in order", () => {
  const { n, shard, id } = owner();
  const [d1, d2, d3] = [n.forwardedBy(a, id), n.forwardedBy(a, id), n.forwardedBy(a, id)];
  const batch = delivers(n.envelope(d1, a, 2_000));
  assert.deepEqual(
    batch.map((e) => e.deliveries),
    [[d1]],
  );
  const opened = n.feed({ kind: "delivered", type, shard, retry: false, deliveries: [d1], outcomes: ["lease"] }, 2_001);
  const [tick] = schedules(opened, "barrierTick");
  assert.equal(tick!.afterMs, 25);
  assert.equal(schedules(opened, "barrierTick").length, 1);
  // Behind it: no new deliver effect for the shard.
  assert.deepEqual(delivers(n.envelope(d2, a, 2_005)), []);
  assert.deepEqual(delivers(n.envelope(d3, a, 2_006)), []);
  const retried = n.feed({ kind: "timer", timer: tick!.timer }, 2_026);
  assert.deepEqual(delivers(retried), [{ kind: "deliver", type, shard, retry: true, deliveries: [d1, d2, d3] }]);
  assert.equal(n.stats.leaseRetries, 1, "a lease failure counts one lease retry");
  // A stale tick (the same id again) does nothing.
  assert.deepEqual(n.feed({ kind: "timer", timer: tick!.timer }, 2_027), []);
  const settled = n.feed(
    {
      kind: "delivered",
      type,
      shard,
      retry: true,
      deliveries: [d1, d2, d3],
      outcomes: ["delivered", "delivered", "delivered"],
    },
    2_028,
  );
  assert.deepEqual(schedules(settled, "barrierTick"), [], "empty: no more ticks");
  // The barrier is gone: the next delivery goes straight to the provider.
  const d4 = n.forwardedBy(a, id);
  assert.deepEqual(
    delivers(n.envelope(d4, a, 2_030)).map((e) => e.deliveries),
    [[d4]],
  );
});

test("barrier: in a batch, the deliveries after the first transient failure queue behind it; a delivered one is done; an entity error rejects only its delivery", () => {
  const { n, shard, id } = owner();
  const [d1, d2, d3, d4] = [0, 1, 2, 3].map(() => n.forwardedBy(a, id));
  const failure = new Error("entity threw");
  const effects = n.feed(
    {
      kind: "delivered",
      type,
      shard,
      retry: false,
      deliveries: [d1!, d2!, d3!, d4!],
      outcomes: ["delivered", { error: failure }, "handoff"],
    },
    2_000,
  );
  assert.deepEqual(
    rejects(effects).map((r) => [r.delivery, r.error]),
    [[d2, failure]],
  );
  assert.equal(n.stats.leaseRetries, 0, "a handoff failure is no lease retry");
  const [tick] = schedules(effects, "barrierTick");
  const retried = n.feed({ kind: "timer", timer: tick!.timer }, 2_025);
  assert.deepEqual(delivers(retried)[0]!.deliveries, [d3, d4], "the failed one first, then the one without an outcome");
});

test("barrier: a delivery retried once more is counted again, and the queue is rejected whole when its window ends", () => {
  const { n, shard, id } = owner();
  const d = n.forwardedBy(a, id);
  const opened = n.feed({ kind: "delivered", type, shard, retry: false, deliveries: [d], outcomes: ["lease"] }, 0);
  let tick = schedules(opened, "barrierTick")[0]!;
  let now = 0;
  let rejected: ReturnType<typeof rejects> = [];
  for (let round = 0; round < 200 && rejected.length === 0; round++) {
    now += 25;
    const effects = n.feed({ kind: "timer", timer: tick.timer }, now);
    rejected = rejects(effects);
    if (rejected.length > 0) break;
    const [retry] = delivers(effects);
    const after = n.feed(
      { kind: "delivered", type, shard, retry: true, deliveries: retry!.deliveries, outcomes: ["lease"] },
      now,
    );
    rejected = rejects(after);
    const next = schedules(after, "barrierTick")[0];
    if (next === undefined) break;
    tick = next;
  }
  assert.equal(rejected.length, 1, "rejected once the window (lease duration + renewal = 1,500 ms) ended");
  assert.equal(rejected[0]!.delivery, d);
  assert.ok(rejected[0]!.error instanceof ShardLeaseUnavailableError);
  assert.ok(now >= 1_450 && now <= 1_500, `within a tick of the end of the window (${now} ms)`);
  assert.ok(n.stats.leaseRetries > 10);
});

test("barrier: a tick at an owner that lost the shard rejects what waits instead of delivering it", () => {
  const { n, shard, id } = owner();
  const d = n.forwardedBy(a, id);
  const opened = n.feed({ kind: "delivered", type, shard, retry: false, deliveries: [d], outcomes: ["lease"] }, 2_000);
  // a's new plan (generation 2) places the shard elsewhere.
  const t = n.t;
  const moved = new Map(t.plan.allocations);
  moved.set(shard, a);
  t.plan = { ...t.plan, allocations: moved };
  const effects = n.feed({ kind: "timer", timer: schedules(opened, "barrierTick")[0]!.timer }, 2_025);
  assert.deepEqual(delivers(effects), []);
  assert.deepEqual(
    rejects(effects).map((r) => r.delivery),
    [d],
  );
  assert.ok(rejects(effects)[0]!.error instanceof NoShardOwnerError);
});

test("barrier: outcomes of a type that is not registered here change nothing", () => {
  const { n, shard, id } = owner();
  const d = n.forwardedBy(a, id);
  assert.deepEqual(
    n.feed({ kind: "delivered", type: "Other", shard, retry: false, deliveries: [d], outcomes: ["lease"] }, 0),
    [],
  );
  assert.deepEqual(n.feed({ kind: "timer", timer: { kind: "barrierTick", type: "Other", shard, id: 1 } }, 0), []);
});

test("barrier: stop rejects every delivery waiting in a barrier", () => {
  const { n, shard, id } = owner();
  const [d1, d2] = [n.forwardedBy(a, id), n.forwardedBy(a, id)];
  n.feed({ kind: "delivered", type, shard, retry: false, deliveries: [d1, d2], outcomes: ["lease"] }, 0);
  const stopped = n.feed({ kind: "stop" }, 10);
  assert.deepEqual(
    rejects(stopped).map((r) => r.delivery),
    [d1, d2],
  );
  for (const r of rejects(stopped)) assert.ok(r.error instanceof NoShardOwnerError);
});

test("barrier: a tick while no coordinator is accepted (a member unreachable) rejects what waits, unauthorized, instead of delivering it", () => {
  const { n, shard, id } = owner();
  const d = n.forwardedBy(a, id);
  const opened = n.feed({ kind: "delivered", type, shard, retry: false, deliveries: [d], outcomes: ["lease"] }, 2_000);
  n.feed(
    { kind: "membershipChanged", snapshot: view(b, [member(a), member(b), member(c)], { unreachable: [c] }) },
    2_010,
  );
  assert.equal(n.state.view.accepting, null);
  const effects = n.feed({ kind: "timer", timer: schedules(opened, "barrierTick")[0]!.timer }, 2_025);
  assert.deepEqual(delivers(effects), []);
  assert.deepEqual(
    rejects(effects).map((r) => r.delivery),
    [d],
  );
});

test("barrier: a barrier that empties with no drain waiting starts no drain", () => {
  const { n, shard, id } = owner();
  const d = n.forwardedBy(a, id);
  const opened = n.feed({ kind: "delivered", type, shard, retry: false, deliveries: [d], outcomes: ["lease"] }, 2_000);
  const retried = n.feed({ kind: "timer", timer: schedules(opened, "barrierTick")[0]!.timer }, 2_025);
  assert.equal(delivers(retried).length, 1);
  const settled = n.feed(
    { kind: "delivered", type, shard, retry: true, deliveries: [d], outcomes: ["delivered"] },
    2_026,
  );
  assert.deepEqual(
    settled.filter((e) => e.kind === "drainShard"),
    [],
  );
  assert.equal(n.t.drainsStarted.size, 0);
});
