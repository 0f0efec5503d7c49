// Rules of the delivery retry barrier (docs/protocol.md §10; src/sharding/internal/retry-barrier.ts), one scenario per rule. The
// scenarios speak only of what a shell observes (a delivery queued, retried, delivered or rejected with which error,
// lease retries counted, when to tick again), through the small `Barrier` adapter below, so a rewrite of the barrier
// changes only the adapter. Every scenario runs through both forms of a tick: `drain` (one call that attempts the
// deliveries itself) and the step form the node core uses (`begin` offers the deliveries, the shell attempts them
// and stops at the first transient failure, `settle` applies the outcomes). Each was written against a mutant that
// kept every other test green (docs/mutation.md).
import assert from "node:assert/strict";
import { test } from "node:test";
import { NoShardOwnerError, ShardLeaseUnavailableError } from "../../../src/sharding/index.ts";
import { RetryBarrier } from "../../../src/sharding/internal/index.ts";
import type { AttemptOutcome } from "../../../src/sharding/internal/retry-barrier.ts";

interface Observed {
  readonly rejected: { readonly item: string; readonly error: Error }[];
  readonly leaseRetries: number;
  readonly next: "tick" | "yield" | "none";
}

/** What a shell does with the barrier of one entity type. */
interface Barrier {
  /** Delivery `item`'s attempt number `attempt` (0 = first) failed transiently at `nowMs`. */
  failed(shardId: number, item: string, attempt: number, failure: "lease" | "handoff", nowMs: number): Observed;
  /** A new delivery for a shard; false when the shard has no queue (deliver directly). */
  join(shardId: number, item: string): boolean;
  /** The shard's tick fired at `nowMs`; `attempt` tries one delivery. */
  tick(shardId: number, nowMs: number, authorized: boolean, attempt: (item: string) => AttemptOutcome): Observed;
  queued(shardId: number): number;
  /** Shards with queued deliveries. */
  pending(): number[];
  /** The extension stops: everything queued, to reject. */
  stop(): string[];
}

/** The step form's tick, as node-core.ts and node-shell.ts perform it: begin, attempt in order, settle. */
function stepTick(
  b: RetryBarrier<string>,
  shardId: number,
  nowMs: number,
  authorized: boolean,
  attempt: (item: string) => AttemptOutcome,
): Observed {
  const begun = b.begin(shardId, nowMs, authorized);
  if ("done" in begun) return begun.done;
  const outcomes: AttemptOutcome[] = [];
  for (const item of begun.attempt) {
    const outcome = attempt(item);
    outcomes.push(outcome);
    if (outcome === "lease" || outcome === "handoff") break;
  }
  return b.settle(shardId, outcomes);
}

const forms = ["drain", "step"] as const;
type Form = (typeof forms)[number];

function barrierOf(form: Form, windowMs: number, capacity?: number): Barrier {
  const b = new RetryBarrier<string>({
    entityType: "Order",
    windowMs,
    ...(capacity === undefined ? {} : { capacity }),
  });
  return {
    failed: (shardId, item, attempt, failure, nowMs) => b.failed(shardId, item, attempt, failure, nowMs),
    join: (shardId, item) => b.join(shardId, item).queued,
    tick: (shardId, nowMs, authorized, attempt) =>
      form === "drain"
        ? b.drain(shardId, nowMs, authorized, attempt)
        : stepTick(b, shardId, nowMs, authorized, attempt),
    queued: (shardId) => b.size(shardId),
    pending: () => b.shards,
    stop: () => b.clear(),
  };
}

const items = (o: Observed) => o.rejected.map((r) => r.item);

