// Rules of the lease book (src/sharding/lease/lease-book.ts), one scenario per rule, at the level of the pure `step`
// so they survive any rewrite of the shell. Each was written against a mutant that kept every other test green
// (docs/mutation.md).
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  createLeaseBook,
  type LeaseBookConfig,
  type LeaseBookState,
  type LeaseEffect,
  type LeaseInput,
  liveToken,
  type ShardLeaseToken,
  step,
} from "../../../src/sharding/lease/index.ts";

const config: LeaseBookConfig = {
  clusterName: "shop",
  entityType: "Order",
  owner: "movie.tcp://shop@127.0.0.1:2551#a1",
  leaseDurationMs: 10_000,
  leaseRenewIntervalMs: 3_000,
};

function token(shardId: number, epoch: number, owner = config.owner): ShardLeaseToken {
  return { key: { clusterName: "shop", entityType: "Order", shardId }, owner, epoch, leaseUntilEpochMs: 1_000_000 };
}

function ready(...shards: number[]): LeaseBookState {
  let s = createLeaseBook(config);
  [s] = step(s, { kind: "safeToOwn", safe: true }, 0);
  for (const shardId of shards) [s] = step(s, { kind: "own", shardId }, 0);
  return s;
}

/** Feeds `inputs` at `nowMs`; returns the final state and every effect. */
function run(state: LeaseBookState, inputs: LeaseInput[], nowMs = 0): [LeaseBookState, LeaseEffect[]] {
  const all: LeaseEffect[] = [];
  let s = state;
  for (const input of inputs) {
    const [next, effects] = step(s, input, nowMs);
    s = next;
    all.push(...effects);
  }
  return [s, all];
}

const kinds = (effects: LeaseEffect[]) => effects.map((e) => e.kind);
const drained = (effects: LeaseEffect[]) => effects.filter((e) => e.kind === "drained").map((e) => e.shardId);
const grants = (effects: LeaseEffect[]) => effects.flatMap((e) => (e.kind === "grant" ? [e.requestId] : []));
const failures = (effects: LeaseEffect[]) =>
  effects.flatMap((e) =>
    e.kind === "fail"
      ? [[e.requestId, e.failure.error === "ShardLeaseUnavailableError" ? e.failure.reason : "handoff"]]
      : [],
  );
const callOf = (effects: LeaseEffect[], kind: "acquire" | "renew" | "release") => {
  const effect = effects.find((e) => e.kind === kind);
  assert.ok(
    effect !== undefined && "callId" in effect,
    `expected a ${kind} effect in ${JSON.stringify(kinds(effects))}`,
  );
  return effect.callId;
};

/** A book whose acquire for shard 7 (call 1, issued at 0) was dropped by a suspension, then re-issued at `at`. */
function reissued(at: number): [LeaseBookState, number] {
  const [s1, e1] = run(ready(7), [{ kind: "needLease", requestId: 1, shardId: 7 }], 0);
  assert.equal(callOf(e1, "acquire"), 1);
  const [s2, e2] = run(s1, [{ kind: "safeToOwn", safe: false }], 1);
  assert.deepEqual(failures(e2), [[1, "unsafe"]]);
  const [s3, e3] = run(
    s2,
    [
      { kind: "safeToOwn", safe: true },
      { kind: "needLease", requestId: 2, shardId: 7 },
    ],
    at,
  );
  return [s3, callOf(e3, "acquire")];
}

test("a newer acquire never takes the answer to an older, dropped acquire", () => {
  const [s, newer] = reissued(8_000);
  assert.notEqual(newer, 1);
  // The old call's token is valid in the database only until 0 + 10,000; taking it now would stretch it to 18,000.
  const [afterOld, old] = step(s, { kind: "acquired", callId: 1, shardId: 7, token: token(7, 1) }, 8_100);
  assert.deepEqual(old, [], "the stale answer is neither used nor answered");
  assert.equal(liveToken(afterOld, 7, 8_100), null);
  assert.equal(afterOld.shards.get(7)?.phase, "acquiring");
  const [held, fresh] = step(afterOld, { kind: "acquired", callId: newer, shardId: 7, token: token(7, 2) }, 8_200);
  assert.deepEqual(grants(fresh), [2]);
  assert.deepEqual(liveToken(held, 7, 17_999), token(7, 2), "validity counts from the newer call's issue time");
  assert.equal(liveToken(held, 7, 18_000), null);
});

