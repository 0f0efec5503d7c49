// Direct batches (docs/protocol.md §8.8 "Batches") from a hostile peer over real loopback TCP: a raw socket writes a
// direct-routing owner `DirectBatch` frames malformed in every way (counts, header strings and numbers, entries, the
// nested message), JSON batches with hostile values, and well-formed batches whose envelopes the owner must refuse.
// The owner refuses each malformed frame whole, typed and counted, delivers nothing of it, pollutes no prototype, and
// keeps serving; of a well-formed batch it refuses exactly the envelopes a single direct envelope would be refused
// for (each counted once in directRefusals) and delivers the others, in order.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { FrameKind, PayloadFormat, type PayloadFormatValue } from "../../src/remote/envelope.ts";
import { encodeNested, type MessageRegistry } from "../../src/remote/index.ts";
import { LeastLoadedAllocation, NoRebalance, ShardingSettings } from "../../src/sharding/index.ts";
import { wireNames } from "../../src/sharding/internal/messages.ts";
import { settingsDigest } from "../../src/sharding/internal/settings-digest.ts";
import { eventually } from "../fixtures/eventually.ts";
import { binaryPayload, definingFrame } from "../remote/fixtures/frames.ts";
import type { Node } from "../remote/fixtures/nodes.ts";
import { type RawPeer, rawPeer } from "../remote/fixtures/raw-peer.ts";
import { BinarySeq, type OrderCommand, OrderReply, Seq, sequenceSink } from "./fixtures/order.ts";
import { type ShardingNode, startWithType, terminateAll } from "./fixtures/tcp-nodes.ts";

const type = "HostileBatch";
const settings = {
  shardCount: 16,
  allocation: new LeastLoadedAllocation(),
  rebalance: new NoRebalance(),
  routing: "direct" as const,
};
const digest = settingsDigest(ShardingSettings.create(settings).key);

let nodes: ShardingNode[];
let coordinator: ShardingNode;
let caller: ShardingNode;
let owner: ShardingNode;
let raw: RawPeer;
let registry: MessageRegistry;
/** Entity ids by shard, for shards the owner owns and shards it does not. */
let owned: string[];
let notOwned: string[];
let generation: number;
let nextMarker = 1_000_000;

before(async () => {
  nodes = await startWithType(3, type, settings);
  [coordinator, caller, owner] = nodes as [ShardingNode, ShardingNode, ShardingNode];
  registry = owner.remoting.registry;
  generation = owner.sharding.planGeneration(type);
  owned = [];
  notOwned = [];
  const self = owner.cluster.selfAddress;
  const seenShards = new Set<number>();
  for (let i = 0; i < 10_000 && (owned.length < 4 || notOwned.length < 2); i++) {
    const id = `hb-${i}`;
    const shard = owner.sharding.shardOf(type, id);
    if (seenShards.has(shard)) continue;
    seenShards.add(shard);
    if (owner.sharding.ownerFor(type, id)?.equals(self) === true) owned.push(id);
    else notOwned.push(id);
  }
  assert.ok(owned.length >= 4 && notOwned.length >= 2, "ids on the owner's shards and on others'");
  // Handshaken as a made-up peer: remoting authenticates it as that address, nothing more.
  raw = await rawPeer(owner as unknown as Node, { handshake: true, port: 19 });
});

after(async () => {
  raw?.socket.destroy();
  await terminateAll(nodes ?? []);
});

// ---------------------------------------------------------------------------------------------- frame building

/** The fields of a batch entry as the caller writes them (`directBatchEntryLayout`), with a Seq as its message. */
interface EntryFields {
  kind?: string;
  entityId: string;
  shardId?: number;
  askTimeoutMs?: number | null;
  senderless?: boolean;
  deliveryAttempt?: number;
  traceparent?: string | null;
  generation?: number;
  message?: unknown;
}

function entryCodec() {
  return registry.lookupName(wireNames.directBatchEntry)!.codec!;
}

/** One entry's bytes, in the entry layout, as the entry codec writes them. */
function entry(fields: EntryFields, n: number): Buffer {
  return binaryPayload(entryCodec(), {
    kind: fields.kind ?? "User",
    entityId: fields.entityId,
    shardId: fields.shardId ?? owner.sharding.shardOf(type, fields.entityId),
    askTimeoutMs: fields.askTimeoutMs ?? null,
    senderless: fields.senderless ?? true,
    deliveryAttempt: fields.deliveryAttempt ?? 0,
    traceparent: fields.traceparent ?? null,
    generation: fields.generation ?? generation,
    message: "message" in fields ? fields.message : encodeNested(registry, new Seq(n)),
  });
}

/**
 * An entry whose nested message is written by hand: `[u32 n][u16 m][name][format][payload]` then the entry's own
 * fields (those of an entry without a message, whose first 4 bytes are its zero length).
 */