for (const form of forms) {
  const barrier = (windowMs: number, capacity?: number) => barrierOf(form, windowMs, capacity);

  test(`${form}: window arithmetic: a delivery is retried while attempt × 25 ms stays strictly inside the window`, () => {
    // window 100 ms: attempts 1, 2 and 3 (25, 50, 75 ms) fit; attempt 4 (100 ms) does not
    const b = barrier(100);
    assert.deepEqual(b.failed(1, "m", 0, "lease", 0), { rejected: [], leaseRetries: 1, next: "tick" });
    const retries: Observed[] = [];
    for (let t = 25; b.queued(1) > 0 && t <= 1000; t += 25) retries.push(b.tick(1, t, true, () => "lease"));
    assert.deepEqual(
      retries.map((r) => [r.next, r.leaseRetries, items(r)]),
      [
        ["tick", 1, []], // attempt 2
        ["tick", 1, []], // attempt 3
        ["none", 0, ["m"]], // attempt 4 would be at 100 ms: rejected
      ],
    );
    assert.ok(retries[2]!.rejected[0]!.error instanceof ShardLeaseUnavailableError);
  });

  test(`${form}: window arithmetic: a failure whose next attempt is outside the window is rejected at once, not queued`, () => {
    const b = barrier(100);
    const third = b.failed(1, "m3", 2, "lease", 0); // next is attempt 3: 75 ms < 100 ms
    assert.deepEqual([third.next, third.leaseRetries, items(third)], ["tick", 1, []]);
    const fourth = b.failed(2, "m4", 3, "lease", 0); // next is attempt 4: 100 ms is not inside
    assert.deepEqual([fourth.next, fourth.leaseRetries, items(fourth)], ["none", 0, ["m4"]]);
    assert.ok(fourth.rejected[0]!.error instanceof ShardLeaseUnavailableError);
    assert.equal(b.join(2, "later"), false, "no queue was opened for the rejected one");
  });

  test(`${form}: window arithmetic: the queue's deadline is when it opened plus the window; at the deadline all is rejected`, () => {
    const open = () => {
      const b = barrier(100);
      b.failed(1, "m1", 0, "lease", 1_000);
      b.join(1, "m2");
      return b;
    };
    const before = open().tick(1, 1_099, true, () => "delivered");
    assert.deepEqual([before.next, items(before)], ["none", []]);
    const at = open().tick(1, 1_100, true, () => "delivered");
    assert.deepEqual([at.next, items(at)], ["none", ["m1", "m2"]]);
    for (const r of at.rejected) assert.ok(r.error instanceof ShardLeaseUnavailableError);
    // the deadline stays the first one: a later failure on the open queue does not extend it
    const b = open();
    assert.equal(b.failed(1, "m3", 0, "lease", 1_050).next, "none", "one tick per shard: no second timer");
    assert.deepEqual(items(b.tick(1, 1_100, true, () => "delivered")), ["m1", "m2", "m3"]);
  });

  test(`${form}: a handoff in progress is retried like a missing lease but not counted as a lease retry`, () => {
    const b = barrier(1_000);
    assert.deepEqual(b.failed(1, "m", 0, "handoff", 0), { rejected: [], leaseRetries: 0, next: "tick" });
    assert.deepEqual(
      b.tick(1, 25, true, () => "handoff"),
      { rejected: [], leaseRetries: 0, next: "tick" },
    );
    assert.deepEqual(
      b.tick(1, 50, true, () => "lease"),
      { rejected: [], leaseRetries: 1, next: "tick" },
    );
  });

  test(`${form}: order: a queued delivery's retry keeps its place ahead of later arrivals; losing ownership rejects all as no owner`, () => {
    const b = barrier(1_000);
    b.failed(1, "m1", 0, "lease", 0);
    assert.equal(b.join(1, "m2"), true);
    const tried: string[] = [];
    const first = b.tick(1, 25, true, (m) => {
      tried.push(m);
      return "lease";
    });
    assert.deepEqual([first.next, tried], ["tick", ["m1"]], "m2 is not tried while m1 waits");
    const lost = b.tick(1, 50, false, () => "delivered");
    assert.deepEqual(items(lost), ["m1", "m2"]);
    for (const r of lost.rejected) assert.ok(r.error instanceof NoShardOwnerError);
    assert.equal(b.queued(1), 0);
  });

  test(`${form}: capacity: a failure on a full queue is rejected at once and counts no lease retry`, () => {
    const b = barrier(1_000, 2);
    b.failed(1, "m1", 0, "lease", 0);
    assert.equal(b.join(1, "m2"), true);
    assert.equal(b.join(1, "m3"), false);
    const over = b.failed(1, "m4", 0, "lease", 5);
    assert.deepEqual([over.next, over.leaseRetries, items(over)], ["none", 0, ["m4"]]);
    assert.equal(b.queued(1), 2);
  });

  test(`${form}: a tick for a shard with nothing queued does nothing and asks for no further tick`, () => {
    const b = barrier(1_000);
    let tried = 0;
    const r = b.tick(3, 25, true, () => {
      tried++;
      return "delivered";
    });
    assert.deepEqual(r, { rejected: [], leaseRetries: 0, next: "none" });
    assert.equal(tried, 0);
  });

  test(`${form}: stopping hands back every queued delivery, shard by shard in order, and leaves nothing queued`, () => {
    const b = barrier(1_000);
    b.failed(1, "a1", 0, "lease", 0);
    b.join(1, "a2");
    b.failed(2, "b1", 0, "handoff", 0);
    assert.deepEqual(b.pending().sort(), [1, 2]);
    assert.deepEqual(b.stop(), ["a1", "a2", "b1"]);
    assert.deepEqual(b.pending(), []);
    assert.equal(b.join(1, "late"), false);
    assert.deepEqual(b.stop(), []);
  });

  test(`${form}: a delivery that fails with an error is rejected with that very error; those behind it are still delivered in order`, () => {
    const b = barrier(1_000);
    b.failed(1, "m1", 0, "lease", 0);
    b.join(1, "m2");
    b.join(1, "m3");
    const refused = new Error("refused by the entity");
    const tried: string[] = [];
    const r = b.tick(1, 25, true, (m) => {
      tried.push(m);
      return m === "m1" ? { error: refused } : "delivered";
    });
    assert.deepEqual(tried, ["m1", "m2", "m3"]);
    assert.deepEqual([r.next, r.leaseRetries, items(r)], ["none", 0, ["m1"]]);
    assert.equal(r.rejected[0]!.error, refused);
    assert.equal(b.queued(1), 0);
  });

  test(`${form}: a tick delivers at most 64 and yields; the next tick goes on in order`, () => {
    const b = barrier(1_000);
    b.failed(1, "m0", 0, "lease", 0);
    for (let i = 1; i < 70; i++) b.join(1, `m${i}`);
    const tried: string[] = [];
    const deliver = (m: string): AttemptOutcome => {
      tried.push(m);
      return "delivered";
    };
    const first = b.tick(1, 25, true, deliver);
    assert.deepEqual([first.next, items(first), tried.length, b.queued(1)], ["yield", [], 64, 6]);
    const second = b.tick(1, 25, true, deliver);
    assert.deepEqual([second.next, items(second), b.queued(1)], ["none", [], 0]);
    assert.deepEqual(
      tried,
      Array.from({ length: 70 }, (_, i) => `m${i}`),
    );
  });
}

test("step: outcomes that arrive after the barrier was stopped change nothing", () => {
  const b = new RetryBarrier<string>({ entityType: "Order", windowMs: 1_000 });
  b.failed(1, "m1", 0, "lease", 0);
  const begun = b.begin(1, 25, true);
  assert.deepEqual(begun, { attempt: ["m1"] });
  assert.deepEqual(b.clear(), ["m1"]);
  assert.deepEqual(b.settle(1, ["lease"]), { rejected: [], leaseRetries: 0, next: "none" });
  assert.equal(b.has(1), false);
});
