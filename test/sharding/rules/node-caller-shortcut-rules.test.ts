// The node shell's shortcut for a member's caller (node-core.ts callerRouteTarget, routeToTarget), as rules of the
// core: it answers exactly when the route step would only send the delivery on — to the routing coordinator, or with
// direct routing straight to the owner under a valid grant — and applying it does what that step does. Each answer
// is compared with the full step on a twin node fed the same inputs; each refusal names the condition that makes the
// step do something else. The node simulator checks every answer of its histories against the step as well.
import assert from "node:assert/strict";
import { test } from "node:test";
import { NoRebalance } from "../../../src/sharding/index.ts";
import { attachTyped, typedOf } from "../../../src/sharding/internal/codec.ts";
import { CoordinatorFlush } from "../../../src/sharding/internal/index.ts";
import { DirectEnvelope, DirectGrant, DirectProbe } from "../../../src/sharding/internal/messages.ts";
import { callerRouteTarget, type NodeEffect, routeToTarget } from "../../../src/sharding/node/node-core.ts";
import { a, b, c, coordinatorWithPlan, type Driven, follower, forwards, sends, type } from "./node-harness.ts";

/** Two followers b of one coordinator's plan: one takes the shortcut, its twin the step. */
function twins(options = {}) {
  const coordinator = coordinatorWithPlan(options);
  const update = coordinator.update();
  return { coordinator, short: follower(b, update, options), full: follower(b, update, options) };
}

test("a member's caller: the shortcut sends the delivery itself to the coordinator and counts it, as the step does", () => {
  for (const counts of [true, false]) {
    const { short, full } = twins();
    const id = short.entityIn((s) => short.t.plan.allocations.get(s)?.equals(c) === true);
    const d = short.delivery(id);
    const target = callerRouteTarget(short.state, d);
    assert.ok(target !== null && target.direct === null && target.coordinator.equals(a));
    const effect = routeToTarget(short.state, target, d, counts);
    const [stepped] = forwards(full.route(full.delivery(id), 2_000, counts));
    assert.ok(effect.to.equals(stepped!.to));
    assert.equal(effect.envelope, d.envelope, "sent as it is (hop 0)");
    assert.equal(effect.delivery, d);
    assert.equal(effect.envelope.hopCount, stepped!.envelope.hopCount);
    assert.equal(short.stats.remoteRoutes, full.stats.remoteRoutes);
    assert.equal(short.stats.remoteRoutes, counts ? 1 : 0);
    assert.ok(short.t.via?.equals(a) === true && full.t.via?.equals(a) === true, "callers route through a now");
  }
});

test("no shortcut on the coordinator itself, when stopped, or for an unknown type", () => {
  const { coordinator, short } = twins();
  const id = coordinator.entityIn(() => true);
  assert.equal(callerRouteTarget(coordinator.state, coordinator.delivery(id)), null, "routing through itself");
  const types = short.state.types;
  const registered = types.get(type)!;
  types.delete(type);
  assert.equal(callerRouteTarget(short.state, short.delivery(id)), null, "type not registered");
  types.set(type, registered);
  short.feed({ kind: "stop" }, 2_000);
  assert.equal(callerRouteTarget(short.state, short.delivery(id)), null, "stopped");
});

test("no shortcut while the held-delivery pass has work: a marker pending, callers that last routed elsewhere", () => {
  const { short } = twins();
  const id = short.entityIn(() => true);
  short.t.pendingMarkers.set(
    c.toString(),
    new CoordinatorFlush(type, short.settings.key, c.toString(), a.toString(), 1),
  );
  assert.equal(callerRouteTarget(short.state, short.delivery(id)), null, "a flush marker waits");
  short.t.pendingMarkers.clear();
  short.t.via = c;
  assert.equal(callerRouteTarget(short.state, short.delivery(id)), null, "a coordinator change to flush");
  short.t.via = a;
  assert.notEqual(callerRouteTarget(short.state, short.delivery(id)), null);
});

test("no shortcut while this node's callers flush a coordinator change", () => {
  const { short } = twins();
  const id = short.entityIn(() => true);
  short.t.via = a;
  short.t.flush = { token: 1, via: c, target: a, sinceMs: 1_000 };
  assert.equal(callerRouteTarget(short.state, short.delivery(id)), null);
});

