// Property of the group-commit queue under random submits and completions: every accepted item is answered exactly
// once with its own outcome; a statement carries at most maxBatchSize items and at most one per key; items of one key
// leave in submission order; the in-flight bound holds; an item is refused exactly when maxWaiting items wait.
import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { GroupCommit } from "../../src/persistence/group-commit.ts";
import { PersistenceOverloadedError } from "../../src/persistence/index.ts";

interface Item {
  key: string;
  n: number;
}

type Step = { kind: "submit"; key: number } | { kind: "finish"; which: number; fail: boolean } | { kind: "turn" };

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  { weight: 5, arbitrary: fc.nat({ max: 7 }).map<Step>((key) => ({ kind: "submit", key })) },
  {
    weight: 3,
    arbitrary: fc.record({ which: fc.nat(), fail: fc.boolean() }).map<Step>((f) => ({ kind: "finish", ...f })),
  },
  { weight: 1, arbitrary: fc.constant<Step>({ kind: "turn" }) },
);

const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

test("group commit: random submits and completions keep every bound and per-key order; each item answered once", async () => {
  await fc.assert(
    fc.asyncProperty(
      fc.record({
        maxBatchSize: fc.integer({ min: 1, max: 4 }),
        maxConcurrentBatches: fc.integer({ min: 1, max: 3 }),
        maxWaiting: fc.integer({ min: 1, max: 6 }),
        steps: fc.array(stepArb, { maxLength: 60 }),
      }),
      async ({ maxBatchSize, maxConcurrentBatches, maxWaiting, steps }) => {
        const inFlight: { items: readonly Item[]; finish: (fail: boolean) => void }[] = [];
        const sentOrder = new Map<string, number[]>();
        let flying = 0;
        const gc = new GroupCommit<Item, number>(
          { maxBatchSize, maxConcurrentBatches, maxWaiting },
          (i) => i.key,
          (items) => {
            assert.ok(items.length >= 1 && items.length <= maxBatchSize, `batch of ${items.length}`);
            const keys = items.map((i) => i.key);
            assert.equal(new Set(keys).size, keys.length, "one item per key per statement");
            flying++;
            assert.ok(flying <= maxConcurrentBatches, `${flying} statements in flight`);
            for (const i of items) sentOrder.set(i.key, [...(sentOrder.get(i.key) ?? []), i.n]);
            return new Promise((resolve, reject) => {
              inFlight.push({
                items,
                finish: (fail) => {
                  flying--;
                  if (fail) reject(new Error("lost"));
                  else resolve(items.map((i) => ({ status: "fulfilled", value: i.n })));
                },
              });
            });
          },
        );
        const answers = new Map<number, number>();
        const accepted: Item[] = [];
        let n = 0;
        let refused = 0;
        const submit = (key: number) => {
          const item = { key: `k${key}`, n: n++ };
          const full = gc.waiting >= maxWaiting;
          gc.submit(item).then(
            (value) => {
              assert.equal(value, item.n, "its own outcome");
              answers.set(item.n, (answers.get(item.n) ?? 0) + 1);
            },
            (error: unknown) => {
              if (error instanceof PersistenceOverloadedError) {
                assert.ok(full, "refused only when full");
                refused++;
              } else answers.set(item.n, (answers.get(item.n) ?? 0) + 1);
            },
          );
          if (!full) accepted.push(item);
        };
        for (const step of steps) {
          if (step.kind === "submit") submit(step.key);
          else if (step.kind === "finish" && inFlight.length > 0) {
            inFlight.splice(step.which % inFlight.length, 1)[0]!.finish(step.fail);
            await Promise.resolve();
          } else await turn();
        }
        // Drain: finish everything until nothing waits or flies.
        for (let guard = 0; guard < 1000 && (inFlight.length > 0 || gc.waiting > 0); guard++) {
          if (inFlight.length > 0) inFlight.shift()!.finish(false);
          await turn();
        }
        await turn();
        assert.equal(gc.waiting, 0);
        assert.equal(gc.stats.overloaded, refused);
        for (const item of accepted) assert.equal(answers.get(item.n), 1, `item ${item.n} answered once`);
        for (const [key, order] of sentOrder) {
          assert.deepEqual(
            order,
            accepted.filter((i) => i.key === key).map((i) => i.n),
            `items of ${key} left in submission order`,
          );
        }
      },
    ),
    { numRuns: 300 },
  );
});
