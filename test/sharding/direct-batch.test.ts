import assert from "node:assert/strict";
import { test } from "node:test";
import { PayloadFormat } from "../../src/remote/envelope.ts";
import { EnvelopeDecodeError, MessageEncodeError, MessageRegistry } from "../../src/remote/index.ts";
import { DecodedMessage, EncodedMessage } from "../../src/remote/nested-message.ts";
import { ClusterShardingConfigurationError } from "../../src/sharding/errors.ts";
import { ShardingSettings } from "../../src/sharding/index.ts";
import { RegistryCodec, registerShardingWireTypes } from "../../src/sharding/internal/codec.ts";
import { ShardingEnvelope } from "../../src/sharding/internal/index.ts";
import {
  DirectBatch,
  DirectBatchEntry,
  DirectEnvelope,
  directBatchMax,
  ReceivedDirectBatch,
  wireNames,
} from "../../src/sharding/internal/messages.ts";
import { DirectSendBatches, type PendingDirectBatch } from "../../src/sharding/node/direct-batches.ts";
import type { Delivery } from "../../src/sharding/node/node-core.ts";
import { Prng } from "../fixtures/prng.ts";
import { addr } from "./fixtures/members.ts";

/** Every envelope of a batch as the owner read it, built from its records. */
function envelopesOf(batch: ReceivedDirectBatch): DirectEnvelope[] {
  return batch.records.map((_, i) => batch.envelopeAt(i));
}

class Deposit {
  constructor(
    readonly amount: number,
    readonly note: string,
  ) {}
}
class Rename {
  constructor(readonly name: string) {}
}
/** A JSON payload whose text grows with every serialization (a toJSON that is not a pure function). */
let growingCalls = 0;
class Growing {
  toJSON(): { text: string } {
    growingCalls++;
    return { text: "x".repeat(growingCalls * 10) };
  }
}

/** A payload with a `json` field: its codec keeps the text it measured for its next write. */
class Note {
  constructor(
    readonly n: number,
    readonly data: unknown,
  ) {}
}
/** A JSON field value whose text grows with every serialization. */
let growingNoteCalls = 0;
class GrowingText {
  toJSON(): string {
    growingNoteCalls++;
    return "g".repeat(growingNoteCalls * 50);
  }
}

/** The key of direct-routing settings built in this process (so a digest of it resolves here). */
const key = ShardingSettings.create({ routing: "direct" }).key;
const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

type Codec = NonNullable<ReturnType<MessageRegistry["lookupName"]>>["codec"] & object;

function setup(): { registry: MessageRegistry; batch: Codec; single: Codec; wire: RegistryCodec } {
  const registry = new MessageRegistry(null);
  registry.register(Deposit, { name: "bank.deposit", fields: { amount: "number", note: "string" } });
  registry.register(Rename, { name: "bank.rename" });
  registry.register(Growing, { name: "bank.growing" });
  registry.register(Note, { name: "bank.note", fields: { n: "number", data: "json" } });
  registerShardingWireTypes(registry);
  return {
    registry,
    batch: registry.lookupName(wireNames.directBatch)!.codec!,
    single: registry.lookupName(wireNames.directEnvelope)!.codec!,
    wire: new RegistryCodec(registry),
  };
}

/** A caller's direct envelope under coordinator "c" at `generation`. */
function direct(
  wire: RegistryCodec,
  entityId: string,
  shard: number,
  overrides: { askTimeoutMs?: number | null; senderless?: boolean; traceparent?: string | null; type?: string } = {},
  generation = 7,
): DirectEnvelope {
  const hop0 = new ShardingEnvelope(
    "User",
    overrides.type ?? "Account",
    entityId,
    shard,
    key,
    0,
    null,
    overrides.askTimeoutMs ?? null,
    overrides.senderless ?? false,
    wire.encode(shard % 2 === 0 ? new Deposit(shard + 0.5, `n-${entityId}`) : new Rename(`r-${entityId}`)),
    0,
    overrides.traceparent ?? null,
  );
  return DirectEnvelope.of(hop0, addr("c"), generation);
}

