import assert from "node:assert/strict";
import { test } from "node:test";
import {
  type HandoffEffect,
  type HandoffState,
  handoffStep,
  isActive,
  newHandoff,
} from "../../src/sharding/handoff/handoff.ts";
import { ClusterShardingConfigurationError, NoShardOwnerError } from "../../src/sharding/index.ts";
import { addr } from "./fixtures/members.ts";

const a = addr("a");
const b = addr("b");
const ok = { stillCoordinator: true, nextOwnerUp: true, previousReachable: true };

function run(state: HandoffState<string>, ...inputs: Parameters<typeof handoffStep<string>>[1][]) {
  const all: HandoffEffect<string>[] = [];
  for (const input of inputs) {
    const [next, effects] = handoffStep(state, input);
    state = next;
    all.push(...effects);
  }
  return { state, effects: all };
}

test("handoff steps: passivate previous, prepare next, complete, then flush the buffer in FIFO order", () => {
  let h = newHandoff<string>("Order", 5, a, b);
  let r = run(h, { kind: "attempt", ...ok }, { kind: "buffer", delivery: "m1" }, { kind: "buffer", delivery: "m2" });
  assert.deepEqual(r.effects, [{ kind: "passivate", owner: a, next: b }]);
  assert.equal(r.state.phase, "passivating");
  r = run(r.state, { kind: "prepared" }); // out of phase: ignored
  assert.equal(r.state.phase, "passivating");
  r = run(r.state, { kind: "passivated" }, { kind: "buffer", delivery: "m3" });
  assert.deepEqual(r.effects, [{ kind: "prepare", owner: b }]);
  r = run(r.state, { kind: "prepared" });
  assert.deepEqual(r.effects, [{ kind: "complete", next: b }]);
  h = r.state;
  r = run(h, { kind: "buffer", delivery: "m4" }, { kind: "completed" });
  assert.deepEqual(
    r.effects.filter((e) => e.kind === "dispatch").map((e) => (e.kind === "dispatch" ? e.delivery : "")),
    ["m1", "m2", "m3", "m4"],
  );
  // The shell publishes the plan on `finished`, so it must come after every flushed delivery.
  const finished = r.effects.findIndex((e) => e.kind === "finished" && e.outcome === "done");
  const lastDispatch = r.effects.map((e) => e.kind).lastIndexOf("dispatch");
  assert.ok(finished > lastDispatch && lastDispatch >= 0, `finished at ${finished}, last dispatch at ${lastDispatch}`);
  assert.equal(isActive(r.state), false);
  // after it finished, a late buffer is rejected rather than kept
  const late = run(r.state, { kind: "buffer", delivery: "m5" });
  assert.ok(late.effects[0]?.kind === "reject" && late.effects[0].error instanceof NoShardOwnerError);
});

test("handoff skips passivation of a missing, Down or Removed previous owner, and preparation with no next owner", () => {
  let r = run(newHandoff<string>("Order", 1, a, b), { kind: "attempt", ...ok, previousReachable: false });
  assert.deepEqual(r.effects, [{ kind: "prepare", owner: b }]);
  r = run(
    newHandoff<string>("Order", 1, a, null),
    { kind: "attempt", ...ok },
    { kind: "buffer", delivery: "x" },
    { kind: "passivated" },
  );
  assert.deepEqual(
    r.effects.map((e) => e.kind),
    ["passivate", "complete"],
  );
  r = run(r.state, { kind: "completed" });
  assert.ok(
    r.effects[0]?.kind === "reject" && r.effects[0].error instanceof NoShardOwnerError,
    "no next owner: buffer rejected",
  );
});

test("a failed step retries the whole handoff after 100 ms; the buffer keeps waiting", () => {
  let r = run(newHandoff<string>("Order", 1, a, b), { kind: "attempt", ...ok }, { kind: "buffer", delivery: "x" });
  r = run(r.state, { kind: "failed", error: new Error("ask timed out") });
  assert.deepEqual(
    r.effects.map((e) => e.kind),
    ["failedAttempt", "scheduleAttempt"],
  );
  assert.deepEqual(r.effects[1], { kind: "scheduleAttempt", afterMs: 100 });
  assert.equal(r.state.phase, "waiting");
  r = run(r.state, { kind: "passivated" }); // a stale reply of the failed attempt
  assert.deepEqual(r.effects, []);
  r = run(r.state, { kind: "attempt", ...ok });
  assert.deepEqual(r.effects, [{ kind: "passivate", owner: a, next: b }]);
  assert.equal(r.state.attempts, 2);
  assert.deepEqual(r.state.buffer, ["x"]);
});

test("abort when the coordinator changed or the next owner is not Up: every buffered delivery is rejected", () => {
  for (const check of [
    { ...ok, stillCoordinator: false },
    { ...ok, nextOwnerUp: false },
  ]) {
    let r = run(
      newHandoff<string>("Order", 1, a, b),
      { kind: "attempt", ...ok },
      { kind: "buffer", delivery: "x" },
      { kind: "buffer", delivery: "y" },
    );
    r = run(r.state, { kind: "failed", error: new Error("boom") }, { kind: "attempt", ...check });
    const rejects = r.effects.filter((e) => e.kind === "reject");
    assert.deepEqual(
      rejects.map((e) => (e.kind === "reject" ? e.delivery : "")),
      ["x", "y"],
    );
    for (const e of rejects) assert.ok(e.kind === "reject" && e.error instanceof NoShardOwnerError);
    assert.ok(r.effects.some((e) => e.kind === "finished" && e.outcome === "aborted"));
    assert.ok(r.effects.some((e) => e.kind === "scheduleReconcile"));
  }
});