test("a newer acquire is not failed by the failure of an older, dropped acquire", () => {
  const [s, newer] = reissued(500);
  const [afterOld, old] = step(s, { kind: "acquireFailed", callId: 1, shardId: 7, error: "timeout" }, 600);
  assert.deepEqual(old, []);
  assert.equal(afterOld.shards.get(7)?.phase, "acquiring");
  const [, fresh] = step(afterOld, { kind: "acquired", callId: newer, shardId: 7, token: token(7, 2) }, 700);
  assert.deepEqual(grants(fresh), [2]);
});

test("the failure of the current acquire fails its waiters and forgets it, so the next delivery acquires again", () => {
  const [s, e] = run(ready(7), [
    { kind: "needLease", requestId: 1, shardId: 7 },
    { kind: "needLease", requestId: 2, shardId: 7 },
  ]);
  const [after, failed] = step(s, { kind: "acquireFailed", callId: callOf(e, "acquire"), shardId: 7, error: "x" }, 5);
  assert.deepEqual(failures(failed), [
    [1, "error"],
    [2, "error"],
  ]);
  assert.deepEqual(drained(failed), [], "nobody was draining it");
  assert.equal(after.shards.has(7), false);
  assert.deepEqual(kinds(step(after, { kind: "needLease", requestId: 3, shardId: 7 }, 6)[1]), ["acquire"]);
});

test("a delivery that finds its lease expired locally is answered by the acquire it starts", () => {
  const [held] = run(ready(7), [
    { kind: "needLease", requestId: 1, shardId: 7 },
    { kind: "acquired", callId: 1, shardId: 7, token: token(7, 1) },
  ]);
  const [s, effects] = step(held, { kind: "needLease", requestId: 5, shardId: 7 }, 10_000);
  assert.deepEqual(kinds(effects), ["count", "stopEntities", "acquire"]);
  const [, answered] = step(
    s,
    { kind: "acquired", callId: callOf(effects, "acquire"), shardId: 7, token: token(7, 2) },
    10_010,
  );
  assert.deepEqual(grants(answered), [5], "the delivery that found the lease expired is not left waiting");
  // and when that acquire finds no lease, the same delivery is failed, never dropped
  const [, fenced] = step(s, { kind: "acquired", callId: callOf(effects, "acquire"), shardId: 7, token: null }, 10_010);
  assert.deepEqual(failures(fenced), [[5, "fenced"]]);
});

// "drained" tells a waiting handoff (or shutdown) that the shard holds no lease here any more. It must come exactly
// when the last in-flight call for an abandoned shard ends, whichever way it ends.
const acquireEndings: [string, (callId: number) => LeaseInput, number][] = [
  ["fails", (callId) => ({ kind: "acquireFailed", callId, shardId: 7, error: "timeout" }), 10],
  ["finds no lease", (callId) => ({ kind: "acquired", callId, shardId: 7, token: null }), 10],
  [
    "returns a token for another owner",
    (callId) => ({ kind: "acquired", callId, shardId: 7, token: token(7, 1, "x") }),
    10,
  ],
  [
    "answers after the lease would have expired",
    (callId) => ({ kind: "acquired", callId, shardId: 7, token: token(7, 1) }),
    10_000,
  ],
];
const abandonments: [string, LeaseInput][] = [
  ["a handoff drain", { kind: "drain", shardId: 7 }],
  ["a shutdown", { kind: "stopAll" }],
  ["a retain without the shard", { kind: "retain", shardIds: [] }],
];
for (const [abandonment, abandon] of abandonments) {
  for (const [ending, end, at] of acquireEndings) {
    test(`"drained" is signalled when ${abandonment} overlaps an acquire that ${ending}`, () => {
      const [s, e] = run(ready(7), [{ kind: "needLease", requestId: 1, shardId: 7 }, abandon]);
      assert.deepEqual(drained(e), [], "not yet: the acquire is still in flight");
      assert.equal(failures(e).length, 1, "the waiting delivery is refused at once");
      const [after, ended] = step(s, end(callOf(e, "acquire")), at);
      assert.deepEqual(drained(ended), [7]);
      assert.equal(after.shards.has(7), false);
    });
  }
  test(`${abandonment} overlapping a successful acquire releases the token, then signals "drained"`, () => {
    const [s, e] = run(ready(7), [{ kind: "needLease", requestId: 1, shardId: 7 }, abandon]);
    const [releasing, acquired] = step(
      s,
      { kind: "acquired", callId: callOf(e, "acquire"), shardId: 7, token: token(7, 1) },
      10,
    );
    assert.deepEqual(grants(acquired), []);
    assert.deepEqual(drained(acquired), []);
    const [done, released] = step(
      releasing,
      { kind: "released", callId: callOf(acquired, "release"), shardId: 7, released: true },
      20,
    );
    assert.deepEqual(drained(released), [7]);
    assert.equal(done.shards.has(7), false);
  });
}