function entryWithNested(id: string, name: Buffer, format: number, payload: Buffer): Buffer {
  const fixed = entry({ entityId: id, kind: "Passivate", message: null }, 0).subarray(4);
  // A User entry: the kind is the fixed part's first field, written as an ASCII string.
  const user = Buffer.from(fixed);
  const kindAt = 4; // [u32 length word]["Passivate"]
  const fixedUser = Buffer.concat([
    lengthWord("User"),
    Buffer.from("User"),
    user.subarray(kindAt + "Passivate".length),
  ]);
  const nested = Buffer.concat([u16be(name.length), name, Buffer.from([format]), payload]);
  return Buffer.concat([u32be(nested.length), nested, fixedUser]);
}

function lengthWord(ascii: string): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32LE((ascii.length | 0x80000000) >>> 0, 0);
  return b;
}
function u16be(n: number): Buffer {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(n, 0);
  return b;
}
function u32be(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n >>> 0, 0);
  return b;
}
/** The batch header's numbers are big-endian (direct-batch-codec.ts). */
function f64(x: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeDoubleBE(x, 0);
  return b;
}
function text(t: string | Buffer): Buffer {
  const bytes = typeof t === "string" ? Buffer.from(t, "utf8") : t;
  return Buffer.concat([u32be(bytes.length), bytes]);
}

interface Header {
  count?: number;
  /** The byte after the header: 0 (general entries, the default) or 1 (compact records). */
  form?: number;
  entityType?: string | Buffer;
  /** The raw length word of the entity type, instead of its length. */
  entityTypeLength?: number;
  digest?: number;
  uid?: string | Buffer;
}

/** A single direct envelope's fields (its JSON) for `id` with `message`, as the owner's coordinator granted it. */
function directFields(id: string, message: unknown): Record<string, unknown> {
  return {
    kind: "User",
    entityType: type,
    entityId: id,
    shardId: owner.sharding.shardOf(type, id),
    settingsDigest: digest,
    hopCount: 2,
    coordinatorUid: coordinator.cluster.selfAddress.uid,
    askTimeoutMs: null,
    senderless: true,
    deliveryAttempt: 0,
    traceparent: null,
    generation,
    message,
  };
}

/** A batch's payload: the header (by default the owner's: its type, digest, coordinator uid), then entries. */
function batchPayload(entries: Buffer[], header: Header = {}): Buffer {
  const typeBytes = text(header.entityType ?? type);
  if (header.entityTypeLength !== undefined) typeBytes.writeUInt32BE(header.entityTypeLength >>> 0, 0);
  return Buffer.concat([
    u16be(header.count ?? entries.length),
    typeBytes,
    f64(header.digest ?? digest),
    text(header.uid ?? coordinator.cluster.selfAddress.uid),
    Buffer.from([header.form ?? 0]),
    ...entries.map((e) => Buffer.concat([u32be(e.length), e])),
  ]);
}

/** A compact record's fields (direct-batch-codec.ts): a plain tell, its payload a BinarySeq's bytes by default. */
interface CompactFields {
  entityId: string | Buffer;
  /** The raw entity id length word, instead of its length. */
  idLength?: number;
  shardId?: number;
  generation?: number;
  flags?: number;
  payload?: Buffer;
}

/** The binary codec BinarySeq is registered with on the nodes (tcp-nodes.ts). */
function binarySeqCodec() {
  return registry.registrationOf(new BinarySeq(0)).codec!;
}

/** One compact record's bytes: `[u32 k][entity id][i32 shard][f64 generation][u8 flags][payload]`. */
function compactRecord(fields: CompactFields, n: number): Buffer {
  const id = typeof fields.entityId === "string" ? Buffer.from(fields.entityId, "utf8") : fields.entityId;
  const shard = Buffer.alloc(4);
  const shardId = fields.shardId ?? owner.sharding.shardOf(type, fields.entityId.toString());
  shard.writeInt32BE(shardId | 0, 0);
  return Buffer.concat([
    u32be(fields.idLength ?? id.length),
    id,
    shard,
    f64(fields.generation ?? generation),
    Buffer.from([fields.flags ?? 1]),
    fields.payload ?? binaryPayload(binarySeqCodec(), new BinarySeq(n)),
  ]);
}

/** What a compact batch carries once after the form byte: the payloads' wire name and codec fingerprint. */
interface CompactShared {
  name?: string | Buffer;
  /** The raw u16 name length, instead of its length. */
  nameLength?: number;
  fingerprint?: number;
}

/** A compact batch's payload: the header, form 1, the shared wire name and fingerprint, then the records. */
function compactPayload(records: Buffer[], shared: CompactShared = {}, header: Header = {}): Buffer {
  const registration = registry.registrationOf(new BinarySeq(0));
  const name =
    typeof shared.name === "string" || shared.name === undefined
      ? Buffer.from(shared.name ?? registration.name)
      : shared.name;
  const base = batchPayload([], { ...header, count: header.count ?? records.length, form: 1 });
  return Buffer.concat([
    base,
    u16be(shared.nameLength ?? name.length),
    name,
    u32be(shared.fingerprint ?? registration.codec!.fingerprint),
    ...records.map((r) => Buffer.concat([u32be(r.length), r])),
  ]);
}

