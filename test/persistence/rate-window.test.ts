// The sliding-window rate behind ProjectionStats.eventsPerSecond: no figure before a meaningful span (the old runner
// floored the span at 1 ms and reported a burst right after its start), the window's baseline, decay while idle, and
// a bounded number of samples.
import assert from "node:assert/strict";
import { test } from "node:test";
import { RateWindow } from "../../src/persistence/rate-window.ts";

test("no rate before the span reaches minSpanMs: two batches a millisecond apart are not a burst", () => {
  const w = new RateWindow(0);
  w.record(1, 100);
  w.record(2, 200);
  assert.equal(w.rate(2), 0, "200 events in 2 ms is no measurement");
  assert.equal(w.rate(999), 0);
  assert.equal(w.rate(1_000), 200, "200 events in the first second");
});

test("the rate counts from the window's start (the first batch included) over the time since it", () => {
  const w = new RateWindow(0);
  w.record(0, 4);
  w.record(2_000, 10);
  assert.equal(w.rate(2_000), 5);
  assert.equal(w.rate(4_000), 2.5, "no new events: the rate falls as time passes");
});

test("the window slides: events older than windowMs no longer count, and an idle window reports 0", () => {
  const w = new RateWindow(0, 0, { windowMs: 10_000, minSpanMs: 1_000 });
  for (let t = 1_000; t <= 20_000; t += 1_000) w.record(t, t / 10); // 100 events/s for 20 s
  assert.equal(w.rate(20_000), 100);
  w.record(21_000, 2_000 + 1_000); // a burst of 1,000 in the last second
  assert.equal(w.rate(21_000), (3_000 - 1_100) / 10);
  assert.equal(w.rate(40_000), 0, "nothing handled in the last 10 s");
});

test("samples closer than bucketMs are merged, so the window stays small under many batches", () => {
  const w = new RateWindow(0, 0, { windowMs: 10_000, bucketMs: 100 });
  for (let t = 1; t <= 30_000; t++) w.record(t, t);
  const samples = (w as unknown as { samples: unknown[] }).samples.length;
  assert.ok(samples <= 110, `${samples} samples`);
  assert.equal(Math.round(w.rate(30_000)), 1_000);
});
