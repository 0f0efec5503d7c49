import assert from "node:assert/strict";
import { test } from "node:test";
import {
  CorruptPersistentRecordError,
  InvalidPersistenceRequestError,
  JSON_MANIFEST,
  PersistenceCodec,
  UnknownManifestError,
} from "../../src/persistence/index.ts";

class Point {
  constructor(
    readonly x: number,
    readonly y: number,
  ) {}
  static fromJSON(json: unknown): Point {
    const j = json as { x: unknown; y: unknown };
    if (typeof j.x !== "number" || typeof j.y !== "number") throw new TypeError("x and y must be numbers");
    return new Point(j.x, j.y);
  }
}
class Plain {
  label = "";
}
class Unregistered {}

test("codec: class instances round-trip under their manifest; plain JSON under json", () => {
  const codec = new PersistenceCodec().register(Point).register(Plain, { manifest: "shop.Plain.v1" });
  const encoded = codec.encode(new Point(1, 2));
  assert.deepEqual(encoded, { manifest: "Point", payload: '{"x":1,"y":2}' });
  const decoded = codec.decode(encoded.manifest, encoded.payload, "p", 1);
  assert.ok(decoded instanceof Point);
  assert.equal((decoded as Point).y, 2);
  const plain = Object.assign(new Plain(), { label: "a" });
  const back = codec.decode("shop.Plain.v1", codec.encode(plain).payload, "p", 2);
  assert.ok(back instanceof Plain);
  assert.equal((back as Plain).label, "a");
  assert.equal(codec.encode({ a: [1] }).manifest, JSON_MANIFEST);
  assert.deepEqual(codec.copy({ a: [1] }), { a: [1] });
});

test("codec: registration conflicts, unregistered classes and bad rows are typed errors", () => {
  const codec = new PersistenceCodec().register(Point);
  codec.register(Point);
  assert.throws(() => codec.register(Plain, { manifest: "Point" }), InvalidPersistenceRequestError);
  assert.throws(() => codec.register(Plain, { manifest: JSON_MANIFEST }), InvalidPersistenceRequestError);
  assert.throws(() => codec.encode(new Unregistered()), UnknownManifestError);
  const corrupt = (manifest: string, payload: string) => (e: unknown) =>
    e instanceof CorruptPersistentRecordError && e.persistenceId === "pid" && e.sequenceNr === 9 && e.message.length > 0
      ? true
      : assert.fail(`${manifest} ${JSON.stringify(payload)}: ${String(e)}`);
  assert.throws(() => codec.decode("Point", "{", "pid", 9), corrupt("Point", "{"));
  assert.throws(() => codec.decode("Nope", "{}", "pid", 9), corrupt("Nope", "{}"));
  assert.throws(() => codec.decode("Point", '{"x":"a"}', "pid", 9), corrupt("Point", "x"));
});

test("codec: upcasters chain old manifests forward", () => {
  const codec = new PersistenceCodec()
    .register(Point)
    .registerUpcaster("Point.v0", (json) => ({ manifest: "Point.v1", json: { ...(json as object), y: 0 } }))
    .registerUpcaster("Point.v1", (json) => ({ manifest: "Point", json }));
  const p = codec.decode("Point.v0", '{"x":5}', "p", 1) as Point;
  assert.ok(p instanceof Point);
  assert.deepEqual([p.x, p.y], [5, 0]);
});