/** b in direct mode holding c's grant for one of c's shards (probe through a, forwarded, granted). */
function granted(): { short: Driven; full: Driven; shard: number; id: string } {
  const options = { routing: "direct" as const, rebalance: new NoRebalance() };
  const coordinator = coordinatorWithPlan(options);
  const update = coordinator.update();
  const owner = follower(c, update, options);
  const grant = (n: Driven, shard: number, nowMs: number) => {
    const id = n.entityIn((s) => s === shard);
    const probe = sends(n.route(n.delivery(id), nowMs)).find((s) => s.message instanceof DirectProbe)!;
    const forwarded = sends(
      coordinator.feed({ kind: "control", message: probe.message, replyTo: null, origin: b }, nowMs + 1),
    ).find((s) => s.message instanceof DirectProbe)!;
    const answer = sends(
      owner.feed({ kind: "control", message: forwarded.message, replyTo: null, origin: a }, nowMs + 2),
    ).find((s) => s.message instanceof DirectGrant)!;
    n.feed({ kind: "control", message: answer.message, replyTo: null, origin: c }, nowMs + 3);
    return id;
  };
  const short = follower(b, update, options);
  const full = follower(b, update, options);
  const shard = short.shardOn(c);
  const id = grant(short, shard, 2_000);
  grant(full, shard, 2_000);
  assert.equal(short.t.routes.get(shard)?.phase, "direct");
  return { short, full, shard, id };
}

test("direct routing: under a valid grant the shortcut sends the direct copy to the owner, counted, as the step does", () => {
  const { short, full, id } = granted();
  const d = short.delivery(id);
  const target = callerRouteTarget(short.state, d);
  assert.ok(target?.direct !== null && target?.direct !== undefined);
  const effect = routeToTarget(short.state, target, d, true);
  const stepped = forwards(full.route(full.delivery(id), 2_100) as NodeEffect[]);
  assert.equal(stepped.length, 1);
  assert.ok(effect.to.equals(c) && stepped[0]!.to.equals(c), "straight to the owner");
  assert.ok(effect.envelope instanceof DirectEnvelope && stepped[0]!.envelope instanceof DirectEnvelope);
  assert.equal(effect.envelope.generation, (stepped[0]!.envelope as DirectEnvelope).generation);
  assert.equal((effect.envelope as DirectEnvelope).coordinatorUid, a.uid);
  assert.equal(effect.delivery.sender, d.sender);
  assert.equal(short.stats.directRoutes, full.stats.directRoutes);
  assert.equal(short.stats.remoteRoutes, full.stats.remoteRoutes, "a direct send is no remote route");
});

test("direct routing: no shortcut without a grant, for the caller's own shard, or with a grant the plan no longer backs", () => {
  const { short, shard, id } = granted();
  const elsewhere = short.entityIn((s) => short.t.plan.allocations.get(s)?.equals(a) === true);
  assert.equal(callerRouteTarget(short.state, short.delivery(elsewhere)), null, "no grant: the step probes");
  const route = short.t.routes.get(shard)!;
  assert.equal(route.phase, "direct");
  if (route.phase !== "direct") return;
  const plan = short.t.plan;
  const here = new Map(plan.allocations);
  here.set(shard, b);
  short.t.routes.set(shard, { ...route, owner: b });
  short.t.plan = { ...plan, allocations: here };
  assert.equal(callerRouteTarget(short.state, short.delivery(id)), null, "a grant of this node's own shard");
  short.t.plan = plan;
  short.t.routes.set(shard, { ...route, coordinator: c });
  assert.equal(callerRouteTarget(short.state, short.delivery(id)), null, "a grant of another coordinator");
  short.t.routes.set(shard, route);
  short.t.plan = { ...plan, author: c };
  assert.equal(callerRouteTarget(short.state, short.delivery(id)), null, "a plan of another author");
  const moved = new Map(plan.allocations);
  moved.set(shard, a);
  short.t.plan = { ...plan, allocations: moved };
  assert.equal(callerRouteTarget(short.state, short.delivery(id)), null, "the plan moved the shard");
  short.t.plan = plan;
  assert.notEqual(callerRouteTarget(short.state, short.delivery(id)), null);
});

test("direct routing: no shortcut, and no throw, for a grant whose shard the plan now leaves unplaced", () => {
  const { short, shard, id } = granted();
  const plan = short.t.plan;
  const unplaced = new Map(plan.allocations);
  unplaced.delete(shard);
  short.t.plan = { ...plan, allocations: unplaced };
  assert.equal(callerRouteTarget(short.state, short.delivery(id)), null);
});

test("direct routing: the shortcut's direct copy carries the caller's typed (in-process) payload, as the step's does", () => {
  const { short, full, id } = granted();
  const payload = { order: 7 };
  const d = short.delivery(id);
  attachTyped(d.envelope, payload);
  const effect = routeToTarget(short.state, callerRouteTarget(short.state, d)!, d, true);
  const twin = full.delivery(id);
  attachTyped(twin.envelope, payload);
  const [stepped] = forwards(full.route(twin, 2_100));
  assert.equal(typedOf(stepped!.envelope), payload);
  assert.equal(typedOf(effect.envelope), payload);
  assert.equal(typedOf(effect.delivery.envelope), payload);
});
