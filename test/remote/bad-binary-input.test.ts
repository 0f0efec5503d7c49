import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { compileCodec } from "../../src/remote/codec.ts";
import { FrameKind, type FrameKindValue, PayloadFormat, type PayloadFormatValue } from "../../src/remote/envelope.ts";
import { headerTableSize } from "../../src/remote/header-table.ts";
import {
  type InboundRejection,
  MessageEncodeError,
  MessageRegistry,
  type RemotingStats,
} from "../../src/remote/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { binaryPayload, compressedFrame, definingFrame } from "./fixtures/frames.ts";
import { Collector, type Node, startNode } from "./fixtures/nodes.ts";
import { type RawPeer, rawPeer } from "./fixtures/raw-peer.ts";

/** A class with a binary codec on both nodes. */
class Reading {
  constructor(
    readonly sensor: string,
    readonly value: number,
    readonly note: string | null = null,
  ) {}
}
/** A class registered without fields (JSON payload) on both nodes. */
class Plain {
  constructor(readonly n: number) {}
}
const readingFields = { sensor: "string", value: "number", note: "string?" } as const;
const codec = compileCodec("test.reading", readingFields);

let a: Node;
let b: Node;
let received: unknown[];
let rejections: InboundRejection[];

before(async () => {
  const registry = new MessageRegistry();
  registry.register(Reading, { name: "test.reading", fields: readingFields });
  registry.register(Plain, { name: "test.plain" });
  a = await startNode("bin-a", { registry });
  b = await startNode("bin-b", { registry });
  received = [];
  rejections = [];
  b.system.spawn(new Collector(received), "inbox");
  b.remoting.onInboundRejected((r) => rejections.push(r));
});
after(async () => {
  await Promise.all([a.system.terminate(), b.system.terminate()]);
});

/** The binary payload of `message` as the codec writes it. */
const payloadOf = (message: object): Buffer => binaryPayload(codec, message);

/** A framed user envelope to /user/inbox with its header written out (id `headerId`), and `payload` after it. */
function defining(
  headerId: number,
  payload: Buffer,
  options: { type?: string; format?: PayloadFormatValue; fingerprint?: number; kind?: FrameKindValue } = {},
): Buffer {
  return definingFrame(
    headerId,
    {
      recipient: "/user/inbox",
      typeName: options.type ?? "test.reading",
      fingerprint: options.fingerprint ?? codec.fingerprint,
      ...(options.format === undefined ? {} : { format: options.format }),
      ...(options.kind === undefined ? {} : { kind: options.kind }),
    },
    payload,
  );
}

function rejectedSince(before: RemotingStats): Record<string, number> {
  const now = b.remoting.stats.rejected;
  return Object.fromEntries(
    Object.entries(now)
      .map(([k, v]) => [k, v - before.rejected[k as keyof RemotingStats["rejected"]]])
      .filter(([, v]) => v !== 0),
  );
}

/** Sends `frames` then one good envelope as a marker; resolves when the marker arrived. */
async function sendThenMarker(raw: RawPeer, frames: Buffer[], marker: number): Promise<void> {
  for (const frame of frames) raw.socket.write(frame);
  raw.socket.write(defining(0, payloadOf(new Reading("marker", marker))));
  await eventually(() => received.some((m) => m instanceof Reading && m.value === marker), {
    what: `marker ${marker}`,
    describe: () => ({ received, rejected: b.remoting.stats.rejected }),
  });
}

test("unknown, never-defined and out-of-range header ids are dropped and counted; the connection stays up", async () => {
  const raw = await rawPeer(b, { handshake: true, port: 11 });
  const s0 = b.remoting.stats;
  received.length = 0;
  rejections.length = 0;
  const good = payloadOf(new Reading("s", 1));
  await sendThenMarker(
    raw,
    [
      compressedFrame(5, good), // never defined on this connection
      compressedFrame(0, good), // 0 means "not remembered": never valid in a compressed frame
      compressedFrame(headerTableSize + 1, good),
      compressedFrame(0xffff, good),
      defining(headerTableSize + 1, good), // a definition beyond the table
      Buffer.from([0, 0, 0, 2, FrameKind.userCompressed, 0]), // the id itself is cut off
    ],
    1,
  );
  assert.deepEqual(rejectedSince(s0), { undecodable: 6 });
  assert.equal(rejections.length, 6);
  assert.ok(rejections.every((r) => r.reason === "undecodable" && r.peer.address.port === 11));
  assert.deepEqual(received, [new Reading("marker", 1)]);
  assert.equal(raw.isClosed(), false);
  raw.socket.destroy();
});

test("a defined id carries its header: later compressed frames are delivered, and an id can be redefined", async () => {
  const raw = await rawPeer(b, { handshake: true, port: 12 });
  received.length = 0;
  raw.socket.write(defining(3, payloadOf(new Reading("first", 1))));
  raw.socket.write(compressedFrame(3, payloadOf(new Reading("second", 2, "é"))));
  raw.socket.write(
    defining(3, Buffer.from(JSON.stringify({ n: 3 })), { type: "test.plain", format: PayloadFormat.json }),
  );
  raw.socket.write(compressedFrame(3, Buffer.from(JSON.stringify({ n: 4 }))));
  await eventually(() => received.length === 4, { what: "4 messages", describe: () => received });
  assert.deepEqual(received, [new Reading("first", 1), new Reading("second", 2, "é"), new Plain(3), new Plain(4)]);
  assert.ok(received[0] instanceof Reading && received[2] instanceof Plain);
  raw.socket.destroy();
});

