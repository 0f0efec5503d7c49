import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { FrameKind, writeUserEnvelope } from "../../src/remote/envelope.ts";
import {
  MessageRegistry,
  MessageTooLargeError,
  type StandardSchemaV1,
  UnknownMessageTypeError,
} from "../../src/remote/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { Ping, Pong, Sequenced } from "./fixtures/messages.ts";
import { Collector, EchoBehavior, type Node, startNode } from "./fixtures/nodes.ts";
import { rawPeer } from "./fixtures/raw-peer.ts";

class OnlyOnA {
  constructor(readonly x: number) {}
}
class Checked {
  constructor(readonly n: number) {}
}
const positive: StandardSchemaV1 = {
  "~standard": {
    version: 1,
    vendor: "test",
    validate: (v) =>
      typeof (v as { n?: unknown })?.n === "number" && (v as { n: number }).n > 0
        ? { value: v }
        : { issues: [{ message: "n must be positive" }] },
  },
};
class NotRegistered {}

let a: Node;
let b: Node;
let received: unknown[];

before(async () => {
  const registryA = new MessageRegistry();
  registryA.register(OnlyOnA, { name: "test.only-on-a" });
  registryA.register(Checked, { name: "test.checked" });
  const registryB = new MessageRegistry();
  registryB.register(Checked, { name: "test.checked", schema: positive });
  a = await startNode("bad-a", { registry: registryA, maxFrameBytes: 64 * 1024 });
  b = await startNode("bad-b", { registry: registryB, maxFrameBytes: 64 * 1024 });
  received = [];
  b.system.spawn(new Collector(received), "inbox");
  b.system.spawn(new EchoBehavior(), "echo");
});
after(async () => {
  await Promise.all([a.system.terminate(), b.system.terminate()]);
});

function inboxOfB() {
  return a.system.actorSelection(`${b.system.address}/user/inbox`);
}

test("sending an unregistered type throws UnknownMessageTypeError synchronously", () => {
  assert.throws(
    () => inboxOfB().tell(new NotRegistered()),
    (e: unknown) => e instanceof UnknownMessageTypeError && e.typeName === "NotRegistered",
  );
  assert.throws(() => inboxOfB().tell("plain string" as unknown as object), UnknownMessageTypeError);
});

test("an oversize outgoing message throws MessageTooLargeError and sends nothing", async () => {
  const before = a.remoting.stats.framesOut;
  assert.throws(
    () => inboxOfB().tell(new Ping(1, "x".repeat(70 * 1024))),
    (e: unknown) => e instanceof MessageTooLargeError && e.maxFrameBytes === 64 * 1024,
  );
  // Multi-byte characters: the string is short but its UTF-8 form is over the limit.
  assert.throws(() => inboxOfB().tell(new Ping(1, "€".repeat(30 * 1024))), MessageTooLargeError);
  inboxOfB().tell(new Ping(2));
  await eventually(() => received.length >= 1, { what: "the next message still flows" });
  assert.equal(a.remoting.stats.framesOut, before + 1);
});

test("an unregistered type, an undecodable payload and a schema-invalid payload are dropped; the association stays up", async () => {
  received.length = 0;
  const stats0 = b.remoting.stats;
  inboxOfB().tell(new OnlyOnA(1));
  inboxOfB().tell(new Sequenced(5 as unknown as string, 1));
  inboxOfB().tell(new Checked(-1));
  inboxOfB().tell(new Checked(3));
  await eventually(() => received.length === 1, { what: "the valid message after three bad ones" });
  assert.ok(received[0] instanceof Checked);
  const s = b.remoting.stats;
  assert.equal(s.rejected.unknownType - stats0.rejected.unknownType, 1);
  assert.equal(s.rejected.undecodable - stats0.rejected.undecodable, 1);
  assert.equal(s.rejected.schemaInvalid - stats0.rejected.schemaInvalid, 1);
  assert.equal(b.remoting.peerInfo(a.remoting.selfAddress)?.inbound, 1);
});

