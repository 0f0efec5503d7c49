/**
 * The fuzzer's own seeded random numbers (sfc32 seeded through splitmix32), so one printed seed replays a run exactly
 * whatever Node's Math.random does.
 */
export class Prng {
  private a: number;
  private b: number;
  private c: number;
  private d: number;

  constructor(readonly seed: number) {
    let s = seed >>> 0;
    const next = (): number => {
      s = (s + 0x9e3779b9) | 0;
      let z = s;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return (z ^ (z >>> 16)) >>> 0;
    };
    this.a = next();
    this.b = next();
    this.c = next();
    this.d = next();
    for (let i = 0; i < 12; i++) this.u32();
  }

  /** A uniform 32-bit unsigned integer. */
  u32(): number {
    const t = (((this.a + this.b) | 0) + this.d) | 0;
    this.d = (this.d + 1) | 0;
    this.a = this.b ^ (this.b >>> 9);
    this.b = (this.c + (this.c << 3)) | 0;
    this.c = (this.c << 21) | (this.c >>> 11);
    this.c = (this.c + t) | 0;
    return t >>> 0;
  }

  /** A uniform integer in [0, n). */
  int(n: number): number {
    return n <= 1 ? 0 : Math.floor((this.u32() / 4294967296) * n);
  }

  /** True with probability `p`. */
  chance(p: number): boolean {
    return this.u32() / 4294967296 < p;
  }

  /** One element of `items`. */
  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)]!;
  }

  /** `n` random bytes. */
  bytes(n: number): Buffer {
    const out = Buffer.allocUnsafe(n);
    for (let i = 0; i < n; i++) out[i] = this.u32() & 0xff;
    return out;
  }

  /** A new generator whose seed is derived from this one (for an independent stream). */
  fork(): Prng {
    return new Prng(this.u32());
  }
}

/** The seed for today's date (UTC), so a daily run explores new inputs while staying reproducible from its print. */
export function seedOfDate(date: Date): number {
  return Number(date.toISOString().slice(0, 10).replaceAll("-", "")) >>> 0;
}
