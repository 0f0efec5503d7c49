import { classNameOf, isWellFormedText } from "../actor/untrusted.ts";
import { EnvelopeDecodeError, MessageEncodeError } from "./errors.ts";
import { jsonNestingMax, nestsTooDeep } from "./json-nesting.ts";
import { inlineTextMax, type NativeBuffer, shortAscii, shortTextMax } from "./short-text.ts";

/**
 * A field type of a binary payload codec:
 * - `"number"`: any JavaScript number as an IEEE-754 double (8 bytes; NaN, -0, ±Infinity and every integer up to 2^53
 *   survive exactly);
 * - `"int32"`: an integer from -2^31 to 2^31-1 (4 bytes);
 * - `"boolean"`: 1 byte;
 * - `"string"`: UTF-8 with a 4-byte length (well-formed UTF-16 only: a lone surrogate is refused at send; strings
 *   above 2^31-1 bytes do not fit);
 * - `"json"`: any JSON value (arrays, nested objects) as length-prefixed JSON text.
 *
 * A trailing `?` (`"string?"`) also accepts `null` and `undefined` (one presence byte), and decodes them as they were.
 */
export type FieldType = "number" | "int32" | "boolean" | "string" | "json";

/** A field's declared type, optionally nullable: `"number"` or `"number?"`. */
export type FieldSpec = FieldType | `${FieldType}?`;

/** The declared fields of a message class, in wire order: `{ seq: "number", payload: "string" }`. */
export type FieldList = Readonly<Record<string, FieldSpec>>;

/** A compiled binary codec for one registered class (see `RegisterOptions.fields`). */
export interface PayloadCodec {
  /** The fields in wire order, as declared. */
  readonly fields: readonly { readonly name: string; readonly type: FieldType; readonly optional: boolean }[];
  /**
   * FNV-1a hash of the declared field list: a sender puts it in the envelope header, and a receiver whose declaration
   * differs drops the envelope as undecodable instead of misreading it.
   */
  readonly fingerprint: number;
  /**
   * Checks the type of every declared field of `message` and returns an upper bound of its encoded bytes.
   * @throws MessageEncodeError for a value the declared type cannot carry
   */
  measure(message: object): number;
  /**
   * Writes `message` (checked by {@link measure} just before) at `at`; returns the end offset. A string that is not
   * well-formed UTF-16 (a lone surrogate) is refused here rather than in `measure`: only a string whose UTF-8 is longer
   * than itself can hold one, so the check costs nothing for ASCII. Bytes written before a refusal are garbage that
   * the caller must not commit.
   * @throws MessageEncodeError for a string with a lone surrogate
   */
  write(buf: Buffer, at: number, message: object): number;
  /**
   * Refuses a string field that is not well-formed UTF-16, as {@link write} would, without writing: the general send
   * path checks every message with it before it may drop one unwritten, so a bad value is refused whatever the
   * link's state; only the repeated-tell path, which always writes, leaves the check to {@link write}.
   * @throws MessageEncodeError for a string with a lone surrogate
   */
  checkText(message: object): void;
  /**
   * Reads the fields from `buf[at, end)` into a new object with prototype `proto` (every byte must be used).
   * @throws EnvelopeDecodeError (reason `undecodable`) for truncated, trailing or malformed bytes
   */
  read(buf: Buffer, at: number, end: number, proto: object): Record<string, unknown>;
}

const fieldTypes: ReadonlySet<string> = new Set(["number", "int32", "boolean", "string", "json"]);
/** Most fields one codec may declare (keeps a generated function small). */
export const codecFieldsMax = 256;

/**
 * Validates a field list; returns a description of the first problem or null.
 * Field names must be own data properties that JSON would also carry; `__proto__` is refused because assigning it on
 * decode would swap the instance's prototype.
 */
