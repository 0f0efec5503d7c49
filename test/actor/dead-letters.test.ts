import assert from "node:assert/strict";
import { test } from "node:test";
import { Behaviors, type DeadLetter, STOP } from "../../src/actor/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { testSystem } from "./support.ts";

test("messages to a stopped actor are dead letters: counted and published with sender and recipient", async (t) => {
  const system = testSystem(t);
  const letters: DeadLetter[] = [];
  const unsubscribe = system.onDeadLetter((letter) => letters.push(letter));
  const sender = system.spawn(Behaviors.ignore<unknown>(), "sender");
  const ref = system.spawn(Behaviors.ignore<string>(), "gone");
  ref.sendSystem(STOP);
  await eventually(() => system.findLocal(["user", "gone"]) === null);
  const before = system.deadLetterCount;
  ref.tell("one", sender);
  ref.tell("two");
  assert.equal(system.deadLetterCount, before + 2);
  assert.deepEqual(
    letters.map((l) => [l.message, l.sender?.path.toString() ?? null, l.recipient]),
    [
      ["one", sender.path.toString(), ref.path.toString()],
      ["two", null, ref.path.toString()],
    ],
  );
  unsubscribe();
  ref.tell("three");
  assert.equal(letters.length, 2, "no longer observed after unsubscribing");
  assert.equal(system.deadLetterCount, before + 3, "but still counted");
});

test("system.deadLetters takes everything as a dead letter; a throwing listener does not break delivery", async (t) => {
  const system = testSystem(t);
  const seen: unknown[] = [];
  system.onDeadLetter(() => {
    throw new Error("listener bug");
  });
  system.onDeadLetter((letter) => seen.push(letter.message));
  system.deadLetters.tell("x");
  assert.deepEqual(seen, ["x"]);
  assert.equal(system.deadLetterCount, 1);
  assert.equal(system.deadLetters.path.toString(), `${system.address}/deadLetters`);
});