function encode(codec: Codec, value: object): Buffer {
  const bound = codec.measure(value);
  codec.checkText(value);
  const buf = Buffer.alloc(bound + 16, 0xee);
  const end = codec.write(buf, 5, value);
  assert.ok(end - 5 <= bound, `wrote ${end - 5} bytes, measured at most ${bound}`);
  return Buffer.from(buf.subarray(5, end));
}

/** A direct envelope's payload value: decoded, or the instance it was sent with. */
function payloadValue(e: DirectEnvelope): unknown {
  const payload = e.message?.payload;
  return payload instanceof DecodedMessage ? payload.value : payload;
}

/** The fields a receiver sees of a direct envelope, its payload decoded. */
function seen(e: DirectEnvelope): Record<string, unknown> {
  const { message, ...fields } = e;
  const payload = message?.payload;
  return {
    ...fields,
    message: { type: message?.type, value: payload instanceof DecodedMessage ? payload.value : payload },
  };
}

test("a direct batch carries its envelopes as that many single direct envelopes would arrive, the shared fields once", () => {
  const { batch, single, wire } = setup();
  const envelopes = [
    direct(wire, "acct-1", 4),
    direct(wire, "acct-2", 9, { askTimeoutMs: 2500 }),
    direct(wire, "acct-3", 200, { senderless: true, traceparent }),
    direct(wire, "acct-1", 4),
  ];
  const bytes = encode(batch, new DirectBatch(envelopes));
  const back = batch.read(bytes, 0, bytes.length, Object.prototype) as unknown;
  assert.ok(back instanceof ReceivedDirectBatch);
  assert.equal(envelopesOf(back).length, envelopes.length);
  let singles = 0;
  for (const [i, sent] of envelopes.entries()) {
    const alone = encode(single, sent);
    singles += alone.length;
    const expected = single.read(alone, 0, alone.length, Object.prototype) as unknown as DirectEnvelope;
    const got: DirectEnvelope = envelopesOf(back)[i]!;
    assert.ok(got instanceof DirectEnvelope);
    assert.deepEqual(seen(got), seen(expected), `envelope ${i}`);
    assert.equal(got.settingsKey, key);
    assert.equal(got.hopCount, 2);
    assert.equal(got.coordinatorUid, addr("c").uid);
  }
  // The entity type, digest, hop count and uid (28 bytes here) are written once, not four times; each envelope gains
  // a 4-byte length.
  assert.ok(bytes.length <= singles - 3 * 28 + 2 + 4 * 4, `batch ${bytes.length} bytes, singles ${singles}`);
});

/** The batch's form byte (0 general entries, 1 compact records), after the header of entity type "Account". */
function formOf(bytes: Buffer): number {
  const typeBytes = bytes.readUInt32BE(2);
  const uidAt = 2 + 4 + typeBytes + 8;
  return bytes[uidAt + 4 + bytes.readUInt32BE(uidAt)]!;
}

test("a batch of plain tells whose payloads one binary codec writes is written compact, and read as the same direct envelopes", () => {
  const { batch, single, wire } = setup();
  const ids = ["acct-1", "ünïcödé-ид", "🦀 crab", "x".repeat(40), "y".repeat(33), "acct-1"];
  const envelopes = ids.map((id, i) => direct(wire, id, 2 * i, { senderless: i % 2 === 0 }, i === 3 ? 2 ** 40 : 7));
  const bytes = encode(batch, new DirectBatch(envelopes, true));
  assert.equal(formOf(bytes), 1, "compact");
  const general = encode(batch, new DirectBatch([...envelopes, direct(wire, "acct-9", 8, { askTimeoutMs: 10 })]));
  assert.equal(formOf(general), 0);
  assert.ok(
    bytes.length < general.length - 40 * envelopes.length,
    `${bytes.length} compact, ${general.length} general`,
  );
  const back = batch.read(bytes, 0, bytes.length, Object.prototype) as unknown;
  assert.ok(back instanceof ReceivedDirectBatch);
  assert.equal(back.records.length, envelopes.length);
  for (const [i, sent] of envelopes.entries()) {
    const alone = encode(single, sent);
    const expected = single.read(alone, 0, alone.length, Object.prototype) as unknown as DirectEnvelope;
    const got = back.envelopeAt(i);
    assert.deepEqual(seen(got), seen(expected), `envelope ${i}`);
    assert.equal(back.records[i]!.message?.payload instanceof DecodedMessage, true, "decoded as read");
  }
});

