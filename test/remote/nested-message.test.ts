// Remoting's nested-message API from movie/remote's public surface, with an envelope class of its own (sharding's
// envelope is covered by test/sharding/envelope-codec.test.ts): a forwarding node writes the nested bytes on without
// decoding them, and the node that delivers decodes them once.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  decodeNested,
  EncodedMessage,
  EnvelopeDecodeError,
  encodeNested,
  MessageRegistry,
  type NestedMessage,
  registerNesting,
} from "../../src/remote/index.ts";

class Deposit {
  constructor(
    readonly amount: number,
    readonly note: string,
  ) {}
}

/** An envelope that routes one registered message: validates its own fields, keeps the nested one as it came. */
class Routed {
  constructor(
    readonly route: string,
    readonly inner: NestedMessage | null,
  ) {}

  static fromJSON(json: unknown): Routed {
    const o = json as { route?: unknown; inner?: unknown };
    if (typeof o.route !== "string" || o.route.length === 0) throw new Error("route must be a non-empty string");
    return new Routed(o.route, (o.inner ?? null) as NestedMessage | null);
  }
}

function setup() {
  const registry = new MessageRegistry(null);
  registry.register(Deposit, { name: "bank.deposit", fields: { amount: "number", note: "string" } });
  registerNesting(registry, Routed, "test.routed", { fields: { route: "string" }, nestedField: "inner" });
  return { registry, codec: registry.lookupName("test.routed")!.codec! };
}

function write(codec: ReturnType<typeof setup>["codec"], value: Routed): Buffer {
  const buf = Buffer.alloc(codec.measure(value));
  return buf.subarray(0, codec.write(buf, 0, value));
}

test("a nested message stays encoded across a hop, is written on as the same bytes, and decodes once", () => {
  const { registry, codec } = setup();
  const sent = new Routed("a/b", encodeNested(registry, new Deposit(12.5, "rent")));
  assert.equal(sent.inner?.type, "bank.deposit");
  const bytes = write(codec, sent);
  const hop = codec.read(bytes, 0, bytes.length, Object.prototype) as unknown;
  assert.ok(hop instanceof Routed);
  assert.equal(hop.route, "a/b");
  assert.ok(hop.inner?.payload instanceof EncodedMessage, "not decoded on the way");
  assert.deepEqual(write(codec, hop), bytes, "forwarded as it came");
  const delivered = decodeNested(registry, hop.inner);
  assert.ok(delivered instanceof Deposit);
  assert.deepEqual(delivered, new Deposit(12.5, "rent"));
});

test("an envelope without a nested message round-trips; registering the same layout again is idempotent", () => {
  const { registry, codec } = setup();
  const bytes = write(codec, new Routed("only", null));
  const back = codec.read(bytes, 0, bytes.length, Object.prototype) as unknown as Routed;
  assert.equal(back.inner, null);
  const again = registerNesting(registry, Routed, "test.routed", { fields: { route: "string" }, nestedField: "inner" });
  assert.equal(again.codec?.fingerprint, codec.fingerprint);
});

test("malformed bytes and an invalid envelope are undecodable, naming the envelope's wire name", () => {
  const { registry, codec } = setup();
  const bytes = write(codec, new Routed("a", encodeNested(registry, new Deposit(1, "x"))));
  const undecodable = (e: unknown) =>
    e instanceof EnvelopeDecodeError && e.reason === "undecodable" && e.typeName === "test.routed";
  assert.throws(() => codec.read(bytes, 0, 3, Object.prototype), undecodable);
  assert.throws(() => codec.read(bytes, 0, bytes.length - 1, Object.prototype));
  const empty = write(codec, new Routed("", null));
  assert.throws(() => codec.read(empty, 0, empty.length, Object.prototype), undecodable);
  const stranger = new MessageRegistry(null);
  const hop = codec.read(bytes, 0, bytes.length, Object.prototype) as unknown as Routed;
  assert.throws(
    () => decodeNested(stranger, hop.inner!),
    (e: unknown) => e instanceof EnvelopeDecodeError && e.reason === "unknownType",
  );
});
