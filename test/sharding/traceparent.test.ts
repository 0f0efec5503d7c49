// The envelope's W3C traceparent (docs/protocol.md §7.2): the pure parser accepts exactly version 00 with non-zero
// ids in lowercase hex; on the wire a valid value round-trips through the binary envelope codec, and a hostile one
// (wrong type, wrong length, uppercase, zero ids, a megabyte) is dropped on decode and flagged for the counter while
// the rest of the envelope, the user message included, is kept.
import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { MessageRegistry } from "../../src/remote/index.ts";
import type { NestingCodec } from "../../src/remote/nested-message.ts";
import { formatTraceparent, parseTraceparent } from "../../src/sharding/index.ts";
import { RegistryCodec, registerShardingWireTypes } from "../../src/sharding/internal/codec.ts";
import { ShardingEnvelope } from "../../src/sharding/internal/index.ts";
import { wireNames } from "../../src/sharding/internal/messages.ts";
import { addr } from "./fixtures/members.ts";

const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

test("a version-00 traceparent parses into its ids and flags, and formats back to the same text", () => {
  const parsed = parseTraceparent(valid);
  assert.deepEqual(parsed, { traceId: "4bf92f3577b34da6a3ce929d0e0e4736", spanId: "00f067aa0ba902b7", traceFlags: 1 });
  assert.equal(formatTraceparent(parsed!), valid);
  assert.equal(formatTraceparent({ ...parsed!, traceFlags: 0 }), valid.replace(/01$/, "00"));
});

test("anything else is refused: other types, versions, cases, lengths, zero ids, separators", () => {
  const hostile: unknown[] = [
    undefined,
    null,
    42,
    { traceId: "x" },
    ["00"],
    "",
    valid.toUpperCase(),
    valid.replace(/^00/, "01"),
    valid.replace(/^00/, "ff"),
    `${valid}-extra`,
    valid.slice(0, -1),
    valid.replace(/-/g, "_"),
    `00-${"0".repeat(32)}-00f067aa0ba902b7-01`,
    `00-4bf92f3577b34da6a3ce929d0e0e4736-${"0".repeat(16)}-01`,
    valid.replace("4bf9", "4bg9"),
    `${valid.slice(0, 54)}\n`,
    "0".repeat(1_000_000),
  ];
  for (const value of hostile) assert.equal(parseTraceparent(value), null, `refused: ${String(value).slice(0, 60)}`);
  assert.equal(formatTraceparent({ traceId: "0".repeat(32), spanId: "1".repeat(16), traceFlags: 1 }), null);
  assert.equal(formatTraceparent({ traceId: "a".repeat(32), spanId: "1".repeat(16), traceFlags: 256 }), null);
});

test("property: every string the parser accepts formats back to itself; random strings are refused", () => {
  const hex = (n: number) => fc.stringMatching(new RegExp(`^[0-9a-f]{${n}}$`));
  fc.assert(
    fc.property(hex(32), hex(16), fc.integer({ min: 0, max: 255 }), (traceId, spanId, flags) => {
      const text = `00-${traceId}-${spanId}-${flags.toString(16).padStart(2, "0")}`;
      const parsed = parseTraceparent(text);
      if (/^0+$/.test(traceId) || /^0+$/.test(spanId)) return parsed === null;
      return parsed !== null && formatTraceparent(parsed) === text;
    }),
  );
  fc.assert(fc.property(fc.string({ maxLength: 80 }), (s) => s.length === 55 || parseTraceparent(s) === null));
});

/** The registered binary codec of the envelope (what remoting uses on TCP). */
function codec(): { codec: NestingCodec; wire: RegistryCodec } {
  const registry = new MessageRegistry(null);
  registerShardingWireTypes(registry);
  registry.register(
    class Ping {
      constructor(readonly n: number) {}
    },
    { name: "test.ping" },
  );
  return { codec: registry.lookupName(wireNames.envelope)!.codec as NestingCodec, wire: new RegistryCodec(registry) };
}

function roundTrip(c: NestingCodec, envelope: ShardingEnvelope): ShardingEnvelope {
  const buf = Buffer.alloc(c.measure(envelope) + 8);
  const end = c.write(buf, 0, envelope);
  const back = c.read(buf, 0, end, Object.prototype);
  assert.ok(back instanceof ShardingEnvelope);
  return back;
}

const withTrace = (traceparent: string | null) =>
  new ShardingEnvelope(
    "User",
    "Order",
    "o-1",
    3,
    "k",
    0,
    null,
    1000,
    false,
    { type: "test.ping", payload: { n: 1 } },
    0,
    traceparent,
  );

test("on the wire: a valid traceparent round-trips and survives the coordinator's forward; none stays none", () => {
  const { codec: c } = codec();
  const back = roundTrip(c, withTrace(valid));
  assert.equal(back.traceparent, valid);
  assert.equal(back.traceContextMalformed, false);
  assert.equal(roundTrip(c, back.forwarded(addr("c"), false)).traceparent, valid);
  const none = roundTrip(c, withTrace(null));
  assert.equal(none.traceparent, null);
  assert.equal(none.traceContextMalformed, false);
});

test("on the wire: a hostile traceparent is dropped and flagged, the envelope and its message kept", () => {
  const { codec: c } = codec();
  for (const bad of ["garbage", valid.toUpperCase(), `00-${"0".repeat(32)}-00f067aa0ba902b7-01`, "x".repeat(100_000)]) {
    const back = roundTrip(c, withTrace(bad));
    assert.equal(back.traceparent, null, `dropped: ${bad.slice(0, 40)}`);
    assert.equal(back.traceContextMalformed, true);
    assert.equal(back.entityId, "o-1");
    assert.equal(back.message?.type, "test.ping");
  }
  // A JSON envelope (the format's other path) with a non-string value: the same.
  const json = JSON.parse(JSON.stringify(withTrace(valid)));
  json.traceparent = { evil: true };
  const fromJson = ShardingEnvelope.fromJSON(json);
  assert.equal(fromJson.traceparent, null);
  assert.equal(fromJson.traceContextMalformed, true);
});