test('a suspension that overlaps a running drain signals "drained" at once (the lease is dropped, not released)', () => {
  const [held] = run(ready(7), [
    { kind: "needLease", requestId: 1, shardId: 7 },
    { kind: "acquired", callId: 1, shardId: 7, token: token(7, 1) },
  ]);
  const [draining, e1] = step(held, { kind: "drain", shardId: 7 }, 5);
  assert.deepEqual(kinds(e1), ["stopEntities"]);
  const [after, e2] = step(draining, { kind: "safeToOwn", safe: false }, 6);
  assert.deepEqual(drained(e2), [7]);
  assert.ok(!kinds(e2).includes("release"), "an unsafe node releases nothing");
  assert.ok(!kinds(e2).includes("stopEntities"), "the drain already stops them");
  assert.equal(after.shards.has(7), false);
  // the entities stopping later changes nothing
  assert.deepEqual(step(after, { kind: "entitiesStopped", shardId: 7 }, 7)[1], []);
});

test('a shutdown or a second drain during a running drain keeps the one release, then "drained" once', () => {
  const [held] = run(ready(7), [
    { kind: "needLease", requestId: 1, shardId: 7 },
    { kind: "acquired", callId: 1, shardId: 7, token: token(7, 1) },
  ]);
  for (const overlap of [{ kind: "stopAll" }, { kind: "drain", shardId: 7 }] as LeaseInput[]) {
    const [s, e] = run(held, [{ kind: "drain", shardId: 7 }, overlap, { kind: "entitiesStopped", shardId: 7 }], 5);
    assert.deepEqual(kinds(e), ["stopEntities", "release"], overlap.kind);
    const [, done] = step(s, { kind: "releaseFailed", callId: callOf(e, "release"), shardId: 7, error: "x" }, 6);
    assert.deepEqual(drained(done), [7]);
  }
});

test('a suspension that overlaps an acquire drops it: its later answer neither grants nor signals "drained"', () => {
  const [s, e] = run(ready(7), [
    { kind: "needLease", requestId: 1, shardId: 7 },
    { kind: "safeToOwn", safe: false },
  ]);
  assert.deepEqual(failures(e), [[1, "unsafe"]]);
  assert.deepEqual(drained(e), []);
  assert.equal(s.shards.has(7), false);
  for (const late of [
    { kind: "acquired", callId: 1, shardId: 7, token: token(7, 1) },
    { kind: "acquireFailed", callId: 1, shardId: 7, error: "x" },
  ] as LeaseInput[]) {
    assert.deepEqual(step(s, late, 2)[1], [], late.kind);
  }
});

test("a delivery after a drain of an in-flight acquire re-owns the shard: the answer is granted, not released", () => {
  const [s, e] = run(ready(7), [
    { kind: "needLease", requestId: 1, shardId: 7 },
    { kind: "drain", shardId: 7 },
    { kind: "own", shardId: 7 },
    { kind: "needLease", requestId: 2, shardId: 7 },
  ]);
  assert.deepEqual(failures(e), [[1, "handoff"]]);
  const [held, answered] = step(
    s,
    { kind: "acquired", callId: callOf(e, "acquire"), shardId: 7, token: token(7, 1) },
    10,
  );
  assert.deepEqual(grants(answered), [2]);
  assert.deepEqual(drained(answered), []);
  assert.deepEqual(liveToken(held, 7, 10), token(7, 1));
});

