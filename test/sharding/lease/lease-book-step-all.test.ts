// stepAll (issue 23: renewal rounds step the book once for many shards) must equal stepping the same inputs one by
// one: the same book and the same effects in the same order, for any sequence of inputs.
import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import {
  createLeaseBook,
  type LeaseBookState,
  type LeaseEffect,
  type LeaseInput,
  step,
  stepAll,
} from "../../../src/sharding/lease/lease-book.ts";

const config = { clusterName: "c", entityType: "T", owner: "me", leaseDurationMs: 1_000, leaseRenewIntervalMs: 300 };
const shard = fc.integer({ min: 0, max: 3 });
const callId = fc.integer({ min: 1, max: 12 });
const token = fc.record({
  shardId: shard,
  owner: fc.constantFrom("me", "other"),
  epoch: fc.integer({ min: 1, max: 3 }),
});
const input: fc.Arbitrary<LeaseInput> = fc.oneof(
  fc.record({ kind: fc.constant("needLease" as const), requestId: fc.integer({ min: 1, max: 5 }), shardId: shard }),
  fc.record({ kind: fc.constant("own" as const), shardId: shard }),
  fc.record({ kind: fc.constant("safeToOwn" as const), safe: fc.boolean() }),
  fc.record({
    kind: fc.constant("renewTick" as const),
    shardId: shard,
    epoch: fc.integer({ min: 1, max: 3 }),
    safeToOwn: fc.boolean(),
  }),
  fc.record({ kind: fc.constant("verify" as const), shardId: shard }),
  fc.record({ kind: fc.constant("drain" as const), shardId: shard }),
  fc.record({ kind: fc.constant("entitiesStopped" as const), shardId: shard }),
  fc.record({ kind: fc.constant("retain" as const), shardIds: fc.array(shard, { maxLength: 3 }) }),
  fc.record({ kind: fc.constant("released" as const), callId, shardId: shard, released: fc.boolean() }),
  fc.record({ kind: fc.constant("renewFailed" as const), callId, shardId: shard, error: fc.constant("down") }),
  fc.record({ kind: fc.constant("acquireFailed" as const), callId, shardId: shard, error: fc.constant("down") }),
  fc.tuple(callId, fc.option(token, { nil: null })).map(
    ([id, t]): LeaseInput => ({
      kind: "acquired",
      callId: id,
      shardId: t?.shardId ?? 0,
      token:
        t === null
          ? null
          : {
              key: { clusterName: "c", entityType: "T", shardId: t.shardId },
              owner: t.owner,
              epoch: t.epoch,
              leaseUntilEpochMs: 5_000,
            },
    }),
  ),
  fc.tuple(callId, fc.option(token, { nil: null })).map(
    ([id, t]): LeaseInput => ({
      kind: "renewed",
      callId: id,
      shardId: t?.shardId ?? 0,
      token:
        t === null
          ? null
          : {
              key: { clusterName: "c", entityType: "T", shardId: t.shardId },
              owner: t.owner,
              epoch: t.epoch,
              leaseUntilEpochMs: 5_000,
            },
    }),
  ),
  fc.constant<LeaseInput>({ kind: "stopAll" }),
);

test("stepAll equals stepping the inputs one by one (same book, same effects in order)", () => {
  fc.assert(
    fc.property(
      fc.array(fc.tuple(fc.array(input, { minLength: 1, maxLength: 8 }), fc.integer({ min: 0, max: 400 })), {
        maxLength: 12,
      }),
      (groups) => {
        let one: LeaseBookState = createLeaseBook(config);
        let all: LeaseBookState = createLeaseBook(config);
        let now = 0;
        for (const [inputs, later] of groups) {
          now += later;
          const effectsOne: LeaseEffect[] = [];
          for (const i of inputs) {
            const [next, effects] = step(one, i, now);
            one = next;
            effectsOne.push(...effects);
          }
          const [next, effectsAll] = stepAll(all, inputs, now);
          all = next;
          assert.deepEqual(effectsAll, effectsOne);
          assert.deepEqual(all, one);
        }
      },
    ),
    { seed: 23, numRuns: 500 },
  );
});
