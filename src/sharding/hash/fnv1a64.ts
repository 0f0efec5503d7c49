/**
 * 64-bit FNV-1a kept as two unsigned 32-bit halves. A BigInt version is simpler but allocates a BigInt per byte;
 * bench/sharding.ts measures both ("partitioner" rows). The mixing loops work on four 16-bit limbs: with
 * prime = 2^40 + 0x1b3, h * prime = h * 0x1b3 + (h << 40) (mod 2^64), and each limb's product and carry stays a
 * small integer, so the loop runs on int32 arithmetic alone (2-3x faster than splitting a 32-bit half's product with a
 * floating-point division, which every routed message paid for its shard).
 */

const offsetHi = 0xcbf29ce4;
const offsetLo = 0x84222325;
const primeLow = 0x1b3;

/** A streaming FNV-1a 64 hasher (offset basis 14695981039346656037, prime 1099511628211); reusable via `reset`. */
export class Fnv1a64 {
  /** High 32 bits of the current hash, unsigned. */
  hi = offsetHi;
  /** Low 32 bits of the current hash, unsigned. */
  lo = offsetLo;

  /** Restarts from the offset basis. */
  reset(): this {
    this.hi = offsetHi;
    this.lo = offsetLo;
    return this;
  }

  /** Mixes one byte (0..255). */
  byte(value: number): this {
    let h0 = (this.lo & 0xffff) ^ value;
    let h1 = this.lo >>> 16;
    let h2 = this.hi & 0xffff;
    let h3 = this.hi >>> 16;
    const t0 = h0 * primeLow;
    const t1 = h1 * primeLow + (t0 >>> 16);
    const t2 = h2 * primeLow + (h0 << 8) + (t1 >>> 16);
    h3 = (h3 * primeLow + (h1 << 8) + (t2 >>> 16)) & 0xffff;
    h0 = t0 & 0xffff;
    h1 = t1 & 0xffff;
    h2 = t2 & 0xffff;
    this.lo = ((h1 << 16) | h0) >>> 0;
    this.hi = ((h3 << 16) | h2) >>> 0;
    return this;
  }

  /** Mixes every byte of `bytes` (the hot loop of rendezvous scoring: no calls, no allocation). */
  bytes(bytes: Uint8Array): this {
    let h0 = this.lo & 0xffff;
    let h1 = this.lo >>> 16;
    let h2 = this.hi & 0xffff;
    let h3 = this.hi >>> 16;
    for (let i = 0; i < bytes.length; i++) {
      h0 ^= bytes[i]!;
      const t0 = h0 * primeLow;
      const t1 = h1 * primeLow + (t0 >>> 16);
      const t2 = h2 * primeLow + (h0 << 8) + (t1 >>> 16);
      h3 = (h3 * primeLow + (h1 << 8) + (t2 >>> 16)) & 0xffff;
      h0 = t0 & 0xffff;
      h1 = t1 & 0xffff;
      h2 = t2 & 0xffff;
    }
    this.lo = ((h1 << 16) | h0) >>> 0;
    this.hi = ((h3 << 16) | h2) >>> 0;
    return this;
  }

  /** Mixes the UTF-8 bytes of `text` (a lone surrogate encodes as U+FFFD, as TextEncoder does). */
  utf8(text: string): this {
    let i = 0;
    // ASCII fast path with locals; the general path below handles the rest of the string.
    let h0 = this.lo & 0xffff;
    let h1 = this.lo >>> 16;
    let h2 = this.hi & 0xffff;
    let h3 = this.hi >>> 16;
    for (; i < text.length; i++) {
      const code = text.charCodeAt(i);
      if (code >= 0x80) break;
      h0 ^= code;
      const t0 = h0 * primeLow;
      const t1 = h1 * primeLow + (t0 >>> 16);
      const t2 = h2 * primeLow + (h0 << 8) + (t1 >>> 16);
      h3 = (h3 * primeLow + (h1 << 8) + (t2 >>> 16)) & 0xffff;
      h0 = t0 & 0xffff;
      h1 = t1 & 0xffff;
      h2 = t2 & 0xffff;
    }
    this.lo = ((h1 << 16) | h0) >>> 0;
    this.hi = ((h3 << 16) | h2) >>> 0;
    for (; i < text.length; i++) {
      let code = text.charCodeAt(i);
      if (code < 0x80) {
        this.byte(code);
        continue;
      }
      if (code < 0x800) {
        this.byte(0xc0 | (code >> 6)).byte(0x80 | (code & 0x3f));
        continue;
      }
      if (code >= 0xd800 && code <= 0xdfff) {
        const next = i + 1 < text.length ? text.charCodeAt(i + 1) : 0;
        if (code <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
          code = 0x10000 + ((code - 0xd800) << 10) + (next - 0xdc00);
          i++;
          this.byte(0xf0 | (code >> 18))
            .byte(0x80 | ((code >> 12) & 0x3f))
            .byte(0x80 | ((code >> 6) & 0x3f))
            .byte(0x80 | (code & 0x3f));
          continue;
        }
        code = 0xfffd;
      }
      this.byte(0xe0 | (code >> 12))
        .byte(0x80 | ((code >> 6) & 0x3f))
        .byte(0x80 | (code & 0x3f));
    }
    return this;
  }

  /** Mixes an unsigned 32-bit integer as 4 little-endian bytes. */
  u32le(value: number): this {
    const v = value >>> 0;
    return this.byte(v & 0xff)
      .byte((v >>> 8) & 0xff)
      .byte((v >>> 16) & 0xff)
      .byte(v >>> 24);
  }

  /** The hash modulo `divisor` (a positive integer below 2^31), as unsigned 64-bit arithmetic would give it. */
  mod(divisor: number): number {
    const hi = this.hi;
    const lo = this.lo;
    if (divisor <= 0x8000) {
      // Horner over the four 16-bit limbs: every remainder is below 2^15, so (r << 16) | limb stays a non-negative
      // int32 and each % is an integer division. A uint32 half above 2^31 is a double to V8, and a double's % is a
      // call into the C library: the general path below costs ~70 ns more per shard lookup (every routed message).
      let r = (hi >>> 16) % divisor;
      r = ((r << 16) | (hi & 0xffff)) % divisor;
      r = ((r << 16) | (lo >>> 16)) % divisor;
      return ((r << 16) | (lo & 0xffff)) % divisor;
    }
    // (hi * 2^32 + lo) mod d, splitting 2^32 into 2^16 * 2^16 so that every product stays below 2^53.
    let r = hi % divisor;
    r = (r * 0x10000) % divisor;
    r = (r * 0x10000) % divisor;
    return (r + (lo % divisor)) % divisor;
  }

  /** The hash as a BigInt (for tests and diagnostics). */
  toBigInt(): bigint {
    return (BigInt(this.hi) << 32n) | BigInt(this.lo);
  }

  /** Compares two hashes as unsigned 64-bit numbers: negative, zero or positive. */
  static compare(aHi: number, aLo: number, bHi: number, bLo: number): number {
    return aHi !== bHi ? aHi - bHi : aLo - bLo;
  }
}