test("garbage before the handshake fails it, is counted, and never reaches an actor", async () => {
  const failed0 = b.remoting.stats.handshakesFailed;
  const raw = await rawPeer(b, { handshake: false });
  raw.socket.write(Buffer.from("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  await raw.closed;
  assert.equal(b.remoting.stats.handshakesFailed, failed0 + 1);
  const raw2 = await rawPeer(b, { handshake: false });
  raw2.socket.write(Buffer.from([0, 0, 0, 5, FrameKind.user, 0, 0, 0, 0]));
  await raw2.closed;
  assert.equal(b.remoting.stats.handshakesFailed, failed0 + 2);
});

test("after the handshake: a malformed envelope is dropped, oversize and zero-length frames close only that connection", async () => {
  const raw = await rawPeer(b, { handshake: true, port: 1 });
  const s0 = b.remoting.stats;
  // Well framed but a truncated header: dropped, connection stays.
  raw.socket.write(Buffer.from([0, 0, 0, 3, FrameKind.user, 0, 200]));
  // Well framed, valid, to the inbox: delivered with the raw peer as origin.
  const buf = Buffer.alloc(200);
  const end = writeUserEnvelope(buf, 0, FrameKind.user, Buffer.from("/user/inbox"), null, null, "test.ping", '{"n":9}');
  received.length = 0;
  raw.socket.write(buf.subarray(0, end));
  await eventually(() => received.length === 1, { what: "the raw peer's valid envelope" });
  assert.equal(b.remoting.stats.rejected.undecodable, s0.rejected.undecodable + 1);
  assert.equal(raw.isClosed(), false);
  // An announced frame far above maxFrameBytes: the stream cannot be trusted, so the connection closes.
  const huge = Buffer.alloc(4);
  huge.writeUInt32BE(0x7fffffff);
  raw.socket.write(huge);
  await raw.closed;
  assert.equal(b.remoting.stats.rejected.oversize, s0.rejected.oversize + 1);
  const raw2 = await rawPeer(b, { handshake: true, port: 2 });
  raw2.socket.write(Buffer.from([0, 0, 0, 0]));
  await raw2.closed;
  assert.equal(b.remoting.stats.rejected.framing, s0.rejected.framing + 1);
  // The real association from A is unaffected.
  const reply = await a.system.actorSelection(`${b.system.address}/user/echo`).ask(new Ping(4), Pong, 3000);
  assert.equal(reply.n, 4);
});

test("a wrong secret fails the handshake on both sides and nothing is delivered", async () => {
  const guarded = await startNode("guarded", { secret: "right" });
  const intruder = await startNode("intruder", { secret: "wrong" });
  const open = await startNode("open-node");
  try {
    const got: unknown[] = [];
    guarded.system.spawn(new Collector(got), "inbox");
    const path = `${guarded.system.address}/user/inbox`;
    intruder.system.actorSelection(path).tell(new Ping(1));
    open.system.actorSelection(path).tell(new Ping(2));
    await eventually(
      () => guarded.remoting.stats.handshakesFailed >= 2 && intruder.remoting.stats.handshakesFailed >= 1,
      { what: "both handshakes failing", describe: () => guarded.remoting.stats },
    );
    assert.equal(got.length, 0);
    assert.equal(guarded.remoting.stats.delivered, 0);
    assert.equal(guarded.remoting.stats.handshakesOk, 0);
    // The right secret works.
    const friend = await startNode("friend", { secret: "right" });
    friend.system.actorSelection(path).tell(new Ping(3));
    await eventually(() => got.length === 1, { what: "delivery with the right secret" });
    await friend.system.terminate();
  } finally {
    await Promise.all([guarded.system.terminate(), intruder.system.terminate(), open.system.terminate()]);
  }
});

test("invalid settings are refused with InvalidArgumentError", async () => {
  const { ActorSystem, InvalidArgumentError } = await import("../../src/actor/index.ts");
  const system = ActorSystem.create("settings");
  await assert.rejects(system.enableRemoting({ host: "127.0.0.1", port: 70000 }), InvalidArgumentError);
  await assert.rejects(system.enableRemoting({ host: "", port: 0 }), InvalidArgumentError);
  await assert.rejects(system.enableRemoting({ host: "127.0.0.1", port: 0, maxFrameBytes: 0 }), InvalidArgumentError);
  await assert.rejects(system.enableRemoting({ host: "127.0.0.1", port: 0, secret: "" }), InvalidArgumentError);
  await system.terminate();
});

test("a connection that never completes the handshake is closed after handshakeTimeout and counted", async () => {
  const strict = await startNode("strict", { handshakeTimeout: 100 });
  try {
    const raw = await rawPeer(strict, { handshake: false });
    await raw.closed;
    assert.equal(strict.remoting.stats.handshakesFailed, 1);
  } finally {
    await strict.system.terminate();
  }
});

test("a non-loopback host with neither secret nor tls is refused unless insecure; insecure warns, loopback notes at info", async () => {
  const { bindingNotice, resolveRemotingSettings } = await import("../../src/remote/settings.ts");
  const { RemotingConfigurationError } = await import("../../src/remote/errors.ts");
  assert.throws(
    () => resolveRemotingSettings({ host: "10.1.2.3", port: 1 }),
    (error: unknown) =>
      error instanceof RemotingConfigurationError &&
      error.name === "RemotingConfigurationError" &&
      error.field === "secret" &&
      /set enableRemoting\(\{ secret \}\) and tls.*insecure: true/.test(error.message),
  );
  assert.throws(
    () => resolveRemotingSettings({ host: "0.0.0.0", port: 1, insecure: false }),
    RemotingConfigurationError,
  );
  // Only loopback literals count as loopback: a name that merely starts like one resolves anywhere.
  for (const host of ["127.example.com", "localhost.example.com", "::", "0.0.0.0"]) {
    assert.throws(() => resolveRemotingSettings({ host, port: 1 }), RemotingConfigurationError, host);
  }
  assert.equal(bindingNotice(resolveRemotingSettings({ host: "10.1.2.3", port: 1, secret: "s" })), null);
  assert.equal(bindingNotice(resolveRemotingSettings({ host: "10.1.2.3", port: 1, tls: {} })), null);
  assert.equal(bindingNotice(resolveRemotingSettings({ host: "10.1.2.3", port: 1, insecure: true }))?.level, "warn");
  assert.match(
    bindingNotice(resolveRemotingSettings({ host: "10.1.2.3", port: 1, insecure: true }))!.message,
    /REMOTING IS OPEN/,
  );
  assert.equal(bindingNotice(resolveRemotingSettings({ host: "127.0.0.1", port: 1 }))?.level, "info");
  assert.equal(bindingNotice(resolveRemotingSettings({ host: "localhost", port: 1 }))?.level, "info");
  assert.equal(bindingNotice(resolveRemotingSettings({ host: "127.0.0.1", port: 1, secret: "s" })), null);
  // TLS is the integrity option: protocol versions before TLS 1.2 are refused.
  for (const minVersion of ["TLSv1", "TLSv1.1"] as const) {
    assert.throws(
      () => resolveRemotingSettings({ host: "127.0.0.1", port: 1, tls: { minVersion } }),
      /tls\.minVersion/,
    );
  }
});

test("enableRemoting: 0.0.0.0 without secret or tls is refused (nothing bound); insecure warns once; loopback logs once at info", async () => {
  const { ActorSystem } = await import("../../src/actor/index.ts");
  const { RemotingConfigurationError } = await import("../../src/remote/errors.ts");
  const { remotingId } = await import("../../src/remote/remoting.ts");
  const { CapturingLogger } = await import("../actor/support.ts");
  {
    const system = ActorSystem.create("exposed");
    try {
      await assert.rejects(system.enableRemoting({ host: "0.0.0.0", port: 0 }), RemotingConfigurationError);
      assert.equal(system.hasExtension(remotingId), undefined);
    } finally {
      await system.terminate();
    }
  }
  const cases = [
    { host: "0.0.0.0", extra: { insecure: true }, warn: 1, info: 0 },
    { host: "0.0.0.0", extra: { secret: "s" }, warn: 0, info: 0 },
    { host: "127.0.0.1", extra: {}, warn: 0, info: 1 },
    { host: "127.0.0.1", extra: { secret: "s" }, warn: 0, info: 0 },
  ];
  for (const { host, extra, warn, info } of cases) {
    const logger = new CapturingLogger();
    const system = ActorSystem.create("exposed", { logger });
    try {
      await system.enableRemoting({ host, port: 0, ...extra });
      const at = (level: string, pattern: RegExp) =>
        logger.records.filter((r) => r.level === level && pattern.test(r.message)).length;
      const what = `${host} ${JSON.stringify(extra)}`;
      assert.equal(at("warn", /REMOTING IS OPEN.*0\.0\.0\.0/), warn, what);
      assert.equal(at("info", /without a secret/), info, what);
    } finally {
      await system.terminate();
    }
  }
});

test("system messages: a duplicate sequence number is acknowledged but applied once; a gap is reported", async () => {
  const { encodeControlFrame, readControlFrame } = await import("../../src/remote/envelope.ts");
  const { FrameDecoder } = await import("../../src/remote/frame.ts");
  let stops = 0;
  const { AbstractBehavior } = await import("../../src/actor/index.ts");
  class Victim extends AbstractBehavior<unknown> {
    receive(): void {}
    override postStop(): void {
      stops++;
    }
  }
  b.system.spawn(new Victim(), "victim");
  const raw = await rawPeer(b, { handshake: true, port: 3 });
  const acks: number[] = [];
  const decoder = new FrameDecoder();
  raw.socket.on("data", (chunk: Buffer) => {
    for (const f of decoder.push(chunk)) if (f[0] === FrameKind.ack) acks.push(readControlFrame(f).seq as number);
  });
  const stop = encodeControlFrame(FrameKind.system, { seq: 1, sys: "stop", to: "/user/victim" });
  const dup0 = b.remoting.stats.systemDuplicates;
  raw.socket.write(stop);
  raw.socket.write(stop);
  await eventually(() => acks.length === 2, { what: "two acks" });
  assert.deepEqual(acks, [1, 1]);
  await eventually(() => stops === 1, { what: "victim stopped" });
  assert.equal(b.remoting.stats.systemDuplicates, dup0 + 1);
  // A gap (seq 3 before 2) is not applied; the ack reports the gap so the sender re-sends.
  raw.socket.write(encodeControlFrame(FrameKind.system, { seq: 3, sys: "stop", to: "/user/none" }));
  await eventually(() => acks.length === 3, { what: "gap ack" });
  assert.equal(acks[2], 1);
  raw.socket.destroy();
});

test("a port in use rejects enableRemoting with the listen error and leaves the system without remoting", async () => {
  const { ActorSystem } = await import("../../src/actor/index.ts");
  const { Remoting, RemotingNotEnabledError } = await import("../../src/remote/index.ts");
  const system = ActorSystem.create("busy");
  try {
    const port = b.remoting.selfAddress.address.port!;
    await assert.rejects(system.enableRemoting({ host: "127.0.0.1", port }), (e: unknown) => {
      return (e as NodeJS.ErrnoException).code === "EADDRINUSE";
    });
    assert.throws(() => Remoting.get(system), RemotingNotEnabledError);
    const remoting = await system.enableRemoting({ host: "127.0.0.1", port: 0 });
    assert.equal(Remoting.get(system), remoting);
  } finally {
    await system.terminate();
  }
});

test("a type registered after frames of it were rejected is accepted from the next frame on", async () => {
  class LateType {
    constructor(readonly v: number) {}
  }
  const late = await startNode("late", { registry: new MessageRegistry() });
  const sender = await startNode("late-sender", { registry: new MessageRegistry() });
  try {
    sender.remoting.registry.register(LateType, { name: "test.late" });
    const got: unknown[] = [];
    late.system.spawn(new Collector(got), "inbox");
    const ref = sender.system.actorSelection(`${late.system.address}/user/inbox`);
    ref.tell(new LateType(1));
    await eventually(() => late.remoting.stats.rejected.unknownType === 1, { what: "first one rejected" });
    late.remoting.registry.register(LateType, { name: "test.late" });
    ref.tell(new LateType(2));
    await eventually(() => got.length === 1, { what: "the second one delivered" });
    assert.equal((got[0] as LateType).v, 2);
  } finally {
    await Promise.all([late.system.terminate(), sender.system.terminate()]);
  }
});
