// The checks of the direct route (docs/protocol.md §8.8) one condition at a time, as rules of the node core fed by
// hand: when a caller probes, when its grant still counts, when the coordinator forwards a probe, when the owner
// grants, which grants and refusals a caller takes. Each test makes one condition false and the others true, so
// removing that condition from the core makes the test fail (written from the scoped mutation run m24-direct,
// docs/mutation.md).
import assert from "node:assert/strict";
import { test } from "node:test";
import type { UniqueAddress } from "../../../src/actor/index.ts";
import { ClusterShardingConfigurationError, NoRebalance } from "../../../src/sharding/index.ts";
import {
  DirectEnvelope,
  DirectGrant,
  DirectProbe,
  DirectRefused,
  PlanUpdate,
} from "../../../src/sharding/internal/messages.ts";
import type { ControlMessage, NodeEffect } from "../../../src/sharding/node/node-core.ts";
import {
  a,
  address,
  b,
  c,
  coordinatorWithPlan,
  Driven,
  follower,
  forwards,
  member,
  ofKind,
  sends,
  type,
  view,
} from "./node-harness.ts";

const direct = { routing: "direct" as const, rebalance: new NoRebalance() };
/** A member whose address sorts before a's: while Up it is the elected coordinator. */
const e: UniqueAddress = address(2550);

function control(n: Driven, message: ControlMessage, origin: UniqueAddress | null, nowMs: number): NodeEffect[] {
  return n.feed({ kind: "control", message, replyTo: null, origin }, nowMs);
}

function cluster() {
  const coordinator = coordinatorWithPlan(direct);
  const update = coordinator.update();
  return { coordinator, update, b: follower(b, update, direct), c: follower(c, update, direct) };
}

function sent<T>(
  effects: NodeEffect[],
  cls: abstract new (...args: never[]) => T,
): { to: UniqueAddress; message: T }[] {
  return sends(effects).flatMap((x) => (x.message instanceof cls ? [{ to: x.to, message: x.message as T }] : []));
}

/** `update` with `shard` given to `owner` (or left unplaced when `owner` is null), at `generation`, by `author`. */
function moved(update: PlanUpdate, shard: number, owner: UniqueAddress | null, generation: number, author = a) {
  const assignments = update.assignments.flatMap((x) =>
    x.shardId !== shard ? [x] : owner === null ? [] : [{ shardId: shard, owner: owner.toString() }],
  );
  return new PlanUpdate(type, update.settingsKey, author.toString(), generation, assignments);
}

/** b holds c's grant for `shard` (probe through a, forwarded, granted). */
function granted(k: ReturnType<typeof cluster>, shard: number, nowMs: number): DirectGrant {
  const id = k.b.entityIn((s) => s === shard);
  const [probe] = sent(k.b.route(k.b.delivery(id), nowMs), DirectProbe);
  const [forwarded] = sent(control(k.coordinator, probe!.message, b, nowMs + 1), DirectProbe);
  const [grant] = sent(control(k.c, forwarded!.message, a, nowMs + 2), DirectGrant);
  control(k.b, grant!.message, c, nowMs + 3);
  assert.equal(k.b.t.routes.get(shard)?.phase, "direct");
  return grant!.message;
}

/** The one forward of `effects`: to whom, and whether it is a direct copy. */
function onlyForward(effects: NodeEffect[]) {
  const all = forwards(effects);
  assert.equal(all.length, 1, "exactly one forward");
  return { to: all[0]!.to.toString(), direct: all[0]!.envelope instanceof DirectEnvelope };
}

