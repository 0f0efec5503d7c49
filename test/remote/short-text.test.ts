// The hot-path text read (src/remote/short-text.ts): readUtf8 must read exactly what Buffer#toString("utf8") reads,
// for any bytes (short ASCII takes the JavaScript path, everything else the native one; a wrong switch between them
// shows up as a different text).
import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { readUtf8, shortTextMax } from "../../src/remote/short-text.ts";

/** Fixed, so a failure replays exactly (fast-check prints the path to the shrunk case). */
const seed = 20261207;

/** Bytes around the ASCII limit (0x7f/0x80), invalid UTF-8 leads and continuations included, at any offset. */
const bytes = fc.uint8Array({ maxLength: 3 * shortTextMax }).chain((b) =>
  fc.record({
    buf: fc.constant(Buffer.from(b)),
    o: fc.integer({ min: 0, max: b.length }),
    n: fc.integer({ min: 0, max: b.length }),
  }),
);
const asciiBytes = fc
  .uint8Array({ maxLength: shortTextMax + 4 })
  .map((b) => Buffer.from(b.map((x) => x & 0x7f)))
  .map((buf) => ({ buf, o: 0, n: buf.length }));

test("readUtf8 reads what Buffer#toString('utf8') reads, for any bytes at any offset", () => {
  fc.assert(
    fc.property(fc.oneof(bytes, asciiBytes), ({ buf, o, n }) => {
      const len = Math.min(n, buf.length - o);
      assert.equal(readUtf8(buf, o, len), buf.toString("utf8", o, o + len));
    }),
    { seed, numRuns: 20_000 },
  );
  // Every length of ASCII across the JavaScript path's limit, and one byte of 0x80 at each place.
  for (let n = 0; n <= shortTextMax + 2; n++) {
    const buf = Buffer.from("x".repeat(n + 3));
    assert.equal(readUtf8(buf, 2, n), "x".repeat(n));
    for (let at = 0; at < n; at++) {
      const bad = Buffer.from(buf);
      bad[2 + at] = 0x80;
      assert.equal(readUtf8(bad, 2, n), bad.toString("utf8", 2, 2 + n), `length ${n}, 0x80 at ${at}`);
    }
  }
});
