import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { Fnv1a64 } from "../../src/sharding/hash/fnv1a64.ts";
import { ClusterShardingConfigurationError, StableHashPartitioner } from "../../src/sharding/index.ts";

// Independent BigInt FNV-1a 64 over TextEncoder bytes: the halves implementation must agree with it.
function reference(type: string, id: string, shards: number): number {
  let h = 14695981039346656037n;
  const bytes = [...new TextEncoder().encode(type), 0, ...new TextEncoder().encode(id)];
  for (const b of bytes) h = ((h ^ BigInt(b)) * 1099511628211n) & 0xffff_ffff_ffff_ffffn;
  return Number(h % BigInt(shards));
}

const vectors: [string, string, number, number][] = [
  ["Order", "order-42", 256, 68], // the published vector (seed, docs/protocol.md §5.2)
  ["Order", "order-1", 256, 29],
  ["Order", "", 256, 213],
  ["", "", 1024, 991],
  ["Cart", "cart-7", 64, 43],
  ["Ünïcødé", "名前-😀", 1000, 909],
  ["Order", "order-42", 2147483647, 956590019],
  ["a", "b", 1, 0],
  ["movie.singleton.x", "singleton", 7, 1],
  ["User", "u\u0000", 128, 27],
];

test("StableHashPartitioner matches the vector table", () => {
  const p = new StableHashPartitioner();
  for (const [type, id, shards, expected] of vectors) {
    assert.equal(p.shardFor(type, id, shards), expected, `${type}/${id} mod ${shards}`);
  }
});

test("StableHashPartitioner agrees with a BigInt FNV-1a 64 on arbitrary strings and shard counts", () => {
  const p = new StableHashPartitioner();
  fc.assert(
    fc.property(
      fc.string({ unit: "grapheme" }),
      fc.string({ unit: "binary" }),
      fc.integer({ min: 1, max: 0x7fffffff }),
      (t, id, n) => {
        const shard = p.shardFor(t, id, n);
        assert.equal(shard, reference(t, id, n));
        assert.ok(shard >= 0 && shard < n);
      },
    ),
    { numRuns: 500 },
  );
});

test("Fnv1a64's byte, bytes, u32le and utf8 each agree with a BigInt FNV-1a 64, in any mix (the 64-bit hash)", () => {
  const bigint = (bytes: Iterable<number>) => {
    let h = 14695981039346656037n;
    for (const b of bytes) h = ((h ^ BigInt(b)) * 1099511628211n) & 0xffff_ffff_ffff_ffffn;
    return h;
  };
  const part = fc.oneof(
    fc.integer({ min: 0, max: 255 }).map((b) => ({ kind: "byte" as const, b })),
    fc.uint8Array({ maxLength: 40 }).map((bytes) => ({ kind: "bytes" as const, bytes })),
    fc.integer({ min: 0, max: 0xffffffff }).map((u) => ({ kind: "u32le" as const, u })),
    fc.string({ unit: "binary", maxLength: 20 }).map((text) => ({ kind: "utf8" as const, text })),
  );
  fc.assert(
    fc.property(fc.array(part, { maxLength: 6 }), (parts) => {
      const h = new Fnv1a64();
      const all: number[] = [];
      for (const p of parts) {
        if (p.kind === "byte") {
          h.byte(p.b);
          all.push(p.b);
        } else if (p.kind === "bytes") {
          h.bytes(p.bytes);
          all.push(...p.bytes);
        } else if (p.kind === "u32le") {
          h.u32le(p.u);
          all.push(p.u & 0xff, (p.u >>> 8) & 0xff, (p.u >>> 16) & 0xff, p.u >>> 24);
        } else {
          h.utf8(p.text);
          all.push(...new TextEncoder().encode(p.text));
        }
      }
      assert.equal(h.toBigInt(), bigint(all));
      assert.ok(h.hi >= 0 && h.hi <= 0xffffffff && h.lo >= 0 && h.lo <= 0xffffffff, "unsigned halves");
    }),
    { numRuns: 1_000 },
  );
});

test("Fnv1a64.mod is the 64-bit hash's remainder on both of its paths (shard counts up to 2^15, and above)", () => {
  // Up to 2^15 the remainder is taken limb by limb in int32 arithmetic, above it in doubles: each must be exact for
  // every 64-bit value, the halves' extremes included (a uint32 half above 2^31 is where an int32 shortcut breaks).
  const half = fc.oneof(fc.constantFrom(0, 1, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff), fc.nat({ max: 0xffff_ffff }));
  const divisor = fc.oneof(
    fc.constantFrom(1, 2, 255, 256, 1000, 0x7fff, 0x8000, 0x8001, 0x8002, 0x7fff_ffff),
    fc.integer({ min: 1, max: 0x8000 }),
    fc.integer({ min: 0x8001, max: 0x7fff_ffff }),
  );
  fc.assert(
    fc.property(half, half, divisor, (hi, lo, d) => {
      const h = new Fnv1a64();
      h.hi = hi;
      h.lo = lo;
      assert.equal(h.mod(d), Number(((BigInt(hi) << 32n) | BigInt(lo)) % BigInt(d)), `${hi}:${lo} mod ${d}`);
    }),
    { numRuns: 5_000 },
  );
});

test("the separator byte keeps type and id apart", () => {
  const h1 = new Fnv1a64().utf8("ab").byte(0).utf8("c").toBigInt();
  const h2 = new Fnv1a64().utf8("a").byte(0).utf8("bc").toBigInt();
  assert.notEqual(h1, h2);
});

test("StableHashPartitioner rejects a non-positive shard count", () => {
  const p = new StableHashPartitioner();
  for (const n of [0, -1, 1.5, Number.NaN]) {
    assert.throws(
      () => p.shardFor("Order", "x", n),
      (e: unknown) => {
        assert.ok(e instanceof ClusterShardingConfigurationError);
        assert.match(e.message, /^shard count must be positive/);
        assert.equal(e.field, "shardCount");
        return true;
      },
    );
  }
});
