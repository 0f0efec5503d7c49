import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  ClusterShardingConfigurationError,
  ShardHandoffInProgressError,
  ShardLeaseUnavailableError,
} from "../../../src/sharding/errors.ts";
import {
  createLeaseBook,
  failureError,
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

function token(shardId: number, epoch: number, leaseUntilEpochMs = 1_000_000, owner = config.owner): ShardLeaseToken {
  return { key: { clusterName: "shop", entityType: "Order", shardId }, owner, epoch, leaseUntilEpochMs };
}

/** A book that is safe to own and owns `shards`. */
function ready(...shards: number[]): LeaseBookState {
  let s = createLeaseBook(config);
  [s] = step(s, { kind: "safeToOwn", safe: true }, 0);
  for (const shardId of shards) [s] = step(s, { kind: "own", shardId }, 0);
  return s;
}

/** Runs inputs at `nowMs`, returning the final state and all effects. */
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
const counts = (effects: LeaseEffect[]) =>
  effects.flatMap((e) => (e.kind === "count" ? [`${e.counter}+${e.by}`] : [])).sort();

/** A book holding shard 7 at epoch 1, acquired at time 0. */
function holding(): LeaseBookState {
  const [s] = run(ready(7), [
    { kind: "needLease", requestId: 1, shardId: 7 },
    { kind: "acquired", callId: 1, shardId: 7, token: token(7, 1) },
  ]);
  return s;
}

describe("lease book configuration", () => {
  test("rejects empty key parts and out-of-range durations with the field named", () => {
    const cases: [Partial<LeaseBookConfig>, string][] = [
      [{ clusterName: "" }, "clusterName"],
      [{ entityType: "" }, "routingName"],
      [{ owner: "" }, "owner"],
      [{ leaseDurationMs: 0 }, "leaseDuration"],
      [{ leaseDurationMs: Number.NaN }, "leaseDuration"],
      [{ leaseRenewIntervalMs: 0 }, "leaseRenewInterval"],
      [{ leaseRenewIntervalMs: 10_000 }, "leaseRenewInterval"],
      [{ leaseRenewIntervalMs: 12_000 }, "leaseRenewInterval"],
    ];
    for (const [patch, field] of cases) {
      assert.throws(
        () => createLeaseBook({ ...config, ...patch }),
        (e: unknown) => e instanceof ClusterShardingConfigurationError && e.field === field,
        field,
      );
    }
    assert.throws(() => createLeaseBook({ ...config, leaseRenewIntervalMs: 10_000 }), {
      message: /shard lease renewal interval must be positive and shorter than its duration/,
    });
  });

  test("a new book is not safe to own and refuses deliveries as unsafe", () => {
    const [, effects] = step(createLeaseBook(config), { kind: "needLease", requestId: 1, shardId: 0 }, 0);
    assert.deepEqual(effects, [
      { kind: "fail", requestId: 1, shardId: 0, failure: { error: "ShardLeaseUnavailableError", reason: "unsafe" } },
    ]);
  });
});

describe("acquiring", () => {
  test("the first delivery acquires; later ones wait and are granted in arrival order", () => {
    const [s1, e1] = run(ready(7), [
      { kind: "needLease", requestId: 1, shardId: 7 },
      { kind: "needLease", requestId: 2, shardId: 7 },
    ]);
    assert.deepEqual(e1, [
      {
        kind: "acquire",
        callId: 1,
        key: { clusterName: "shop", entityType: "Order", shardId: 7 },
        owner: config.owner,
        leaseDurationMs: 10_000,
      },
    ]);
    assert.equal(liveToken(s1, 7, 5), null);
    const [s2, e2] = step(s1, { kind: "acquired", callId: 1, shardId: 7, token: token(7, 1) }, 20);
    assert.deepEqual(e2, [
      { kind: "count", counter: "leaseAcquisitions", by: 1 },
      { kind: "scheduleRenewal", shardId: 7, epoch: 1, afterMs: 3_000 },
      { kind: "grant", requestId: 1, token: token(7, 1) },
      { kind: "grant", requestId: 2, token: token(7, 1) },
    ]);
    assert.deepEqual(liveToken(s2, 7, 20), token(7, 1));
  });

  test("a held lease is granted on the fast path until its local validity (issue time + duration) ends", () => {
    const s = holding();
    assert.deepEqual(liveToken(s, 7, 9_999), token(7, 1));
    assert.equal(liveToken(s, 7, 10_000), null);
    const [, granted] = step(s, { kind: "needLease", requestId: 5, shardId: 7 }, 9_999);
    assert.deepEqual(granted, [{ kind: "grant", requestId: 5, token: token(7, 1) }]);
  });

  test("a lease past its local validity counts a loss, stops its entities and is acquired again", () => {
    const [s, effects] = step(holding(), { kind: "needLease", requestId: 5, shardId: 7 }, 10_000);
    assert.deepEqual(kinds(effects), ["count", "stopEntities", "acquire"]);
    assert.deepEqual(counts(effects), ["leaseLosses+1"]);
    assert.deepEqual(effects[1], { kind: "stopEntities", shardId: 7, reason: "lost" });
    assert.equal(s.shards.get(7)?.phase, "acquiring");
  });

  test("no lease from the database fails the waiters as fenced; the next delivery tries again", () => {
    const [s, effects] = run(ready(7), [
      { kind: "needLease", requestId: 1, shardId: 7 },
      { kind: "needLease", requestId: 2, shardId: 7 },
      { kind: "acquired", callId: 1, shardId: 7, token: null },
    ]);
    const fails = effects.filter((e) => e.kind === "fail");
    assert.deepEqual(
      fails.map((e) => (e.kind === "fail" ? [e.requestId, e.failure] : [])),
      [
        [1, { error: "ShardLeaseUnavailableError", reason: "fenced" }],
        [2, { error: "ShardLeaseUnavailableError", reason: "fenced" }],
      ],
    );
    assert.equal(s.shards.size, 0);
    const [, again] = step(s, { kind: "needLease", requestId: 3, shardId: 7 }, 25);
    assert.deepEqual(kinds(again), ["acquire"]);
  });

  test("a database error fails the waiters with the cause", () => {
    const [, effects] = run(ready(7), [
      { kind: "needLease", requestId: 1, shardId: 7 },
      { kind: "acquireFailed", callId: 1, shardId: 7, error: "connection refused" },
    ]);
    assert.deepEqual(effects.at(-1), {
      kind: "fail",
      requestId: 1,
      shardId: 7,
      failure: { error: "ShardLeaseUnavailableError", reason: "error", detail: "connection refused" },
    });
  });

  test("an acquire answer that arrives after the lease would have expired is not used", () => {
    const [s, effects] = run(ready(7), [{ kind: "needLease", requestId: 1, shardId: 7 }], 0);
    const [s2, late] = step(s, { kind: "acquired", callId: 1, shardId: 7, token: token(7, 1) }, 10_000);
    assert.equal(kinds(effects)[0], "acquire");
    assert.deepEqual(kinds(late), ["fail"]);
    assert.equal(s2.shards.size, 0);
  });

  test("a token for another key, another owner or a lower epoch than already seen is refused", () => {
    const [held] = run(holding(), [
      { kind: "drain", shardId: 7 },
      { kind: "entitiesStopped", shardId: 7 },
      { kind: "released", callId: 2, shardId: 7, released: true },
      { kind: "own", shardId: 7 },
    ]);
    for (const bad of [token(8, 2), token(7, 2, 1, "someone-else"), token(7, 0)]) {
      const [s, effects] = run(held, [
        { kind: "needLease", requestId: 9, shardId: 7 },
        { kind: "acquired", callId: 3, shardId: 7, token: bad },
      ]);
      assert.equal(effects.at(-1)?.kind, "fail", JSON.stringify(bad));
      assert.equal(s.shards.size, 0);
    }
    const [ok, effects] = run(held, [
      { kind: "needLease", requestId: 9, shardId: 7 },
      { kind: "acquired", callId: 3, shardId: 7, token: token(7, 2) },
    ]);
    assert.equal(effects.at(-1)?.kind, "grant");
    assert.equal(ok.highestEpoch.get(7), 2);
  });

  test("a shard that is not owned here is refused without touching the database", () => {
    const [, effects] = step(ready(), { kind: "needLease", requestId: 1, shardId: 3 }, 0);
    assert.deepEqual(effects, [
      { kind: "fail", requestId: 1, shardId: 3, failure: { error: "ShardLeaseUnavailableError", reason: "not-owned" } },
    ]);
  });
});

describe("renewing", () => {
  test("a due tick renews; the answer counts a renewal, extends validity and schedules the next", () => {
    const s = holding();
    const [, early] = step(s, { kind: "renewTick", shardId: 7, epoch: 1, safeToOwn: true }, 2_990);
    assert.deepEqual(early, [{ kind: "scheduleRenewal", shardId: 7, epoch: 1, afterMs: 10 }], "early: wait the rest");
    const [s1, e1] = step(s, { kind: "renewTick", shardId: 7, epoch: 1, safeToOwn: true }, 3_000);
    assert.deepEqual(e1, [{ kind: "renew", callId: 2, token: token(7, 1), leaseDurationMs: 10_000 }]);
    const [, dup] = step(s1, { kind: "renewTick", shardId: 7, epoch: 1, safeToOwn: true }, 3_001);
    assert.deepEqual(dup, [], "one renewal in flight at a time");
    const [s2, e2] = step(s1, { kind: "renewed", callId: 2, shardId: 7, token: token(7, 1, 2_000_000) }, 3_050);
    assert.deepEqual(e2, [
      { kind: "count", counter: "leaseRenewals", by: 1 },
      { kind: "scheduleRenewal", shardId: 7, epoch: 1, afterMs: 3_000 },
    ]);
    assert.deepEqual(liveToken(s2, 7, 12_999), token(7, 1, 2_000_000));
    assert.equal(liveToken(s2, 7, 13_000), null);
  });

  test("verify renews at once when held and idle, and does nothing otherwise", () => {
    const [s1, e1] = step(holding(), { kind: "verify", shardId: 7 }, 500);
    assert.deepEqual(e1, [{ kind: "renew", callId: 2, token: token(7, 1), leaseDurationMs: 10_000 }]);
    const [, e2] = step(s1, { kind: "verify", shardId: 7 }, 600);
    assert.deepEqual(e2, [], "a renewal is already in flight");
    const [, e3] = step(holding(), { kind: "verify", shardId: 8 }, 600);
    assert.deepEqual(e3, []);
    const [, lost] = step(s1, { kind: "renewed", callId: 2, shardId: 7, token: null }, 650);
    assert.deepEqual(counts(lost), ["leaseLosses+1"]);
  });

  test("a tick for another epoch is ignored", () => {
    const [, effects] = step(holding(), { kind: "renewTick", shardId: 7, epoch: 4, safeToOwn: true }, 3_000);
    assert.deepEqual(effects, []);
  });

  for (const [title, input] of [
    ["returns nothing", { kind: "renewed", callId: 2, shardId: 7, token: null }],
    ["fails", { kind: "renewFailed", callId: 2, shardId: 7, error: "timeout" }],
    ["returns another epoch", { kind: "renewed", callId: 2, shardId: 7, token: token(7, 2) }],
  ] as [string, LeaseInput][]) {
    test(`a renewal that ${title} counts a loss and drains the shard without a release`, () => {
      const [s1] = step(holding(), { kind: "renewTick", shardId: 7, epoch: 1, safeToOwn: true }, 3_000);
      const [s2, effects] = step(s1, input, 3_010);
      assert.deepEqual(effects, [
        { kind: "count", counter: "leaseLosses", by: 1 },
        { kind: "stopEntities", shardId: 7, reason: "lost" },
      ]);
      assert.equal(s2.shards.size, 0);
      assert.equal(liveToken(s2, 7, 3_010), null);
    });
  }

  test("a renewal answer that arrives after local validity ended is a loss", () => {
    const [s1] = step(holding(), { kind: "renewTick", shardId: 7, epoch: 1, safeToOwn: true }, 3_000);
    const [, effects] = step(s1, { kind: "renewed", callId: 2, shardId: 7, token: token(7, 1) }, 13_000);
    assert.deepEqual(counts(effects), ["leaseLosses+1"]);
  });

  test("a tick that finds local validity over counts a loss instead of renewing", () => {
    const [, effects] = step(holding(), { kind: "renewTick", shardId: 7, epoch: 1, safeToOwn: true }, 10_000);
    assert.deepEqual(kinds(effects), ["count", "stopEntities"]);
  });
});

describe("not safe to own", () => {
  function twoHeld(): LeaseBookState {
    const [s] = run(ready(1, 2, 3), [
      { kind: "needLease", requestId: 1, shardId: 1 },
      { kind: "acquired", callId: 1, shardId: 1, token: token(1, 1) },
      { kind: "needLease", requestId: 2, shardId: 2 },
      { kind: "acquired", callId: 2, shardId: 2, token: token(2, 5) },
      { kind: "needLease", requestId: 3, shardId: 3 },
    ]);
    return s;
  }

  for (const [title, input] of [
    ["the safe-to-own rule turns false", { kind: "safeToOwn", safe: false }],
    ["a renewal tick finds the node unsafe", { kind: "renewTick", shardId: 1, epoch: 1, safeToOwn: false }],
  ] as [string, LeaseInput][]) {
    test(`when ${title}, every lease is dropped without release, entities stop and losses are counted`, () => {
      const [s, effects] = step(twoHeld(), input, 100);
      assert.ok(!effects.some((e) => e.kind === "release" || e.kind === "renew"), JSON.stringify(effects));
      assert.deepEqual(counts(effects), ["leaseLosses+2"]);
      assert.deepEqual(
        effects.filter((e) => e.kind === "stopEntities"),
        [
          { kind: "stopEntities", shardId: 1, reason: "suspended" },
          { kind: "stopEntities", shardId: 2, reason: "suspended" },
        ],
      );
      assert.ok(
        effects.some((e) => e.kind === "fail" && e.requestId === 3),
        "the waiter of the pending acquire fails",
      );
      assert.equal(s.safe, false);
      assert.equal(liveToken(s, 1, 100), null);
      // The pending acquire's token comes back later: neither used nor released.
      const [s2, late] = step(s, { kind: "acquired", callId: 3, shardId: 3, token: token(3, 1) }, 150);
      assert.deepEqual(late, []);
      const [, refused] = step(s2, { kind: "needLease", requestId: 4, shardId: 1 }, 200);
      assert.deepEqual(refused, [
        { kind: "fail", requestId: 4, shardId: 1, failure: { error: "ShardLeaseUnavailableError", reason: "unsafe" } },
      ]);
    });
  }

  test("once safe again, the next delivery acquires afresh", () => {
    const [s] = run(twoHeld(), [
      { kind: "safeToOwn", safe: false },
      { kind: "safeToOwn", safe: true },
    ]);
    const [, effects] = step(s, { kind: "needLease", requestId: 9, shardId: 1 }, 300);
    assert.deepEqual(kinds(effects), ["acquire"]);
  });

  test("a release already sent before the suspension completes; nothing new is released", () => {
    const [s, effects] = run(holding(), [
      { kind: "drain", shardId: 7 },
      { kind: "entitiesStopped", shardId: 7 },
      { kind: "safeToOwn", safe: false },
      { kind: "released", callId: 2, shardId: 7, released: true },
    ]);
    assert.deepEqual(
      effects.filter((e) => e.kind === "release").length,
      1,
      "the one release is the drain's, sent while safe",
    );
    assert.equal(s.shards.size, 0);
  });
});

describe("handoff, retain and stop", () => {
  test("drain stops the entities first, refuses deliveries as handoff in progress, then releases", () => {
    const [s1, e1] = step(holding(), { kind: "drain", shardId: 7 }, 100);
    assert.deepEqual(e1, [{ kind: "stopEntities", shardId: 7, reason: "handoff" }]);
    assert.equal(liveToken(s1, 7, 100), null);
    const [, refused] = step(s1, { kind: "needLease", requestId: 2, shardId: 7 }, 110);
    assert.deepEqual(refused, [
      { kind: "fail", requestId: 2, shardId: 7, failure: { error: "ShardHandoffInProgressError" } },
    ]);
    const [s2, e2] = step(s1, { kind: "entitiesStopped", shardId: 7 }, 120);
    assert.deepEqual(e2, [{ kind: "release", callId: 2, token: token(7, 1) }]);
    const [s3, e3] = step(s2, { kind: "released", callId: 2, shardId: 7, released: true }, 130);
    assert.deepEqual(e3, [{ kind: "drained", shardId: 7 }]);
    assert.equal(s3.shards.size, 0);
    assert.equal(s3.owned.has(7), false);
  });

  test("draining a shard without a lease reports it drained at once", () => {
    const [, effects] = step(ready(4), { kind: "drain", shardId: 4 }, 0);
    assert.deepEqual(effects, [{ kind: "drained", shardId: 4 }]);
  });

  test("a drain during an acquire releases the token when it arrives", () => {
    const [, effects] = run(ready(7), [
      { kind: "needLease", requestId: 1, shardId: 7 },
      { kind: "drain", shardId: 7 },
      { kind: "acquired", callId: 1, shardId: 7, token: token(7, 1) },
      { kind: "released", callId: 2, shardId: 7, released: true },
    ]);
    assert.deepEqual(kinds(effects), ["acquire", "fail", "release", "drained"]);
    assert.ok(!effects.some((e) => e.kind === "grant"));
  });

  test("retain drains and releases the shards outside the set and keeps the others", () => {
    const [s0] = run(ready(1, 2), [
      { kind: "needLease", requestId: 1, shardId: 1 },
      { kind: "acquired", callId: 1, shardId: 1, token: token(1, 1) },
      { kind: "needLease", requestId: 2, shardId: 2 },
      { kind: "acquired", callId: 2, shardId: 2, token: token(2, 1) },
    ]);
    const [s1, e1] = step(s0, { kind: "retain", shardIds: [2] }, 10);
    assert.deepEqual(e1, [{ kind: "stopEntities", shardId: 1, reason: "not-retained" }]);
    assert.deepEqual([...s1.owned], [2]);
    const [, e2] = run(s1, [
      { kind: "entitiesStopped", shardId: 1 },
      { kind: "released", callId: 3, shardId: 1, released: true },
    ]);
    assert.deepEqual(kinds(e2), ["release", "drained"]);
    assert.deepEqual(liveToken(s1, 2, 10), token(2, 1));
  });

  test("a shard owned again while its release is in flight acquires after the release", () => {
    const [s, effects] = run(holding(), [
      { kind: "retain", shardIds: [] },
      { kind: "entitiesStopped", shardId: 7 },
      { kind: "own", shardId: 7 },
      { kind: "needLease", requestId: 3, shardId: 7 },
      { kind: "released", callId: 2, shardId: 7, released: true },
      { kind: "acquired", callId: 3, shardId: 7, token: token(7, 2) },
    ]);
    assert.deepEqual(kinds(effects), [
      "stopEntities",
      "release",
      "drained",
      "acquire",
      "count",
      "scheduleRenewal",
      "grant",
    ]);
    assert.deepEqual(liveToken(s, 7, 0), token(7, 2));
  });

  test("stopAll drains and releases every lease, and nothing is acquired afterwards", () => {
    const [s0] = run(ready(1, 2), [
      { kind: "needLease", requestId: 1, shardId: 1 },
      { kind: "acquired", callId: 1, shardId: 1, token: token(1, 1) },
      { kind: "needLease", requestId: 2, shardId: 2 },
    ]);
    const [s1, e1] = step(s0, { kind: "stopAll" }, 10);
    assert.deepEqual(e1, [
      { kind: "stopEntities", shardId: 1, reason: "stopping" },
      { kind: "fail", requestId: 2, shardId: 2, failure: { error: "ShardLeaseUnavailableError", reason: "stopped" } },
    ]);
    const [s2, e2] = run(s1, [
      { kind: "entitiesStopped", shardId: 1 },
      { kind: "acquired", callId: 2, shardId: 2, token: token(2, 1) },
      { kind: "released", callId: 3, shardId: 1, released: true },
      { kind: "releaseFailed", callId: 4, shardId: 2, error: "gone" },
      { kind: "own", shardId: 1 },
      { kind: "needLease", requestId: 9, shardId: 1 },
    ]);
    assert.deepEqual(kinds(e2), ["release", "release", "drained", "drained", "fail"]);
    assert.equal(s2.shards.size, 0);
    assert.equal(s2.owned.size, 0);
  });
});

test("failure effects map to the typed errors with the shard and reason", () => {
  const lease = failureError(config, 7, { error: "ShardLeaseUnavailableError", reason: "unsafe" });
  assert.ok(lease instanceof ShardLeaseUnavailableError);
  assert.equal(lease.name, "ShardLeaseUnavailableError");
  assert.match(lease.message, /^Persistent shard Order\/7 is fenced by another owner/);
  assert.equal(lease instanceof ShardLeaseUnavailableError && lease.shardId, 7);
  const handoff = failureError(config, 7, { error: "ShardHandoffInProgressError" });
  assert.ok(handoff instanceof ShardHandoffInProgressError);
  assert.match(handoff.message, /^Shard Order\/7 is draining on its previous owner/);
});
