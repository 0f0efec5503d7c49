// Histogram: bucket edges (a value equal to a bound falls in that bound's bucket), the +Inf bucket, ignored
// non-finite values, refused bounds; and its Prometheus exposition (cumulative buckets, _sum, _count), checked by
// promtool and parsed back by parse-prometheus-text-format.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { test } from "node:test";
import parsePrometheusTextFormat from "parse-prometheus-text-format";
import { Histogram, latencyBucketsSeconds } from "../../src/actor/index.ts";
import { Exposition } from "../../src/management/exposition.ts";

test("values fall in the first bucket whose bound is at least the value; above the last, in +Inf", () => {
  const h = new Histogram([1, 5, 10]);
  for (const v of [0, 1, 1.5, 5, 10, 10.01, 1000, -3]) h.observe(v);
  const s = h.snapshot();
  assert.deepEqual(s.counts, [3, 2, 1, 2]);
  assert.equal(s.count, 8);
  assert.equal(s.sum, 0 + 1 + 1.5 + 5 + 10 + 10.01 + 1000 - 3);
});

test("NaN and infinities are ignored, not counted", () => {
  const h = new Histogram([1]);
  h.observe(Number.NaN);
  h.observe(Number.POSITIVE_INFINITY);
  h.observe(Number.NEGATIVE_INFINITY);
  assert.deepEqual(h.snapshot(), { bounds: [1], counts: [0, 0], sum: 0, count: 0 });
});

test("bounds that are empty, unordered, repeated or not finite are refused", () => {
  assert.throws(() => new Histogram([]), RangeError);
  assert.throws(() => new Histogram([2, 1]), /strictly increasing/);
  assert.throws(() => new Histogram([1, 1]), /strictly increasing/);
  assert.throws(() => new Histogram([1, Number.NaN]), /finite/);
  assert.throws(() => new Histogram(new Array(65).fill(0).map((_, i) => i)), RangeError);
});

test("a snapshot is a copy: later observations do not change it", () => {
  const h = new Histogram([1]);
  h.observe(0.5);
  const s = h.snapshot();
  h.observe(2);
  assert.deepEqual(s.counts, [1, 0]);
  assert.equal(h.count, 2);
});

test("subscribers see each later observation until they unsubscribe", () => {
  const h = new Histogram([1]);
  const seen: number[] = [];
  h.observe(0.1);
  const stop = h.subscribe((v) => seen.push(v));
  h.observe(0.2);
  stop();
  h.observe(0.3);
  assert.deepEqual(seen, [0.2]);
});

test("exposition: cumulative _bucket samples ending in le=+Inf, then _sum and _count; promtool accepts it", () => {
  const a = new Histogram(latencyBucketsSeconds);
  for (const v of [0.0005, 0.002, 0.002, 0.3, 42]) a.observe(v);
  const b = new Histogram(latencyBucketsSeconds);
  const out = new Exposition();
  out.histogram("movie_test_duration_seconds", "A test latency", a, [["type", 'we"ird']], "s");
  out.histogram("movie_test_duration_seconds", "A test latency", b, [["type", "empty"]], "s");
  const text = out.render();
  assert.match(text, /^# TYPE movie_test_duration_seconds histogram$/m);
  assert.match(text, /^movie_test_duration_seconds_bucket\{type="we\\"ird",le="0.001"\} 1$/m);
  assert.match(text, /^movie_test_duration_seconds_bucket\{type="we\\"ird",le="0.0025"\} 3$/m);
  assert.match(text, /^movie_test_duration_seconds_bucket\{type="we\\"ird",le="10"\} 4$/m);
  assert.match(text, /^movie_test_duration_seconds_bucket\{type="we\\"ird",le="\+Inf"\} 5$/m);
  assert.match(text, /^movie_test_duration_seconds_count\{type="we\\"ird"\} 5$/m);
  // parse-prometheus-text-format folds a histogram family into one unlabelled histogram (labels are lost), so the
  // parse-back runs on a family of one unlabelled histogram.
  const single = new Exposition();
  single.histogram("movie_test_duration_seconds", "A test latency", a, [], "s");
  const [family] = parsePrometheusTextFormat(single.render());
  assert.equal(family?.type, "HISTOGRAM");
  const parsed = family!.metrics[0] as unknown as { buckets: Record<string, string>; count: string; sum: string };
  assert.equal(parsed.buckets["+Inf"], "5");
  assert.equal(parsed.buckets["0.25"], "3");
  assert.equal(parsed.count, "5");
  assert.equal(Number(parsed.sum), 0.0005 + 0.002 + 0.002 + 0.3 + 42);
  const check = spawnSync("promtool", ["check", "metrics"], { input: text, encoding: "utf8" });
  assert.equal(check.error, undefined, "promtool is missing: apt-get install -y --no-install-recommends prometheus");
  assert.equal(check.status, 0, `promtool: ${check.stdout}${check.stderr}`);
});

test("exposition refuses a histogram name with a reserved suffix or an le label", () => {
  const out = new Exposition();
  const h = new Histogram([1]);
  assert.throws(() => out.histogram("movie_x_count", "x", h), /reserved suffix/);
  assert.throws(() => out.histogram("movie_x_seconds", "x", h, [["le", "1"]]), /le/);
});