export function fieldListProblem(fields: unknown): string | null {
  if (fields === null || typeof fields !== "object" || Array.isArray(fields)) {
    return 'fields must be an object such as { seq: "number", text: "string" }';
  }
  const names = Object.keys(fields);
  if (names.length === 0) return "fields must declare at least one field";
  if (names.length > codecFieldsMax) return `fields may declare at most ${codecFieldsMax} fields`;
  for (const name of names) {
    if (name === "__proto__") return "a field may not be called __proto__";
    const spec = (fields as Record<string, unknown>)[name];
    const type = typeof spec === "string" && spec.endsWith("?") ? spec.slice(0, -1) : spec;
    if (typeof type !== "string" || !fieldTypes.has(type)) {
      return `field "${name}" has type ${JSON.stringify(spec)}; use number, int32, boolean, string or json (with ? for nullable)`;
    }
  }
  return null;
}

/**
 * Compiles a codec for `fields` (validated by {@link fieldListProblem}). Encoder and decoder are generated once per
 * class so each field access is a plain monomorphic property load; names are embedded as JSON string literals only.
 * `slot`, when given, names one more property that every object `read` builds (with `proto`) holds, null: a caller that
 * sets it after reading (the nesting codec's nested message) then stores into the object's own layout instead of
 * growing it by a property, which costs a property array per object read.
 */
