/**
 * The fuzzer's frame generator: every frame kind of the remoting protocol after the handshake (user envelopes with
 * JSON and binary payloads, header-compressed ones, ask failures, system messages, acks, heartbeats, unknown kinds),
 * with the payload types a node carries (test messages, the fuzz classes, every cluster and sharding message), and
 * the handshake documents of both sides. Each frame comes with what the receiving node must count for it, so the
 * harness can check that every frame is accounted for.
 */
import { compileCodec } from "../../src/remote/codec.ts";
import { FrameKind, PayloadFormat } from "../../src/remote/envelope.ts";
import { protocolVersion } from "../../src/remote/handshake.ts";
import { headerTableSize } from "../../src/remote/header-table.ts";
import { MessageRegistry } from "../../src/remote/message-registry.ts";
import { StableHashPartitioner } from "../../src/sharding/index.ts";
import { registerShardingWireTypes } from "../../src/sharding/internal/codec.ts";
import { wireNames } from "../../src/sharding/internal/messages.ts";
import { settingsDigest } from "../../src/sharding/internal/settings-digest.ts";
import type { Prng } from "../fixtures/prng.ts";
import { deepValues, type Hostile, headerStrings, pickHostileJson, smallJson } from "./dictionary.ts";
import { describeMutation, type Json, type JsonMutation, pathsOf, randomMutation, renderJson } from "./json.ts";
import { binaryFields, fuzzTypeNames } from "./types.ts";

/** What the target told the fuzzer about itself. */
export interface TargetInfo {
  readonly uniqueAddress: string;
  readonly address: string;
  readonly system: string;
  readonly clusterName: string;
  readonly settingsKey: string;
  readonly entityType: string;
  /** The type's shard count: an envelope's shard matches its entity id only under it. */
  readonly shardCount: number;
  readonly maxFrameBytes: number;
}

/** State of one fuzzing connection. */
export interface FuzzContext {
  readonly rng: Prng;
  readonly target: TargetInfo;
  /** The fuzzer's own claimed unique address on this connection. */
  readonly self: string;
  /** Biggest huge value, in bytes, and how often one is used. */
  readonly hugeBytes: number;
  readonly hugeChance: number;
  /** Next system sequence number that would be in order. */
  seq: number;
  /** Header ids defined on this connection (maybe refused, which the node must count too). */
  readonly definedIds: number[];
  /** `/temp/…` reply actors of asks the target sent the fuzzer (ask failures and replies go there). */
  readonly temps: string[];
}

/** One generated frame and what the node must count for it. */
export interface GenFrame {
  /** The whole frame, length prefix included. */
  readonly bytes: Buffer;
  /** What it is, for reports: `user fuzz.plain c=toStringNumber`. */
  readonly label: string;
  /** Frames the node's decoder yields for it (0 for a framing error). */
  readonly framesIn: 0 | 1;
  /** Least and most the node's outcome counters (delivered, dead letters, rejected, system) move for it. */
  readonly outcome: readonly [number, number];
  /** Heartbeat replies the node writes for it. */
  readonly heartbeats: 0 | 1;
  /** The node closes the connection on it (a framing error): it is sent alone, after a fence. */
  readonly closes: boolean;
}

/** Frames `payload` with a correct length prefix. */
export function frame(payload: Buffer): Buffer {
  const out = Buffer.allocUnsafe(4 + payload.length);
  out.writeUInt32BE(payload.length, 0);
  payload.copy(out, 4);
  return out;
}

/** A control frame `[kind][json bytes]`. */
export function controlFrame(kind: number, body: Buffer): Buffer {
  return frame(Buffer.concat([Buffer.from([kind]), body]));
}

function u16(n: number): Buffer {
  const b = Buffer.allocUnsafe(2);
  b.writeUInt16BE(n & 0xffff, 0);
  return b;
}

function u32be(n: number): Buffer {
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32BE(n >>> 0, 0);
  return b;
}

/** A binary user header from raw parts (see `writeUserHeader`); lengths are taken from the parts, cut to fit. */
export function userHeader(parts: {
  kind: number;
  headerId: number;
  recipient: Buffer;
  sender: Buffer;
  senderUid: Buffer;
  typeName: Buffer;
  format: number;
  fingerprint: number;
}): Buffer {
  const cut16 = (b: Buffer) => b.subarray(0, 0xffff);
  const uid = parts.senderUid.subarray(0, 255);
  const out = [
    Buffer.from([parts.kind]),
    u16(parts.headerId),
    u16(cut16(parts.recipient).length),
    cut16(parts.recipient),
    u16(cut16(parts.sender).length),
    cut16(parts.sender),
    Buffer.from([uid.length]),
    uid,
    u16(cut16(parts.typeName).length),
    cut16(parts.typeName),
    Buffer.from([parts.format & 0xff]),
  ];
  if (parts.format === PayloadFormat.binary) out.push(u32be(parts.fingerprint));
  return Buffer.concat(out);
}

