import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import fc from "fast-check";
import { PayloadFormat } from "../../src/remote/envelope.ts";
import {
  EnvelopeDecodeError,
  MessageEncodeError,
  MessageRegistrationError,
  MessageRegistry,
} from "../../src/remote/index.ts";
import {
  DecodedMessage,
  decodeNested,
  EncodedMessage,
  type NestingCodec as ShardingEnvelopeCodec,
} from "../../src/remote/nested-message.ts";
import { ShardingSettings } from "../../src/sharding/index.ts";
import { RegistryCodec, registerShardingWireTypes } from "../../src/sharding/internal/codec.ts";
import { ShardingEnvelope } from "../../src/sharding/internal/index.ts";
import { DirectEnvelope, wireNames } from "../../src/sharding/internal/messages.ts";
import { addr } from "./fixtures/members.ts";

class Deposit {
  constructor(
    readonly amount: number,
    readonly note: string,
  ) {}
}
class Rename {
  constructor(readonly name: string) {}
}
class Other {
  constructor(readonly x: number) {}
}

const coordinator = addr("c").toString();
/** The key of direct-routing settings built in this process (so a direct envelope's digest of it resolves). */
const directKey = ShardingSettings.create({ routing: "direct" }).key;

/** A per-test registry: Deposit in binary, Rename as JSON, plus the sharding protocol. */
function setup(): { registry: MessageRegistry; codec: ShardingEnvelopeCodec; wire: RegistryCodec } {
  const registry = new MessageRegistry(null);
  registry.register(Deposit, { name: "bank.deposit", fields: { amount: "number", note: "string" } });
  registry.register(Rename, { name: "bank.rename" });
  registerShardingWireTypes(registry);
  const codec = registry.lookupName(wireNames.envelope)!.codec as ShardingEnvelopeCodec;
  return { registry, codec, wire: new RegistryCodec(registry) };
}

function envelope(message: ShardingEnvelope["message"], overrides: Partial<ShardingEnvelope> = {}): ShardingEnvelope {
  return Object.assign(
    new ShardingEnvelope("User", "Account", "acct-7", 12, "key", 1, coordinator, 2500, false, message, 2),
    overrides,
  );
}

/** Writes `value` at an odd offset of a larger buffer, checks the measured bound, and returns the written bytes. */
function encode(codec: ShardingEnvelopeCodec, value: ShardingEnvelope): Buffer {
  const bound = codec.measure(value);
  codec.checkText(value);
  const buf = Buffer.alloc(bound + 20, 0xee);
  const end = codec.write(buf, 7, value);
  assert.ok(end - 7 <= bound, `wrote ${end - 7} bytes, measured at most ${bound}`);
  return Buffer.from(buf.subarray(7, end));
}

function decode(codec: ShardingEnvelopeCodec, bytes: Buffer): ShardingEnvelope {
  const value = codec.read(bytes, 0, bytes.length, Object.prototype) as unknown;
  assert.ok(value instanceof ShardingEnvelope);
  return value;
}

test("a caller's envelope (hop 0) round-trips with its binary user message, which stays encoded until delivered", () => {
  const { codec, wire } = setup();
  const sent = envelope(wire.encode(new Deposit(12.5, "rent")), { hopCount: 0, coordinator: null });
  const back = decode(codec, encode(codec, sent));
  const { message, ...fields } = back;
  const { message: _, ...sentFields } = sent;
  assert.deepEqual(fields, sentFields);
  assert.equal(message?.type, "bank.deposit");
  assert.ok(message?.payload instanceof EncodedMessage);
  assert.equal(message.payload.format, PayloadFormat.binary);
  const delivered = wire.decode(message);
  assert.ok(delivered instanceof Deposit);
  assert.deepEqual(delivered, new Deposit(12.5, "rent"));
});

