import assert from "node:assert/strict";
import { test } from "node:test";
import {
  EnvelopeDecodeError,
  MessageRegistrationError,
  MessageRegistry,
  type StandardSchemaV1,
  UnknownMessageTypeError,
} from "../../src/remote/index.ts";

class Plain {
  constructor(
    readonly a: number,
    readonly b: string,
  ) {}
  sum(): string {
    return `${this.a}${this.b}`;
  }
}
class Built {
  constructor(readonly items: string[]) {}
  static fromJSON(json: unknown): Built {
    const items = (json as { items?: unknown }).items;
    if (!Array.isArray(items)) throw new TypeError("items must be an array");
    return new Built(items.map(String));
  }
}
class Other {}

/** A hand-written Standard Schema: `{ n: number >= 0 }`. */
const nonNegative: StandardSchemaV1<{ n: number }> = {
  "~standard": {
    version: 1,
    vendor: "test",
    validate(value) {
      const n = (value as { n?: unknown } | null)?.n;
      return typeof n === "number" && n >= 0 ? { value: { n } } : { issues: [{ message: "n must be >= 0" }] };
    },
  },
};
class Counted {
  constructor(readonly n: number) {}
}

test("registering is idempotent for the same pair and refuses conflicts", () => {
  const registry = new MessageRegistry(null);
  const entry = registry.register(Plain);
  assert.equal(entry.name, "Plain");
  assert.equal(registry.register(Plain), entry);
  assert.throws(() => registry.register(Other, { name: "Plain" }), MessageRegistrationError);
  assert.throws(() => registry.register(Plain, { name: "plain.v2" }), MessageRegistrationError);
  assert.throws(() => registry.register(Other, { name: "" }), MessageRegistrationError);
  assert.throws(
    () => registry.register(Other, { schema: {} as unknown as StandardSchemaV1 }),
    MessageRegistrationError,
  );
});

test("decode rebuilds real instances by prototype or through fromJSON", () => {
  const registry = new MessageRegistry(null);
  registry.register(Plain, { name: "t.plain" });
  registry.register(Built, { name: "t.built" });
  const plain = registry.decode("t.plain", JSON.parse(JSON.stringify(new Plain(1, "x"))));
  assert.ok(plain instanceof Plain);
  assert.equal(plain.sum(), "1x");
  const built = registry.decode("t.built", { items: ["a", 2] });
  assert.ok(built instanceof Built);
  assert.deepEqual(built.items, ["a", "2"]);
  assert.throws(
    () => registry.decode("t.built", { items: 3 }),
    (e: unknown) => e instanceof EnvelopeDecodeError && e.reason === "undecodable",
  );
  assert.throws(
    () => registry.decode("t.plain", JSON.parse('{"__proto__": {"x": 1}}')),
    (e: unknown) => e instanceof EnvelopeDecodeError && e.reason === "undecodable",
  );
  assert.throws(() => registry.decode("t.plain", 5), EnvelopeDecodeError);
});

test("unknown types: UnknownMessageTypeError on encode, unknownType on decode", () => {
  const registry = new MessageRegistry(null);
  assert.throws(
    () => registry.registrationOf(new Other()),
    (e: unknown) => e instanceof UnknownMessageTypeError && e.typeName === "Other",
  );
  assert.throws(() => registry.registrationOf("text"), UnknownMessageTypeError);
  assert.throws(
    () => registry.decode("nope", {}),
    (e: unknown) => e instanceof EnvelopeDecodeError && e.reason === "unknownType",
  );
});

test("a schema validates inbound JSON before the instance is rebuilt", () => {
  const registry = new MessageRegistry(null);
  registry.register(Counted, { name: "t.counted", schema: nonNegative });
  const ok = registry.decode("t.counted", { n: 3 });
  assert.ok(ok instanceof Counted);
  assert.throws(
    () => registry.decode("t.counted", { n: -1 }),
    (e: unknown) =>
      e instanceof EnvelopeDecodeError && e.reason === "schemaInvalid" && /n must be >= 0/.test(e.message),
  );
});

test("a per-system registry sees the default one and keeps its own entries private", () => {
  class Shared {}
  class Mine {}
  MessageRegistry.register(Shared, { name: "t.registry.shared" });
  const mine = new MessageRegistry();
  mine.register(Mine, { name: "t.registry.mine" });
  assert.equal(mine.lookupName("t.registry.shared")?.type, Shared);
  assert.equal(MessageRegistry.default.lookupName("t.registry.mine"), undefined);
  assert.throws(() => mine.register(Mine, { name: "t.registry.shared" }), MessageRegistrationError);
});
