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