export function compileCodec(
  typeName: string,
  fields: FieldList,
  proto: object = Object.prototype,
  slot: string | null = null,
): PayloadCodec {
  const list = Object.keys(fields).map((name) => {
    const spec = fields[name]!;
    const optional = spec.endsWith("?");
    return { name, type: (optional ? spec.slice(0, -1) : spec) as FieldType, optional };
  });
  const fingerprint = fnv1a(list.map((f) => `${f.name}:${f.type}${f.optional ? "?" : ""}`).join(","));
  const measureLines: string[] = ["let n = 0;", "let v;"];
  const writeLines: string[] = ["let o = at;", "let v;", "let k = 0;"];
  // Fields are read into locals f0, f1, …; the object is built at the end (see the Shape constructor below).
  const checkLines: string[] = ["let v;"];
  const readLines: string[] = [
    "let o = at;",
    "let n = 0;",
    "let k = 0;",
    "let v;",
    "let b;",
    ...list.map((_, i) => `let f${i};`),
  ];
  let jsonFields = 0;
  let textCaches = 0;
  // Bounds checks are inlined: `bad` is only reached on malformed input.
  const need = (bytes: number) => `if (o + ${bytes} > end) throw bad("truncated");`;
  // A string's length word has its top bit set when every byte is ASCII: Latin-1 decoding is then exact and cheaper.
  // A short ASCII string that equals the one this field held last (an envelope's kind, its entity type, a
  // message's enum-like text) is the same string again: its bytes are compared in place with the last one's (kept
  // beside it, `sb`: byte to byte is cheaper than byte to charCodeAt) instead of sliced out. Another short one is
  // built with String.fromCharCode (`shortAscii`): a slice is a native call, about twice the cost up to 24 bytes.
  // Longer ones are sliced: past about 24 bytes the compare and the build cost more than they save.
  const readText = (into: string, cached: number | null) => [
    need(4),
    "n = buf[o] | (buf[o + 1] << 8) | (buf[o + 2] << 16) | (buf[o + 3] << 24);",
    "o += 4;",
    "if (n < 0) {",
    "n &= 0x7fffffff;",
    'if (o + n > end) throw bad("truncated");',
    ...(cached === null
      ? [`${into} = buf.latin1Slice(o, o + n);`]
      : [
          `if (n <= ${cachedTextMax}) {`,
          `v = sc[${cached}];`,
          `b = sb[${cached}];`,
          "k = v.length === n ? 0 : -1;",
          "if (k === 0) while (k < n && buf[o + k] === b[k]) k++;",
          "if (k !== n) {",
          "v = shortAscii(buf, o, n);",
          `sc[${cached}] = v;`,
          "for (k = 0; k < n; k++) b[k] = buf[o + k];",
          "}",
          `${into} = v;`,
          `} else ${into} = buf.latin1Slice(o, o + n);`,
        ]),
    "} else {",
    'if (o + n > end) throw bad("truncated");',
    `${into} = n === 0 ? "" : buf.utf8Slice(o, o + n);`,
    "}",
    "o += n;",
  ];
  list.forEach((field, i) => {
    const key = JSON.stringify(field.name);
    const get = `v = m[${key}];`;
    const into = `f${i}`;
    const fail = (what: string) => `throw refuse(${i}, ${JSON.stringify(what)}, v);`;
    // measure: type check and byte bound
    measureLines.push(get);
    const measureValue: string[] = [];
    const writeValue: string[] = [];
    const readValue: string[] = [];
    switch (field.type) {
      case "number":
        measureValue.push(`if (typeof v !== "number") ${fail("a number")}`, "n += 8;");
        // The same scratch as reading below: Buffer#writeDoubleLE range-checks through calls that are not inlined.
        writeValue.push(
          "f64[0] = v;",
          littleEndian
            ? "buf[o] = b8[0]; buf[o + 1] = b8[1]; buf[o + 2] = b8[2]; buf[o + 3] = b8[3]; buf[o + 4] = b8[4]; buf[o + 5] = b8[5]; buf[o + 6] = b8[6]; buf[o + 7] = b8[7];"
            : "buf[o] = b8[7]; buf[o + 1] = b8[6]; buf[o + 2] = b8[5]; buf[o + 3] = b8[4]; buf[o + 4] = b8[3]; buf[o + 5] = b8[2]; buf[o + 6] = b8[1]; buf[o + 7] = b8[0];",
          "o += 8;",
        );
        // Through a shared 8-byte scratch aliased as a double: Buffer#readDoubleLE is not inlined and showed in
        // receiver profiles. The scratch has the platform's byte order, the wire little-endian.
        readValue.push(
          need(8),
          littleEndian
            ? "b8[0] = buf[o]; b8[1] = buf[o + 1]; b8[2] = buf[o + 2]; b8[3] = buf[o + 3]; b8[4] = buf[o + 4]; b8[5] = buf[o + 5]; b8[6] = buf[o + 6]; b8[7] = buf[o + 7];"
            : "b8[7] = buf[o]; b8[6] = buf[o + 1]; b8[5] = buf[o + 2]; b8[4] = buf[o + 3]; b8[3] = buf[o + 4]; b8[2] = buf[o + 5]; b8[1] = buf[o + 6]; b8[0] = buf[o + 7];",
          `${into} = f64[0];`,
          "o += 8;",
        );
        break;
      case "int32":
        // typeof first: `v | 0` runs a value's toString/valueOf (a received object whose toString is not a function
        // throws a TypeError, a 20,000-deep array a RangeError) where a MessageEncodeError is due.
        measureValue.push(
          `if (typeof v !== "number" || (v | 0) !== v || (v === 0 && 1 / v < 0)) ${fail("an int32")}`,
          "n += 4;",
        );
        // Plain byte stores and loads; `<< 24` on the top byte restores the sign.
        writeValue.push("buf[o] = v; buf[o + 1] = v >>> 8; buf[o + 2] = v >>> 16; buf[o + 3] = v >>> 24;", "o += 4;");
        readValue.push(
          need(4),
          `${into} = buf[o] | (buf[o + 1] << 8) | (buf[o + 2] << 16) | (buf[o + 3] << 24);`,
          "o += 4;",
        );
        break;
      case "boolean":
        measureValue.push(`if (typeof v !== "boolean") ${fail("a boolean")}`, "n += 1;");
        writeValue.push("buf[o++] = v ? 1 : 0;");
        readValue.push(
          need(1),
          "n = buf[o++];",
          `if (n > 1) throw bad(${JSON.stringify(`field "${field.name}" is not a boolean byte`)});`,
          `${into} = n === 1;`,
        );
        break;
      case "string":
        measureValue.push(`if (typeof v !== "string") ${fail("a string")}`, "n += 4 + 3 * v.length;");
        writeValue.push(
          "k = writeText(buf, o, v);",
          `if (k < 0) ${fail("well-formed UTF-16 (no lone surrogates)")}`,
          "o += k;",
        );
        readValue.push(...readText(into, textCaches++));
        checkLines.push(
          get,
          `if (typeof v === "string" && !v.isWellFormed()) ${fail("well-formed UTF-16 (no lone surrogates)")}`,
        );
        break;
      case "json":
        measureValue.push(
          `try { v = JSON.stringify(v); } catch (e) { throw refuse(${i}, "JSON-serialisable", m[${key}]); }`,
          `if (typeof v !== "string") { v = m[${key}]; ${fail("a JSON value")} }`,
          // Kept for write(), which runs right after measure() (and checkText(), which only reads string fields).
          // Held in a local until measure() ends: a toJSON that sends a message of this same class measures it
          // meanwhile, and must not overwrite this message's texts.
          `s${jsonFields} = v;`,
          "n += 4 + 3 * v.length;",
        );
        writeValue.push(`k = writeText(buf, o, j[${jsonFields}]);`, "o += k;");
        readValue.push(
          ...readText("v", null),
          `try { ${into} = JSON.parse(v); } catch { throw bad(${JSON.stringify(`field "${field.name}" is not valid JSON`)}); }`,
          // Parsed JSON always encodes again, except past the stack's depth: refused here, so a delivered instance can
          // be sent on. Only a text long enough to nest that deep is scanned (a length compare for the rest).
          `if (v.length > ${2 * jsonNestingMax} && nestsTooDeep(v)) throw bad(${JSON.stringify(`field "${field.name}" nests deeper than ${jsonNestingMax} levels`)});`,
        );
        jsonFields++;
        break;
    }
    if (field.optional) {
      measureLines.push("n += 1;", "if (v !== undefined && v !== null) {", ...measureValue, "}");
      writeLines.push(
        get,
        "if (v === undefined) buf[o++] = 0;",
        "else if (v === null) buf[o++] = 1;",
        "else {",
        "buf[o++] = 2;",
        ...writeValue,
        "}",
      );
      readLines.push(
        need(1),
        "n = buf[o++];",
        `if (n === 0) ${into} = undefined;`,
        `else if (n === 1) ${into} = null;`,
        "else if (n === 2) {",
        ...readValue,
        `} else throw bad(${JSON.stringify(`field "${field.name}" has presence byte `)} + n);`,
      );
    } else {
      measureLines.push(...measureValue);
      writeLines.push(get, ...writeValue);
      readLines.push(...readValue);
    }
  });
  if (jsonFields > 0) {
    measureLines.splice(2, 0, `let ${Array.from({ length: jsonFields }, (_, k) => `s${k}`).join(", ")};`);
    for (let k = 0; k < jsonFields; k++) measureLines.push(`j[${k}] = s${k};`);
  }
  measureLines.push("return n;");
  writeLines.push("return o;");
  const args = list.map((_, i) => `f${i}`).join(", ");
  readLines.push(
    'if (o !== end) throw bad("trailing bytes after the last field");',
    // `new Shape(…)` allocates the object at its final size with all fields in one go, several times cheaper than
    // Object.create plus one property transition per field; any other prototype (tests, plain objects) takes that way.
    `if (proto === Shape.prototype) return new Shape(${args});`,
    "const m = Object.create(proto);",
    ...list.map((field, i) => `m[${JSON.stringify(field.name)}] = f${i};`),
    "return m;",
  );
  const jsonScratch: string[] = new Array(jsonFields);
  // Per string field: the text it held last (see readText).
  const textCache: string[] = new Array<string>(textCaches).fill("");
  // Per string field: the bytes of that text (its first `length` bytes are the text's).
  const textBytes: Uint8Array[] = Array.from({ length: textCaches }, () => new Uint8Array(cachedTextMax));
  const refuse = (index: number, expected: string, value: unknown): MessageEncodeError =>
    new MessageEncodeError(typeName, list[index]!.name, expected, describe(value));
  const bad = (detail: string): EnvelopeDecodeError =>
    new EnvelopeDecodeError("undecodable", `binary payload of "${typeName}": ${detail}`, typeName);
  const factory = new Function(
    "refuse",
    "bad",
    "nestsTooDeep",
    "writeText",
    "j",
    "proto",
    "b8",
    "f64",
    "sc",
    "sb",
    "shortAscii",
    `"use strict";
function Shape(${args}) { ${list.map((field, i) => `this[${JSON.stringify(field.name)}] = f${i};`).join(" ")} ${slot === null ? "" : `this[${JSON.stringify(slot)}] = null;`} }
Shape.prototype = proto;
return {
  measure(m) { ${measureLines.join("\n")} },
  write(buf, at, m) { ${writeLines.join("\n")} },
  checkText(m) { ${checkLines.join("\n")} },
  read(buf, at, end, proto) { ${readLines.join("\n")} },
};`,
  ) as (...args: unknown[]) => Pick<PayloadCodec, "measure" | "write" | "checkText" | "read">;
  const compiled = factory(
    refuse,
    bad,
    nestsTooDeep,
    writeText,
    jsonScratch,
    proto,
    doubleBytes,
    doubleView,
    textCache,
    textBytes,
    shortAscii,
  );
  return {
    fields: list,
    fingerprint,
    measure: compiled.measure,
    write: compiled.write,
    checkText: compiled.checkText,
    read: compiled.read,
  };
}