test("a message registered without fields travels as its JSON; control kinds carry none", () => {
  const { codec, wire } = setup();
  const back = decode(
    codec,
    encode(codec, envelope(wire.encode(new Rename("Zoë 🚀")), { hopCount: 0, coordinator: null })),
  );
  assert.ok(back.message?.payload instanceof EncodedMessage);
  assert.equal(back.message.payload.format, PayloadFormat.json);
  assert.deepEqual(wire.decode(back.message), new Rename("Zoë 🚀"));
  const control = decode(codec, encode(codec, envelope(null, { kind: "Activate", askTimeoutMs: null })));
  assert.equal(control.message, null);
  assert.equal(control.kind, "Activate");
  assert.equal(control.askTimeoutMs, null);
});

test("a forwarded envelope writes the message bytes it received, unchanged", () => {
  const { codec, wire } = setup();
  for (const message of [new Deposit(1, "a"), new Rename("b")]) {
    const first = encode(codec, envelope(wire.encode(message), { hopCount: 0, coordinator: null }));
    const received = decode(codec, first);
    const again = encode(codec, received);
    assert.deepEqual(again, first, "re-encoding a received envelope gives the same bytes");
    const forwarded = encode(codec, received.forwarded(addr("c"), false));
    const hop = decode(codec, forwarded);
    assert.equal(hop.hopCount, 1);
    assert.deepEqual(wire.decode(hop.message!), message);
  }
});

test("a hand-built payload that is not an instance of its class travels as JSON and is validated on delivery", () => {
  const { registry, codec, wire } = setup();
  const caller = { hopCount: 0, coordinator: null };
  const back = decode(
    codec,
    encode(codec, envelope({ type: "bank.deposit", payload: { amount: 3, note: "x" } }, caller)),
  );
  assert.equal((back.message!.payload as EncodedMessage).format, PayloadFormat.json);
  const value = wire.decode(back.message!);
  assert.ok(value instanceof Deposit, "rebuilt as the registered class");
  const unknown = decode(codec, encode(codec, envelope({ type: "no.such.type", payload: {} }, caller)));
  assert.throws(
    () => wire.decode(unknown.message!),
    (e: unknown) => e instanceof EnvelopeDecodeError && e.reason === "unknownType",
  );
  // The same name declared with other fields on the receiving node: refused, not misread.
  const stranger = new MessageRegistry(null);
  stranger.register(Deposit, { name: "bank.deposit", fields: { amount: "int32", note: "string" } });
  const binary = decode(codec, encode(codec, envelope(wire.encode(new Deposit(2, "y")), caller))).message!;
  assert.throws(
    () => decodeNested(stranger, binary),
    (e: unknown) => e instanceof EnvelopeDecodeError && e.reason === "undecodable" && /other fields/.test(e.message),
  );
  const notJson = new EncodedMessage(PayloadFormat.json, 0, Buffer.from("{nope"));
  assert.throws(
    () => decodeNested(registry, { type: "bank.rename", payload: notJson }),
    (e: unknown) => e instanceof EnvelopeDecodeError && e.reason === "undecodable" && /not JSON/.test(e.message),
  );
});

test("every truncation or corruption of an envelope is a typed undecodable error", () => {
  const { codec, wire } = setup();
  const bytes = encode(codec, envelope(wire.encode(new Deposit(7, "seven"))));
  for (let cut = 0; cut < bytes.length; cut++) {
    assert.throws(
      () => codec.read(bytes, 0, cut, Object.prototype),
      (e: unknown) => e instanceof EnvelopeDecodeError && e.reason === "undecodable",
      `cut at ${cut}`,
    );
  }
  const longer = Buffer.concat([bytes, Buffer.from([0])]);
  assert.throws(() => codec.read(longer, 0, longer.length, Object.prototype), EnvelopeDecodeError);
  const pastEnd = Buffer.from(bytes);
  pastEnd.writeUInt32BE(bytes.length, 0);
  assert.throws(() => codec.read(pastEnd, 0, pastEnd.length, Object.prototype), /runs past the frame/);
  const badFormat = Buffer.from(bytes);
  badFormat[4 + 2 + "bank.deposit".length] = 9;
  assert.throws(() => codec.read(badFormat, 0, badFormat.length, Object.prototype), /unknown nested message format 9/);
  // Any byte flipped: a typed error or a well-formed envelope, never anything else.
  fc.assert(
    fc.property(fc.nat({ max: bytes.length - 1 }), fc.nat({ max: 255 }), (at, value) => {
      const corrupt = Buffer.from(bytes);
      corrupt[at] = value;
      try {
        assert.ok(codec.read(corrupt, 0, corrupt.length, Object.prototype) instanceof ShardingEnvelope);
      } catch (error) {
        assert.ok(error instanceof EnvelopeDecodeError, String(error));
      }
    }),
  );
});

