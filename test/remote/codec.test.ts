import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { compileCodec, type FieldList } from "../../src/remote/codec.ts";
import {
  EnvelopeDecodeError,
  MessageEncodeError,
  MessageRegistrationError,
  MessageRegistry,
  type StandardSchemaV1,
} from "../../src/remote/index.ts";
import { jsonNestingMax } from "../../src/remote/json-nesting.ts";
import { decodeBinary } from "../../src/remote/message-registry.ts";

const allTypes: FieldList = {
  n: "number",
  i: "int32",
  b: "boolean",
  s: "string",
  j: "json",
  on: "number?",
  oi: "int32?",
  ob: "boolean?",
  os: "string?",
  oj: "json?",
};

/** Encodes `message` with `codec` at a random offset of a larger buffer and reads it back. */
function roundTrip(codec: ReturnType<typeof compileCodec>, message: object, at = 7): Record<string, unknown> {
  const bound = codec.measure(message);
  const buf = Buffer.alloc(at + bound + 9, 0xee);
  const end = codec.write(buf, at, message);
  assert.ok(end - at <= bound, `wrote ${end - at} bytes, measured at most ${bound}`);
  return codec.read(buf, at, end, Object.prototype);
}

/** Strings of any Unicode text (surrogate pairs, combining marks, ASCII), all well-formed. */
const text = fc.oneof(
  fc.string({ unit: "grapheme", maxLength: 40 }),
  fc.string({ unit: "binary", maxLength: 40 }),
  fc.string({ maxLength: 80 }),
);
const number = fc.oneof(
  fc.double(),
  fc.constantFrom(Number.NaN, -0, 0, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY),
  fc.constantFrom(Number.MAX_SAFE_INTEGER, Number.MIN_SAFE_INTEGER, 2 ** 53 + 2, Number.MAX_VALUE, Number.MIN_VALUE),
  fc.maxSafeInteger(),
);
const int32 = fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 });
const json = fc.jsonValue();
/** A nullable field's value: the value, null, or undefined. */
const maybe = <T>(arb: fc.Arbitrary<T>) => fc.oneof(arb, fc.constant(null), fc.constant(undefined));

test("property: every declared type round-trips exactly (unicode, NaN, -0, large integers, null and undefined)", () => {
  const codec = compileCodec("test.all", allTypes);
  fc.assert(
    fc.property(
      fc.record({
        n: number,
        i: int32,
        b: fc.boolean(),
        s: text,
        j: json,
        on: maybe(number),
        oi: maybe(int32),
        ob: maybe(fc.boolean()),
        os: maybe(text),
        oj: maybe(json),
      }),
      (message) => {
        const back = roundTrip(codec, message);
        assert.deepStrictEqual(Object.keys(back), Object.keys(allTypes));
        for (const key of Object.keys(allTypes)) {
          const sent = (message as Record<string, unknown>)[key];
          if (key.endsWith("j") && sent !== null && sent !== undefined) {
            // A json field carries what JSON carries (JSON turns -0 into 0).
            assert.deepStrictEqual(back[key], JSON.parse(JSON.stringify(sent)), key);
          } else if (typeof sent === "number") {
            assert.ok(Object.is(back[key], sent), `${key}: ${back[key]} !== ${sent}`);
          } else {
            assert.deepStrictEqual(back[key], sent, key);
          }
        }
      },
    ),
    { numRuns: 400 },
  );
});

test("property: any strict prefix of an encoding, and any encoding with trailing bytes, is undecodable", () => {
  const codec = compileCodec("test.prefix", { n: "number", s: "string", o: "string?", j: "json?" });
  fc.assert(
    fc.property(fc.record({ n: number, s: text, o: maybe(text), j: maybe(json) }), fc.nat(), (message, cut) => {
      const buf = Buffer.alloc(codec.measure(message) + 1);
      const end = codec.write(buf, 0, message);
      const at = cut % end;
      assert.throws(
        () => codec.read(buf, 0, at, Object.prototype),
        (e: unknown) => e instanceof EnvelopeDecodeError && e.reason === "undecodable",
      );
      assert.throws(
        () => codec.read(buf, 0, end + 1, Object.prototype),
        (e: unknown) => e instanceof EnvelopeDecodeError && /trailing/.test(e.message),
      );
    }),
    { numRuns: 200 },
  );
});

