// Both kinds of persistent entity name their effects the same way: EventSourcedEffect.persist(...) returns an
// EventSourcedEffect, DurableStateEffect.persist(...) a DurableStateEffect. The old names (Effect, EventEffect,
// DurableEffect) are deprecated aliases of the same things for one release.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  type DurableEffect,
  DurableStateEffect,
  Effect,
  type EventEffect,
  EventSourcedEffect,
  OperationId,
} from "../../src/persistence/index.ts";

test("the effect constructors of both entity kinds are static methods of the effect type they return", () => {
  const op = OperationId.from("op-1");
  const event = EventSourcedEffect.persist<string, number>("added", op);
  assert.ok(event instanceof EventSourcedEffect);
  assert.deepEqual([event.events, event.operationId, event.stopAfter], [["added"], op, false]);
  assert.deepEqual(EventSourcedEffect.persistAll<string, number>(["a", "b"], op).events, ["a", "b"]);
  assert.equal(EventSourcedEffect.stop<string, number>().stopAfter, true);
  const state = DurableStateEffect.persist({ n: 1 }, op);
  assert.ok(state instanceof DurableStateEffect);
  assert.deepEqual([state.kind, state.state, state.operationId], ["persist", { n: 1 }, op]);
  assert.equal(DurableStateEffect.delete("op-2").kind, "delete");
  assert.equal(DurableStateEffect.none().kind, "none");
});

test("the old names still work and are the same effects", () => {
  const old: EventEffect<string, number> = Effect.persist<string, number>("added", "op-1");
  assert.ok(old instanceof EventSourcedEffect);
  const renamed: EventSourcedEffect<string, number> = old;
  assert.deepEqual(renamed.events, ["added"]);
  assert.equal(Effect.none<string, number>().events.length, 0);
  const durable: DurableEffect<number> = DurableStateEffect.persist(1, "op-1");
  assert.equal(durable.state, 1);
});