test("envelope fields are validated on receipt as the JSON form was", () => {
  const { codec } = setup();
  const cases: [Partial<ShardingEnvelope>, RegExp][] = [
    [{ kind: "Teleport" as ShardingEnvelope["kind"] }, /kind/],
    [{ entityId: "" }, /entityId/],
    [{ shardId: -1 }, /shardId/],
    [{ coordinator: "not an address" }, /coordinator/],
    [{ askTimeoutMs: -5 }, /askTimeoutMs/],
  ];
  for (const [override, field] of cases) {
    const bytes = encode(codec, envelope({ type: "bank.rename", payload: { name: "n" } }, override));
    assert.throws(
      () => codec.read(bytes, 0, bytes.length, Object.prototype),
      (e: unknown) => e instanceof EnvelopeDecodeError && e.reason === "undecodable" && field.test(e.message),
      JSON.stringify(override),
    );
  }
  const noMessage = encode(codec, envelope(null));
  assert.throws(() => codec.read(noMessage, 0, noMessage.length, Object.prototype), /needs a message/);
});

test("values the envelope cannot carry are refused at send with MessageEncodeError", () => {
  const { codec, wire } = setup();
  assert.throws(() => codec.measure(envelope({ type: "x".repeat(1025), payload: {} })), MessageEncodeError);
  assert.throws(() => codec.measure(envelope({ type: "", payload: {} })), MessageEncodeError);
  const wrongField = envelope(wire.encode(new Deposit(1, "ok")));
  (wrongField.message!.payload as { amount: unknown }).amount = "one";
  assert.throws(() => codec.measure(wrongField), MessageEncodeError);
  const loneInPayload = envelope(wire.encode(new Deposit(1, "\ud800")));
  codec.measure(loneInPayload);
  assert.throws(() => codec.checkText(loneInPayload), MessageEncodeError);
  const loneInId = envelope(null, { kind: "Activate", entityId: "id-\udc00" });
  codec.measure(loneInId);
  assert.throws(() => codec.checkText(loneInId), MessageEncodeError);
});

test("the measured bound holds for any names and payloads", () => {
  const { codec, wire } = setup();
  fc.assert(
    fc.property(
      fc.string({ unit: "grapheme", minLength: 1, maxLength: 30 }),
      fc.string({ unit: "grapheme", maxLength: 60 }),
      fc.double(),
      fc.boolean(),
      (id, note, amount, json) => {
        const message = json ? new Rename(note) : new Deposit(amount, note);
        const sent = envelope(wire.encode(message), { entityId: id });
        const back = decode(codec, encode(codec, sent));
        assert.equal(back.entityId, id);
        assert.deepEqual(wire.decode(back.message!), message);
      },
    ),
  );
});

test("the envelope codec registers once per registry and refuses a conflicting registration", () => {
  const registry = new MessageRegistry(null);
  registerShardingWireTypes(registry);
  const first = registry.lookupName(wireNames.envelope);
  registerShardingWireTypes(registry);
  assert.equal(registry.lookupName(wireNames.envelope), first, "idempotent");
  const json = new MessageRegistry(null);
  json.register(ShardingEnvelope, { name: wireNames.envelope });
  assert.throws(() => registerShardingWireTypes(json), MessageRegistrationError);
  assert.throws(() => registry.registerCodec(Other, wireNames.envelope, first!.codec!), /already bound/);
});