test("malformed bytes are undecodable: a bad boolean byte, a bad presence byte, a length past the end, bad JSON", () => {
  const codec = compileCodec("test.bad", { b: "boolean", o: "string?", j: "json" });
  const good = Buffer.alloc(64);
  const message = { b: true, o: "x", j: [1] };
  codec.measure(message);
  const end = codec.write(good, 0, message);
  const undecodable = (bytes: Buffer, pattern: RegExp) =>
    assert.throws(
      () => codec.read(bytes, 0, bytes.length, Object.prototype),
      (e: unknown) =>
        e instanceof EnvelopeDecodeError &&
        e.reason === "undecodable" &&
        e.typeName === "test.bad" &&
        pattern.test(e.message),
    );
  const badBool = Buffer.from(good.subarray(0, end));
  badBool[0] = 2;
  undecodable(badBool, /boolean/);
  const badPresence = Buffer.from(good.subarray(0, end));
  badPresence[1] = 7;
  undecodable(badPresence, /presence/);
  const hugeLength = Buffer.from(good.subarray(0, end));
  hugeLength.writeUInt32LE(0x7ffffff0, 2);
  undecodable(hugeLength, /truncated/);
  const badJson = Buffer.from(good.subarray(0, end));
  badJson[end - 1] = 0x7b; // "[1]" becomes "[1{"
  undecodable(badJson, /not valid JSON/);
});

test("numbers and int32s go on the wire little-endian, whatever the platform", () => {
  const codec = compileCodec("test.wire", { n: "number", i: "int32" });
  for (const [n, i] of [
    [1.5, -2],
    [-0, 2 ** 31 - 1],
    [Number.NaN, -(2 ** 31)],
    [2 ** 53 + 2, 0],
  ] as const) {
    const buf = Buffer.alloc(12);
    assert.equal(codec.write(buf, 0, { n, i }), 12);
    const expected = Buffer.alloc(12);
    expected.writeDoubleLE(n, 0);
    expected.writeInt32LE(i, 8);
    assert.deepEqual([...buf], [...expected], `n=${n} i=${i}`);
    const back = codec.read(buf, 0, 12, Object.prototype);
    assert.ok(Object.is(back.n, n) && back.i === i, `read back ${String(back.n)} ${String(back.i)}`);
  }
});

test("values the declared types cannot carry are refused with MessageEncodeError naming the field", () => {
  const codec = compileCodec("test.strict", { n: "number", i: "int32", s: "string", b: "boolean", j: "json" });
  const ok = { n: 1, i: 1, s: "a", b: true, j: {} };
  // Types are refused by measure; a lone surrogate only by write (it is found while encoding, see PayloadCodec).
  const refused = (patch: Record<string, unknown>, field: string) =>
    assert.throws(
      () => {
        const message = { ...ok, ...patch };
        codec.write(Buffer.alloc(codec.measure(message)), 0, message);
      },
      (e: unknown) => e instanceof MessageEncodeError && e.typeName === "test.strict" && e.field === field,
    );
  refused({ n: "1" }, "n");
  refused({ n: null }, "n");
  refused({ n: undefined }, "n");
  refused({ i: 2 ** 31 }, "i");
  refused({ i: 1.5 }, "i");
  refused({ i: -0 }, "i");
  refused({ s: 5 }, "s");
  refused({ s: "lone \ud800 surrogate" }, "s");
  refused({ s: "\udc00" }, "s");
  refused({ s: "short \ud83d" }, "s");
  refused({ s: `${"x".repeat(40)}\ud83d${"y".repeat(40)}` }, "s");
  assert.doesNotThrow(() => codec.measure({ ...ok, s: "lone \ud800 surrogate" }), "measure checks types only");
  // checkText refuses what write would, without a buffer (a message dropped unwritten is refused all the same).
  assert.throws(
    () => codec.checkText({ ...ok, s: "lone \ud800 surrogate" }),
    (e: unknown) => e instanceof MessageEncodeError && e.field === "s",
  );
  assert.doesNotThrow(() => codec.checkText({ ...ok, s: "ü-😀" }));
  const optional = compileCodec("test.optional", { s: "string?" });
  assert.doesNotThrow(() => optional.checkText({ s: null }));
  assert.throws(() => optional.checkText({ s: "\udfff" }), MessageEncodeError);
  refused({ b: 1 }, "b");
  refused({ j: undefined }, "j");
  refused({ j: 10n }, "j");
  refused({ j: () => 1 }, "j");
  assert.doesNotThrow(() => codec.measure(ok));
});

