// Property: whatever the mix of sync and async handlers, an actor handles exactly the messages sent before
// DRAIN_AND_STOP (or, for STOP, a prefix ending with the one in progress), in send order, and every other message
// is a dead letter. Sharding's handoff relies on the DRAIN_AND_STOP half of this.
import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { Behaviors, DRAIN_AND_STOP, STOP } from "../../src/actor/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { testSystem } from "./support.ts";

/** How a message is handled: synchronously, after some microtask hops, or after a macrotask turn. */
type Work = { kind: "sync" } | { kind: "microtasks"; hops: number } | { kind: "immediate" };

const workArb: fc.Arbitrary<Work> = fc.oneof(
  fc.constant<Work>({ kind: "sync" }),
  fc.integer({ min: 1, max: 4 }).map<Work>((hops) => ({ kind: "microtasks", hops })),
  fc.constant<Work>({ kind: "immediate" }),
);

async function perform(work: Work): Promise<void> {
  if (work.kind === "microtasks") for (let i = 0; i < work.hops; i++) await Promise.resolve();
  else if (work.kind === "immediate") await new Promise((resolve) => setImmediate(resolve));
}

const scenario = fc.record({
  works: fc.array(workArb, { minLength: 0, maxLength: 40 }),
  stopAt: fc.nat(),
  // Let the actor run for a few turns before the stop is sent (0: send it at once).
  turnsBefore: fc.integer({ min: 0, max: 3 }),
  drain: fc.boolean(),
});

test("DRAIN_AND_STOP handles exactly what was sent before it; STOP a prefix; the rest are dead letters", async (t) => {
  const system = testSystem(t);
  let run = 0;
  await fc.assert(
    fc.asyncProperty(scenario, async ({ works, stopAt, turnsBefore, drain }) => {
      const name = `p${run++}`;
      const handled: number[] = [];
      const dead: number[] = [];
      const unsubscribe = system.onDeadLetter((letter) => {
        if (letter.recipient.endsWith(`/${name}`)) dead.push(letter.message as number);
      });
      const ref = system.spawn(
        Behaviors.receive<number>((message) => {
          const work = works[message]!;
          if (work.kind === "sync") {
            handled.push(message);
            return;
          }
          return perform(work).then(() => {
            handled.push(message);
          });
        }),
        name,
      );
      const cut = works.length === 0 ? 0 : stopAt % (works.length + 1);
      for (let i = 0; i < cut; i++) ref.tell(i);
      for (let i = 0; i < turnsBefore; i++) await new Promise((resolve) => setImmediate(resolve));
      const handledAtStop = handled.length;
      ref.sendSystem(drain ? DRAIN_AND_STOP : STOP);
      for (let i = cut; i < works.length; i++) ref.tell(i);
      await eventually(() => system.findLocal(["user", name]) === null, { what: `${name} to stop` });
      unsubscribe();
      const all = works.map((_, i) => i);
      if (drain) {
        assert.deepEqual(handled, all.slice(0, cut));
      } else {
        // STOP: what was handled is a prefix in order, at most one message more than at the time STOP was sent.
        assert.deepEqual(handled, all.slice(0, handled.length));
        assert.ok(handled.length <= Math.min(cut, handledAtStop + 1), `${handled.length} after ${handledAtStop}`);
      }
      assert.deepEqual(
        [...dead].sort((a, b) => a - b),
        all.slice(handled.length),
      );
    }),
    { numRuns: 60, seed: 20_261_202 },
  );
});