test("a batch is written compact only when every envelope is a first-attempt plain tell of the same binary payload type", () => {
  const { batch, wire } = setup();
  const tell = (id: string) => direct(wire, id, 2);
  // A tell whose payload arrived decoded from another node and is sent on (a DecodedMessage holding the instance):
  // written as a general entry, whose nesting codec writes the decoded value (compact takes only the instance itself).
  const resent = (id: string) => {
    const e = tell(id);
    const wire = { type: e.message!.type, payload: new DecodedMessage(e.message!.payload) };
    return new DirectEnvelope(
      e.kind,
      e.entityType,
      id,
      e.shardId,
      e.settingsKey,
      null,
      false,
      wire,
      0,
      null,
      e.generation,
      e.coordinatorUid,
      e.settingsDigest,
    );
  };
  const t = tell("r");
  const retried = new DirectEnvelope(
    t.kind,
    t.entityType,
    t.entityId,
    t.shardId,
    t.settingsKey,
    null,
    false,
    t.message,
    2,
    null,
    t.generation,
    t.coordinatorUid,
    t.settingsDigest,
  );
  const cases: [string, DirectEnvelope[], number][] = [
    ["plain tells", [tell("a"), tell("b")], 1],
    ["plain tells of decoded payloads, sent on", [resent("a"), resent("b")], 0],
    ["decoded and typed payloads together", [tell("a"), resent("b")], 0],
    ["one ask", [tell("a"), direct(wire, "b", 2, { askTimeoutMs: 100 })], 0],
    ["one traced tell", [tell("a"), direct(wire, "b", 2, { traceparent })], 0],
    ["a JSON payload", [tell("a"), direct(wire, "b", 3)], 0],
    ["JSON payloads only", [direct(wire, "a", 1), direct(wire, "b", 3)], 0],
    ["a second attempt", [tell("a"), retried], 0],
  ];
  for (const [what, envelopes, form] of cases) {
    const bytes = encode(batch, new DirectBatch(envelopes));
    assert.equal(formOf(bytes), form, what);
    const back = batch.read(bytes, 0, bytes.length, Object.prototype) as unknown as ReceivedDirectBatch;
    assert.deepEqual(
      envelopesOf(back).map((e) => [e.entityId, e.askTimeoutMs, e.traceparent, e.deliveryAttempt, payloadValue(e)]),
      envelopes.map((e) => [e.entityId, e.askTimeoutMs, e.traceparent, e.deliveryAttempt, payloadValue(e)]),
      what,
    );
  }
});

test("a compact batch refuses an entity id with a lone surrogate at write, typed, even when the text check is skipped", () => {
  const { batch, wire } = setup();
  const value = new DirectBatch([direct(wire, "ok", 2), direct(wire, `bad-\ud800-${"z".repeat(40)}`, 2)]);
  const buf = Buffer.alloc(batch.measure(value) + 16);
  assert.throws(() => batch.write(buf, 0, value), MessageEncodeError);
  const short = new DirectBatch([direct(wire, "\udfff", 2)]);
  assert.throws(() => batch.write(Buffer.alloc(batch.measure(short)), 0, short), MessageEncodeError);
});