class Point {
  constructor(
    readonly x: number,
    readonly y: number,
    readonly label: string | null = null,
  ) {}
  norm(): number {
    return Math.hypot(this.x, this.y);
  }
}
class Validated {
  constructor(readonly n: number) {}
  static fromJSON(json: unknown): Validated {
    const { n } = json as { n: number };
    if (n < 0) throw new RangeError("n must be >= 0");
    return new Validated(n);
  }
}
const positive: StandardSchemaV1 = {
  "~standard": {
    version: 1,
    vendor: "test",
    validate: (v) => ((v as { n: number }).n > 0 ? { value: v } : { issues: [{ message: "n must be positive" }] }),
  },
};
class Checked {
  constructor(readonly n: number) {}
}

test("a registered codec rebuilds real instances; fromJSON and schema apply to binary payloads as to JSON", () => {
  const registry = new MessageRegistry(null);
  const point = registry.register(Point, { name: "t.point", fields: { x: "number", y: "number", label: "string?" } });
  const validated = registry.register(Validated, { name: "t.validated", fields: { n: "number" } });
  const checked = registry.register(Checked, { name: "t.checked", fields: { n: "number" }, schema: positive });
  const encode = (entry: typeof point, message: object) => {
    const buf = Buffer.alloc(entry.codec!.measure(message));
    return buf.subarray(0, entry.codec!.write(buf, 0, message));
  };
  const p = encode(point, new Point(3, 4, "é"));
  const back = decodeBinary(point, p, 0, p.length) as Point;
  assert.ok(back instanceof Point);
  assert.equal(back.norm(), 5);
  assert.equal(back.label, "é");
  const v = encode(validated, new Validated(-1));
  assert.throws(
    () => decodeBinary(validated, v, 0, v.length),
    (e: unknown) => e instanceof EnvelopeDecodeError && e.reason === "undecodable" && /fromJSON/.test(e.message),
  );
  const c = encode(checked, new Checked(0));
  assert.throws(
    () => decodeBinary(checked, c, 0, c.length),
    (e: unknown) => e instanceof EnvelopeDecodeError && e.reason === "schemaInvalid",
  );
  const c2 = encode(checked, new Checked(2));
  assert.ok(decodeBinary(checked, c2, 0, c2.length) instanceof Checked);
});

test("field lists are validated at registration; re-registering with different fields is refused", () => {
  const registry = new MessageRegistry(null);
  class A {}
  const refused = (fields: unknown, pattern: RegExp) =>
    assert.throws(
      () => registry.register(A, { name: "t.a", fields: fields as FieldList }),
      (e: unknown) => e instanceof MessageRegistrationError && pattern.test(e.message),
    );
  refused({}, /at least one/);
  refused([], /must be an object/);
  refused({ x: "float" }, /use number, int32/);
  refused({ x: "number??" }, /use number, int32/);
  refused(JSON.parse('{"__proto__": "number"}'), /__proto__/);
  registry.register(A, { name: "t.a", fields: { x: "number" } });
  assert.doesNotThrow(() => registry.register(A, { name: "t.a", fields: { x: "number" } }));
  assert.doesNotThrow(() => registry.register(A, { name: "t.a" }));
  refused({ x: "string" }, /other fields|different fields/);
});

test("the codec fingerprint changes with names, types, nullability and order", () => {
  const print = (fields: FieldList) => compileCodec("t", fields).fingerprint;
  const base = print({ a: "number", b: "string" });
  assert.equal(print({ a: "number", b: "string" }), base);
  assert.notEqual(print({ b: "string", a: "number" }), base);
  assert.notEqual(print({ a: "number", b: "string?" }), base);
  assert.notEqual(print({ a: "int32", b: "string" }), base);
  assert.notEqual(print({ a: "number", c: "string" }), base);
});

test("a toJSON that encodes another message of the same class mid-measure does not swap their JSON fields", () => {
  const codec = compileCodec("Twin", { a: "json", b: "json" });
  const innerBytes: Buffer[] = [];
  // Field b's toJSON sends a message of the same class while the outer one is being measured (after field a).
  const reentrant = {
    toJSON() {
      const inner = { a: "inner-a", b: "inner-b" };
      const buf = Buffer.alloc(codec.measure(inner));
      innerBytes.push(buf.subarray(0, codec.write(buf, 0, inner)));
      return "outer-b";
    },
  };
  const outer = { a: "outer-a", b: reentrant };
  const buf = Buffer.alloc(codec.measure(outer));
  const end = codec.write(buf, 0, outer);
  assert.deepEqual({ ...codec.read(buf, 0, end, Object.prototype) }, { a: "outer-a", b: "outer-b" });
  assert.deepEqual(
    { ...codec.read(innerBytes[0]!, 0, innerBytes[0]!.length, Object.prototype) },
    {
      a: "inner-a",
      b: "inner-b",
    },
  );
});

