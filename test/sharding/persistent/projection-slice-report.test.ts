// A slice owner's report as another node receives it (GET /projections asks the owners through sharding): the wire
// types are fixed by the registration's fields, and the values are checked before they are shown; a report that does
// not check out counts as no answer.
import assert from "node:assert/strict";
import { test } from "node:test";
import { MessageRegistry } from "../../../src/remote/index.ts";
import { ProjectionSliceReport } from "../../../src/sharding/persistent/index.ts";
import { figuresOf } from "../../../src/sharding/persistent/projection-control.ts";

const good = (): ProjectionSliceReport =>
  new ProjectionSliceReport("running", 40, 42, 12.5, 0, "Error: x".repeat(300), 1_796_000_000_000);

test("a well-formed report is kept, its error text cut to 1,000 characters", () => {
  const figures = figuresOf(good());
  assert.ok(figures !== null);
  assert.deepEqual(
    [figures.status, figures.checkpoint, figures.latestOffset, figures.eventsPerSecond, figures.lastError?.length],
    ["running", 40, 42, 12.5, 1_000],
  );
});

test("a report with a value out of its domain is no answer", () => {
  const bad: [string, Partial<Record<keyof ProjectionSliceReport, unknown>>][] = [
    ["unknown status", { status: "__proto__" }],
    ["negative checkpoint", { checkpoint: -1 }],
    ["fractional checkpoint", { checkpoint: 1.5 }],
    ["unsafe latest offset", { latestOffset: 2 ** 60 }],
    ["NaN rate", { eventsPerSecond: Number.NaN }],
    ["infinite rate", { eventsPerSecond: Number.POSITIVE_INFINITY }],
    ["negative rate", { eventsPerSecond: -1 }],
    ["negative failures", { consecutiveFailures: -3 }],
    ["negative error time", { lastErrorAtEpochMs: -5 }],
  ];
  for (const [what, change] of bad) assert.equal(figuresOf(Object.assign(good(), change)), null, what);
});

test("the report is registered with typed fields (a binary codec), so a peer cannot send another shape", () => {
  const registration = MessageRegistry.default.lookupType(ProjectionSliceReport);
  assert.ok(registration !== undefined);
  assert.deepEqual(
    registration.codec?.fields.map((f) => [f.name, f.type, f.optional]),
    [
      ["status", "string", false],
      ["checkpoint", "number", false],
      ["latestOffset", "number", false],
      ["eventsPerSecond", "number", false],
      ["consecutiveFailures", "number", false],
      ["lastError", "string", true],
      ["lastErrorAtEpochMs", "number", true],
    ],
  );
});
