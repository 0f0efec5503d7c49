/**
 * The hostile values the fuzzer puts at every field: JSON texts (raw bytes, so they can hold what JSON.stringify never
 * writes: `1e309`, own `__proto__` keys, invalid UTF-8, 20,000-deep nesting) and raw header strings for the binary
 * envelope header. Each entry has a short name that appears in findings.
 */
import type { Prng } from "../fixtures/prng.ts";

/** One hostile value: its name (for reports) and its bytes. */
export interface Hostile {
  readonly name: string;
  readonly bytes: Buffer;
}

const deepDepth = 20_000;

function entry(name: string, text: string | Buffer): Hostile {
  return { name, bytes: typeof text === "string" ? Buffer.from(text, "utf8") : text };
}

/** `"` + raw bytes + `"`: a JSON string whose bytes may be invalid UTF-8. */
function rawString(name: string, inner: Buffer): Hostile {
  return entry(name, Buffer.concat([Buffer.from('"'), inner, Buffer.from('"')]));
}

/** Small hostile JSON values, cheap enough to use anywhere. */
export const smallJson: readonly Hostile[] = [
  entry("null", "null"),
  entry("true", "true"),
  entry("false", "false"),
  entry("zero", "0"),
  entry("negZero", "-0"),
  entry("one", "1"),
  entry("minusOne", "-1"),
  entry("fraction", "1.5"),
  entry("overflow1e309", "1e309"),
  entry("negOverflow", "-1e309"),
  entry("underflow", "1e-400"),
  entry("unsafeInt", "9007199254740993"),
  entry("u32max1", "4294967296"),
  entry("i32min1", "-2147483649"),
  entry("u16max1", "65536"),
  entry("emptyString", '""'),
  entry("x", '"x"'),
  entry("loneHigh", '"\\ud800"'),
  entry("loneLow", '"\\udfff"'),
  entry("swapped", '"\\udfff\\ud800"'),
  entry("nul", '"\\u0000"'),
  rawString("rawLoneSurrogate", Buffer.from([0xed, 0xa0, 0x80])),
  rawString("rawFF", Buffer.from([0xff, 0xfe])),
  rawString("overlongNul", Buffer.from([0xc0, 0x80])),
  entry("protoString", '"__proto__"'),
  entry("constructorString", '"constructor"'),
  entry("prototypeString", '"prototype"'),
  entry("toStringString", '"toString"'),
  entry("emptyArray", "[]"),
  entry("array", "[1,2]"),
  entry("arrayOfNull", "[null]"),
  entry("emptyObject", "{}"),
  entry("toStringNumber", '{"toString":1}'),
  entry("toStringNull", '{"toString":null}'),
  entry("valueOfNumber", '{"valueOf":1}'),
  entry("bothObjects", '{"toString":{},"valueOf":{}}'),
  entry("bothStrings", '{"toString":"x","valueOf":"y"}'),
  entry("toJSONObject", '{"toJSON":{},"toString":{}}'),
  entry("protoKey", '{"__proto__":{"polluted":1}}'),
  entry("protoNull", '{"__proto__":null}'),
  entry("constructorKey", '{"constructor":{"prototype":{"polluted":1}}}'),
  entry("prototypeKey", '{"prototype":{"polluted":1}}'),
  entry("thenKey", '{"then":1}'),
  entry("lengthKey", '{"length":-1}'),
  entry("hugeLength", '{"length":1e309}'),
  entry("arrayOfBad", '[{"toString":1},{"__proto__":{"polluted":1}}]'),
  entry("localAddress", '"movie://fuzz"'),
  entry("badAddress", '"movie.tcp://x@127.0.0.1:99999#u"'),
  entry("portOnlyAddress", '"movie.tcp://x@:1#u"'),
  entry("hashOnly", '"#"'),
  entry("longString", JSON.stringify("y".repeat(70_000))),
];

/** A JSON text nested `depth` deep: arrays `[[[…]]]` or objects `{"a":{"a":…}}`. */
export function deepJson(kind: "array" | "object", depth = deepDepth): Hostile {
  if (kind === "array") return entry(`deepArray${depth}`, "[".repeat(depth) + "]".repeat(depth));
  return entry(`deepObject${depth}`, '{"a":'.repeat(depth) + "null" + "}".repeat(depth));
}

/** Deep nesting, built once. */
export const deepValues: readonly Hostile[] = [
  deepJson("array"),
  deepJson("object"),
  entry("deepMixed", '[{"a":'.repeat(deepDepth / 2) + "1" + "}]".repeat(deepDepth / 2)),
];

/** A JSON string of `bytes` bytes (ASCII, or a 3-byte character repeated). */
export function hugeString(bytes: number, wide: boolean): Hostile {
  const inner = wide ? "€".repeat(Math.floor(bytes / 3)) : "A".repeat(bytes);
  return entry(`hugeString${wide ? "Wide" : ""}${bytes}`, JSON.stringify(inner));
}

/** A JSON array of `count` small numbers. */
export function hugeArray(count: number): Hostile {
  return entry(`hugeArray${count}`, `[${"0,".repeat(count - 1)}0]`);
}

/** Picks a hostile JSON value: mostly small ones, sometimes deep, rarely huge (`hugeBytes` is the biggest allowed). */
export function pickHostileJson(rng: Prng, hugeBytes: number, hugeChance: number): Hostile {
  const r = rng.u32() / 4294967296;
  if (r < hugeChance && hugeBytes > 0) {
    const size = Math.max(1024, Math.floor(hugeBytes * (0.25 + 0.75 * rng.int(1000) * 0.001)));
    const which = rng.int(3);
    if (which === 0) return hugeString(size, false);
    if (which === 1) return hugeString(size, true);
    return hugeArray(Math.floor(size / 2));
  }
  if (r < hugeChance + 0.05) return rng.pick(deepValues);
  return rng.pick(smallJson);
}

/** Hostile header strings (raw bytes) for the recipient, sender, sender uid and type name of a binary header. */
export const headerStrings: readonly Hostile[] = [
  entry("empty", ""),
  entry("slash", "/"),
  entry("doubleSlash", "//"),
  entry("noSlash", "user/sink"),
  entry("dotdot", "/user/../system/cluster"),
  entry("proto", "__proto__"),
  entry("protoPath", "/__proto__"),
  entry("constructorPath", "/constructor/prototype"),
  entry("tempEmpty", "/temp/"),
  entry("tempProto", "/temp/__proto__"),
  entry("systemCluster", "/system/cluster"),
  entry("systemSharding", "/system/sharding"),
  entry("userSink", "/user/sink"),
  entry("deepPath", `/${"a/".repeat(20_000)}a`),
  entry("rawSurrogate", Buffer.from([0x2f, 0xed, 0xa0, 0x80])),
  entry("rawFF", Buffer.from([0x2f, 0xff, 0xfe, 0xfd])),
  entry("nul", Buffer.from([0x2f, 0x00, 0x00])),
  entry("localSender", "movie://fuzz/user/sink"),
  entry("remoteSender", "movie.tcp://other@127.0.0.1:1/user/x"),
  entry("remoteTemp", "movie.tcp://other@127.0.0.1:1/temp/x"),
  entry("badPort", "movie.tcp://other@127.0.0.1:99999/user/x"),
  entry("hashSender", "movie.tcp://other@127.0.0.1:1/user/x#uid"),
  entry("long", "x".repeat(65_535)),
  entry("typeProto", "__proto__"),
  entry("typeConstructor", "constructor"),
  entry("typeToString", "toString"),
  entry("typeHasOwn", "hasOwnProperty"),
];