// ---- JSON payload templates, one per registered type -------------------------------------------------------------

function member(address: string, status = "Up"): Json {
  return { address, status, roles: [], upNumber: 1, revision: 1, changedBy: address };
}

const digest = "0".repeat(64);

/** Valid JSON payloads (before mutation) of every type the target knows, by wire name. */
function payloadTemplates(ctx: FuzzContext): Record<string, Json> {
  const t = ctx.target;
  const me = ctx.self;
  const cn = t.clusterName;
  return {
    "test.ping": { n: 1, text: "" },
    "test.pong": { n: 1 },
    "test.forward": { to: "/user/sink", n: 1 },
    "test.sequenced": { from: "f", seq: 1 },
    [fuzzTypeNames.plain]: { a: 1, b: "b", c: null },
    [fuzzTypeNames.getter]: { n: 1, kind: "k" },
    [fuzzTypeNames.schema]: { n: 1 },
    [fuzzTypeNames.fromJson]: { x: 1 },
    [fuzzTypeNames.throwsValue]: { x: 1 },
    [fuzzTypeNames.binary]: { n: 1, i: 1, b: true, s: "s", j: [1], o: null },
    [fuzzTypeNames.binaryFromJson]: { n: 1, i: 1, b: true, s: "s", j: [1], o: "o" },
    "movie.cluster.join.v1": { clusterName: cn, from: me, member: member(me, "Joining") },
    "movie.cluster.welcome.v1": { clusterName: cn, from: me, to: t.uniqueAddress, members: [member(me)] },
    "movie.cluster.gossip.v1": {
      clusterName: cn,
      from: me,
      to: t.uniqueAddress,
      round: 1,
      digest,
      members: [member(t.uniqueAddress), member(me)],
    },
    "movie.cluster.gossip-ack.v1": { clusterName: cn, from: me, to: t.uniqueAddress, round: 1, digest },
    "movie.cluster.heartbeat.v1": { clusterName: cn, from: me, to: t.uniqueAddress, seq: 1 },
    "movie.cluster.heartbeat-ack.v1": { clusterName: cn, from: me, to: t.uniqueAddress, seq: 1 },
    "movie.cluster.leave.v1": { clusterName: cn, from: me, target: me },
    "movie.cluster.down.v1": { clusterName: cn, from: me, target: me },
    "movie.cluster.sharding.control-ack.v1": { accepted: true },
    "movie.cluster.sharding.plan-request.v1": {
      entityType: t.entityType,
      settingsKey: t.settingsKey,
      requester: me,
      knownAuthor: null,
      knownGeneration: 0,
    },
    "movie.cluster.sharding.plan-snapshot-request.v1": {
      entityType: t.entityType,
      settingsKey: t.settingsKey,
      coordinator: me,
    },
    "movie.cluster.sharding.plan-snapshot.v1": {
      entityType: t.entityType,
      settingsKey: t.settingsKey,
      coordinator: me,
      generation: 1,
      assignments: [{ shardId: 0, owner: me }],
    },
    "movie.cluster.sharding.plan-update.v1": {
      entityType: t.entityType,
      settingsKey: t.settingsKey,
      coordinator: me,
      generation: 1,
      assignments: [{ shardId: 0, owner: me }],
    },
    "movie.cluster.sharding.passivate-shard.v1": {
      entityType: t.entityType,
      settingsKey: t.settingsKey,
      shardId: 0,
      coordinator: me,
      nextOwner: null,
    },
    "movie.cluster.sharding.prepare-shard.v1": {
      entityType: t.entityType,
      settingsKey: t.settingsKey,
      shardId: 0,
      coordinator: me,
    },
  };
}

/** Where each type is normally sent. */
function recipientOf(typeName: string): string {
  if (typeName.startsWith("movie.cluster.sharding.")) return "/system/sharding";
  if (typeName.startsWith("movie.cluster.")) return "/system/cluster";
  if (typeName === "test.ping") return "/user/echo";
  return "/user/sink";
}

// ---- prediction --------------------------------------------------------------------------------------------------