test("the handoff buffer holds 1,024 deliveries; the next is rejected with the original's text", () => {
  let state: HandoffState<number> = handoffStep(newHandoff<number>("Order", 3, a, b), { kind: "attempt", ...ok })[0];
  for (let i = 0; i < 1024; i++) {
    const [next, effects] = handoffStep(state, { kind: "buffer", delivery: i });
    assert.deepEqual(effects, []);
    state = next;
  }
  const [, effects] = handoffStep(state, { kind: "buffer", delivery: 1024 });
  assert.equal(effects.length, 1);
  const e = effects[0]!;
  assert.ok(e.kind === "reject" && e.error instanceof ClusterShardingConfigurationError);
  assert.match(e.error.message, /^Shard handoff buffer is full for Order\/3/);
});

test("settling (gossip re-converging in the same term) makes the handoff wait instead of aborting; lost still aborts", () => {
  // an attempt while settling: no abort, no rejection, a new attempt later; the buffer is kept
  let r = run(
    newHandoff<string>("Order", 2, a, b),
    { kind: "buffer", delivery: "m1" },
    {
      kind: "attempt",
      ...ok,
      stillCoordinator: false,
      settling: true,
    },
  );
  assert.deepEqual(r.effects, [{ kind: "scheduleAttempt", afterMs: 100 }]);
  assert.equal(r.state.phase, "waiting");
  assert.deepEqual(r.state.buffer, ["m1"]);
  // settling does not excuse a next owner that is no longer Up
  const gone = run(r.state, { kind: "attempt", ...ok, stillCoordinator: false, settling: true, nextOwnerUp: false });
  assert.equal(gone.state.phase, "aborted");
  // converged again: the handoff proceeds
  r = run(r.state, { kind: "attempt", ...ok }, { kind: "passivated" }, { kind: "prepared" });
  assert.equal(r.state.phase, "completing");
  // the shell could not complete while settling: it waits, then tries the completion again, buffer intact
  r = run(r.state, { kind: "buffer", delivery: "m2" }, { kind: "settling" });
  assert.deepEqual(r.effects, [{ kind: "scheduleRetryComplete", afterMs: 100 }]);
  assert.equal(r.state.phase, "completing");
  r = run(r.state, { kind: "retryComplete" });
  assert.deepEqual(r.effects, [{ kind: "complete", next: b }]);
  r = run(r.state, { kind: "completed" });
  assert.deepEqual(
    r.effects.filter((e) => e.kind === "dispatch").map((e) => (e.kind === "dispatch" ? e.delivery : "")),
    ["m1", "m2"],
  );
  // out of phase, both are ignored
  assert.deepEqual(
    run(newHandoff<string>("Order", 2, a, b), { kind: "settling" }, { kind: "retryComplete" }).effects,
    [],
  );
  // not settling and not coordinator (unreachable member, another coordinator): abort and reject the buffer
  const lost = run(
    newHandoff<string>("Order", 2, a, b),
    { kind: "buffer", delivery: "x" },
    {
      kind: "attempt",
      ...ok,
      stillCoordinator: false,
      settling: false,
    },
  );
  assert.equal(lost.state.phase, "aborted");
  assert.ok(lost.effects.some((e) => e.kind === "reject" && e.delivery === "x"));
});

test("settling is bounded: the 21st consecutive round (2 s = HANDOFF_TIMEOUT) aborts and rejects the buffer", () => {
  const settlingAttempt = { kind: "attempt" as const, ...ok, stillCoordinator: false, settling: true };
  // Waiting before the first step: 20 rounds of 100 ms each schedule another attempt, the next aborts.
  let r = run(newHandoff<string>("Order", 4, a, b), { kind: "buffer", delivery: "m1" });
  for (let round = 1; round <= 20; round++) {
    r = run(r.state, settlingAttempt);
    assert.deepEqual(r.effects, [{ kind: "scheduleAttempt", afterMs: 100 }], `round ${round}`);
    assert.equal(r.state.settlingRounds, round);
  }
  r = run(r.state, settlingAttempt);
  assert.equal(r.state.phase, "aborted");
  const rejected = r.effects.filter((e) => e.kind === "reject");
  assert.equal(rejected.length, 1);
  assert.ok(rejected[0]!.kind === "reject" && rejected[0]!.error instanceof NoShardOwnerError);
  assert.deepEqual(
    r.effects.filter((e) => e.kind !== "reject"),
    [
      { kind: "finished", outcome: "aborted" },
      { kind: "scheduleReconcile", afterMs: 100 },
    ],
  );

  // An attempt that finds this node the coordinator again resets the count: a later flicker gets its own 2 s.
  r = run(newHandoff<string>("Order", 4, a, b));
  for (let round = 1; round <= 19; round++) r = run(r.state, settlingAttempt);
  r = run(r.state, { kind: "attempt", ...ok }, { kind: "passivated" }, { kind: "prepared" });
  assert.equal(r.state.phase, "completing");
  assert.equal(r.state.settlingRounds, 0);
  // Waiting to complete counts the same way.
  r = run(r.state, { kind: "buffer", delivery: "m2" });
  for (let round = 1; round <= 20; round++) {
    r = run(r.state, { kind: "settling" });
    assert.deepEqual(r.effects, [{ kind: "scheduleRetryComplete", afterMs: 100 }], `completing round ${round}`);
    r = run(r.state, { kind: "retryComplete" });
    assert.deepEqual(r.effects, [{ kind: "complete", next: b }]);
  }
  r = run(r.state, { kind: "settling" });
  assert.equal(r.state.phase, "aborted");
  assert.ok(r.effects.some((e) => e.kind === "reject" && e.delivery === "m2" && e.error instanceof NoShardOwnerError));
});