/** A book holding shard 7 at epoch 1, acquired at time 0. */
function holding(): LeaseBookState {
  const [s] = run(ready(7), [
    { kind: "needLease", requestId: 1, shardId: 7 },
    { kind: "acquired", callId: 1, shardId: 7, token: token(7, 1) },
  ]);
  return s;
}

/** Shard 7 held, then drained: its release is in flight. Returns the state and the release call id. */
function releasing(): [LeaseBookState, number] {
  const [s, e] = run(holding(), [
    { kind: "drain", shardId: 7 },
    { kind: "entitiesStopped", shardId: 7 },
  ]);
  return [s, callOf(e, "release")];
}

test("a suspension that finds nothing held moves no loss counter (no zero count)", () => {
  const [, e] = run(ready(7), [
    { kind: "needLease", requestId: 1, shardId: 7 },
    { kind: "safeToOwn", safe: false },
  ]);
  assert.ok(!kinds(e).includes("count"), JSON.stringify(e));
});

test("a shard re-owned while its release is in flight, then drained again: the waiting delivery is refused at once", () => {
  const [s, releaseId] = releasing();
  const [waiting, e1] = run(s, [
    { kind: "own", shardId: 7 },
    { kind: "needLease", requestId: 2, shardId: 7 },
  ]);
  assert.deepEqual(e1, [], "it waits for the release to finish");
  const [drainedAgain, e2] = step(waiting, { kind: "drain", shardId: 7 }, 1);
  assert.deepEqual(failures(e2), [[2, "handoff"]]);
  const [, done] = step(drainedAgain, { kind: "released", callId: releaseId, shardId: 7, released: true }, 2);
  assert.deepEqual(done, [{ kind: "drained", shardId: 7 }], "nothing acquired, nobody failed twice");
});

test("a suspension during a release refuses the deliveries waiting on it at once as unsafe; the release completes", () => {
  const [s, releaseId] = releasing();
  const [suspended, e] = run(s, [
    { kind: "own", shardId: 7 },
    { kind: "needLease", requestId: 2, shardId: 7 },
    { kind: "safeToOwn", safe: false },
  ]);
  assert.deepEqual(failures(e), [[2, "unsafe"]]);
  assert.ok(!kinds(e).includes("release") && !kinds(e).includes("drained"));
  const [, done] = step(suspended, { kind: "released", callId: releaseId, shardId: 7, released: true }, 2);
  assert.deepEqual(done, [{ kind: "drained", shardId: 7 }]);
});

test("a shard re-owned (without a delivery) while its release is in flight is not acquired when the release ends", () => {
  const [s, releaseId] = releasing();
  const [, done] = run(s, [
    { kind: "own", shardId: 7 },
    { kind: "released", callId: releaseId, shardId: 7, released: true },
  ]);
  assert.deepEqual(done, [{ kind: "drained", shardId: 7 }], "the next delivery acquires, not the release");
});

test("a release answer for another call, or a shard without a release, is ignored", () => {
  const [s, releaseId] = releasing();
  assert.deepEqual(step(s, { kind: "released", callId: releaseId + 1, shardId: 7, released: true }, 1)[1], []);
  assert.deepEqual(step(s, { kind: "releaseFailed", callId: releaseId, shardId: 8, error: "x" }, 1)[1], []);
  // an acquire in flight is not ended by a release answer that happens to carry its call id
  const [acquiring, e] = run(ready(7), [{ kind: "needLease", requestId: 1, shardId: 7 }]);
  const [still, none] = step(
    acquiring,
    { kind: "released", callId: callOf(e, "acquire"), shardId: 7, released: true },
    1,
  );
  assert.deepEqual(none, []);
  assert.equal(still.shards.get(7)?.phase, "acquiring");
});

