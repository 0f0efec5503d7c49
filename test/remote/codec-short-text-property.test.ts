// The short-string read of a compiled binary codec (src/remote/codec.ts readText): a string field keeps the last short
// ASCII text it read (and its bytes) and returns it again when the next one has the same bytes, else builds the new
// one with String.fromCharCode. Whatever sequence of strings a codec reads, each read must give exactly the text
// written (or, for hand-made bytes, exactly what a plain Latin-1 / UTF-8 decoder gives): a stale cache shows up as an
// earlier message's text.
import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { compileCodec } from "../../src/remote/codec.ts";

/** Fixed, so a failure replays exactly (fast-check prints the path to the shrunk case). */
const seed = 20261207;

/** ASCII strings of every length 0..40, from a small alphabet so equal and near-equal texts follow each other often. */
const ascii = fc.oneof(
  fc
    .integer({ min: 0, max: 40 })
    .chain((n) => fc.string({ unit: fc.constantFrom("a", "b", "\u0000", "\u007f"), minLength: n, maxLength: n })),
  fc.string({ unit: fc.integer({ min: 0, max: 0x7f }).map((c) => String.fromCharCode(c)), maxLength: 40 }),
);
/** Latin-1 (one UTF-8 byte pair per character above 0x7f), non-BMP (surrogate pairs), and any well-formed text. */
const latin1 = fc.string({ unit: fc.integer({ min: 0, max: 0xff }).map((c) => String.fromCharCode(c)), maxLength: 40 });
const nonBmp = fc.string({
  unit: fc.integer({ min: 0x10000, max: 0x10ffff }).map((c) => String.fromCodePoint(c)),
  maxLength: 12,
});
const anyText = fc.oneof(ascii, ascii, latin1, nonBmp, fc.string({ unit: "binary", maxLength: 40 }));
/**
 * A few texts: one, and small variants of it (one longer, one shorter, the last character changed, the first changed),
 * plus another text: the cache's hits and near misses. Messages pick from it, so the same and near-same texts follow
 * each other in every order.
 */
const pool = fc.tuple(anyText, anyText).map(([s, other]) => {
  // By code point, so a variant never splits a surrogate pair (a lone surrogate is refused at send, not a read case).
  const points = [...s];
  const head = points.slice(0, -1).join("");
  const tail = points.slice(1).join("");
  const last = points.at(-1)?.codePointAt(0) ?? 0x60;
  const first = points[0]?.codePointAt(0) ?? 0x60;
  const bump = (c: number) => String.fromCharCode((c + 1) & 0x7f);
  return [s, `${s}x`, head, `${head}${bump(last)}`, `${bump(first)}${tail}`, other];
});

function roundTrip(codec: ReturnType<typeof compileCodec>, message: object): Record<string, unknown> {
  const bound = codec.measure(message);
  codec.checkText(message);
  const buf = Buffer.alloc(bound + 11, 0xee);
  const end = codec.write(buf, 3, message);
  return codec.read(buf, 3, end, Object.prototype);
}

test("any sequence of strings read through a compiled codec reads back exactly as written", () => {
  // Fresh codecs per run: each run's sequence starts from an empty cache, and reads go through every field's own.
  const pick = fc.integer({ min: 0, max: 5 });
  fc.assert(
    fc.property(
      pool,
      fc.array(fc.tuple(pick, fc.option(pick, { nil: null }), pick), { minLength: 1, maxLength: 30 }),
      (texts, picks) => {
        const codec = compileCodec("Texts", { s: "string", n: "int32", t: "string?", u: "string" });
        for (const [i, [s, t, u]] of picks.entries()) {
          const sent = { s: texts[s]!, n: i, t: t === null ? null : texts[t]!, u: texts[u]! };
          assert.deepEqual(roundTrip(codec, sent), sent, `message ${i}`);
        }
      },
    ),
    { seed, numRuns: 400 },
  );
});

test("every ASCII length 0..40, each read twice, then once changed in every position, reads back exactly", () => {
  const codec = compileCodec("Text", { s: "string" });
  for (let n = 0; n <= 40; n++) {
    const base = Array.from({ length: n }, (_, j) => String.fromCharCode((n * 13 + j * 29) % 128)).join("");
    assert.equal(roundTrip(codec, { s: base }).s, base, `length ${n}`);
    assert.equal(roundTrip(codec, { s: base }).s, base, `length ${n} again`);
    for (let j = 0; j < n; j++) {
      const changed = base.slice(0, j) + String.fromCharCode((base.charCodeAt(j) + 1) % 128) + base.slice(j + 1);
      assert.equal(roundTrip(codec, { s: changed }).s, changed, `length ${n}, byte ${j} changed`);
      assert.equal(roundTrip(codec, { s: base }).s, base, `length ${n}, back to the base after byte ${j}`);
    }
  }
});

/** A frame of one string field with `bytes` as its text: the length word's ASCII flag as given, whatever the bytes. */
function rawText(bytes: Uint8Array, asciiFlag: boolean): Buffer {
  const buf = Buffer.alloc(4 + bytes.length);
  buf.writeUInt32LE((bytes.length | (asciiFlag ? 0x80000000 : 0)) >>> 0, 0);
  buf.set(bytes, 4);
  return buf;
}

test("hand-made bytes (lone bytes above 0x7f, under a false ASCII flag too) read as a plain decoder reads them, whatever came before", () => {
  const bytes = fc.oneof(
    fc.uint8Array({ maxLength: 30 }),
    fc.uint8Array({ min: 0, max: 0x7f, maxLength: 30 }),
    fc.constantFrom(
      new Uint8Array([0x80]),
      new Uint8Array([0xff]),
      new Uint8Array([0xc3]),
      new Uint8Array([0x61, 0xe9]),
    ),
  );
  // A byte string and variants of it (its last byte changed, one byte shorter), plus another: picked in any order.
  const pool = fc.tuple(bytes, bytes).map(([b, other]) => {
    const changed = Uint8Array.from(b.length === 0 ? [0x41] : b);
    changed[changed.length - 1] = (changed.at(-1)! + 1) & 0xff;
    return [b, changed, b.subarray(0, Math.max(0, b.length - 1)), other];
  });
  fc.assert(
    fc.property(
      pool,
      fc.array(fc.tuple(fc.integer({ min: 0, max: 3 }), fc.boolean()), { minLength: 1, maxLength: 40 }),
      (texts, picks) => {
        const codec = compileCodec("Text", { s: "string" });
        for (const [i, [pick, asciiFlag]] of picks.entries()) {
          const b = texts[pick]!;
          const buf = rawText(b, asciiFlag);
          const expected = Buffer.from(b).toString(asciiFlag ? "latin1" : "utf8");
          assert.equal(codec.read(buf, 0, buf.length, Object.prototype).s, expected, `frame ${i}`);
        }
      },
    ),
    { seed, numRuns: 400 },
  );
});
