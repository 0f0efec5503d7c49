import assert from "node:assert/strict";
import { test } from "node:test";
import { AbstractBehavior } from "../../src/actor/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { CapturingLogger, testSystem } from "./support.ts";

/** Throws a value whose `toString` is not a function: turning it into text with `String()` would throw again. */
class ThrowsHostile extends AbstractBehavior<string> {
  receive(message: string): void {
    if (message === "boom") throw { toString: 1, valueOf: 1 };
  }
}

test("a behavior that throws a non-Error whose toString is not a function fails like any error", async (t) => {
  const logger = new CapturingLogger();
  const system = testSystem(t, { logger });
  const ref = system.spawn(new ThrowsHostile(), "hostile");
  ref.tell("boom");
  await eventually(() => logger.records.some((r) => r.level === "error" || r.level === "warn"), {
    what: "the failure logged",
    describe: () => logger.records.map((r) => r.message),
  });
  const text = JSON.stringify(
    logger.records.map((r) => r.context),
    (_k, v) => (v instanceof Error ? v.message : v),
  );
  assert.match(text, /a non-Error was thrown: an object/);
});