test("a batch of payloads with a JSON field writes each its own text, compact or not, never past what it measured", () => {
  const { batch, wire } = setup();
  const noteTell = (id: string, data: unknown, askTimeoutMs: number | null = null) => {
    const hop0 = new ShardingEnvelope(
      "User",
      "Account",
      id,
      2,
      key,
      0,
      null,
      askTimeoutMs,
      false,
      wire.encode(new Note(id.length, data)),
      0,
      null,
    );
    return DirectEnvelope.of(hop0, addr("c"), 7);
  };
  const sent = [
    noteTell("a", "s"),
    noteTell("bb", "L".repeat(100)),
    noteTell("ccc", { deep: [1, 2] }),
    noteTell("d", ""),
  ];
  for (const [what, envelopes, form] of [
    ["compact", sent, 1],
    ["general", [...sent, noteTell("e", "t", 50)], 0],
  ] as const) {
    const bytes = encode(batch, new DirectBatch(envelopes));
    assert.equal(formOf(bytes), form, what);
    const back = batch.read(bytes, 0, bytes.length, Object.prototype) as unknown as ReceivedDirectBatch;
    assert.deepEqual(
      envelopesOf(back).map((e) => {
        const p = e.message!.payload;
        return p instanceof DecodedMessage ? (p.value as Note).data : p;
      }),
      envelopes.map((e) => (e.message!.payload as Note).data),
      what,
    );
  }
  // A field whose text grows between the measure and the write: refused, typed, or written within what was measured.
  for (const extra of [null, 50] as const) {
    const growing = [
      noteTell("a", new GrowingText()),
      noteTell("b", "x".repeat(10)),
      noteTell("c", new GrowingText(), extra),
    ];
    const value = new DirectBatch(growing);
    const bound = batch.measure(value);
    const buf = Buffer.alloc(bound + 4096, 0xee);
    try {
      const end = batch.write(buf, 0, value);
      assert.ok(end <= bound, `wrote ${end} bytes, measured ${bound}`);
    } catch (error) {
      assert.ok(error instanceof MessageEncodeError, String(error));
    }
    assert.ok(
      buf.subarray(bound).every((b) => b === 0xee),
      "nothing written past the measured bytes",
    );
  }
});

test("envelopes granted under different plan generations share a batch, each keeping its own", () => {
  const { batch, wire } = setup();
  const envelopes = [direct(wire, "a", 1, {}, 3), direct(wire, "b", 2, {}, 9), direct(wire, "c", 3, {}, 3)];
  const bytes = encode(batch, new DirectBatch(envelopes));
  const back = batch.read(bytes, 0, bytes.length, Object.prototype) as unknown as ReceivedDirectBatch;
  assert.deepEqual(
    envelopesOf(back).map((e) => [e.entityId, e.generation]),
    [
      ["a", 3],
      ["b", 9],
      ["c", 3],
    ],
  );
});

test("a batch of JSON payloads serializes each once and writes the text it measured, even one that changes between calls", () => {
  const { batch, wire } = setup();
  const envelopes = ["a", "b", "c", "d"].map((id, i) => {
    const hop0 = new ShardingEnvelope("User", "Account", id, i, key, 0, null, null, false, wire.encode(new Growing()));
    return DirectEnvelope.of(hop0, addr("c"), 7);
  });
  growingCalls = 0;
  const bytes = encode(batch, new DirectBatch(envelopes));
  assert.equal(growingCalls, 4, "one serialization per payload");
  const back = batch.read(bytes, 0, bytes.length, Object.prototype) as unknown as ReceivedDirectBatch;
  assert.deepEqual(
    envelopesOf(back).map((e) => (e.message!.payload as DecodedMessage).value),
    [1, 2, 3, 4].map((k) => Object.assign(Object.create(Growing.prototype) as object, { text: "x".repeat(k * 10) })),
  );
});

test("a batch whose envelopes do not share the header's fields, or of no or too many envelopes, is refused at send", () => {
  const { batch, wire } = setup();
  const a = direct(wire, "a", 1);
  const cases: [string, unknown[]][] = [
    ["another entity type", [a, direct(wire, "b", 1, { type: "Other" })]],
    ["another coordinator", [a, DirectEnvelope.of(direct(wire, "b", 1), addr("d", 2552, "2"), 7)]],
    [
      "a hop-1 envelope",
      [a, new ShardingEnvelope("User", "Account", "b", 1, key, 1, addr("c").toString(), null, false, null)],
    ],
    ["no envelopes", []],
    ["too many", Array.from({ length: directBatchMax + 1 }, () => a)],
    ["not an envelope", [a, { entityType: "Account" }]],
  ];
  for (const [what, envelopes] of cases) {
    assert.throws(
      () => batch.measure(new DirectBatch(envelopes as DirectEnvelope[])),
      (e: unknown) => e instanceof MessageEncodeError,
      what,
    );
  }
  assert.throws(() => batch.measure({ envelopes: "x" }), MessageEncodeError);
  assert.throws(() => batch.measure({}), MessageEncodeError);
});

