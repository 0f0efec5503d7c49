// Remoting's nested-message API from movie/remote's public surface, with an envelope class of its own (sharding's
// envelope is covered by test/sharding/envelope-codec.test.ts): a forwarding node writes the nested bytes on without
// decoding them, and the node that delivers decodes them once. Hostile nested bytes are refused with a typed error
// (EnvelopeDecodeError) naming the envelope, and over TCP counted in `rejected.undecodable` with the connection kept.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { PayloadFormat } from "../../src/remote/envelope.ts";
import {
  decodeNested,
  EncodedMessage,
  EnvelopeDecodeError,
  encodeNested,
  type InboundRejection,
  MessageRegistry,
  type NestedMessage,
  registerNesting,
} from "../../src/remote/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { definingFrame } from "./fixtures/frames.ts";
import { Collector, type Node, startNode } from "./fixtures/nodes.ts";
import { rawPeer } from "./fixtures/raw-peer.ts";

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
    // A validator that throws what it was given (here a value whose toString is not a function, as a peer's
    // JSON can hold): the codec must describe it, not convert it.
    if (o.route === "rethrow") throw JSON.parse('{"toString":1,"valueOf":1}');
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

/** The bytes of an envelope whose nested part is `nested` (written by hand) and whose own fields are `route`. */
function handBuilt(codec: ReturnType<typeof setup>["codec"], nested: Buffer, route = "r"): Buffer {
  const fields = write(codec, new Routed(route, null)).subarray(4);
  const length = Buffer.alloc(4);
  length.writeUInt32BE(nested.length);
  return Buffer.concat([length, nested, fields]);
}

/** A nested part: `[u16 m][name][u8 format][u32 fingerprint when binary][payload]`, each piece overridable. */
function nestedPart(options: { name?: string; nameLength?: number; format?: number; tail?: Buffer }): Buffer {
  const name = Buffer.from(options.name ?? "bank.deposit");
  const head = Buffer.alloc(2);
  head.writeUInt16BE(options.nameLength ?? name.length);
  return Buffer.concat([
    head,
    name,
    Buffer.from([options.format ?? PayloadFormat.json]),
    options.tail ?? Buffer.alloc(0),
  ]);
}

/** Hostile envelope bytes, each refused by the nesting codec itself (before anything is delivered). */
function hostileEnvelopes(codec: ReturnType<typeof setup>["codec"]): [string, Buffer][] {
  const good = handBuilt(codec, nestedPart({ tail: Buffer.from('{"amount":1,"note":"x"}') }));
  const pastFrame = Buffer.from(good);
  pastFrame.writeUInt32BE(good.length, 0);
  return [
    ["fewer than 4 bytes", good.subarray(0, 3)],
    ["a nested length past the frame", pastFrame],
    ["a nested part cut inside its name length", handBuilt(codec, Buffer.from([0]))],
    ["a name length past the nested part", handBuilt(codec, nestedPart({ nameLength: 400 }))],
    ["an empty name", handBuilt(codec, nestedPart({ name: "" }))],
    ["a name longer than 1,024 characters", handBuilt(codec, nestedPart({ name: "n".repeat(1_025) }))],
    ["an unknown payload format", handBuilt(codec, nestedPart({ format: 7 }))],
    [
      "a binary payload cut inside its fingerprint",
      handBuilt(codec, nestedPart({ format: PayloadFormat.binary, tail: Buffer.from([1, 2]) })),
    ],
    ["envelope fields cut short", good.subarray(0, good.length - 1)],
    ["an envelope its class refuses", handBuilt(codec, Buffer.alloc(0), "")],
    ["an envelope whose validator throws a hostile value", handBuilt(codec, Buffer.alloc(0), "rethrow")],
  ];
}

test("every malformed nested part is refused with EnvelopeDecodeError (undecodable) naming the envelope", () => {
  const { codec } = setup();
  const sane = handBuilt(codec, nestedPart({ tail: Buffer.from('{"amount":1,"note":"x"}') }));
  assert.ok(codec.read(sane, 0, sane.length, Object.prototype) instanceof Routed, "the hand-built layout is right");
  for (const [what, bytes] of hostileEnvelopes(codec)) {
    assert.throws(
      () => codec.read(bytes, 0, bytes.length, Object.prototype),
      (e: unknown) => {
        assert.ok(e instanceof EnvelopeDecodeError, `${what}: got ${String(e)}`);
        assert.equal(e.reason, "undecodable", what);
        assert.equal(e.typeName, "test.routed", what);
        return true;
      },
      what,
    );
  }
});

