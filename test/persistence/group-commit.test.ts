import assert from "node:assert/strict";
import { test } from "node:test";
import { GroupCommit, groupCommitSettings } from "../../src/persistence/group-commit.ts";
import { PersistenceConfigurationError, PersistenceOverloadedError } from "../../src/persistence/index.ts";

interface Item {
  key: string;
  n: number;
}

/** A GroupCommit whose statements the test completes by hand. */
function harness(maxBatchSize: number, maxConcurrentBatches: number, maxWaiting = 10_000) {
  const sent: { items: readonly Item[]; finish: (outcomes: PromiseSettledResult<number>[] | Error) => void }[] = [];
  const gc = new GroupCommit<Item, number>(
    { maxBatchSize, maxConcurrentBatches, maxWaiting },
    (i) => i.key,
    (items) =>
      new Promise((resolve, reject) => {
        sent.push({
          items,
          finish: (outcomes) => (outcomes instanceof Error ? reject(outcomes) : resolve(outcomes)),
        });
      }),
  );
  const ok = (items: readonly Item[]) =>
    items.map((i): PromiseSettledResult<number> => ({ status: "fulfilled", value: i.n }));
  return { gc, sent, ok };
}

const item = (key: string, n: number): Item => ({ key, n });
/**
 * Lets every pending callback run: a statement's completion sends the next one from a promise callback, one turn of
 * the event loop later when other items are about.
 */
const settle = async () => {
  for (let turn = 0; turn < 3; turn++) await new Promise<void>((resolve) => setImmediate(resolve));
};

test("group commit: a lone item leaves at once; items arriving while the bound is reached leave together", async () => {
  const { gc, sent, ok } = harness(64, 1);
  const first = gc.submit(item("a", 1));
  assert.equal(sent.length, 1, "nothing in flight: sent without waiting");
  const later = [gc.submit(item("b", 2)), gc.submit(item("c", 3)), gc.submit(item("d", 4))];
  assert.equal(sent.length, 1);
  assert.equal(gc.waiting, 3);
  sent[0]!.finish(ok(sent[0]!.items));
  assert.equal(await first, 1);
  await settle();
  assert.equal(sent.length, 2);
  assert.deepEqual(
    sent[1]!.items.map((i) => i.n),
    [2, 3, 4],
  );
  sent[1]!.finish(ok(sent[1]!.items));
  assert.deepEqual(await Promise.all(later), [2, 3, 4]);
  assert.deepEqual(gc.stats, { statements: 2, batches: 1, batchedItems: 3, largestBatch: 3, overloaded: 0 });
});

test("group commit: two items of one key never share a statement, and keep their order", async () => {
  const { gc, sent, ok } = harness(64, 1);
  const results = [gc.submit(item("x", 0))];
  for (const [key, n] of [
    ["a", 1],
    ["a", 2],
    ["b", 3],
    ["a", 4],
  ] as const)
    results.push(gc.submit(item(key, n)));
  for (let i = 0; i < 4; i++) {
    const s = sent[i];
    assert.ok(s !== undefined, `statement ${i} sent`);
    s.finish(ok(s.items));
    await settle();
  }
  assert.deepEqual(
    sent.map((s) => s.items.map((i) => `${i.key}${i.n}`)),
    [["x0"], ["a1", "b3"], ["a2"], ["a4"]],
  );
  assert.deepEqual(await Promise.all(results), [0, 1, 2, 3, 4]);
});

test("group commit: the batch size is bounded; the concurrency bound lets two statements fly", async () => {
  const { gc, sent, ok } = harness(2, 2);
  const results = [1, 2, 3, 4, 5, 6].map((n) => gc.submit(item(`k${n}`, n)));
  // Two statements leave at once (one item each: nothing else was waiting), the other four wait.
  assert.deepEqual(
    sent.map((s) => s.items.length),
    [1, 1],
  );
  sent[0]!.finish(ok(sent[0]!.items));
  await settle();
  assert.deepEqual(
    sent.map((s) => s.items.length),
    [1, 1, 2],
  );
  sent[1]!.finish(ok(sent[1]!.items));
  await settle();
  assert.deepEqual(
    sent.map((s) => s.items.length),
    [1, 1, 2, 2],
  );
  sent[2]!.finish(ok(sent[2]!.items));
  sent[3]!.finish(ok(sent[3]!.items));
  assert.deepEqual(await Promise.all(results), [1, 2, 3, 4, 5, 6]);
  assert.equal(gc.stats.largestBatch, 2);
});

test("group commit: each item gets its own outcome; a failed statement fails only its own items", async () => {
  const { gc, sent, ok } = harness(64, 1);
  const gate = gc.submit(item("g", 0));
  const mixed = [gc.submit(item("a", 1)), gc.submit(item("b", 2)), gc.submit(item("c", 3))];
  sent[0]!.finish(ok(sent[0]!.items));
  await gate;
  await settle();
  sent[1]!.finish([
    { status: "fulfilled", value: 10 },
    { status: "rejected", reason: new Error("b alone") },
    { status: "fulfilled", value: 30 },
  ]);
  const settled = await Promise.allSettled(mixed);
  assert.deepEqual(
    settled.map((s) => (s.status === "fulfilled" ? s.value : (s.reason as Error).message)),
    [10, "b alone", 30],
  );
  await settle();
  const gate2 = gc.submit(item("g", 1));
  const lost = [gc.submit(item("a", 4)), gc.submit(item("b", 5))];
  sent[2]!.finish(ok(sent[2]!.items));
  await gate2;
  await settle();
  assert.equal(sent[3]!.items.length, 2);
  sent[3]!.finish(new Error("connection lost"));
  for (const r of await Promise.allSettled(lost)) {
    assert.equal(r.status, "rejected");
    assert.equal((r as PromiseRejectedResult).reason.message, "connection lost");
  }
  await settle();
  // The next item leaves: nothing is stuck in flight.
  const next = gc.submit(item("a", 6));
  sent[4]!.finish(ok(sent[4]!.items));
  assert.equal(await next, 6);
});

