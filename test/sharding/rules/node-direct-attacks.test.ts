// Adversarial rules of the direct route (docs/protocol.md §8.8), written by a reviewer who did not write it: each test
// is one attack on the owner's or the caller's checks, fed by hand with time passed in (node-harness.ts).
import assert from "node:assert/strict";
import { test } from "node:test";
import type { UniqueAddress } from "../../../src/actor/index.ts";
import { DirectDeliveryRefusedError, NoRebalance } from "../../../src/sharding/index.ts";
import { DirectEnvelope, DirectRefused, PlanUpdate } from "../../../src/sharding/internal/messages.ts";
import type { ControlMessage, Delivery, NodeEffect } from "../../../src/sharding/node/node-core.ts";
import {
  a,
  address,
  b,
  c,
  coordinatorWithPlan,
  type Driven,
  delivers,
  follower,
  member,
  rejects,
  sends,
  type,
  view,
} from "./node-harness.ts";

const direct = { routing: "direct" as const, rebalance: new NoRebalance() };
/** A joiner whose address sorts before a's: while Up it is the coordinator; once it leaves, a is again. */
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

function directFrom(n: Driven, entityId: string, coordinator: UniqueAddress, generation: number): Delivery {
  const d = n.delivery(entityId);
  return { envelope: DirectEnvelope.of(d.envelope, coordinator, generation), sender: d.sender };
}

/** `update`'s assignments re-authored by `author` at `generation`. */
function reauthored(update: PlanUpdate, author: UniqueAddress, generation: number): PlanUpdate {
  return new PlanUpdate(type, update.settingsKey, author.toString(), generation, update.assignments);
}

test("direct attack: a direct delivery granted under coordinator a, still in flight while e coordinated and a took over again, is refused — it would land behind what e forwarded meanwhile", () => {
  const k = cluster();
  const shard = k.c.shardOn(c);
  const id = k.c.entityIn((s) => s === shard);
  const g = k.c.t.plan.generation;
  // b sent m1 straight to c under a's grant of generation g; m1 is slow.
  const m1 = directFrom(k.c, id, a, g);
  // e joins and coordinates: its plan keeps the shard on c; b's next message m2 goes through e and is delivered.
  k.c.feed({ kind: "membershipChanged", snapshot: view(c, [member(e), member(a), member(b), member(c)]) }, 2_000);
  control(k.c, reauthored(k.update, e, g + 1), e, 2_001);
  assert.equal(delivers(k.c.envelope(k.c.forwardedBy(e, id), e, 2_002)).length, 1, "m2 through e");
  // e leaves: a coordinates again, with a plan that still gives the shard to c.
  k.c.feed(
    { kind: "membershipChanged", snapshot: view(c, [member(e, "Leaving"), member(a), member(b), member(c)]) },
    2_003,
  );
  control(k.c, reauthored(k.update, a, g + 2), a, 2_004);
  assert.ok(k.c.t.plan.author?.equals(a) && k.c.t.plan.allocations.get(shard)?.equals(c));
  // m1 arrives at last: accepting it would deliver it after m2.
  const late = k.c.envelope(m1, b, 2_005);
  assert.deepEqual(delivers(late), [], "m1 must not be delivered behind m2");
  const [rejected] = rejects(late);
  assert.ok(rejected?.error instanceof DirectDeliveryRefusedError, "refused, typed");
  assert.equal(sent(late, DirectRefused).length, 1, "and the sender told");
});