test("a json field nested deeper than jsonNestingMax is undecodable, so every delivered instance can be sent on", () => {
  const codec = compileCodec("test.deep", { j: "json" });
  const bytesOf = (text: string): Buffer => {
    const buf = Buffer.alloc(4 + text.length);
    buf.writeUInt32LE((text.length | 0x80000000) >>> 0, 0);
    buf.write(text, 4, "latin1");
    return buf;
  };
  // The layout used above is the codec's own (ASCII flag, little-endian length).
  const probe = Buffer.alloc(16);
  codec.measure({ j: [1] });
  assert.deepEqual(probe.subarray(0, codec.write(probe, 0, { j: [1] })), bytesOf("[1]"));
  const read = (text: string) => {
    const bytes = bytesOf(text);
    return codec.read(bytes, 0, bytes.length, Object.prototype) as { j: unknown };
  };
  for (const deep of ["[".repeat(20_000) + "]".repeat(20_000), `${'{"a":'.repeat(20_000)}1${"}".repeat(20_000)}`]) {
    assert.throws(
      () => read(deep),
      (e: unknown) => e instanceof EnvelopeDecodeError && e.reason === "undecodable" && /nests deeper/.test(e.message),
    );
  }
  // At the limit it decodes and encodes again; brackets inside strings (escaped quotes too) are text, not nesting.
  const atLimit = read("[".repeat(jsonNestingMax) + "]".repeat(jsonNestingMax));
  codec.measure(atLimit);
  const inString = read(JSON.stringify([`\\"${"[".repeat(5_000)}`, "{".repeat(5_000)]));
  assert.equal((inString.j as string[])[1]!.length, 5_000);
  codec.measure(inString);
});

test("a string field read again gives the text of these bytes, whatever it held before (same length, other length, non-ASCII, long)", () => {
  const codec = compileCodec("Texts", { s: "string", t: "string?" });
  const sequence = ["User", "User", "Usar", "Use", "", "Users", "Zoë", "Zoe", "x".repeat(24), "x".repeat(23) + "y"];
  sequence.push("x".repeat(25), "x".repeat(24), "User");
  // Every short length, every ASCII byte (NUL and DEL too), each read twice (built, then found the same again).
  for (let n = 1; n <= 26; n++) {
    const text = Array.from({ length: n }, (_, j) => String.fromCharCode((n * 31 + j * 7) % 128)).join("");
    sequence.push(text, text);
  }
  for (const [i, s] of sequence.entries()) {
    const t = sequence[sequence.length - 1 - i]!;
    assert.deepEqual(roundTrip(codec, { s, t }), { s, t }, `message ${i}`);
  }
  // Two codecs of the same fields keep their own last texts.
  const other = compileCodec("Texts", { s: "string", t: "string?" });
  assert.deepEqual(roundTrip(other, { s: "abc", t: null }), { s: "abc", t: null });
  assert.deepEqual(roundTrip(codec, { s: "abd", t: "abc" }), { s: "abd", t: "abc" });
  fc.assert(
    fc.property(
      fc.array(fc.tuple(fc.string({ maxLength: 30 }), fc.string({ maxLength: 30 })), { maxLength: 20 }),
      (pairs) => {
        for (const [s, t] of pairs) assert.deepEqual(roundTrip(codec, { s, t }), { s, t });
      },
    ),
  );
});

test("a long text written again is the same bytes even when the buffer it was first written into was reused", () => {
  const codec = compileCodec("Keyed", { key: "string", n: "int32" });
  const key = `256|StableHashPartitioner|LeastLoadedAllocation|${"k".repeat(40)}`;
  const frame = Buffer.alloc(codec.measure({ key, n: 1 }) + 8);
  for (let n = 0; n < 4; n++) {
    frame.fill(n === 0 ? 0 : 0x5a + n);
    const end = codec.write(frame, 3, { key, n });
    assert.deepEqual(codec.read(Buffer.from(frame.subarray(3, end)), 0, end - 3, Object.prototype), { key, n });
  }
  // A new text of the same length replaces the kept bytes.
  const other = key.replace("Stable", "Sturdy");
  const end = codec.write(frame, 0, { key: other, n: 9 });
  assert.deepEqual(codec.read(frame, 0, end, Object.prototype), { key: other, n: 9 });
});
