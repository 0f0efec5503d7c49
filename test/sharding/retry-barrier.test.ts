import assert from "node:assert/strict";
import { test } from "node:test";
import {
  ClusterShardingConfigurationError,
  NoShardOwnerError,
  ShardLeaseUnavailableError,
} from "../../src/sharding/index.ts";
import { RetryBarrier } from "../../src/sharding/internal/index.ts";
import type { AttemptOutcome } from "../../src/sharding/internal/retry-barrier.ts";

test("the first transient failure opens a per-shard FIFO; later deliveries join it and keep their order", () => {
  const b = new RetryBarrier<string>({ entityType: "Order", windowMs: 13_000 });
  const first = b.failed(4, "m1", 0, "lease", 0);
  assert.deepEqual(first, { rejected: [], leaseRetries: 1, next: "tick" });
  assert.equal(b.has(4), true);
  assert.deepEqual(b.join(4, "m2"), { queued: true });
  assert.deepEqual(b.join(4, "m3"), { queued: true });
  assert.deepEqual(b.join(5, "other"), { queued: false, error: null });
  // the lease is still missing: the head stays, one lease retry counted, tick again
  let r = b.drain(4, 25, true, () => "lease");
  assert.deepEqual(r, { rejected: [], leaseRetries: 1, next: "tick" });
  const delivered: string[] = [];
  r = b.drain(4, 50, true, (m) => {
    delivered.push(m);
    return "delivered";
  });
  assert.deepEqual(delivered, ["m1", "m2", "m3"]);
  assert.equal(r.next, "none");
  assert.equal(b.has(4), false);
});

test("the window ends: everything still queued is rejected with ShardLeaseUnavailableError", () => {
  const b = new RetryBarrier<string>({ entityType: "Order", windowMs: 100 });
  b.failed(1, "m1", 0, "lease", 0);
  b.join(1, "m2");
  const r = b.drain(1, 100, true, () => "delivered");
  assert.deepEqual(
    r.rejected.map((x) => x.item),
    ["m1", "m2"],
  );
  for (const x of r.rejected) assert.ok(x.error instanceof ShardLeaseUnavailableError);
  assert.equal(b.has(1), false);
});

test("an envelope whose attempts exhaust the window (attempt * 25 ms) is rejected, the rest continue", () => {
  const b = new RetryBarrier<string>({ entityType: "Order", windowMs: 60 }); // attempts 1 and 2 fit, 3 does not
  b.failed(1, "m1", 0, "handoff", 0);
  b.join(1, "m2");
  assert.equal(b.drain(1, 25, true, () => "handoff").next, "tick"); // m1 attempt 2
  const seen: string[] = [];
  const r = b.drain(1, 50, true, (m): AttemptOutcome => {
    seen.push(m);
    return m === "m1" ? "handoff" : "delivered";
  });
  assert.deepEqual(
    r.rejected.map((x) => x.item),
    ["m1"],
  );
  assert.deepEqual(seen, ["m1", "m2"]);
  // a first failure already past the window is rejected at once
  assert.equal(
    new RetryBarrier<string>({ entityType: "T", windowMs: 25 }).failed(0, "x", 0, "lease", 0).rejected.length,
    1,
  );
});

test("a non-transient error rejects only the head; losing ownership rejects all with NoShardOwnerError", () => {
  const b = new RetryBarrier<string>({ entityType: "Order", windowMs: 13_000 });
  b.failed(2, "bad", 0, "lease", 0);
  b.join(2, "good");
  const r = b.drain(2, 25, true, (m) => (m === "bad" ? { error: new Error("factory failed") } : "delivered"));
  assert.deepEqual(
    r.rejected.map((x) => x.error.message),
    ["factory failed"],
  );
  b.failed(3, "x", 0, "lease", 0);
  b.join(3, "y");
  const lost = b.drain(3, 25, false, () => "delivered");
  assert.deepEqual(
    lost.rejected.map((x) => x.item),
    ["x", "y"],
  );
  for (const x of lost.rejected) assert.ok(x.error instanceof NoShardOwnerError);
});

test("drain yields after 64 deliveries; the queue is capped at 1,024", () => {
  const b = new RetryBarrier<number>({ entityType: "Order", windowMs: 13_000 });
  b.failed(0, 0, 0, "lease", 0);
  for (let i = 1; i < 1024; i++) assert.deepEqual(b.join(0, i), { queued: true });
  const full = b.join(0, 1024);
  assert.ok(!full.queued && full.error instanceof ClusterShardingConfigurationError);
  assert.match((full as { error: Error }).error.message, /^Shard delivery retry buffer is full for Order\/0/);
  let count = 0;
  const r = b.drain(0, 25, true, () => {
    count++;
    return "delivered";
  });
  assert.equal(count, 64);
  assert.equal(r.next, "yield");
  assert.equal(b.size(0), 1024 - 64);
});