test("group commit: settings are validated", () => {
  assert.deepEqual(groupCommitSettings(), { maxBatchSize: 64, maxConcurrentBatches: 1, maxWaiting: 10_000 });
  assert.equal(groupCommitSettings({ maxWaiting: 1_000_000 }).maxWaiting, 1_000_000);
  assert.throws(() => groupCommitSettings({ maxWaiting: 0 }), PersistenceConfigurationError);
  assert.throws(() => groupCommitSettings({ maxWaiting: 1_000_001 }), PersistenceConfigurationError);
  assert.throws(
    () => groupCommitSettings({ maxWaiting: { toString: 1 } as unknown as number }),
    PersistenceConfigurationError,
  );
  assert.throws(() => groupCommitSettings({ maxBatchSize: 0 }), PersistenceConfigurationError);
  assert.throws(() => groupCommitSettings({ maxConcurrentBatches: 1.5 }), PersistenceConfigurationError);
});

test("group commit: a lone writer is never held; writers answered by a statement join the next one", async () => {
  const { gc, sent, ok } = harness(64, 1);
  // A lone writer: its next item leaves as soon as the previous one is answered, without waiting for a turn.
  for (let n = 0; n < 3; n++) {
    const r = gc.submit(item("solo", n));
    assert.equal(sent.length, n + 1, "sent at once");
    sent[n]!.finish(ok(sent[n]!.items));
    assert.equal(await r, n);
  }
  // Four writers that each submit again as soon as they are answered: the first leaves alone, the other three wait,
  // and from then on all four leave together (with others waiting, the slot is held for one turn, so the writer just
  // answered queues again before the next statement leaves).
  let stop = false;
  const loops = [0, 1, 2, 3].map(async (w) => {
    let answers = 0;
    while (!stop) {
      await gc.submit(item(`w${w}`, w));
      answers++;
    }
    return answers;
  });
  for (let statement = 3; statement < 9; statement++) {
    await settle();
    const s = sent[statement];
    assert.ok(s !== undefined, `statement ${statement} sent`);
    if (statement === 8) stop = true;
    s.finish(ok(s.items));
  }
  await settle();
  assert.deepEqual(
    sent.slice(3, 9).map((s) => s.items.length),
    [1, 4, 4, 4, 4, 4],
  );
  assert.deepEqual(await Promise.all(loops), [6, 5, 5, 5]);
});

test("group commit: past maxWaiting an item is refused at once, typed and counted; the queue still drains", async () => {
  const { gc, sent, ok } = harness(64, 1, 3);
  const gate = gc.submit(item("g", 0));
  const queued = [gc.submit(item("a", 1)), gc.submit(item("a", 2)), gc.submit(item("b", 3))];
  assert.equal(gc.waiting, 3);
  const refused = gc.submit(item("c", 4));
  await assert.rejects(refused, (error: unknown) => {
    assert.ok(error instanceof PersistenceOverloadedError);
    assert.equal(error.name, "PersistenceOverloadedError");
    assert.equal(error.limit, 3);
    assert.match(error.message, /retry with the same OperationId/);
    return true;
  });
  assert.equal(gc.stats.overloaded, 1);
  assert.equal(gc.waiting, 3, "the refused item was not queued");
  for (let i = 0; i < 3; i++) {
    sent[i]!.finish(ok(sent[i]!.items));
    await settle();
  }
  assert.deepEqual(await Promise.all([gate, ...queued]), [0, 1, 2, 3]);
  assert.deepEqual(
    sent.map((s) => s.items.map((i) => `${i.key}${i.n}`)),
    [["g0"], ["a1", "b3"], ["a2"]],
  );
  // Room again: the next item is accepted.
  const after = gc.submit(item("c", 5));
  sent[3]!.finish(ok(sent[3]!.items));
  assert.equal(await after, 5);
});

test("group commit: a large backlog of one hot key and many others leaves in per-key order, one per key per statement", async () => {
  const { gc, sent, ok } = harness(64, 1);
  const gate = gc.submit(item("gate", 0));
  const results: Promise<number>[] = [];
  // 5,000 items: every tenth on the hot key, the rest on their own keys.
  for (let n = 1; n <= 5000; n++) results.push(gc.submit(item(n % 10 === 0 ? "hot" : `k${n}`, n)));
  assert.equal(gc.waiting, 5000);
  sent[0]!.finish(ok(sent[0]!.items));
  await gate;
  for (let i = 1; gc.waiting > 0 || sent.length > i; i++) {
    await settle();
    const s = sent[i]!;
    const keys = s.items.map((x) => x.key);
    assert.equal(new Set(keys).size, keys.length, `statement ${i} carries one item per key`);
    assert.ok(s.items.length <= 64);
    s.finish(ok(s.items));
  }
  assert.equal((await Promise.all(results)).length, 5000);
  const hotOrder = sent.flatMap((s) => s.items.filter((x) => x.key === "hot").map((x) => x.n));
  assert.deepEqual(
    hotOrder,
    Array.from({ length: 500 }, (_, i) => (i + 1) * 10),
  );
});