test("an empty address is refused before any address has been parsed in the process", () => {
  // The coordinator-address memo of messages.ts started as "", so the first messages a fresh process read could name
  // an empty coordinator, requester or plan owner unchecked (the memo is process-wide: hence a fresh process).
  const script = `
    import { ShardingEnvelope, PlanUpdate } from "./src/sharding/internal/messages.ts";
    const results = [];
    const envelope = { kind: "Activate", entityType: "A", entityId: "x", shardId: 1, settingsKey: "k", hopCount: 1,
      coordinator: "", askTimeoutMs: null, senderless: false, message: null };
    try { ShardingEnvelope.fromJSON(envelope); results.push("accepted"); } catch { results.push("refused"); }
    const plan = { entityType: "A", settingsKey: "k", coordinator: "", generation: 1, assignments: [] };
    try { PlanUpdate.fromJSON(plan); results.push("accepted"); } catch { results.push("refused"); }
    console.log(results.join(","));`;
  const run = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
    cwd: fileURLToPath(new URL("../..", import.meta.url)),
    encoding: "utf8",
  });
  assert.equal(run.status, 0, run.stderr);
  assert.equal(run.stdout.trim(), "refused,refused");
});

test("a registry whose parent registered the sharding types encodes its own binary types in binary", () => {
  const parent = new MessageRegistry(null);
  registerShardingWireTypes(parent);
  const registry = new MessageRegistry(parent);
  registry.register(Deposit, { name: "bank.deposit", fields: { amount: "number", note: "string" } });
  const inherited = registry.registrationOf(envelope(null));
  registerShardingWireTypes(registry);
  assert.notEqual(registry.registrationOf(envelope(null)), inherited, "the class now resolves to this registry's own");
  const codec = registry.lookupName(wireNames.envelope)!.codec as ShardingEnvelopeCodec;
  const wire = new RegistryCodec(registry);
  const back = decode(
    codec,
    encode(codec, envelope(wire.encode(new Deposit(Number.NaN, "n")), { hopCount: 0, coordinator: null })),
  );
  assert.equal((back.message!.payload as EncodedMessage).format, PayloadFormat.binary);
  assert.deepEqual(wire.decode(back.message!), new Deposit(Number.NaN, "n"), "NaN survives (JSON would make it null)");
  // The parent keeps its own codec, which resolves names in the parent; registering again here is idempotent.
  assert.notEqual(parent.lookupName(wireNames.envelope)!.codec, codec);
  registerShardingWireTypes(registry);
  assert.equal(registry.lookupName(wireNames.envelope)!.codec, codec);
});

test("a nested wire name the envelope could not send on is refused on receipt", () => {
  const { codec } = setup();
  for (const name of ["", "n".repeat(1025)]) {
    const bytes = encode(codec, envelope({ type: "bank.rename", payload: { name: "n" } }, { kind: "Activate" }));
    // Splice the name in place of "bank.rename" (a hand-written peer may send any name).
    const nameBytes = Buffer.from(name);
    const oldLength = bytes.readUInt16BE(4);
    const rest = bytes.subarray(6 + oldLength);
    const nested = bytes.readUInt32BE(0) - 2 - oldLength + 2 + nameBytes.length;
    const head = Buffer.alloc(6);
    head.writeUInt32BE(nested, 0);
    head.writeUInt16BE(nameBytes.length, 4);
    const hostile = Buffer.concat([head, nameBytes, rest]);
    assert.throws(
      () => codec.read(hostile, 0, hostile.length, Object.prototype),
      (e: unknown) => e instanceof EnvelopeDecodeError && e.reason === "undecodable" && /wire name/.test(e.message),
      `name of ${name.length} characters`,
    );
  }
});