test("every truncation and every single-byte corruption of a batch is refused as undecodable or read as direct envelopes, never a crash", () => {
  const { batch, wire } = setup();
  const general = encode(
    batch,
    new DirectBatch([direct(wire, "acct-1", 4, { traceparent }), direct(wire, "acct-2", 9, { askTimeoutMs: 10 })]),
  );
  const compact = encode(batch, new DirectBatch([direct(wire, "acct-1", 4), direct(wire, "ид-2", 6, {}, 2 ** 40)]));
  assert.deepEqual([formOf(general), formOf(compact)], [0, 1]);
  for (const bytes of [general, compact]) fuzz(batch, bytes);
});

function fuzz(batch: Codec, bytes: Buffer): void {
  const outcomes = { refused: 0, read: 0 };
  const check = (buf: Buffer, what: string): void => {
    let value: unknown;
    try {
      value = batch.read(buf, 0, buf.length, Object.prototype);
    } catch (error) {
      assert.ok(error instanceof EnvelopeDecodeError, `${what}: ${String(error)}`);
      assert.equal(error.reason, "undecodable");
      outcomes.refused++;
      return;
    }
    assert.ok(value instanceof ReceivedDirectBatch, what);
    for (const e of envelopesOf(value)) assert.ok(e instanceof DirectEnvelope, what);
    outcomes.read++;
  };
  for (let n = 0; n < bytes.length; n++) check(bytes.subarray(0, n), `truncated at ${n}`);
  check(Buffer.concat([bytes, Buffer.from([0])]), "a trailing byte");
  const random = new Prng(20261207);
  for (let i = 0; i < bytes.length; i++) {
    for (const value of [0x00, 0xff, 0x7f, 0x80, random.int(256)]) {
      const corrupt = Buffer.from(bytes);
      corrupt[i] = value;
      check(corrupt, `byte ${i} = ${value}`);
    }
  }
  assert.ok(outcomes.refused > bytes.length, `refused ${outcomes.refused}, read ${outcomes.read}`);
}

test("a batch header naming no, too many or oversized parts is refused as undecodable", () => {
  const { batch, wire } = setup();
  const bytes = encode(batch, new DirectBatch([direct(wire, "acct-1", 4)]));
  const withCount = (count: number): Buffer => {
    const b = Buffer.from(bytes);
    b.writeUInt16BE(count, 0);
    return b;
  };
  const huge = Buffer.from(bytes);
  huge.writeUInt32LE(0xffff_ffff, 2);
  const hostile: [string, Buffer][] = [
    ["no envelopes", withCount(0)],
    ["more than the limit", withCount(directBatchMax + 1)],
    ["more than it carries", withCount(2)],
    ["an entity type longer than the frame", huge],
    ["nothing", Buffer.alloc(0)],
  ];
  for (const [what, buf] of hostile) {
    assert.throws(
      () => batch.read(buf, 0, buf.length, Object.prototype),
      (e: unknown) => e instanceof EnvelopeDecodeError && e.reason === "undecodable",
      what,
    );
  }
});

test("a batched envelope is validated as a single direct envelope: a field it refuses refuses the whole batch", () => {
  const { batch, wire } = setup();
  const good = direct(wire, "acct-1", 4);
  const bad: [string, DirectEnvelope][] = [
    ["an empty entity id", Object.assign(direct(wire, "x", 4), { entityId: "" })],
    ["an unknown kind", Object.assign(direct(wire, "x", 4), { kind: "Explode" })],
    ["a negative shard", Object.assign(direct(wire, "x", 4), { shardId: -1 })],
    ["a User envelope without a message", Object.assign(direct(wire, "x", 4), { message: null })],
  ];
  for (const [what, envelope] of bad) {
    const bytes = encode(batch, new DirectBatch([good, envelope]));
    assert.throws(
      () => batch.read(bytes, 0, bytes.length, Object.prototype),
      (e: unknown) =>
        e instanceof EnvelopeDecodeError && e.reason === "undecodable" && e.message.includes("envelope 1"),
      what,
    );
  }
  // The header's generation and digest are the envelopes': one a single envelope refuses refuses the batch.
  for (const [what, overrides] of [
    ["generation 0", { generation: 0 }],
    ["a digest of 2^52", { settingsDigest: 2 ** 52 }],
    ["an empty coordinator uid", { coordinatorUid: "" }],
  ] as const) {
    const e = Object.assign(direct(wire, "x", 4), overrides);
    const bytes = encode(batch, new DirectBatch([e]));
    assert.throws(() => batch.read(bytes, 0, bytes.length, Object.prototype), EnvelopeDecodeError, what);
  }
});

