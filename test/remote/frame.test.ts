import assert from "node:assert/strict";
import { test } from "node:test";
import { encodeFrame, FrameDecoder, FramingError } from "../../src/remote/index.ts";

function frames(...payloads: string[]): Buffer {
  return Buffer.concat(payloads.map((p) => encodeFrame(Buffer.from(p))));
}

test("encodeFrame writes a 4-byte big-endian length before the payload", () => {
  const out = encodeFrame(Buffer.from("abc"));
  assert.deepEqual([...out], [0, 0, 0, 3, 97, 98, 99]);
  assert.throws(() => encodeFrame(Buffer.alloc(0)), FramingError);
  assert.throws(() => encodeFrame(Buffer.alloc(2000), 1024), FramingError);
});

test("a stream split at every offset decodes to the same frames", () => {
  const stream = frames("first", "x", "a longer third frame with some bytes", "ü€😀");
  const expected = ["first", "x", "a longer third frame with some bytes", "ü€😀"];
  for (let cut = 0; cut <= stream.length; cut++) {
    const decoder = new FrameDecoder();
    const got = [...decoder.push(stream.subarray(0, cut)), ...decoder.push(stream.subarray(cut))].map((f) =>
      f.toString(),
    );
    assert.deepEqual(got, expected, `cut at ${cut}`);
    assert.equal(decoder.bufferedBytes, 0);
  }
});

test("a stream fed one byte at a time, and split at two offsets, decodes the same", () => {
  const stream = frames("alpha", "beta", "gamma");
  const decoder = new FrameDecoder();
  const got: string[] = [];
  for (let i = 0; i < stream.length; i++)
    for (const f of decoder.push(stream.subarray(i, i + 1))) got.push(f.toString());
  assert.deepEqual(got, ["alpha", "beta", "gamma"]);
  for (let i = 0; i < stream.length; i++) {
    for (let j = i; j <= stream.length; j++) {
      const d = new FrameDecoder();
      const out = [
        ...d.push(stream.subarray(0, i)),
        ...d.push(stream.subarray(i, j)),
        ...d.push(stream.subarray(j)),
      ].map((f) => f.toString());
      assert.deepEqual(out, ["alpha", "beta", "gamma"], `cuts ${i} ${j}`);
    }
  }
});

test("a large frame in many chunks is joined once complete", () => {
  const big = Buffer.alloc(300_000, 7);
  const stream = encodeFrame(big);
  const decoder = new FrameDecoder();
  let got: Buffer[] = [];
  for (let i = 0; i < stream.length; i += 32 * 1024) got = got.concat(decoder.push(stream.subarray(i, i + 32 * 1024)));
  assert.equal(got.length, 1);
  assert.ok(got[0]!.equals(big));
});

test("zero length and oversize lengths are typed framing errors, and the decoder stays failed", () => {
  const zero = new FrameDecoder();
  assert.throws(
    () => zero.push(Buffer.from([0, 0, 0, 0, 1])),
    (e: unknown) => e instanceof FramingError && e.frameBytes === 0 && e.name === "FramingError",
  );
  assert.throws(() => zero.push(frames("ok")), FramingError);
  const big = new FrameDecoder(1024);
  const header = Buffer.alloc(4);
  header.writeUInt32BE(1025);
  // The length is checked as soon as the header is complete, even split across chunks.
  assert.deepEqual(big.push(header.subarray(0, 2)), []);
  assert.throws(
    () => big.push(header.subarray(2)),
    (e: unknown) => e instanceof FramingError && e.frameBytes === 1025 && e.maxFrameBytes === 1024,
  );
});
