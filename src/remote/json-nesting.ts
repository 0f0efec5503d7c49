/**
 * How deep a peer's JSON may nest. `JSON.parse` of a deeply nested text is slow (a 4 MiB frame of nested arrays
 * held this host's event loop for 650 ms, against 8 ms for a 4 MiB string), and `JSON.stringify` overflows the stack
 * a few thousand levels down, so a deeper value could be delivered but never sent on. Both checks below only count
 * brackets outside strings; a text shorter than twice the bound cannot nest that deep and is not scanned.
 */

/** Deepest nesting of arrays and objects a received JSON document (payload, control frame or `"json"` field) may have. */
export const jsonNestingMax = 1_000;

/**
 * Whether the JSON text `text` nests arrays and objects deeper than {@link jsonNestingMax} (a received `"json"` field,
 * already decoded: the rare long one is scanned as its UTF-8 bytes, one copy).
 */
export function nestsTooDeep(text: string): boolean {
  if (text.length <= 2 * jsonNestingMax) return false;
  const bytes = Buffer.from(text, "utf8");
  return bytesNestTooDeep(bytes, 0, bytes.length);
}

/**
 * Whether the UTF-8 JSON bytes `bytes[at, end)` nest deeper than {@link jsonNestingMax}, checked before they are
 * parsed (a byte scan: UTF-8 never puts an ASCII byte inside a multi-byte character). Texts shorter than twice the
 * bound return false at once, so ordinary messages pay one comparison.
 */
export function bytesNestTooDeep(bytes: Uint8Array, at: number, end: number): boolean {
  if (end - at <= 2 * jsonNestingMax) return false;
  let depth = 0;
  for (let i = at; i < end; i++) {
    const c = bytes[i]!;
    if (c === 0x22) {
      for (i++; i < end; i++) {
        const d = bytes[i]!;
        if (d === 0x5c) i++;
        else if (d === 0x22) break;
      }
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > jsonNestingMax) return true;
    } else if (c === 0x5d || c === 0x7d) {
      depth--;
    }
  }
  return false;
}
