// Helpers the direct route's rule tests share (docs/protocol.md §8.8): a, b and c in direct mode, control messages fed
// by hand, a caller's grant taken through the coordinator, and the direct envelope a caller sends under it.
import assert from "node:assert/strict";
import type { UniqueAddress } from "../../../src/actor/index.ts";
import { NoRebalance } from "../../../src/sharding/index.ts";
import { DirectEnvelope, DirectGrant, DirectProbe } from "../../../src/sharding/internal/messages.ts";
import type { ControlMessage, Delivery, NodeEffect } from "../../../src/sharding/node/node-core.ts";
import { a, address, b, c, coordinatorWithPlan, type Driven, follower, sends } from "./node-harness.ts";

/** Direct routing, and no rebalance policy (an operator's move is then never refused as one it would undo). */
export const direct = { routing: "direct" as const, rebalance: new NoRebalance() };

/** A member whose address sorts before a's: while Up it is the elected coordinator. */
export const e: UniqueAddress = address(2550);

/** Feeds `n` a control message from `origin` (null: from this node itself). */
export function control(n: Driven, message: ControlMessage, origin: UniqueAddress | null, nowMs: number): NodeEffect[] {
  return n.feed({ kind: "control", message, replyTo: null, origin }, nowMs);
}

/** a coordinates a, b, c in direct mode; b and c follow its plan. */
export function cluster() {
  const coordinator = coordinatorWithPlan(direct);
  const update = coordinator.update();
  return { coordinator, update, b: follower(b, update, direct), c: follower(c, update, direct) };
}

/** The control messages of `effects` that are instances of `cls`, with their destination. */
export function sent<T>(
  effects: NodeEffect[],
  cls: abstract new (...args: never[]) => T,
): { to: UniqueAddress; message: T }[] {
  return sends(effects).flatMap((x) => (x.message instanceof cls ? [{ to: x.to, message: x.message as T }] : []));
}

/** b holds c's grant for `shard` (probe through a, forwarded, granted); returns the grant. */
export function grantedDirect(k: ReturnType<typeof cluster>, shard: number, nowMs: number): DirectGrant {
  const id = k.b.entityIn((s) => s === shard);
  const [probe] = sent(k.b.route(k.b.delivery(id), nowMs), DirectProbe);
  const [forwarded] = sent(control(k.coordinator, probe!.message, b, nowMs + 1), DirectProbe);
  const [grant] = sent(control(k.c, forwarded!.message, a, nowMs + 2), DirectGrant);
  control(k.b, grant!.message, c, nowMs + 3);
  assert.equal(k.b.t.routes.get(shard)?.phase, "direct");
  return grant!.message;
}

/** A direct envelope for `entityId` naming `coordinator` and `generation`, as a caller with a grant sends it. */
export function directFrom(n: Driven, entityId: string, coordinator: UniqueAddress, generation: number): Delivery {
  const d = n.delivery(entityId);
  return { envelope: DirectEnvelope.of(d.envelope, coordinator, generation), sender: d.sender };
}

/** True when `effects` are exactly one fresh `deliver` of `d` alone. */
export function onlyDelivers(effects: NodeEffect[], d: Delivery): boolean {
  const [x] = effects;
  return (
    effects.length === 1 && x?.kind === "deliver" && !x.retry && x.deliveries.length === 1 && x.deliveries[0] === d
  );
}

/** a coordinates a, b, c in direct mode; c, a member, holds its own grant for a shard it owns. */
export function ownerWithOwnGrant() {
  const coordinator = coordinatorWithPlan(direct);
  const n = follower(c, coordinator.update(), direct);
  const shard = n.shardOn(c);
  const id = n.entityIn((s) => s === shard);
  const [probe] = sent(n.route(n.delivery(id), 2_000), DirectProbe);
  const [forwarded] = sent(control(coordinator, probe!.message, c, 2_001), DirectProbe);
  // The owner is the caller: it takes its own grant at once (nothing sent).
  assert.deepEqual(sent(control(n, forwarded!.message, a, 2_002), DirectGrant), []);
  assert.equal(n.t.routes.get(shard)?.phase, "direct");
  return { n, shard, id };
}