/**
 * The bytes of protocol envelope `name` (a direct batch of one entry, or a direct envelope) carrying Seq `n` to an
 * owned entity, well-formed under the owner's grant; prefixed with the codec's fingerprint (a nested binary payload's
 * layout) unless `fingerprinted` is false.
 */
function containerBytes(name: string, n: number, fingerprinted = true): Buffer {
  const codec = registry.lookupName(name)!.codec!;
  const bytes =
    name === wireNames.directBatch
      ? batchPayload([entry({ entityId: owned[2]! }, n)])
      : binaryPayload(codec, directFields(owned[2]!, encodeNested(registry, new Seq(n))));
  return fingerprinted ? Buffer.concat([u32be(codec.fingerprint), bytes]) : bytes;
}

/** A framed user envelope to the owner's sharding daemon, its header written out (no compression). */
function frame(
  payload: Buffer,
  typeName: string = wireNames.directBatch,
  format: PayloadFormatValue = PayloadFormat.binary,
): Buffer {
  const registration = registry.lookupName(typeName);
  return definingFrame(
    0,
    {
      recipient: "/system/sharding",
      typeName,
      fingerprint: format === PayloadFormat.binary ? (registration?.codec?.fingerprint ?? 0) : 0,
      format,
      kind: FrameKind.user,
    },
    payload,
  );
}

/** A batch of well-formed entries: one Seq(n) per (id, n). */
function seqEntries(pairs: [string, number][]): Buffer[] {
  return pairs.map(([id, n]) => entry({ entityId: id }, n));
}

// ---------------------------------------------------------------------------------------------- observing

function sink(id: string): number[] {
  return sequenceSink.get(id) ?? [];
}

interface Counters {
  rejected: number;
  undecodable: number;
  schemaInvalid: number;
  payload: number;
  directRefusals: number;
  remotingRejected: number;
  /** Deliveries held (for want of a coordinator) and shard mailbox overflows: what a frame could pile up. */
  held: number;
  overflows: number;
}
function counters(): Counters {
  const s = owner.sharding.stats;
  const r = owner.remoting.stats.rejected;
  return {
    rejected: s.rejectedEnvelopes,
    undecodable: s.malformedEnvelopes.undecodable,
    schemaInvalid: s.malformedEnvelopes.schemaInvalid,
    payload: s.malformedEnvelopes.payload,
    directRefusals: s.directRefusals,
    held: s.heldDeliveries,
    overflows: s.shardMailboxOverflows,
    remotingRejected: Object.values(r).reduce((x, y) => x + y, 0),
  };
}
function delta(before: Counters): Partial<Counters> {
  const now = counters();
  const out: Partial<Counters> = {};
  for (const k of Object.keys(now) as (keyof Counters)[]) if (now[k] !== before[k]) out[k] = now[k] - before[k];
  return out;
}

/**
 * Writes `frames`, then a well-formed batch as a marker (one Seq to an owned entity) on the same connection, and
 * waits until the marker was processed: every frame before it was handled by then (one link, one daemon mailbox).
 */
async function sendThenMarker(frames: Buffer[]): Promise<void> {
  const marker = nextMarker++;
  const id = owned[0]!;
  for (const f of frames) raw.socket.write(f);
  raw.socket.write(frame(batchPayload(seqEntries([[id, marker]]))));
  await eventually(() => sink(id).includes(marker), {
    what: `marker ${marker}`,
    describe: () => ({ counters: counters(), remoting: owner.remoting.stats.rejected, closed: raw.isClosed() }),
  });
}

// ---------------------------------------------------------------------------------------------- tests

test("a well-formed batch from a peer is delivered envelope by envelope, in order, 256 entries too", async () => {
  const [a, b] = owned as [string, string];
  const before = counters();
  const pairs: [string, number][] = [];
  for (let i = 0; i < 256; i++) pairs.push([i % 3 === 0 ? a : b, i]);
  raw.socket.write(frame(batchPayload(seqEntries(pairs))));
  await eventually(() => sink(a).length + sink(b).length >= 256, {
    what: "256 batched tells",
    describe: () => ({ a: sink(a).length, b: sink(b).length, counters: counters() }),
  });
  assert.deepEqual(
    sink(a),
    pairs.filter(([id]) => id === a).map(([, n]) => n),
  );
  assert.deepEqual(
    sink(b),
    pairs.filter(([id]) => id === b).map(([, n]) => n),
  );
  // The same as JSON (any registered type may come as JSON): the JSON cases below are refused for what they hold.
  const json = (n: number) => JSON.stringify(directFields(a, { type: "Seq", payload: { n } }));
  const body = Buffer.from(`{"envelopes":[${json(300)},${json(301)}]}`);
  raw.socket.write(frame(body, wireNames.directBatch, PayloadFormat.json));
  await eventually(() => sink(a).includes(301), { what: "a JSON batch", describe: counters });
  assert.deepEqual(sink(a).slice(-2), [300, 301]);
  assert.deepEqual(delta(before), {});
});

