// Rules of the coordinator's handoff of one shard (src/sharding/handoff/handoff.ts), one scenario per rule, at the
// level of the pure step. Each was written against a mutant that kept every other test green (docs/mutation.md).
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  type HandoffEffect,
  type HandoffInput,
  type HandoffState,
  handoffStep,
  isActive,
  newHandoff,
} from "../../../src/sharding/handoff/handoff.ts";
import { NoShardOwnerError } from "../../../src/sharding/index.ts";
import { addr } from "../fixtures/members.ts";

const a = addr("a");
const b = addr("b");
const ok = { stillCoordinator: true, nextOwnerUp: true, previousReachable: true };

function run(state: HandoffState<string>, ...inputs: HandoffInput<string>[]) {
  const all: HandoffEffect<string>[] = [];
  for (const input of inputs) {
    const [next, effects] = handoffStep(state, input);
    state = next;
    all.push(...effects);
  }
  return { state, effects: all };
}

const kinds = (effects: HandoffEffect<string>[]) => effects.map((e) => e.kind);

/** The handoff of shard 5 from a to b in `phase`, with m1 and m2 buffered. */
function inPhase(phase: "waiting" | "passivating" | "preparing" | "completing"): HandoffState<string> {
  const steps: HandoffInput<string>[] = [
    { kind: "buffer", delivery: "m1" },
    { kind: "buffer", delivery: "m2" },
  ];
  if (phase !== "waiting") steps.push({ kind: "attempt", ...ok });
  if (phase === "preparing" || phase === "completing") steps.push({ kind: "passivated" });
  if (phase === "completing") steps.push({ kind: "prepared" });
  const { state } = run(newHandoff<string>("Order", 5, a, b), ...steps);
  assert.equal(state.phase, phase);
  return state;
}

test("flush order: a completion reply in any phase but completing flushes nothing and changes nothing", () => {
  for (const phase of ["waiting", "passivating", "preparing"] as const) {
    const state = inPhase(phase);
    const [after, effects] = handoffStep(state, { kind: "completed" });
    assert.equal(after, state, phase);
    assert.deepEqual(effects, [], `${phase}: the buffer waits for the new owner's completion`);
  }
});

test("flush order: completion dispatches the buffer oldest first, then reports done, then schedules a reconcile", () => {
  const { state, effects } = run(inPhase("completing"), { kind: "completed" });
  assert.deepEqual(effects, [
    { kind: "dispatch", delivery: "m1", owner: b },
    { kind: "dispatch", delivery: "m2", owner: b },
    { kind: "finished", outcome: "done" },
    { kind: "scheduleReconcile", afterMs: 100 },
  ]);
  assert.equal(state.phase, "done");
  assert.deepEqual(state.buffer, [], "nothing stays buffered after the flush");
});

test("replies that do not fit the phase are ignored, leaving the state as it was", () => {
  const cases: [ReturnType<typeof inPhase>, HandoffInput<string>][] = [
    [inPhase("passivating"), { kind: "attempt", ...ok }],
    [inPhase("passivating"), { kind: "prepared" }],
    [inPhase("preparing"), { kind: "passivated" }],
    [inPhase("waiting"), { kind: "failed", error: new Error("late") }],
    [inPhase("waiting"), { kind: "retryComplete" }],
  ];
  for (const [state, input] of cases) {
    const [after, effects] = handoffStep(state, input);
    assert.equal(after, state, `${state.phase} + ${input.kind}`);
    assert.deepEqual(effects, [], `${state.phase} + ${input.kind}`);
  }
});

test("a finished handoff ignores every reply; only new traffic is answered, with NoShardOwnerError", () => {
  const done = run(inPhase("completing"), { kind: "completed" }).state;
  const aborted = run(inPhase("preparing"), { kind: "abort" }).state;
  for (const state of [done, aborted]) {
    assert.equal(isActive(state), false, state.phase);
    for (const input of [
      { kind: "completed" },
      { kind: "attempt", ...ok },
      { kind: "failed", error: new Error("x") },
      { kind: "abort" },
    ] as HandoffInput<string>[]) {
      const [after, effects] = handoffStep(state, input);
      assert.equal(after, state);
      assert.deepEqual(effects, [], `${state.phase} + ${input.kind}`);
    }
    const [, rejected] = handoffStep(state, { kind: "buffer", delivery: "late" });
    assert.equal(rejected.length, 1);
    const r = rejected[0]!;
    assert.ok(r.kind === "reject" && r.delivery === "late" && r.error instanceof NoShardOwnerError);
  }
  for (const phase of ["waiting", "passivating", "preparing", "completing"] as const) {
    assert.equal(isActive(inPhase(phase)), true, phase);
  }
});

test("an abort rejects the buffer in order, reports aborted, schedules a reconcile and keeps nothing", () => {
  const { state, effects } = run(inPhase("preparing"), { kind: "abort" });
  assert.deepEqual(kinds(effects), ["reject", "reject", "finished", "scheduleReconcile"]);
  assert.deepEqual(
    effects.flatMap((e) => (e.kind === "reject" ? [e.delivery] : [])),
    ["m1", "m2"],
  );
  assert.deepEqual(effects.at(-2), { kind: "finished", outcome: "aborted" });
  assert.deepEqual(state.buffer, []);
  assert.equal(state.phase, "aborted");
});

test("no previous owner: nothing to passivate even if the check says reachable; the next owner is prepared", () => {
  const { state, effects } = run(newHandoff<string>("Order", 5, null, b), { kind: "attempt", ...ok });
  assert.deepEqual(effects, [{ kind: "prepare", owner: b }]);
  assert.equal(state.phase, "preparing");
});
