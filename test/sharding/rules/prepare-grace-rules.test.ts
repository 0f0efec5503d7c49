// The preparation grace (docs/protocol.md §9.3) and the caller's routes across a coordinator term, one condition at
// a time (written from the scoped mutation run m24-prep, docs/mutation.md): the coordinator's own preparation is
// forgotten when its grace ends; a member listing a preparation of a shard the plan leaves unplaced is judged, not
// thrown on; a new plan author cools a probe under way and leaves a cooling route as it was.
import assert from "node:assert/strict";
import { test } from "node:test";
import { NoRebalance } from "../../../src/sharding/index.ts";
import { CancelPreparations, DirectProbe, PlanRequest, PlanUpdate } from "../../../src/sharding/internal/messages.ts";
import { e } from "./direct-harness.ts";
import {
  a,
  abortedAfterPrepare,
  b,
  c,
  cancels,
  coordinatorWithPlan,
  follower,
  logs,
  member,
  ofKind,
  schedules,
  sends,
  type,
  view,
} from "./node-harness.ts";

test("the coordinator's own preparation of a handoff that no longer runs is forgotten when its grace ends, and the provider told what it keeps", () => {
  const n = coordinatorWithPlan({ rebalance: new NoRebalance(), leaseDuration: 300, leaseRenewInterval: 100 });
  const stale = n.shardOn(b);
  n.t.prepared.set(stale, a.toString());
  // The first plan sync lists it as not stood by (the grace starts), the timer of the grace finds it stale.
  n.feed({ kind: "timer", timer: { kind: "planSync", type } }, 2_000);
  assert.equal(n.t.prepared.has(stale), true, "within the grace");
  const fired = n.feed(
    { kind: "timer", timer: { kind: "preparationGrace", type, shard: stale, node: a.toString() } },
    2_150,
  );
  assert.equal(n.t.prepared.has(stale), false, "forgotten");
  assert.deepEqual(cancels(fired), [], "no message to itself");
  assert.equal(logs(fired, "info").length, 1, "logged at info");
  const [retain] = ofKind(fired, "retainShards");
  assert.equal(retain?.shards.has(stale), false);
});

test("a preparation listed for a shard the coordinator's plan leaves unplaced is judged (cancelled after the grace), not thrown on", () => {
  const n = coordinatorWithPlan({ rebalance: new NoRebalance(), leaseDuration: 300, leaseRenewInterval: 100 });
  const shard = n.shardOn(c);
  const plan = n.t.plan;
  const allocations = new Map(plan.allocations);
  allocations.delete(shard);
  n.t.plan = { ...plan, allocations };
  const request = (nowMs: number) =>
    n.feed(
      {
        kind: "control",
        message: new PlanRequest(type, n.settings.key, b.toString(), a.toString(), plan.generation, [shard]),
        replyTo: null,
        origin: b,
      },
      nowMs,
    );
  assert.deepEqual(ofKind(request(2_000), "refused"), []);
  assert.deepEqual(cancels(request(2_200)), [{ to: b.toString(), shards: [shard] }]);
});

test("direct: a new plan author cools a probe under way (its grant would be refused), and leaves a cooling route's period as it was", () => {
  const direct = { routing: "direct" as const, rebalance: new NoRebalance() };
  const coordinator = coordinatorWithPlan(direct);
  const update = coordinator.update();
  const f = follower(b, update, direct);
  const probing = f.shardOn(c);
  const cooling =
    f.shardOn(a) === probing
      ? undefined
      : [...f.t.plan.allocations].find(([s, o]) => s !== probing && o.equals(c))?.[0];
  assert.notEqual(cooling, undefined);
  const probe = sends(f.route(f.delivery(f.entityIn((s) => s === probing)), 2_000)).filter(
    (s) => s.message instanceof DirectProbe,
  );
  assert.equal(probe.length, 1);
  f.t.routes.set(cooling!, { phase: "cooling", untilMs: 2_100 });
  f.feed({ kind: "membershipChanged", snapshot: view(b, [member(e), member(a), member(b), member(c)]) }, 2_010);
  f.feed(
    {
      kind: "control",
      message: new PlanUpdate(type, update.settingsKey, e.toString(), update.generation + 1, update.assignments),
      replyTo: null,
      origin: e,
    },
    2_020,
  );
  assert.ok(f.t.plan.author?.equals(e));
  assert.deepEqual(f.t.routes.get(probing), { phase: "cooling", untilMs: 2_020 + 500 });
  assert.deepEqual(f.t.routes.get(cooling!), { phase: "cooling", untilMs: 2_100 }, "not restarted");
});