test("a well-formed compact batch from a peer is delivered envelope by envelope, in order, with and without a sender", async () => {
  const [a, b] = owned as [string, string];
  const aBefore = sink(a).length;
  const bBefore = sink(b).length;
  const before = counters();
  const records: Buffer[] = [];
  const pairs: [string, number][] = [];
  for (let i = 0; i < 256; i++) {
    const id = i % 3 === 0 ? a : b;
    pairs.push([id, 500_000 + i]);
    records.push(compactRecord({ entityId: id, flags: i % 2 }, 500_000 + i));
  }
  raw.socket.write(frame(compactPayload(records)));
  await eventually(() => sink(a).length - aBefore + sink(b).length - bBefore >= 256, {
    what: "256 compact tells",
    describe: () => ({ a: sink(a).length - aBefore, b: sink(b).length - bBefore, counters: counters() }),
  });
  assert.deepEqual(
    sink(a).slice(aBefore),
    pairs.filter(([id]) => id === a).map(([, n]) => n),
  );
  assert.deepEqual(
    sink(b).slice(bBefore),
    pairs.filter(([id]) => id === b).map(([, n]) => n),
  );
  assert.deepEqual(delta(before), {});
});

/** `[[[…]]]` nested `depth` deep, as JSON text. */
function deepJson(depth: number): string {
  return `${"[".repeat(depth)}${"]".repeat(depth)}`;
}