test("a batch's JSON is validated envelope by envelope for hostile values, never crashing or polluting a prototype", () => {
  const { single, wire } = setup();
  const bytes = encode(single, direct(wire, "acct-1", 4));
  const record = { ...(single.read(bytes, 0, bytes.length, Object.prototype) as unknown as DirectEnvelope) } as Record<
    string,
    unknown
  >;
  const evil = {
    toString() {
      throw new Error("toString called");
    },
    valueOf() {
      throw new Error("valueOf called");
    },
  };
  let deep: unknown = record;
  for (let i = 0; i < 10_000; i++) deep = [deep];
  const hostile: unknown[] = [
    evil,
    JSON.parse('{"__proto__": {"polluted": true}}'),
    JSON.parse('{"envelopes": [{"__proto__": {"polluted": true}}]}'),
    { envelopes: [] },
    { envelopes: Array.from({ length: directBatchMax + 1 }, () => record) },
    { envelopes: [record, evil] },
    { envelopes: [record, { ...record, shardId: "1" }] },
    { envelopes: [record, { ...record, generation: Number.NaN }] },
    { envelopes: [record, { ...record, entityId: "x".repeat(1 << 20), kind: evil }] },
    { envelopes: deep },
    { envelopes: [deep] },
    { envelopes: evil },
    "x".repeat(1 << 20),
    [],
    null,
    10n,
    Symbol("s"),
  ];
  for (const value of hostile) {
    assert.throws(
      () => DirectBatch.fromJSON(value),
      (e: unknown) => e instanceof ClusterShardingConfigurationError,
      typeof value,
    );
  }
  assert.equal(({} as Record<string, unknown>).polluted, undefined);
  const ok = DirectBatch.fromJSON({ envelopes: [record, record] });
  assert.equal(ok.envelopes.length, 2);
  assert.ok(ok.envelopes.every((e) => e instanceof DirectEnvelope));
});

test("a batch entry read alone is an inert wrapper of its fields, not a message any actor would act on; only a batch's codec opens and validates it", () => {
  const { registry, wire } = setup();
  const entryCodec = registry.lookupName(wireNames.directBatchEntry)!.codec!;
  const bytes = encode(entryCodec, direct(wire, "acct-1", 4));
  const read = entryCodec.read(bytes, 0, bytes.length, Object.prototype) as unknown;
  assert.ok(read instanceof DirectBatchEntry);
  assert.equal(Object.getPrototypeOf(read), DirectBatchEntry.prototype);
  assert.deepEqual(Object.keys(read), ["fields"]);
  assert.equal((read.fields as { entityId: string }).entityId, "acct-1");
  // Its JSON form is wrapped too, and refused by remoting's check of the declared fields (nothing to send on).
  const wrapped = DirectBatchEntry.fromJSON({ kind: "User", entityId: 7 });
  assert.ok(wrapped instanceof DirectBatchEntry);
  assert.throws(() => entryCodec.measure(wrapped), MessageEncodeError);
});

// ---------------------------------------------------------------- the caller's batches

function fakeDelivery(envelope: DirectEnvelope, sender: Delivery["sender"]): Delivery {
  return { envelope, sender };
}