test("at plan sync the coordinator forgets only its own stale preparations: one another coordinator made here stays (it counts again if that one coordinates again)", () => {
  const n = coordinatorWithPlan({ rebalance: new NoRebalance(), leaseDuration: 300, leaseRenewInterval: 100 });
  const own = n.shardOn(b);
  const foreign = n.shardOn(c);
  n.t.prepared.set(own, a.toString());
  n.t.prepared.set(foreign, c.toString());
  n.feed({ kind: "timer", timer: { kind: "planSync", type } }, 2_000);
  n.feed({ kind: "timer", timer: { kind: "planSync", type } }, 2_200);
  assert.equal(n.t.prepared.has(own), false, "its own, past the grace: forgotten");
  assert.equal(n.t.prepared.get(foreign), c.toString(), "c's: not this coordinator's to forget");
});

test("a second abort to the same node, with no plan request between, keeps the grace that the first abort started: the first abort's timer cancels", () => {
  const { n, moving, aborted } = abortedAfterPrepare({ rebalance: new NoRebalance() });
  const grace = n.settings.leaseDuration / 2;
  const first = schedules(aborted, "preparationGrace")[0]!.timer;
  // The move starts again to c and aborts again after c prepared (2,400 to 2,420), well within the first grace.
  n.feed({ kind: "moveShard", type, shard: moving, to: c }, 2_400);
  const token = n.t.handoffs.get(moving)!.token;
  n.feed({ kind: "handoffReply", type, shard: moving, token, step: "passivated", error: null }, 2_410);
  const plan = n.t.plan;
  n.t.plan = { ...plan, author: b };
  n.feed({ kind: "handoffReply", type, shard: moving, token, step: "prepared", error: null }, 2_420);
  n.t.plan = plan;
  assert.equal(n.t.handoffs.has(moving), false, "aborted again");
  assert.deepEqual(cancels(n.feed({ kind: "timer", timer: first }, 2_020 + grace)), [
    { to: c.toString(), shards: [moving] },
  ]);
});

test("a member that forgets a cancelled preparation logs it at info", () => {
  const coordinator = coordinatorWithPlan();
  const f = follower(b, coordinator.update());
  const shard = f.shardOn(c);
  f.t.prepared.set(shard, a.toString());
  const effects = f.feed(
    {
      kind: "control",
      message: new CancelPreparations(type, f.settings.key, a.toString(), [shard]),
      replyTo: null,
      origin: a,
    },
    2_000,
  );
  assert.equal(f.t.prepared.has(shard), false);
  assert.equal(logs(effects, "info").length, 1);
});

test("the grace's timer for a node whose last plan request no longer listed the preparation (nothing remembered) still sends the harmless cancel, not thrown on", () => {
  const { n, moving, aborted } = abortedAfterPrepare({ rebalance: new NoRebalance() });
  const timer = schedules(aborted, "preparationGrace")[0]!.timer;
  const request = new PlanRequest(type, n.settings.key, c.toString(), a.toString(), n.t.plan.generation, []);
  n.feed({ kind: "control", message: request, replyTo: null, origin: c }, 2_100);
  assert.equal(n.t.staleSince.has(c.toString()), false, "nothing remembered for c");
  const fired = n.feed({ kind: "timer", timer }, 2_020 + n.settings.leaseDuration / 2);
  assert.deepEqual(cancels(fired), [{ to: c.toString(), shards: [moving] }]);
});

test("cancelling one preparation at the end of its grace keeps the grace of the node's other stale preparation: a later request cancels that one on time", () => {
  const { n, moving, aborted } = abortedAfterPrepare({ rebalance: new NoRebalance() });
  const grace = n.settings.leaseDuration / 2;
  // A second move to c aborts after c prepared (2,030 to 2,050).
  const second = [...n.t.plan.allocations].find(([s, o]) => s !== moving && o.equals(b))![0];
  n.feed({ kind: "moveShard", type, shard: second, to: c }, 2_030);
  const token = n.t.handoffs.get(second)!.token;
  n.feed({ kind: "handoffReply", type, shard: second, token, step: "passivated", error: null }, 2_040);
  const plan = n.t.plan;
  n.t.plan = { ...plan, author: b };
  n.feed({ kind: "handoffReply", type, shard: second, token, step: "prepared", error: null }, 2_050);
  n.t.plan = plan;
  const first = schedules(aborted, "preparationGrace")[0]!.timer;
  assert.deepEqual(cancels(n.feed({ kind: "timer", timer: first }, 2_020 + grace)), [
    { to: c.toString(), shards: [moving] },
  ]);
  assert.equal(n.t.staleSince.get(c.toString())?.get(second), 2_050, "the other grace still runs from its abort");
  const request = new PlanRequest(type, n.settings.key, c.toString(), a.toString(), n.t.plan.generation, [second]);
  const answered = n.feed({ kind: "control", message: request, replyTo: null, origin: c }, 2_050 + grace);
  assert.deepEqual(cancels(answered), [{ to: c.toString(), shards: [second] }]);
});