/** The hostile dictionary: each a frame the owner must refuse whole, named. */
function malformedFrames(): [string, Buffer][] {
  const [a, b] = owned as [string, string];
  const good = (n: number) => entry({ entityId: a }, n);
  const hostile = 7_000_000;
  const uid = coordinator.cluster.selfAddress.uid;
  const single = registry.lookupName(wireNames.directEnvelope)!.codec!;
  const out: [string, Buffer][] = [];
  const bin = (what: string, payload: Buffer) => out.push([what, frame(payload)]);
  // Counts.
  bin("count 0", batchPayload([good(hostile)], { count: 0 }));
  bin("count 257", batchPayload([good(hostile)], { count: 257 }));
  bin("count 257 with 257 entries", batchPayload(Array.from({ length: 257 }, () => good(hostile))));
  bin("count 65535", batchPayload([good(hostile)], { count: 65_535 }));
  bin("count 256, one entry", batchPayload([good(hostile)], { count: 256 }));
  bin("count 1, two entries", batchPayload([good(hostile), good(hostile + 1)], { count: 1 }));
  bin("count 2, the second entry cut", batchPayload([good(hostile), good(hostile + 1)]).subarray(0, -3));
  bin("nothing", Buffer.alloc(0));
  bin("one byte", Buffer.from([1]));
  // Header strings.
  bin("entity type of 2^32-1 bytes", batchPayload([good(hostile)], { entityTypeLength: 0xffff_ffff }));
  bin("entity type of 4,097 bytes", batchPayload([good(hostile)], { entityType: "T".repeat(4_097) }));
  bin("entity type longer than the frame", batchPayload([good(hostile)], { entityTypeLength: 200 }));
  bin("empty entity type", batchPayload([good(hostile)], { entityType: "" }));
  bin("empty coordinator uid", batchPayload([good(hostile)], { uid: "" }));
  bin("coordinator uid of 65 characters", batchPayload([good(hostile)], { uid: "a".repeat(65) }));
  bin("coordinator uid of 4,096 bytes", batchPayload([good(hostile)], { uid: "u".repeat(4_096) }));
  // The digest (header) and the generation (entry) are checked as a single direct envelope's.
  for (const [what, x] of [
    ["NaN", Number.NaN],
    ["Infinity", Number.POSITIVE_INFINITY],
    ["-Infinity", Number.NEGATIVE_INFINITY],
    ["2^52", 2 ** 52],
    ["2^53", 2 ** 53],
    ["-1", -1],
    ["0.5", 0.5],
  ] as const) {
    bin(`digest ${what}`, batchPayload([good(hostile)], { digest: x }));
    bin(`generation ${what}`, batchPayload([entry({ entityId: a, generation: x }, hostile)]));
  }
  bin("generation 0", batchPayload([entry({ entityId: a, generation: 0 }, hostile)]));
  bin("generation -0", batchPayload([entry({ entityId: a, generation: -0 }, hostile)]));
  bin("generation 2^40+1", batchPayload([entry({ entityId: a, generation: 2 ** 40 + 1 }, hostile)]));
  // Entries of wrong lengths.
  const e = good(hostile);
  const withLength = (n: number, body: Buffer) => Buffer.concat([u32be(n), body]);
  const headerOnly = batchPayload([]).subarray(0);
  const withCount1 = (rest: Buffer) => {
    const h = Buffer.from(headerOnly);
    h.writeUInt16BE(1, 0);
    return Buffer.concat([h, rest]);
  };
  bin("entry of length 0", withCount1(withLength(0, Buffer.alloc(0))));
  bin("entry length 0 then its bytes", withCount1(withLength(0, e)));
  bin("entry one byte short", withCount1(withLength(e.length - 1, e)));
  bin("entry one byte long", withCount1(withLength(e.length + 1, Buffer.concat([e, Buffer.from([0])]))));
  bin("entry length 2^32-1", withCount1(withLength(0xffff_ffff, e)));
  bin("entry length cut", withCount1(Buffer.from([0, 0])));
  const singleBytes = binaryPayload(single, directFields(a, encodeNested(registry, new Seq(hostile))));
  bin("a single direct envelope's bytes as an entry", batchPayload([singleBytes]));
  bin("a single direct envelope's bytes as a batch", singleBytes);
  // Entries a direct envelope's validation refuses (the whole frame with them, the good first entry too).
  const badEntry = (what: string, fields: EntryFields) =>
    bin(`entry with ${what}`, batchPayload([good(hostile), entry(fields, hostile + 1)]));
  badEntry("an unknown kind", { entityId: b, kind: "Explode" });
  badEntry("an empty entity id", { entityId: "" });
  badEntry("a negative shard", { entityId: b, shardId: -1 });
  badEntry("a User kind and no message", { entityId: b, message: null });
  badEntry("a negative ask timeout", { entityId: b, askTimeoutMs: -5 });
  badEntry("a NaN ask timeout", { entityId: b, askTimeoutMs: Number.NaN });
  badEntry("a negative delivery attempt", { entityId: b, deliveryAttempt: -1 });
  // The nested message: names and formats its codec refuses.
  const nested = (what: string, name: Buffer, format: number, payload: Buffer) =>
    bin(`nested ${what}`, batchPayload([good(hostile), entryWithNested(b, name, format, payload)]));
  nested("empty name", Buffer.alloc(0), PayloadFormat.json, Buffer.from("{}"));
  nested("name of 1,025 characters", Buffer.from("n".repeat(1_025)), PayloadFormat.json, Buffer.from("{}"));
  nested("format 7", Buffer.from("Seq"), 7, Buffer.from("{}"));
  nested("binary format, fingerprint cut", Buffer.from("Seq"), PayloadFormat.binary, Buffer.from([1, 2]));
  // The form byte, and compact batches malformed in every part.
  const goodRecord = (n: number) => compactRecord({ entityId: a }, n);
  for (const form of [2, 7, 0x80, 0xff]) bin(`form ${form}`, batchPayload([good(hostile)], { form }));
  bin("no form byte", batchPayload([]).subarray(0, -1));
  bin("compact, nothing after the form", batchPayload([], { count: 1, form: 1 }));
  bin("compact, wire name length cut", Buffer.concat([batchPayload([], { count: 1, form: 1 }), Buffer.from([0])]));
  bin("compact, empty wire name", compactPayload([goodRecord(hostile)], { name: "" }));
  bin("compact, wire name of 1,025 characters", compactPayload([goodRecord(hostile)], { name: "n".repeat(1_025) }));
  bin("compact, wire name longer than the frame", compactPayload([goodRecord(hostile)], { nameLength: 0xffff }));
  bin("compact, fingerprint cut", compactPayload([], { fingerprint: 0 }, { count: 1 }).subarray(0, -2));
  bin("compact, count 2 and one record", compactPayload([goodRecord(hostile)], {}, { count: 2 }));
  bin(
    "compact, count 1 and two records",
    compactPayload([goodRecord(hostile), goodRecord(hostile + 1)], {}, { count: 1 }),
  );
  bin("compact, count 257", compactPayload(Array.from({ length: 257 }, (_, i) => goodRecord(hostile + i))));
  const r = goodRecord(hostile);
  const compactWith = (record: Buffer, length = record.length) =>
    Buffer.concat([compactPayload([], {}, { count: 1 }), u32be(length), record]);
  bin("compact, record of length 0", compactWith(Buffer.alloc(0)));
  bin("compact, record length 2^32-1", compactWith(r, 0xffff_ffff));
  bin("compact, record one byte short", compactWith(r, r.length - 1));
  bin("compact, record of 16 bytes", compactWith(r.subarray(0, 16)));
  bin("compact, record length cut", Buffer.concat([compactPayload([], {}, { count: 1 }), Buffer.from([0, 0])]));
  bin("compact, empty entity id", compactPayload([compactRecord({ entityId: "" }, hostile)]));
  bin(
    "compact, entity id longer than its record",
    compactPayload([compactRecord({ entityId: a, idLength: 200 }, hostile)]),
  );
  bin(
    "compact, entity id length 2^32-1",
    compactPayload([compactRecord({ entityId: a, idLength: 0xffff_ffff }, hostile)]),
  );
  bin(
    "compact, negative shard",
    compactPayload([goodRecord(hostile), compactRecord({ entityId: b, shardId: -1 }, hostile)]),
  );
  bin("compact, shard -2^31", compactPayload([compactRecord({ entityId: b, shardId: -(2 ** 31) }, hostile)]));
  for (const flags of [2, 0xff])
    bin(`compact, flags ${flags}`, compactPayload([compactRecord({ entityId: a, flags }, hostile)]));
  for (const [what, x] of [
    ["NaN", Number.NaN],
    ["Infinity", Number.POSITIVE_INFINITY],
    ["0", 0],
    ["-0", -0],
    ["-1", -1],
    ["0.5", 0.5],
    ["2^40+1", 2 ** 40 + 1],
    ["2^53", 2 ** 53],
  ] as const) {
    bin(
      `compact, generation ${what}`,
      compactPayload([goodRecord(hostile), compactRecord({ entityId: b, generation: x }, hostile)]),
    );
  }
  bin("compact, trailing bytes", Buffer.concat([compactPayload([goodRecord(hostile)]), Buffer.from([0])]));
  // JSON batches (a batch's JSON is DirectBatch.fromJSON's): hostile values.
  const json = (what: string, body: string) =>
    out.push([`JSON ${what}`, frame(Buffer.from(body, "utf8"), wireNames.directBatch, PayloadFormat.json)]);
  const envelopeJson = (overrides: string) =>
    `{"kind":"User","entityType":${JSON.stringify(type)},"entityId":${JSON.stringify(a)},"shardId":${owner.sharding.shardOf(type, a)},"settingsDigest":${digest},"hopCount":2,"coordinatorUid":${JSON.stringify(uid)},"askTimeoutMs":null,"senderless":true,"deliveryAttempt":0,"traceparent":null,"generation":${generation},"message":{"type":"Seq","payload":{"n":${hostile}}}${overrides}}`;
  json("__proto__ at the top", '{"__proto__":{"polluted":true}}');
  json("__proto__ in an envelope", `{"envelopes":[{"__proto__":{"polluted":true}}]}`);
  json("__proto__ beside a good envelope", `{"envelopes":[${envelopeJson("")},{"__proto__":{"polluted":true}}]}`);
  json("constructor.prototype", `{"envelopes":[{"constructor":{"prototype":{"polluted":true}}}]}`);
  json("envelopes nested 20,000 deep", `{"envelopes":${deepJson(20_000)}}`);
  json("an envelope nested 20,000 deep", `{"envelopes":[${deepJson(20_000)}]}`);
  json(
    "a kind whose toString is not a function",
    `{"envelopes":[${envelopeJson(',"kind":{"toString":1,"valueOf":1}')}]}`,
  );
  json(
    "an entity id whose toString is not a function",
    `{"envelopes":[${envelopeJson(',"entityId":{"toString":1}')}]}`,
  );
  json("a shard whose valueOf is not a function", `{"envelopes":[${envelopeJson(',"shardId":{"valueOf":1}')}]}`);
  json("a generation as a string", `{"envelopes":[${envelopeJson(',"generation":"1"')}]}`);
  json("hop count 1", `{"envelopes":[${envelopeJson(',"hopCount":1')}]}`);
  json("no envelopes", '{"envelopes":[]}');
  json("257 envelopes", `{"envelopes":[${Array.from({ length: 257 }, () => envelopeJson("")).join(",")}]}`);
  json("envelopes as an object with a length", '{"envelopes":{"length":1,"0":{}}}');
  json("not JSON", "{");
  json("null", "null");
  json("a string", '"x"');
  return out;
}