/**
 * Writes `text` as `[u32 LE byte length][UTF-8]`, the length's top bit set when all bytes are ASCII; returns the bytes
 * written, or -1 for a string with a lone surrogate (which UTF-8 cannot carry: the encoder would substitute U+FFFD).
 * Short ASCII is copied inline: below about 16 characters that beats the native call, above it the native encoder
 * wins. UTF-8 of a string is as long as the string exactly when every character is ASCII.
 */
function writeText(buf: Buffer, at: number, text: string): number {
  const length = text.length;
  if (length <= inlineTextMax) {
    let o = at + 4;
    let i = 0;
    for (; i < length; i++) {
      const c = text.charCodeAt(i);
      if (c >= 0x80) break;
      buf[o++] = c;
    }
    if (i === length) {
      writeLength(buf, at, length | asciiFlag);
      return 4 + length;
    }
  }
  const bytes = length === 0 ? 0 : (buf as NativeBuffer).utf8Write(text, at + 4);
  if (bytes === length) {
    writeLength(buf, at, bytes | asciiFlag);
    return 4 + bytes;
  }
  if (!isWellFormedText(text)) return -1;
  writeLength(buf, at, bytes);
  return 4 + bytes;
}

/** Stores a 32-bit length word little-endian (plain byte stores: Buffer#writeUInt32LE range-checks in JS first). */
function writeLength(buf: Buffer, at: number, word: number): void {
  buf[at] = word;
  buf[at + 1] = word >>> 8;
  buf[at + 2] = word >>> 16;
  buf[at + 3] = word >>> 24;
}

/**
 * Scratch for encoding and decoding doubles: the same 8 bytes seen as bytes and as a float64 (JavaScript is
 * single-threaded).
 */
const doubleView = new Float64Array(1);
const doubleBytes = new Uint8Array(doubleView.buffer);
/** Longest ASCII string a field's read compares with its last text instead of slicing (see compileCodec's readText). */
const cachedTextMax = shortTextMax;
const littleEndian = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** Top bit of a string's length word: every byte is ASCII. */
const asciiFlag = 0x80000000 | 0;

/** What a refused value was, for MessageEncodeError; never runs the value's own code (it may have come from a peer). */
function describe(value: unknown): string {
  if (value === null) return "null";
  if (typeof value === "string") return value.length > 40 ? `a string of ${value.length} characters` : `a string`;
  if (typeof value === "number") return `the number ${value}`;
  if (typeof value === "object") return classNameOf(value) ?? "an object";
  return typeof value;
}

/** 32-bit FNV-1a of a string's UTF-16 code units. */
export function fnv1a(text: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    hash ^= text.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193);
  }
  return hash >>> 0;
}