test("verify renews only a lease still valid on the local clock", () => {
  assert.deepEqual(kinds(step(holding(), { kind: "verify", shardId: 7 }, 9_999)[1]), ["renew"]);
  assert.deepEqual(step(holding(), { kind: "verify", shardId: 7 }, 10_000)[1], []);
});

test("a refused delivery says why: not owned after a retain, stopped after a shutdown, error for a bad acquire", () => {
  const [, retained] = run(ready(7), [
    { kind: "needLease", requestId: 1, shardId: 7 },
    { kind: "retain", shardIds: [] },
  ]);
  assert.deepEqual(failures(retained), [[1, "not-owned"]]);
  const [, stopped] = run(holding(), [{ kind: "stopAll" }, { kind: "needLease", requestId: 2, shardId: 7 }]);
  assert.deepEqual(failures(stopped), [[2, "stopped"]]);
  const [s, e] = run(ready(7), [{ kind: "needLease", requestId: 3, shardId: 7 }]);
  const acquireId = callOf(e, "acquire");
  const bad = step(s, { kind: "acquired", callId: acquireId, shardId: 7, token: token(7, 1, "x") }, 1)[1];
  assert.deepEqual(failures(bad), [[3, "error"]]);
  const late = step(s, { kind: "acquired", callId: acquireId, shardId: 7, token: token(7, 1) }, 10_000)[1];
  assert.deepEqual(failures(late), [[3, "error"]]);
});

test('an acquire that ends without a lease signals "drained" only when the shard was being given up', () => {
  const [s, e] = run(ready(7), [{ kind: "needLease", requestId: 1, shardId: 7 }]);
  const acquireId = callOf(e, "acquire");
  for (const [at, end] of [
    [1, { kind: "acquired", callId: acquireId, shardId: 7, token: null }],
    [1, { kind: "acquired", callId: acquireId, shardId: 7, token: token(7, 1, "x") }],
    [10_000, { kind: "acquired", callId: acquireId, shardId: 7, token: token(7, 1) }],
  ] as [number, LeaseInput][]) {
    assert.deepEqual(drained(step(s, end, at)[1]), [], JSON.stringify(end));
  }
});

test("a drain during an acquire wins over a later `own` without a delivery: the token is released, then drained", () => {
  const [s, e] = run(ready(7), [
    { kind: "needLease", requestId: 1, shardId: 7 },
    { kind: "drain", shardId: 7 },
    { kind: "own", shardId: 7 },
  ]);
  const [r, answered] = step(s, { kind: "acquired", callId: callOf(e, "acquire"), shardId: 7, token: token(7, 1) }, 1);
  assert.deepEqual(kinds(answered), ["release"]);
  assert.equal(liveToken(r, 7, 1), null);
  const [, done] = step(r, { kind: "released", callId: callOf(answered, "release"), shardId: 7, released: true }, 2);
  assert.deepEqual(drained(done), [7]);
});

test("a renewal tick that finds the node unsafe suspends it even when it holds nothing", () => {
  const [s] = run(ready(7), [{ kind: "renewTick", shardId: 7, epoch: 1, safeToOwn: false }]);
  assert.equal(s.safe, false);
  assert.deepEqual(failures(step(s, { kind: "needLease", requestId: 1, shardId: 7 }, 1)[1]), [[1, "unsafe"]]);
});

test("after a renewal the next one is due a full interval later: an early tick reschedules instead of renewing", () => {
  const [s, e] = run(holding(), [{ kind: "renewTick", shardId: 7, epoch: 1, safeToOwn: true }], 3_000);
  const [renewedState] = step(
    s,
    { kind: "renewed", callId: callOf(e, "renew"), shardId: 7, token: token(7, 1) },
    3_100,
  );
  const [, early] = step(renewedState, { kind: "renewTick", shardId: 7, epoch: 1, safeToOwn: true }, 5_000);
  assert.deepEqual(early, [{ kind: "scheduleRenewal", shardId: 7, epoch: 1, afterMs: 1_100 }]);
  const [, due] = step(renewedState, { kind: "renewTick", shardId: 7, epoch: 1, safeToOwn: true }, 6_100);
  assert.deepEqual(kinds(due), ["renew"]);
});