const hostileBase = 7_000_000;

/** No number a hostile frame carried reached any entity (the sink is shared by every in-process node). */
function assertNoHostileDelivered(): void {
  for (const [id, list] of sequenceSink) {
    assert.deepEqual(
      list.filter((n) => typeof n !== "number" || n >= hostileBase),
      [],
      `entity ${id} processed a message of a refused frame`,
    );
  }
}

/** Uncaught errors and unhandled rejections while the hostile frames are handled (the process must not end). */
const uncaught: unknown[] = [];
const onUncaught = (error: unknown) => void uncaught.push(error);

test("every malformed batch frame is refused whole, typed and counted once, delivers and activates nothing", async () => {
  process.on("uncaughtException", onUncaught);
  process.on("unhandledRejection", onUncaught);
  try {
    const frames = malformedFrames();
    assert.ok(frames.length >= 60, `${frames.length} hostile frames`);
    const entitiesBefore = owner.sharding.localEntityCount;
    const protoKeys = Object.getOwnPropertyNames(Object.prototype).length;
    for (const [what, f] of frames) {
      const c = counters();
      await sendThenMarker([f]);
      // Remoting refuses the frame (its codec threw a typed EnvelopeDecodeError), and sharding counts it as a
      // malformed envelope: once each, whatever the frame carried.
      assert.deepEqual(delta(c), { rejected: 1, undecodable: 1, remotingRejected: 1 }, what);
    }
    assertNoHostileDelivered();
    assert.equal(owner.sharding.localEntityCount, entitiesBefore, "no entity activated by a refused frame");
    assert.equal(({} as Record<string, unknown>).polluted, undefined, "no prototype polluted");
    assert.equal(Object.getOwnPropertyNames(Object.prototype).length, protoKeys);
    assert.equal(raw.isClosed(), false, "the peer's connection stays up: a malformed frame costs the frame");
    assert.deepEqual(uncaught, []);
  } finally {
    process.off("uncaughtException", onUncaught);
    process.off("unhandledRejection", onUncaught);
  }
});

