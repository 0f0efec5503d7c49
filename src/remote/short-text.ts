// Text to and from buffer bytes on the hot paths of the codecs: Node's own UTF-8 methods called without the
// argument handling of Buffer#toString and Buffer#write (per message in profiles), and short ASCII texts read without
// a native call at all.

/**
 * Node's own UTF-8 and Latin-1 methods on Buffer.prototype (what `toString` and `write` call after checking their
 * arguments); callers check bounds themselves.
 */
export interface NativeBuffer extends Buffer {
  utf8Slice(start: number, end: number): string;
  latin1Slice(start: number, end: number): string;
  utf8Write(text: string, offset: number): number;
}

/** Longest ASCII text {@link shortAscii} builds in JavaScript. */
export const shortTextMax = 24;

/** Texts up to this length the codecs write inline (below about 16 characters that beats the native call). */
export const inlineTextMax = 16;

/**
 * The string of the `n` (1 to {@link shortTextMax}) ASCII bytes at `buf[o]`, built by String.fromCharCode with one
 * argument per byte: for short texts about half the cost of `latin1Slice`, a native call. Generated once, one case
 * per length.
 */
export const shortAscii = new Function(
  "buf",
  "o",
  "n",
  `switch (n) {
${Array.from(
  { length: shortTextMax },
  (_, i) =>
    `case ${i + 1}: return String.fromCharCode(${Array.from({ length: i + 1 }, (_, j) => `buf[o + ${j}]`).join(", ")});`,
).join("\n")}
default: return buf.latin1Slice(o, o + n);
}`,
) as (buf: Buffer, o: number, n: number) => string;

/**
 * The text of the `n` UTF-8 bytes at `buf[o]` (the caller checked they lie inside `buf`), as `buf.toString("utf8",
 * o, o + n)` reads it (a byte sequence that does not decode reads as U+FFFD): a short all-ASCII text is built in
 * JavaScript, any other sliced natively.
 */
export function readUtf8(buf: Buffer, o: number, n: number): string {
  if (n <= shortTextMax) {
    if (n === 0) return "";
    let any = 0;
    for (let k = 0; k < n; k++) any |= buf[o + k]!;
    if (any < 0x80) return shortAscii(buf, o, n);
  }
  return (buf as NativeBuffer).utf8Slice(o, o + n);
}