/** The direct envelope's codec and a caller's hop-0 envelope (Rename payload, senderless) under settings `key`. */
function directSetup(key: string): { registry: MessageRegistry; codec: ShardingEnvelopeCodec; hop0: ShardingEnvelope } {
  const { registry, wire } = setup();
  const codec = registry.lookupName(wireNames.directEnvelope)!.codec as ShardingEnvelopeCodec;
  const hop0 = new ShardingEnvelope("User", "Account", "a", 1, key, 0, null, null, true, wire.encode(new Rename("x")));
  return { registry, codec, hop0 };
}

test("a direct envelope round-trips through its own wire name with the generation it names, and is validated on receipt", () => {
  const { registry, wire } = setup();
  const codec = registry.lookupName(wireNames.directEnvelope)!.codec as ShardingEnvelopeCodec;
  assert.notEqual(
    codec.fingerprint,
    (registry.lookupName(wireNames.envelope)!.codec as ShardingEnvelopeCodec).fingerprint,
  );
  const hop0 = new ShardingEnvelope(
    "User",
    "Account",
    "acct-7",
    12,
    directKey,
    0,
    null,
    2500,
    false,
    wire.encode(new Deposit(3, "d")),
  );
  const sent = DirectEnvelope.of(hop0, addr("c"), 2 ** 40);
  assert.equal(registry.registrationOf(sent).name, wireNames.directEnvelope);
  const bytes = encode(codec, sent);
  const back = codec.read(bytes, 0, bytes.length, Object.prototype);
  assert.ok(back instanceof DirectEnvelope);
  assert.equal(back.hopCount, 2);
  assert.equal(back.coordinator, null, "a direct envelope names its coordinator by uid only");
  assert.equal(back.coordinatorUid, addr("c").uid);
  assert.equal(back.settingsKey, directKey, "the digest resolves to the key of settings built here");
  assert.equal(back.generation, 2 ** 40);
  assert.deepEqual(decodeNested(registry, back.message!), new Deposit(3, "d"));
  const cases: [Partial<DirectEnvelope>, RegExp][] = [
    [{ hopCount: 1 }, /hopCount/],
    [{ hopCount: 0 }, /hopCount/],
    [{ coordinatorUid: "" }, /coordinatorUid/],
    [{ coordinatorUid: "f".repeat(65) }, /coordinatorUid/],
    [{ settingsDigest: -1 }, /settingsDigest/],
    [{ settingsDigest: 0.5 }, /settingsDigest/],
    [{ settingsDigest: 2 ** 52 }, /settingsDigest/],
    [{ generation: 0 }, /generation/],
    [{ generation: 1.5 }, /generation/],
    [{ generation: 2 ** 40 + 1 }, /generation/],
    [{ generation: -3 }, /generation/],
  ];
  for (const [override, field] of cases) {
    const bad = encode(codec, Object.assign(DirectEnvelope.of(hop0, addr("c"), 5), override));
    assert.throws(
      () => codec.read(bad, 0, bad.length, Object.prototype),
      (e: unknown) => e instanceof EnvelopeDecodeError && e.reason === "undecodable" && field.test(e.message),
      JSON.stringify(override),
    );
  }
});

test("a direct envelope carries neither the settings key nor the coordinator's address: a 52-bit digest and a uid stand for them", () => {
  const { registry, codec, hop0 } = directSetup(directKey);
  const key = directKey;
  const sent = DirectEnvelope.of(hop0, addr("c"), 3);
  const bytes = encode(codec, sent);
  assert.equal(bytes.includes(Buffer.from(key)), false, "no settings key on the wire");
  assert.equal(bytes.includes(Buffer.from(addr("c").address.toString())), false, "no coordinator address on the wire");
  const viaHop1 = encode(
    registry.lookupName(wireNames.envelope)!.codec as ShardingEnvelopeCodec,
    hop0.forwarded(addr("c"), false),
  );
  assert.ok(bytes.length + 100 < viaHop1.length, `direct ${bytes.length} bytes, hop 1 ${viaHop1.length} bytes`);
  const back = decode(codec, bytes) as DirectEnvelope;
  assert.equal(back.settingsKey, key);
  assert.equal(back.settingsDigest, sent.settingsDigest);
  assert.equal(back.coordinatorUid, addr("c").uid);
});