function parseObject(body: Buffer): Record<string, unknown> | null {
  try {
    const v: unknown = JSON.parse(body.toString("utf8"));
    return v !== null && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/** What the node counts for a complete frame with `payload` (kind byte first), from its kind alone. */
export function predict(payload: Buffer): Pick<GenFrame, "outcome" | "heartbeats"> {
  const kind = payload[0];
  if (kind === FrameKind.heartbeat) return { outcome: [0, 0], heartbeats: 1 };
  if (kind === FrameKind.heartbeatReply) return { outcome: [0, 0], heartbeats: 0 };
  if (kind === FrameKind.ack) {
    const doc = parseObject(payload.subarray(1));
    return { outcome: doc !== null && typeof doc.seq === "number" ? [0, 0] : [1, 1], heartbeats: 0 };
  }
  if (kind === FrameKind.system) {
    const doc = parseObject(payload.subarray(1));
    const seq = doc?.seq;
    const valid =
      doc !== null && typeof seq === "number" && Number.isInteger(seq) && seq >= 1 && typeof doc.to === "string";
    // In order: delivered (and maybe then refused by apply); a duplicate: counted; a gap: only acknowledged.
    return { outcome: valid ? [0, 2] : [1, 1], heartbeats: 0 };
  }
  // User, compressed, ask failure, a handshake frame after the handshake, any unknown kind: exactly one outcome.
  return { outcome: [1, 1], heartbeats: 0 };
}

function made(payload: Buffer, label: string): GenFrame {
  return { bytes: frame(payload), label, framesIn: 1, closes: false, ...predict(payload) };
}

// ---- generators --------------------------------------------------------------------------------------------------

const sysKinds = ["stop", "drain", "watch", "unwatch", "terminated"];
/** Targets of system messages: never /user/echo, which the liveness ask needs. */
const sysTargets = ["/user/sink", "/user/none", "/system/none", "/temp/none", "/deadbeef", "/user/sink/child"];

function systemFrame(ctx: FuzzContext): GenFrame {
  const rng = ctx.rng;
  const sys = rng.pick(sysKinds);
  const doc: Record<string, Json> = { seq: ctx.seq, to: rng.pick(sysTargets), sys };
  if (sys !== "stop" && sys !== "drain") {
    doc.ref = rng.chance(0.5) ? `${ctx.self.split("#")[0]}/user/watcher` : `${ctx.target.address}/user/sink`;
    doc.refUid = rng.chance(0.5) ? (ctx.self.split("#")[1] ?? "u") : null;
    if (sys === "terminated") doc.addressTerminated = rng.chance(0.5);
  }
  const mutation = rng.chance(0.85) ? randomMutation(rng, doc, ctx.hugeBytes, ctx.hugeChance) : { op: "none" as const };
  if (mutation.op === "none" || rng.chance(0.7)) ctx.seq++;
  return made(
    Buffer.concat([Buffer.from([FrameKind.system]), renderJson(doc, mutation)]),
    `system ${sys} ${describeMutation(mutation)}`,
  );
}

function ackFrame(ctx: FuzzContext): GenFrame {
  const doc: Json = { seq: ctx.rng.int(5), gap: ctx.rng.chance(0.5) };
  const mutation = randomMutation(ctx.rng, doc, ctx.hugeBytes, ctx.hugeChance);
  return made(
    Buffer.concat([Buffer.from([FrameKind.ack]), renderJson(doc, mutation)]),
    `ack ${describeMutation(mutation)}`,
  );
}

function heartbeatFrame(ctx: FuzzContext): GenFrame {
  const kind = ctx.rng.chance(0.7) ? FrameKind.heartbeat : FrameKind.heartbeatReply;
  const body = ctx.rng.chance(0.5) ? Buffer.from("{}") : pickHostileJson(ctx.rng, 0, 0).bytes;
  return made(
    Buffer.concat([Buffer.from([kind]), body]),
    `heartbeat${kind === FrameKind.heartbeatReply ? "Reply" : ""}`,
  );
}

function headerString(ctx: FuzzContext, valid: string): { bytes: Buffer; name: string } {
  if (ctx.rng.chance(0.75)) return { bytes: Buffer.from(valid), name: "" };
  const h: Hostile = ctx.rng.pick(headerStrings);
  return { bytes: h.bytes, name: h.name };
}

function pickHeaderId(ctx: FuzzContext): number {
  const r = ctx.rng.int(10);
  if (r < 6) return 0;
  if (r < 9) return 1 + ctx.rng.int(headerTableSize);
  return ctx.rng.pick([headerTableSize + 1, 0xffff, 0x8000]);
}

/** The header of a user (or ask failure) envelope, with maybe one hostile part; returns bytes and a label. */
function header(
  ctx: FuzzContext,
  kind: number,
  typeName: string,
  recipient: string,
  format: number,
  fingerprint: number,
): { bytes: Buffer; label: string; headerId: number } {
  const rng = ctx.rng;
  const selfAddress = ctx.self.split("#")[0]!;
  const validSender = rng.pick([
    "",
    `${selfAddress}/temp/$fz${rng.int(100)}`,
    `${selfAddress}/user/peer`,
    `${ctx.target.address}/user/sink`,
  ]);
  const r = headerString(ctx, recipient);
  const s = headerString(ctx, validSender);
  const u = rng.chance(0.8)
    ? { bytes: Buffer.from(rng.chance(0.5) ? "" : (ctx.self.split("#")[1] ?? "")), name: "" }
    : {
        bytes: rng.bytes(rng.int(256)),
        name: "randomUid",
      };
  const t = headerString(ctx, typeName);
  const headerId = pickHeaderId(ctx);
  const fmt = rng.chance(0.95) ? format : rng.int(256);
  const fp = rng.chance(0.9) ? fingerprint : rng.u32();
  const bytes = userHeader({
    kind,
    headerId,
    recipient: r.bytes,
    sender: s.bytes,
    senderUid: u.bytes,
    typeName: t.bytes,
    format: fmt,
    fingerprint: fp,
  });
  if (headerId !== 0 && headerId <= headerTableSize) ctx.definedIds.push(headerId);
  if (ctx.definedIds.length > 64) ctx.definedIds.shift();
  const hostile = [r.name && `recipient=${r.name}`, s.name && `sender=${s.name}`, u.name, t.name && `type=${t.name}`]
    .filter((x) => x)
    .join(",");
  return {
    bytes,
    headerId,
    label: `${hostile}${fmt !== format ? ` format=${fmt}` : ""}${fp !== fingerprint ? " fingerprint" : ""}`,
  };
}

function userJsonFrame(ctx: FuzzContext): GenFrame {
  const templates = payloadTemplates(ctx);
  const typeName = ctx.rng.pick(Object.keys(templates));
  const template = templates[typeName]!;
  const mutation: JsonMutation = ctx.rng.chance(0.9)
    ? randomMutation(ctx.rng, template, ctx.hugeBytes, ctx.hugeChance)
    : { op: "none" };
  const h = header(ctx, FrameKind.user, typeName, recipientOf(typeName), PayloadFormat.json, 0);
  return made(
    Buffer.concat([h.bytes, renderJson(template, mutation)]),
    `user ${typeName} ${describeMutation(mutation)} ${h.label}`.trim(),
  );
}

function askFailureFrame(ctx: FuzzContext): GenFrame {
  const template: Json = { remoteClass: "Error", message: "failed" };
  const mutation = randomMutation(ctx.rng, template, ctx.hugeBytes, ctx.hugeChance);
  const recipient = ctx.temps.length > 0 && ctx.rng.chance(0.8) ? ctx.rng.pick(ctx.temps) : "/temp/$fz0";
  const h = header(ctx, FrameKind.askFailure, "movie.ask-failure", recipient, PayloadFormat.json, 0);
  return made(
    Buffer.concat([h.bytes, renderJson(template, mutation)]),
    `askFailure ${describeMutation(mutation)} ${h.label}`.trim(),
  );
}

const [envelopeFingerprint, directEnvelopeFingerprint] = (() => {
  const registry = new MessageRegistry(null);
  registerShardingWireTypes(registry);
  return [
    registry.lookupName(wireNames.envelope)!.codec!.fingerprint,
    registry.lookupName(wireNames.directEnvelope)!.codec!.fingerprint,
  ];
})();
const binaryCodec = compileCodec(fuzzTypeNames.binary, binaryFields);
/** The target's partitioner (the default one). */
const partitioner = new StableHashPartitioner();

/** A little-endian string field of a binary payload, maybe lying about its length or ASCII flag. */
function binaryText(ctx: FuzzContext, text: Buffer): Buffer {
  const rng = ctx.rng;
  let length = text.length;
  const ascii = text.every((c) => c < 0x80);
  let word = ascii && rng.chance(0.8) ? (length | 0x80000000) >>> 0 : length;
  if (rng.chance(0.1)) {
    length = rng.pick([0, text.length + 1, 0x7fffffff, 0xffffffff]);
    word = length >>> 0;
  }
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32LE(word >>> 0, 0);
  return Buffer.concat([b, text]);
}

function hostileText(ctx: FuzzContext): { bytes: Buffer; name: string } {
  if (ctx.rng.chance(0.6)) return { bytes: Buffer.from("text"), name: "" };
  const h = ctx.rng.pick(headerStrings);
  return { bytes: h.bytes, name: h.name };
}

/** A binary payload of the fuzz binary classes: every field a valid or hostile value. */
function binaryPayload(ctx: FuzzContext): { bytes: Buffer; label: string } {
  const rng = ctx.rng;
  const parts: Buffer[] = [];
  const labels: string[] = [];
  const f64 = Buffer.allocUnsafe(8);
  f64.writeDoubleLE(rng.pick([1, -0, Number.NaN, Number.POSITIVE_INFINITY, 1e308, 5e-324, 2 ** 53 + 2]), 0);
  parts.push(f64);
  const i32 = Buffer.allocUnsafe(4);
  i32.writeInt32LE(rng.pick([0, 1, -1, 0x7fffffff, -0x80000000]), 0);
  parts.push(i32);
  const bool = rng.chance(0.9) ? rng.int(2) : rng.pick([2, 255]);
  if (bool > 1) labels.push(`b=${bool}`);
  parts.push(Buffer.from([bool]));
  const s = hostileText(ctx);
  if (s.name) labels.push(`s=${s.name}`);
  parts.push(binaryText(ctx, s.bytes));
  const j = rng.chance(0.5)
    ? { name: "", bytes: Buffer.from("[1]") }
    : pickHostileJson(rng, ctx.hugeBytes, ctx.hugeChance);
  if (j.name) labels.push(`j=${j.name}`);
  parts.push(binaryText(ctx, j.bytes));
  const presence = rng.chance(0.9) ? rng.int(3) : rng.pick([3, 255]);
  parts.push(Buffer.from([presence]));
  if (presence === 2) parts.push(binaryText(ctx, hostileText(ctx).bytes));
  else if (presence > 2) labels.push(`o.presence=${presence}`);
  let bytes = Buffer.concat(parts);
  const cut = rng.int(10);
  if (cut === 0) {
    const at = rng.int(bytes.length);
    bytes = bytes.subarray(0, at);
    labels.push(`truncated@${at}`);
  } else if (cut === 1) {
    bytes = Buffer.concat([bytes, rng.bytes(1 + rng.int(8))]);
    labels.push("trailing");
  }
  return { bytes, label: labels.join(",") || "valid" };
}

function userBinaryFrame(ctx: FuzzContext): GenFrame {
  const typeName = ctx.rng.chance(0.7) ? fuzzTypeNames.binary : fuzzTypeNames.binaryFromJson;
  const p = binaryPayload(ctx);
  const h = header(ctx, FrameKind.user, typeName, "/user/sink", PayloadFormat.binary, binaryCodec.fingerprint);
  return made(Buffer.concat([h.bytes, p.bytes]), `userBinary ${typeName} ${p.label} ${h.label}`.trim());
}

/**
 * The fixed fields of a sharding envelope (see `envelope-codec.ts`), maybe with hostile values: the v2 layout, or with
 * `direct` the direct envelope's (a settings digest and a coordinator uid in place of the key and the address, and a
 * generation after the v2 fields).
 */
function shardingFixed(ctx: FuzzContext, direct: boolean): { bytes: Buffer; label: string } {
  const rng = ctx.rng;
  const labels: string[] = [];
  const str = (name: string, valid: string): Buffer => {
    if (rng.chance(0.85)) return binaryText(ctx, Buffer.from(valid));
    const h = rng.pick(headerStrings);
    labels.push(`${name}=${h.name}`);
    return binaryText(ctx, h.bytes);
  };
  const i32 = (name: string, valid: number): Buffer => {
    const b = Buffer.allocUnsafe(4);
    const v = rng.chance(0.85) ? valid : rng.pick([-1, 0x7fffffff, -0x80000000, 1 << 20]);
    if (v !== valid) labels.push(`${name}=${v}`);
    b.writeInt32LE(v, 0);
    return b;
  };
  const f64 = (name: string, valid: number, hostile: readonly number[]): Buffer => {
    const b = Buffer.allocUnsafe(8);
    const v = rng.chance(0.85) ? valid : rng.pick(hostile);
    if (!Object.is(v, valid)) labels.push(`${name}=${v}`);
    b.writeDoubleLE(v, 0);
    return b;
  };
  const kind = rng.chance(0.9) ? rng.pick(["User", "Activate", "Passivate"]) : "Bogus";
  const entityId = `e${rng.int(50)}`;
  // Mostly the entity's own shard, so that a well-formed envelope gets past the node's shard check to its routing.
  const ownShard = partitioner.shardFor(ctx.target.entityType, entityId, ctx.target.shardCount);
  const parts = [
    str("kind", kind),
    str("entityType", ctx.target.entityType),
    str("entityId", entityId),
    i32("shardId", rng.chance(0.7) ? ownShard : rng.int(ctx.target.shardCount)),
  ];
  if (direct) {
    const digest = settingsDigest(ctx.target.settingsKey);
    parts.push(
      f64("settingsDigest", digest, [-1, 0.5, 2 ** 52, Number.NaN, Number.POSITIVE_INFINITY, -0, digest + 1]),
      i32("hopCount", 2),
    );
    const uid = (address: string) => address.slice(address.lastIndexOf("#") + 1);
    parts.push(str("coordinatorUid", rng.chance(0.5) ? uid(ctx.self) : uid(ctx.target.uniqueAddress)));
  } else {
    parts.push(str("settingsKey", ctx.target.settingsKey), i32("hopCount", rng.int(3)));
    const coordinator = rng.int(3);
    if (coordinator === 0) parts.push(Buffer.from([0]));
    else if (coordinator === 1) parts.push(Buffer.from([1]));
    else parts.push(Buffer.from([2]), str("coordinator", rng.chance(0.5) ? ctx.self : ctx.target.uniqueAddress));
  }
  const timeout = rng.int(3);
  if (timeout < 2) parts.push(Buffer.from([timeout]));
  else {
    const f = Buffer.allocUnsafe(8);
    f.writeDoubleLE(rng.pick([1000, -1, Number.NaN, Number.POSITIVE_INFINITY, 0]), 0);
    parts.push(Buffer.from([2]), f);
  }
  parts.push(Buffer.from([rng.chance(0.95) ? rng.int(2) : 7]), i32("deliveryAttempt", 0));
  // The traceparent's presence byte (absent, null, or a text that may be no trace context), so that a well-formed
  // envelope reaches the sharding node rather than stopping at the decoder.
  const trace = rng.int(3);
  if (trace < 2) parts.push(Buffer.from([trace]));
  else parts.push(Buffer.from([2]), str("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"));
  if (direct)
    parts.push(f64("generation", 1 + rng.int(8), [0, -1, 1.5, 2 ** 41, Number.NaN, Number.NEGATIVE_INFINITY]));
  return { bytes: Buffer.concat(parts), label: `${direct ? "direct " : ""}${kind} ${labels.join(",")}`.trim() };
}

function shardingEnvelopeFrame(ctx: FuzzContext): GenFrame {
  const rng = ctx.rng;
  const labels: string[] = [];
  let nested = Buffer.alloc(0);
  if (rng.chance(0.8)) {
    const name = rng.chance(0.85) ? fuzzTypeNames.plain : rng.pick(["test.ping", "nope", "", "__proto__"]);
    const template: Json = { a: 1, b: "b", c: null };
    const mutation = rng.chance(0.7)
      ? randomMutation(rng, template, ctx.hugeBytes, ctx.hugeChance)
      : { op: "none" as const };
    labels.push(`message=${name}:${describeMutation(mutation)}`);
    const nameBytes = Buffer.from(name);
    const format = rng.chance(0.95) ? PayloadFormat.json : rng.int(256);
    nested = Buffer.concat([
      u16(nameBytes.length),
      nameBytes,
      Buffer.from([format]),
      ...(format === PayloadFormat.binary ? [u32be(rng.u32())] : []),
      renderJson(template, mutation),
    ]);
  }
  const direct = rng.chance(0.35);
  const fixed = shardingFixed(ctx, direct);
  let length = nested.length;
  if (rng.chance(0.05)) {
    length = rng.pick([nested.length + 1, 0xffffffff, 3]);
    labels.push(`nestedLength=${length}`);
  }
  let payload = Buffer.concat([u32be(length), nested, fixed.bytes]);
  if (rng.chance(0.08)) {
    const at = rng.int(payload.length);
    payload = payload.subarray(0, at);
    labels.push(`truncated@${at}`);
  }
  const h = header(
    ctx,
    FrameKind.user,
    direct ? wireNames.directEnvelope : wireNames.envelope,
    "/system/sharding",
    PayloadFormat.binary,
    direct ? directEnvelopeFingerprint : envelopeFingerprint,
  );
  const typed = Buffer.concat([h.bytes, payload]);
  return made(typed, `sharding ${fixed.label} ${labels.join(" ")} ${h.label}`.trim());
}

function compressedFrame(ctx: FuzzContext): GenFrame {
  const rng = ctx.rng;
  const id =
    ctx.definedIds.length > 0 && rng.chance(0.8)
      ? rng.pick(ctx.definedIds)
      : rng.pick([0, 1, headerTableSize, headerTableSize + 1, 0xffff]);
  const body = rng.chance(0.3) ? binaryPayload(ctx).bytes : pickHostileJson(rng, ctx.hugeBytes, ctx.hugeChance).bytes;
  const short = rng.chance(0.05);
  const payload = short
    ? Buffer.from([FrameKind.userCompressed, id >> 8].slice(0, 1 + rng.int(2)))
    : Buffer.concat([Buffer.from([FrameKind.userCompressed]), u16(id), body]);
  return made(payload, `compressed id=${id}${short ? " short" : ""}`);
}

function unknownKindFrame(ctx: FuzzContext): GenFrame {
  const kind = ctx.rng.pick([0, FrameKind.handshake, 9, 127, 128, 255, ctx.rng.int(256)]);
  return made(Buffer.concat([Buffer.from([kind]), ctx.rng.bytes(ctx.rng.int(32))]), `kind ${kind}`);
}

function randomFrame(ctx: FuzzContext): GenFrame {
  const payload = ctx.rng.bytes(1 + ctx.rng.int(ctx.rng.chance(0.9) ? 64 : 4096));
  return made(payload, `random kind=${payload[0]}`);
}

/** A valid (or hostile) frame with bytes flipped, set, cut or repeated; the length prefix stays right. */
function mutatedFrame(ctx: FuzzContext): GenFrame {
  const rng = ctx.rng;
  const base = rng.pick([userJsonFrame, systemFrame, userBinaryFrame, shardingEnvelopeFrame, askFailureFrame])(ctx);
  let payload = Buffer.from(base.bytes.subarray(4));
  const ops: string[] = [];
  for (let n = 1 + rng.int(4); n > 0; n--) {
    const op = rng.int(5);
    if (payload.length === 0) break;
    const at = rng.int(payload.length);
    if (op === 0) payload[at] = payload[at]! ^ (1 << rng.int(8));
    else if (op === 1) payload[at] = rng.pick([0, 0xff, 0x7f, 0x80, 0x22, 0x5c, 0x7b]);
    else if (op === 2) payload = payload.subarray(0, Math.max(1, at));
    else if (op === 3)
      payload = Buffer.concat([payload.subarray(0, at), rng.bytes(1 + rng.int(16)), payload.subarray(at)]);
    else payload = Buffer.concat([payload, payload.subarray(at, at + 64)]);
    ops.push(`${["flip", "set", "cut", "insert", "repeat"][op]}@${at}`);
  }
  return made(payload, `mutated(${base.label}) ${ops.join(",")}`);
}

/** A frame whose length prefix breaks the stream: zero, or over the node's frame limit. */
export function framingFrame(ctx: FuzzContext): GenFrame {
  const length = ctx.rng.pick([0, ctx.target.maxFrameBytes + 1, 0xffffffff, 0x80000000]);
  const bytes = Buffer.concat([u32be(length), ctx.rng.bytes(ctx.rng.int(16))]);
  return { bytes, label: `framing length=${length}`, framesIn: 0, outcome: [1, 1], heartbeats: 0, closes: true };
}

const generators: readonly [number, (ctx: FuzzContext) => GenFrame][] = [
  [30, userJsonFrame],
  [10, userBinaryFrame],
  [10, shardingEnvelopeFrame],
  [12, systemFrame],
  [5, ackFrame],
  [4, heartbeatFrame],
  [6, askFailureFrame],
  [8, compressedFrame],
  [3, unknownKindFrame],
  [4, randomFrame],
  [8, mutatedFrame],
];
const totalWeight = generators.reduce((n, [w]) => n + w, 0);

/** One random frame of the post-handshake protocol (never a framing error: see {@link framingFrame}). */
export function nextFrame(ctx: FuzzContext): GenFrame {
  let r = ctx.rng.int(totalWeight);
  for (const [weight, generate] of generators) {
    if (r < weight) return generate(ctx);
    r -= weight;
  }
  return userJsonFrame(ctx);
}

// ---- handshake documents -----------------------------------------------------------------------------------------

/** The hello template a client sends. */
export function helloTemplate(target: TargetInfo, self: string, nonce: string): Record<string, Json> {
  return {
    step: "hello",
    version: protocolVersion,
    system: self.slice(self.indexOf("//") + 2, self.indexOf("@")),
    cluster: "",
    from: self,
    toSystem: target.system,
    nonce,
  };
}

/** A challenge template a (fake) server answers a hello with. */
export function challengeTemplate(system: string, from: string, nonce: string, proof: string): Record<string, Json> {
  return { step: "challenge", version: protocolVersion, system, cluster: "", from, nonce, proof };
}

/** A reject template. */
export const rejectTemplate: Json = { step: "reject", reason: "malformed", detail: "no" };

/** An accepted template. */
export const acceptedTemplate: Json = { step: "accepted" };

const dangerousNames = new Set([
  "toStringNumber",
  "toStringNull",
  "valueOfNumber",
  "bothObjects",
  "toJSONObject",
  "arrayOfBad",
]);
/** Values that break `String()` or a recursive walk. */
const dangerous: readonly Hostile[] = [...smallJson.filter((h) => dangerousNames.has(h.name)), ...deepValues];

/** A handshake frame of `template` under a random mutation (or none with probability `validChance`). */
export function handshakeFrame(
  rng: Prng,
  template: Json,
  validChance: number,
  hugeBytes: number,
  hugeChance: number,
): { bytes: Buffer; label: string; valid: boolean } {
  let mutation: JsonMutation = rng.chance(validChance)
    ? { op: "none" }
    : randomMutation(rng, template, hugeBytes, hugeChance);
  // Half the hostile ones put a value that breaks stringification or recursion at a field, the class of input that
  // ends a process where an error text is built from the peer's document.
  const paths = pathsOf(template);
  if (mutation.op !== "none" && paths.length > 0 && rng.chance(0.5)) {
    mutation = { op: "set", path: rng.pick(paths), value: rng.pick(dangerous) };
  }
  return {
    bytes: controlFrame(FrameKind.handshake, renderJson(template, mutation)),
    label: describeMutation(mutation),
    valid: mutation.op === "none",
  };
}

// ---- the systematic sweep: every dictionary value at every field of every JSON document -------------------------

/** Every single-field mutation of `template` with `values`: each value at each field, each field missing, extras. */
export function* allMutations(template: Json, values: readonly Hostile[]): Generator<JsonMutation> {
  const paths = pathsOf(template);
  for (const path of paths) {
    yield { op: "delete", path };
    for (const value of values) yield { op: "set", path, value };
  }
  for (const key of ["__proto__", "constructor", "prototype", "toString"]) {
    for (const value of values.slice(0, 8)) yield { op: "extra", path: [], key, value };
    yield { op: "extra", path: [], key, value: values.find((v) => v.name === "protoKey")! };
    yield { op: "extra", path: [], key, value: values.find((v) => v.name === "toStringNumber")! };
  }
  for (const value of values) yield { op: "root", value };
}

/** The JSON documents of every post-handshake frame kind: a label and how to frame one rendered body. */
function sweepDocuments(ctx: FuzzContext): { label: string; template: Json; wrap: (body: Buffer) => Buffer }[] {
  const docs: { label: string; template: Json; wrap: (body: Buffer) => Buffer }[] = [];
  const plainHeader = (kind: number, typeName: string, recipient: string, sender = "") =>
    userHeader({
      kind,
      headerId: 0,
      recipient: Buffer.from(recipient),
      sender: Buffer.from(sender),
      senderUid: Buffer.alloc(0),
      typeName: Buffer.from(typeName),
      format: PayloadFormat.json,
      fingerprint: 0,
    });
  for (const [typeName, template] of Object.entries(payloadTemplates(ctx))) {
    const head = plainHeader(FrameKind.user, typeName, recipientOf(typeName));
    docs.push({ label: `user ${typeName}`, template, wrap: (body) => Buffer.concat([head, body]) });
  }
  const failure = (recipient: string) => plainHeader(FrameKind.askFailure, "movie.ask-failure", recipient);
  docs.push({
    label: "askFailure",
    template: { remoteClass: "Error", message: "failed" },
    wrap: (body) => Buffer.concat([failure(ctx.temps[0] ?? "/temp/$fz0"), body]),
  });
  for (const sys of sysKinds) {
    const template: Record<string, Json> = { seq: 1, to: "/user/sink", sys };
    if (sys !== "stop" && sys !== "drain") {
      template.ref = `${ctx.target.address}/user/sink`;
      template.refUid = null;
      if (sys === "terminated") template.addressTerminated = false;
    }
    docs.push({
      label: `system ${sys}`,
      template,
      wrap: (body) => Buffer.concat([Buffer.from([FrameKind.system]), body]),
    });
  }
  docs.push({
    label: "ack",
    template: { seq: 0, gap: false },
    wrap: (body) => Buffer.concat([Buffer.from([FrameKind.ack]), body]),
  });
  const fixed = Buffer.concat([
    binaryTextExact("User"),
    binaryTextExact(ctx.target.entityType),
    binaryTextExact("e1"),
    Buffer.from([0, 0, 0, 0]),
    binaryTextExact(ctx.target.settingsKey),
    Buffer.from([0, 0, 0, 0]),
    Buffer.from([0]),
    Buffer.from([0]),
    Buffer.from([1]),
    Buffer.from([0, 0, 0, 0]),
  ]);
  const envelopeHead = userHeader({
    kind: FrameKind.user,
    headerId: 0,
    recipient: Buffer.from("/system/sharding"),
    sender: Buffer.alloc(0),
    senderUid: Buffer.alloc(0),
    typeName: Buffer.from(wireNames.envelope),
    format: PayloadFormat.binary,
    fingerprint: envelopeFingerprint,
  });
  const name = Buffer.from(fuzzTypeNames.plain);
  docs.push({
    label: "sharding message",
    template: { a: 1, b: "b", c: null },
    wrap: (body) => {
      const nested = Buffer.concat([u16(name.length), name, Buffer.from([PayloadFormat.json]), body]);
      return Buffer.concat([envelopeHead, u32be(nested.length), nested, fixed]);
    },
  });
  return docs;
}

function binaryTextExact(text: string): Buffer {
  const bytes = Buffer.from(text);
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32LE((bytes.length | 0x80000000) >>> 0, 0);
  return Buffer.concat([b, bytes]);
}

/**
 * The sweep's frames, every `stride`-th from `offset` (a stride of 1 is all of them): each dictionary value at each
 * field of each document, each field missing, extra `__proto__`/`constructor` keys, each value as the whole document.
 */
export function* sweepFrames(
  ctx: FuzzContext,
  values: readonly Hostile[],
  offset: number,
  stride: number,
): Generator<GenFrame> {
  let i = 0;
  for (const doc of sweepDocuments(ctx)) {
    for (const mutation of allMutations(doc.template, values)) {
      if (i++ % stride !== offset % stride) continue;
      yield made(doc.wrap(renderJson(doc.template, mutation)), `${doc.label} ${describeMutation(mutation)}`);
    }
  }
}

/** Handshake templates for the sweep before the handshake: the hello and the confirm. */
export function sweepHandshakes(
  target: TargetInfo,
  self: string,
  values: readonly Hostile[],
): { step: "hello" | "confirm"; bytes: Buffer; label: string }[] {
  const out: { step: "hello" | "confirm"; bytes: Buffer; label: string }[] = [];
  const hello = helloTemplate(target, self, "aabb");
  for (const mutation of allMutations(hello, values)) {
    out.push({
      step: "hello",
      bytes: controlFrame(FrameKind.handshake, renderJson(hello, mutation)),
      label: `hello ${describeMutation(mutation)}`,
    });
  }
  const confirm: Json = { step: "confirm", proof: "00" };
  for (const mutation of allMutations(confirm, values)) {
    out.push({
      step: "confirm",
      bytes: controlFrame(FrameKind.handshake, renderJson(confirm, mutation)),
      label: `confirm ${describeMutation(mutation)}`,
    });
  }
  return out;
}