test("a batch that decodes but names what the owner does not have is refused per envelope, typed and counted, delivering nothing", async () => {
  // An entity never addressed before, so an activation would show.
  const fresh = owned[2]!;
  const hostile = hostileBase + 100;
  const good = (n: number) => entry({ entityId: fresh }, n);
  const nested = (name: string | Buffer, format: number, payload: string | Buffer) =>
    frame(batchPayload([entryWithNested(fresh, Buffer.from(name), format, Buffer.from(payload))]));
  const cases: [string, Buffer, Partial<Counters>][] = [
    // Not a type or settings of this node: the envelope is rejected as any such single direct envelope is.
    [
      "a non-UTF-8 entity type",
      frame(batchPayload([good(hostile)], { entityType: Buffer.from([0xff, 0xfe]) })),
      { rejected: 1 },
    ],
    ["an entity type not registered", frame(batchPayload([good(hostile)], { entityType: "Nope" })), { rejected: 1 }],
    [
      "a digest no settings here have",
      frame(batchPayload([good(hostile)], { digest: digest === 1 ? 2 : 1 })),
      { rejected: 1 },
    ],
    ["digest -0", frame(batchPayload([good(hostile)], { digest: -0 })), { rejected: 1 }],
    [
      "an entity id of another shard",
      frame(batchPayload([entry({ entityId: fresh, shardId: owner.sharding.shardOf(type, owned[3]!) }, hostile)])),
      { rejected: 1 },
    ],
    ["shard 9,999 of 16", frame(batchPayload([entry({ entityId: fresh, shardId: 9_999 }, hostile)])), { rejected: 1 }],
    // The nested message is decoded where it is delivered: refused there (malformedEnvelopes.payload), not activated.
    ["a nested __proto__ name", nested("__proto__", PayloadFormat.json, "{}"), { rejected: 1, payload: 1 }],
    ["a nested constructor name", nested("constructor", PayloadFormat.json, "{}"), { rejected: 1, payload: 1 }],
    ["a nested name not registered", nested("no.such.type", PayloadFormat.json, "{}"), { rejected: 1, payload: 1 }],
    [
      "a nested non-UTF-8 name",
      nested(Buffer.from([0xff, 0xc3]), PayloadFormat.json, "{}"),
      { rejected: 1, payload: 1 },
    ],
    [
      "a nested name of 1,024 characters",
      nested("n".repeat(1_024), PayloadFormat.json, "{}"),
      { rejected: 1, payload: 1 },
    ],
    [
      "a Seq whose JSON sets __proto__",
      nested("Seq", PayloadFormat.json, '{"__proto__":{"polluted":true},"n":1}'),
      { rejected: 1, payload: 1 },
    ],
    [
      "a Seq nested 20,000 deep",
      nested("Seq", PayloadFormat.json, `{"n":${deepJson(20_000)}}`),
      { rejected: 1, payload: 1 },
    ],
    ["a Seq that is not JSON", nested("Seq", PayloadFormat.json, "{"), { rejected: 1, payload: 1 }],
    [
      "a Seq under a binary fingerprint it does not have",
      nested("Seq", PayloadFormat.binary, "\u0000\u0000\u0000\u0001{}"),
      { rejected: 1, payload: 1 },
    ],
    [
      "a control message's name, malformed",
      nested(wireNames.passivateShard, PayloadFormat.json, "{}"),
      { rejected: 1, payload: 1 },
    ],
    // A protocol envelope nested as the message (well-formed, of this owner's type and grant): never decoded nested,
    // refused where it is delivered; before, a nested batch reached the entity as its message.
    [
      "a nested direct batch, binary",
      nested(wireNames.directBatch, PayloadFormat.binary, containerBytes(wireNames.directBatch, hostile)),
      { rejected: 1, payload: 1 },
    ],
    [
      "a nested direct envelope, binary",
      nested(wireNames.directEnvelope, PayloadFormat.binary, containerBytes(wireNames.directEnvelope, hostile)),
      { rejected: 1, payload: 1 },
    ],
    [
      "a nested direct batch, JSON",
      nested(
        wireNames.directBatch,
        PayloadFormat.json,
        JSON.stringify({
          envelopes: [directFields(fresh, { type: registry.registrationOf(new Seq(0)).name, payload: { n: hostile } })],
        }),
      ),
      { rejected: 1, payload: 1 },
    ],
    [
      "a compact batch of direct batches",
      frame(
        compactPayload(
          [compactRecord({ entityId: fresh, payload: containerBytes(wireNames.directBatch, hostile, false) }, hostile)],
          { name: wireNames.directBatch, fingerprint: registry.lookupName(wireNames.directBatch)!.codec!.fingerprint },
        ),
      ),
      { rejected: 1, payload: 1 },
    ],
    // A compact record's payload is decoded where it is read, and kept encoded when it does not decode: refused
    // where it is delivered, as a general entry's.
    [
      "a compact batch of a wire name not registered",
      frame(compactPayload([compactRecord({ entityId: fresh }, hostile)], { name: "no.such.type" })),
      { rejected: 1, payload: 1 },
    ],
    [
      "a compact batch of a non-UTF-8 wire name",
      frame(compactPayload([compactRecord({ entityId: fresh }, hostile)], { name: Buffer.from([0xff, 0xc3]) })),
      { rejected: 1, payload: 1 },
    ],
    [
      "a compact batch under a fingerprint BinarySeq does not have",
      frame(compactPayload([compactRecord({ entityId: fresh }, hostile)], { fingerprint: 1 })),
      { rejected: 1, payload: 1 },
    ],
    [
      "a compact record one byte long (its payload has a trailing byte)",
      frame(
        compactPayload([
          compactRecord(
            {
              entityId: fresh,
              payload: Buffer.concat([binaryPayload(binarySeqCodec(), new BinarySeq(hostile)), Buffer.from([0])]),
            },
            hostile,
          ),
        ]),
      ),
      { rejected: 1, payload: 1 },
    ],
    [
      "a compact record whose payload is cut",
      frame(compactPayload([compactRecord({ entityId: fresh, payload: Buffer.from([1, 2, 3]) }, hostile)])),
      { rejected: 1, payload: 1 },
    ],
    [
      "a compact record of another shard",
      frame(
        compactPayload([compactRecord({ entityId: fresh, shardId: owner.sharding.shardOf(type, owned[3]!) }, hostile)]),
      ),
      { rejected: 1 },
    ],
    // An entry alone: an unknown message to the daemon.
    ["a batch entry sent alone", frame(good(hostile), wireNames.directBatchEntry), { rejected: 1 }],
  ];
  const entitiesBefore = owner.sharding.localEntityCount;
  for (const [what, f, expected] of cases) {
    const c = counters();
    await sendThenMarker([f]);
    assert.deepEqual(delta(c), expected, what);
  }
  assertNoHostileDelivered();
  assert.deepEqual(sink(fresh), []);
  assert.equal(owner.sharding.localEntityCount, entitiesBefore, "no entity activated by a refused envelope");
  assert.equal(({} as Record<string, unknown>).polluted, undefined, "no prototype polluted");
});