test("a caller's direct envelopes are batched per owner in order, a new batch on another sender or entity type, a full one written at once, the rest at the end of the microtask", async () => {
  const { wire } = setup();
  const written: { to: string; ids: string[]; sender: unknown }[] = [];
  let after = 0;
  const batches = new DirectSendBatches(
    3,
    (b: PendingDirectBatch) =>
      written.push({ to: b.to.toString(), ids: b.envelopes.map((e) => e.entityId), sender: b.sender }),
    () => after++,
  );
  const o1 = addr("o1");
  const o2 = addr("o2");
  const s1 = { tag: "s1" } as unknown as Delivery["sender"];
  const add = (to: typeof o1, id: string, sender: Delivery["sender"] = null, generation = 7) => {
    const e = direct(wire, id, 4, {}, generation);
    batches.add(to, e, fakeDelivery(e, sender));
  };
  add(o1, "a");
  add(o2, "x");
  add(o1, "b");
  add(o1, "c"); // full: written now
  assert.deepEqual(
    written.map((w) => w.ids),
    [["a", "b", "c"]],
  );
  add(o1, "d");
  add(o1, "e", s1); // another sender: [d] first
  add(o1, "f", s1, 8); // another generation: the same batch (each entry carries its own)
  const g = direct(wire, "g", 4, { type: "Other" });
  batches.add(o1, g, fakeDelivery(g, s1)); // another entity type: [e, f] first
  assert.deepEqual(
    written.map((w) => w.ids),
    [["a", "b", "c"], ["d"], ["e", "f"]],
  );
  assert.equal(batches.isEmpty, false);
  await Promise.resolve();
  // The microtask wrote the rest: o2's batch (its first envelope came before o1's pending one), then o1's.
  assert.deepEqual(
    written.map((w) => [w.to, w.ids]),
    [
      [o1.toString(), ["a", "b", "c"]],
      [o1.toString(), ["d"]],
      [o1.toString(), ["e", "f"]],
      [o2.toString(), ["x"]],
      [o1.toString(), ["g"]],
    ],
  );
  assert.equal(written.at(-1)!.sender, s1);
  assert.equal(batches.isEmpty, true);
  assert.equal(after, 1);
  // A flush with nothing pending writes nothing and runs nothing.
  batches.flush();
  assert.equal(after, 1);
});

test("an explicit flush writes every pending batch before the microtask, which then finds nothing", async () => {
  const { wire } = setup();
  const written: string[][] = [];
  const batches = new DirectSendBatches(
    64,
    (b) => written.push(b.envelopes.map((e) => e.entityId)),
    () => {},
  );
  const e1 = direct(wire, "a", 4);
  const e2 = direct(wire, "b", 4);
  batches.add(addr("o1"), e1, fakeDelivery(e1, null));
  batches.add(addr("o1"), e2, fakeDelivery(e2, null));
  batches.flush();
  assert.deepEqual(written, [["a", "b"]]);
  await Promise.resolve();
  assert.deepEqual(written, [["a", "b"]]);
});

test("a protocol envelope is never carried as a message: refused at send; read nested, even a thousand deep, it stays encoded and is refused where delivered", () => {
  const { registry, single, wire } = setup();
  const inner = direct(wire, "acct-1", 2);
  for (const container of [inner, new DirectBatch([inner])]) {
    assert.throws(
      () => wire.encode(container),
      (e: unknown) => e instanceof Error && e.name === "InvalidMessageError" && /protocol envelopes/.test(e.message),
    );
  }
  // On the wire a peer may still nest one: each level a direct envelope whose message is the level below.
  const fingerprint = registry.lookupName(wireNames.directEnvelope)!.codec!.fingerprint;
  let bytes = encode(single, inner);
  for (let level = 0; level < 1_000; level++) {
    const nested = {
      type: wireNames.directEnvelope,
      payload: new EncodedMessage(PayloadFormat.binary, fingerprint, bytes),
    };
    const hop0 = new ShardingEnvelope("User", "Account", "acct-1", 2, key, 0, null, null, false, nested, 0, null);
    bytes = encode(single, DirectEnvelope.of(hop0, addr("c"), 7));
  }
  const read = single.read(bytes, 0, bytes.length, Object.prototype) as unknown as DirectEnvelope;
  const message = read.message!;
  assert.equal(message.type, wireNames.directEnvelope);
  assert.ok(message.payload instanceof EncodedMessage, "kept encoded: not decoded a level deeper");
  assert.throws(
    () => wire.decode(message),
    (e: unknown) =>
      e instanceof EnvelopeDecodeError && e.reason === "undecodable" && /protocol envelope/.test(e.message),
  );
});