test("a nested payload that does not decode is refused by decodeNested with a typed reason, never delivered", () => {
  const { registry, codec } = setup();
  const binary = write(codec, new Routed("a", encodeNested(registry, new Deposit(5, "ok"))));
  const hop = (bytes: Buffer) => (codec.read(bytes, 0, bytes.length, Object.prototype) as unknown as Routed).inner!;
  const payload = (hop(binary).payload as EncodedMessage).bytes;
  const fingerprint = registry.lookupName("bank.deposit")!.codec!.fingerprint;
  const binaryTail = (fp: number, body: Buffer) => {
    const head = Buffer.alloc(4);
    head.writeUInt32BE(fp);
    return Buffer.concat([head, body]);
  };
  const cases: [string, NestedMessage, EnvelopeDecodeError["reason"]][] = [
    [
      "a type nobody registered",
      hop(handBuilt(codec, nestedPart({ name: "no.such.type", tail: Buffer.from("{}") }))),
      "unknownType",
    ],
    [
      "binary fields declared otherwise by the sender",
      hop(
        handBuilt(
          codec,
          nestedPart({ format: PayloadFormat.binary, tail: binaryTail((fingerprint ^ 1) >>> 0, payload) }),
        ),
      ),
      "undecodable",
    ],
    [
      "binary fields cut short",
      hop(
        handBuilt(
          codec,
          nestedPart({ format: PayloadFormat.binary, tail: binaryTail(fingerprint, payload.subarray(0, 3)) }),
        ),
      ),
      "undecodable",
    ],
    ["JSON that does not parse", hop(handBuilt(codec, nestedPart({ tail: Buffer.from('{"amount":') }))), "undecodable"],
    [
      "JSON that does not fit the declared fields",
      hop(handBuilt(codec, nestedPart({ tail: Buffer.from('{"amount":"many","note":{"toString":1}}') }))),
      "undecodable",
    ],
  ];
  for (const [what, nested, reason] of cases) {
    assert.ok(nested.payload instanceof EncodedMessage, `${what}: the envelope itself decodes`);
    assert.throws(
      () => decodeNested(registry, nested),
      (e: unknown) => e instanceof EnvelopeDecodeError && e.reason === reason,
      what,
    );
  }
});

const nodes: Node[] = [];
after(async () => {
  await Promise.all(nodes.map((n) => n.system.terminate()));
});

test("over TCP, malformed nested parts are dropped and counted as undecodable; the connection stays up", async () => {
  const { registry, codec } = setup();
  const node = await startNode("nested-b", { registry });
  nodes.push(node);
  const received: unknown[] = [];
  node.system.spawn(new Collector(received), "inbox");
  const rejections: InboundRejection[] = [];
  node.remoting.onInboundRejected((r) => rejections.push(r));
  const raw = await rawPeer(node, { handshake: true, port: 21 });
  const before = node.remoting.stats.rejected;
  const frame = (payload: Buffer) =>
    definingFrame(0, { recipient: "/user/inbox", typeName: "test.routed", fingerprint: codec.fingerprint }, payload);
  const hostile = hostileEnvelopes(codec);
  for (const [, bytes] of hostile) raw.socket.write(frame(bytes));
  // A marker after them: an envelope the node delivers, whose nested message decodes once where it arrives.
  raw.socket.write(frame(write(codec, new Routed("marker", encodeNested(registry, new Deposit(7, "after"))))));
  await eventually(() => received.length === 1, {
    what: "the marker envelope",
    describe: () => ({ received, rejected: node.remoting.stats.rejected }),
  });
  const after = node.remoting.stats.rejected;
  assert.equal(after.undecodable - before.undecodable, hostile.length, "each hostile envelope counted");
  assert.equal(after.internal, before.internal, "no unexpected error on the receive path");
  assert.equal(rejections.length, hostile.length);
  assert.ok(rejections.every((r) => r.reason === "undecodable" && r.typeName === "test.routed"));
  assert.equal(raw.isClosed(), false, "the connection stays up");
  const marker = received[0];
  assert.ok(marker instanceof Routed && marker.route === "marker");
  assert.ok(marker.inner?.payload instanceof EncodedMessage, "delivered still encoded: the receiver decodes it");
  assert.deepEqual(decodeNested(registry, marker.inner), new Deposit(7, "after"));
  raw.socket.destroy();
});