test("of a well-formed batch the owner refuses exactly the envelopes it must, each counted once, and delivers the others in order", async () => {
  const [a, , , c] = owned as [string, string, string, string];
  const [elsewhere] = notOwned as [string];
  const aBefore = sink(a).length;
  const cBefore = sink(c).length;
  // A shard the owner does not own, in the middle: that one refused, the rest delivered in order.
  let before = counters();
  await sendThenMarker([
    frame(
      batchPayload(
        seqEntries([
          [a, 11],
          [elsewhere, hostileBase + 201],
          [a, 12],
          [c, 13],
          [elsewhere, hostileBase + 202],
          [a, 14],
        ]),
      ),
    ),
  ]);
  assert.deepEqual(delta(before), { rejected: 2, directRefusals: 2 });
  assert.deepEqual(
    sink(a)
      .slice(aBefore)
      .filter((n) => n < 1_000_000),
    [11, 12, 14],
  );
  assert.deepEqual(sink(c).slice(cBefore), [13]);
  assert.deepEqual(sink(elsewhere), []);
  // A whole batch under a grant the owner never gave: every envelope refused, once each.
  const three = (named = generation) =>
    (
      [
        [a, hostileBase + 300],
        [c, hostileBase + 301],
        [a, hostileBase + 302],
      ] as [string, number][]
    ).map(([id, n]) => entry({ entityId: id, generation: named }, n));
  before = counters();
  await sendThenMarker([frame(batchPayload(three(generation + 5)))]);
  assert.deepEqual(delta(before), { rejected: 3, directRefusals: 3 }, "a generation past the plan's");
  for (const [what, header] of [
    ["another node's uid as coordinator", { uid: caller.cluster.selfAddress.uid }],
    ["a made-up coordinator uid", { uid: "0123456789abcdef" }],
  ] as [string, Header][]) {
    before = counters();
    await sendThenMarker([frame(batchPayload(three(), header))]);
    assert.deepEqual(delta(before), { rejected: 3, directRefusals: 3 }, what);
  }
  assertNoHostileDelivered();
});

test("after all that the owner still serves sharded traffic, direct batches included", async () => {
  const batchesBefore = caller.sharding.stats.directBatches;
  const refs = owned.map((id) => caller.sharding.entityRefFor<OrderCommand>(type, id));
  // The first message of a shard goes through the coordinator and asks for the grant; later ones go direct.
  for (const ref of refs) await ref.ask(new Seq(500), OrderReply, 5_000);
  await eventually(
    async () => {
      for (let n = 0; n < 4; n++) for (const ref of refs) ref.tell(new Seq(600 + n));
      const reply = await refs[0]!.ask(new Seq(700), OrderReply, 5_000);
      return reply.host === owner.system.address.toString() && caller.sharding.stats.directBatches > batchesBefore;
    },
    { what: "direct batches from the caller to the owner", describe: () => caller.sharding.stats },
  );
  assertNoHostileDelivered();
  assert.equal(raw.isClosed(), false);
});