test("direct caller: a grant its plan no longer backs (a newer plan of the same coordinator gave the shard to the coordinator; the announcement lost) is dropped — the delivery goes through the coordinator, and no probe follows for the coordinator's own shard", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  granted(k, shard, 2_000);
  control(k.b, moved(k.update, shard, a, k.update.generation + 1), a, 2_010);
  const effects = k.b.route(k.b.delivery(k.b.entityIn((s) => s === shard)), 2_011);
  assert.deepEqual(onlyForward(effects), { to: a.toString(), direct: false });
  assert.deepEqual(sent(effects, DirectProbe), [], "the coordinator owns the shard: nothing to probe");
  assert.equal(k.b.t.routes.has(shard), false, "the grant is dropped");
  assert.equal(k.b.stats.directRoutes, 0);
});

test("direct caller: a grant for a shard a newer plan leaves unplaced is dropped without a throw; the delivery goes through the coordinator, unprobed", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  granted(k, shard, 2_000);
  control(k.b, moved(k.update, shard, null, k.update.generation + 1), a, 2_010);
  assert.equal(k.b.t.plan.allocations.has(shard), false);
  const effects = k.b.route(k.b.delivery(k.b.entityIn((s) => s === shard)), 2_011);
  assert.deepEqual(onlyForward(effects), { to: a.toString(), direct: false });
  assert.deepEqual(sent(effects, DirectProbe), [], "no owner: nothing to probe");
  assert.equal(k.b.t.routes.has(shard), false);
});

test("direct caller: a grant under a coordinator that went Down is dropped before the new coordinator's plan arrives — the delivery goes to the new coordinator, and no probe goes to it under the old plan", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  granted(k, shard, 2_000);
  k.b.feed(
    { kind: "membershipChanged", snapshot: view(b, [member(e), member(a, "Down"), member(b), member(c)]) },
    2_010,
  );
  assert.ok(k.b.state.view.routing?.equals(e));
  assert.ok(k.b.t.plan.author?.equals(a), "e's plan has not arrived");
  const effects = k.b.route(k.b.delivery(k.b.entityIn((s) => s === shard)), 2_011);
  assert.deepEqual(onlyForward(effects), { to: e.toString(), direct: false });
  assert.deepEqual(sent(effects, DirectProbe), [], "a probe waits for a plan authored by the coordinator it goes to");
  assert.equal(k.b.t.routes.has(shard), false);
});

test("direct caller: a member that holds no plan yet sends its delivery to the coordinator and probes nothing (it knows no owner)", () => {
  const n = new Driven(b, direct);
  assert.equal(n.t.plan.author, null);
  const effects = n.route(n.delivery("e1"), 2_000);
  assert.deepEqual(onlyForward(effects), { to: a.toString(), direct: false });
  assert.deepEqual(sent(effects, DirectProbe), []);
});

test("direct caller: the cooling period ends exactly directProbeRetryMs after the refusal — a delivery at that instant probes again", () => {
  const k = cluster();
  const shard = k.b.shardOn(c);
  granted(k, shard, 2_000);
  const id = k.b.entityIn((s) => s === shard);
  control(k.b, new DirectRefused(type, k.b.settings.key, shard, c.toString()), c, 2_010);
  const route = k.b.t.routes.get(shard);
  assert.equal(route?.phase, "cooling");
  const untilMs = route?.phase === "cooling" ? route.untilMs : Number.NaN;
  assert.deepEqual(sent(k.b.route(k.b.delivery(id), untilMs - 1), DirectProbe), [], "still cooling 1 ms before");
  assert.equal(sent(k.b.route(k.b.delivery(id), untilMs), DirectProbe).length, 1, "probed again at the end");
});

test("direct coordinator: a probe handed to the core without a transport sender (origin null) is refused as a configuration error", () => {
  const k = cluster();
  const probe = new DirectProbe(type, k.coordinator.settings.key, k.coordinator.shardOn(c), b.toString(), 7);
  const effects = control(k.coordinator, probe, null, 2_000);
  const [refused] = ofKind(effects, "refused");
  assert.ok(refused!.error instanceof ClusterShardingConfigurationError, String(refused!.error));
  assert.deepEqual(sent(effects, DirectProbe), [], "not forwarded");
});