test("a direct envelope whose settings digest no settings here have resolves to no settings key, so the owner refuses it as a mismatch", () => {
  const { codec, hop0 } = directSetup("key");
  const known = DirectEnvelope.of(hop0, addr("c"), 3);
  // Another digest, as a node with settings never built in this process writes it ("key" itself is never remembered
  // either: only ShardingSettings remember theirs).
  const other = Object.assign(DirectEnvelope.of(hop0, addr("c"), 3), {
    settingsDigest: (known.settingsDigest + 1) % 2 ** 52,
  });
  const back = decode(codec, encode(codec, other));
  assert.notEqual(back.settingsKey, "key");
  assert.match(back.settingsKey, /unknown here/);
});

test("a direct envelope's JSON is refused field by field for hostile values of its digest and uid, never crashing", () => {
  const { codec, hop0 } = directSetup("key");
  const good = decode(codec, encode(codec, DirectEnvelope.of(hop0, addr("c"), 3)));
  const record = { ...good } as Record<string, unknown>;
  const evil = {
    toString() {
      throw new Error("toString called");
    },
    valueOf() {
      throw new Error("valueOf called");
    },
  };
  const hostile: unknown[] = [
    evil,
    JSON.parse('{"__proto__": {"polluted": true}}'),
    "x".repeat(1 << 20),
    [],
    {},
    null,
    true,
    Number.NaN,
    Number.POSITIVE_INFINITY,
    -0.5,
    2 ** 53,
    10n,
    Symbol("s"),
  ];
  for (const field of ["settingsDigest", "coordinatorUid"]) {
    for (const value of hostile) {
      assert.throws(
        () => DirectEnvelope.fromJSON({ ...record, [field]: value }),
        (e: unknown) => e instanceof Error && e.message.includes(field),
        `${field} = ${typeof value}`,
      );
    }
  }
  assert.equal(({} as Record<string, unknown>).polluted, undefined);
});

test("a forwarded envelope (hop 1) is read by the owner that delivers it: its payload is decoded straight from the frame, and written out again the same", () => {
  const { codec, wire } = setup();
  for (const message of [new Deposit(4.25, "fee"), new Rename("Zoë")]) {
    const bytes = encode(codec, envelope(wire.encode(message)));
    const back = decode(codec, bytes);
    assert.equal(back.hopCount, 1);
    assert.ok(back.message?.payload instanceof DecodedMessage, "decoded as read");
    assert.deepEqual(wire.decode(back.message), message);
    assert.equal(wire.decode(back.message), wire.decode(back.message), "decoded once: the same instance");
    // Sent on (a rare path: a hop-1 envelope is delivered where it arrives), it is written from the instance.
    assert.deepEqual(encode(codec, back), bytes);
  }
});

test("a forwarded envelope whose payload does not decode keeps it encoded, so the owner refuses it where it delivers it", () => {
  const { codec, wire } = setup();
  const cases: [ShardingEnvelope["message"], RegExp][] = [
    [{ type: "no.such.type", payload: {} }, /not registered/],
    [{ type: "bank.deposit", payload: { amount: "three", note: "x" } }, /amount/],
  ];
  for (const [message, why] of cases) {
    const back = decode(codec, encode(codec, envelope(message)));
    assert.ok(back.message?.payload instanceof EncodedMessage, `${message?.type}: kept encoded`);
    assert.throws(
      () => wire.decode(back.message!),
      (e: unknown) => e instanceof EnvelopeDecodeError && why.test(e.message),
    );
  }
});