test("malformed binary payloads, codec mismatches and unknown formats are dropped and counted; the connection stays up", async () => {
  const raw = await rawPeer(b, { handshake: true, port: 13 });
  const s0 = b.remoting.stats;
  received.length = 0;
  const good = payloadOf(new Reading("sensor-1", 20.5, "ok"));
  const trailing = Buffer.concat([good, Buffer.from([0])]);
  const badPresence = Buffer.from(good);
  badPresence[4 + "sensor-1".length + 8] = 9;
  await sendThenMarker(
    raw,
    [
      defining(0, good.subarray(0, good.length - 3)), // truncated inside the last field
      defining(0, good.subarray(0, 2)), // truncated inside the first length
      defining(0, trailing),
      defining(0, badPresence),
      defining(0, good, { fingerprint: codec.fingerprint ^ 1 }), // the sender declared other fields
      defining(0, good, { type: "test.plain" }), // binary for a class without fields here
      defining(0, good, { format: 7 as PayloadFormatValue }), // no such payload format
    ],
    2,
  );
  assert.deepEqual(rejectedSince(s0), { undecodable: 7 });
  assert.deepEqual(received, [new Reading("marker", 2)]);
  assert.equal(raw.isClosed(), false);
  raw.socket.destroy();
});

test("a header whose payload was undecodable still defines its id; the next frame with it is delivered", async () => {
  const raw = await rawPeer(b, { handshake: true, port: 14 });
  const s0 = b.remoting.stats;
  received.length = 0;
  const good = payloadOf(new Reading("x", 1));
  raw.socket.write(defining(9, good.subarray(0, 3)));
  raw.socket.write(compressedFrame(9, good));
  await eventually(() => received.length === 1, { what: "the compressed frame", describe: () => received });
  assert.deepEqual(rejectedSince(s0), { undecodable: 1 });
  raw.socket.destroy();
});

test("an oversize frame on a connection that uses header ids closes only that connection", async () => {
  const raw = await rawPeer(b, { handshake: true, port: 15 });
  const s0 = b.remoting.stats;
  raw.socket.write(defining(1, payloadOf(new Reading("x", 1))));
  const huge = Buffer.alloc(5);
  huge.writeUInt32BE(0x7fffffff);
  huge[4] = FrameKind.userCompressed;
  raw.socket.write(huge);
  await raw.closed;
  assert.equal(b.remoting.stats.rejected.oversize, s0.rejected.oversize + 1);
  received.length = 0;
  a.system.actorSelection(`${b.system.address}/user/inbox`).tell(new Reading("after", 3));
  await eventually(() => received.length === 1, { what: "a message from a real peer" });
});

test("a value the declared fields cannot carry is refused at tell with MessageEncodeError, counted, and not sent", async () => {
  const inbox = a.system.actorSelection(`${b.system.address}/user/inbox`);
  const unencodable0 = a.remoting.stats.unencodable;
  received.length = 0;
  assert.throws(
    () => inbox.tell(new Reading(42 as unknown as string, 1)),
    (e: unknown) =>
      e instanceof MessageEncodeError &&
      e.typeName === "test.reading" &&
      e.field === "sensor" &&
      e.expected === "a string",
  );
  assert.throws(() => inbox.tell(new Reading("s", null as unknown as number)), MessageEncodeError);
  assert.equal(a.remoting.stats.unencodable, unencodable0 + 2);
  inbox.tell(new Reading("fine", 1));
  await eventually(() => received.length > 0, { what: "the next good message" });
  assert.deepEqual(received, [new Reading("fine", 1)]);
});

test("a lone surrogate is refused at tell, on a header's first frame and on a repeated one, and the stream goes on", async () => {
  const inbox = a.system.actorSelection(`${b.system.address}/user/inbox`);
  // A sender of its own makes a header this connection has not carried yet: the refused frame would have defined it.
  const sender = a.system.spawn(new Collector([]), "surrogate-sender");
  const unencodable0 = a.remoting.stats.unencodable;
  const rejected0 = { ...b.remoting.stats.rejected };
  const lone = (e: unknown) =>
    e instanceof MessageEncodeError && e.field === "sensor" && /well-formed UTF-16/.test(e.message);
  received.length = 0;
  assert.throws(() => inbox.tell(new Reading("lone \ud800", 1), sender), lone);
  inbox.tell(new Reading("first", 1), sender);
  await eventually(() => received.length === 1, { what: "the message after the refused first frame" });
  // Same ref, sender and type again: the repeated-header path.
  assert.throws(() => inbox.tell(new Reading("\udfff tail", 2), sender), lone);
  assert.throws(
    () => inbox.tell(new Reading("ok", 3, "note \ud83d"), sender),
    (e: unknown) => e instanceof MessageEncodeError && e.field === "note",
  );
  inbox.tell(new Reading("second", 4), sender);
  await eventually(() => received.length === 2, { what: "the message after the refused repeated frames" });
  assert.deepEqual(received, [new Reading("first", 1), new Reading("second", 4)]);
  assert.equal(a.remoting.stats.unencodable, unencodable0 + 3);
  // Nothing reached the peer half-written: it rejected nothing.
  assert.deepEqual(b.remoting.stats.rejected, rejected0);
});

test("binary payloads keep unicode, NaN, -0, null and 2^53 across the wire and rebuild real instances", async () => {
  received.length = 0;
  const inbox = a.system.actorSelection(`${b.system.address}/user/inbox`);
  const sent = [new Reading("ü-😀", Number.NaN), new Reading("b", -0, null), new Reading("c", 2 ** 53, "note")];
  for (const m of sent) inbox.tell(m);
  await eventually(() => received.length === 3, { what: "3 readings" });
  assert.ok(received.every((m) => m instanceof Reading));
  assert.deepEqual(received, sent);
  assert.ok(Object.is((received[1] as Reading).value, -0));
});
