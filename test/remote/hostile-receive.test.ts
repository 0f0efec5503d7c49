// Hostile frames after a valid handshake, over real TCP on 127.0.0.1, each of which used to throw out of the socket's
// data listener and end the process: each is now refused by its own check (counted, the connection stays up) or,
// for an error no check foresaw, closes only that connection (counted in rejected.internal). The node keeps
// answering remote asks, and no prototype is polluted.
import assert from "node:assert/strict";
import { createServer, type Socket } from "node:net";
import { after, before, test } from "node:test";
import { AbstractBehavior, type ActorContext, type ActorRef, Address, UniqueAddress } from "../../src/actor/index.ts";
import {
  encodeControlFrame,
  FrameKind,
  type FrameKindValue,
  readControlFrame,
  writeUserEnvelope,
} from "../../src/remote/envelope.ts";
import { FrameDecoder } from "../../src/remote/frame.ts";
import { protocolVersion } from "../../src/remote/handshake.ts";
import { MessageRegistry, RemoteAskError, type StandardSchemaV1 } from "../../src/remote/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { assertAnswersAsk, helloFrame, rawClient, rawJsonFrame } from "./fixtures/hostile.ts";
import { Ping } from "./fixtures/messages.ts";
import { Collector, EchoBehavior, type Node, startNode } from "./fixtures/nodes.ts";
import { type RawPeer, rawPeer } from "./fixtures/raw-peer.ts";

/** A class with a computed, getter-only property: a payload key of that name used to make Object.assign throw. */
class Area {
  constructor(readonly w: number) {}
  get double(): number {
    return this.w * 2;
  }
}
/** Validated by a schema that throws instead of returning issues. */
class Guarded {
  constructor(readonly n: number) {}
}
const throwingSchema: StandardSchemaV1 = {
  "~standard": {
    version: 1,
    vendor: "test",
    validate: () => {
      throw new SyntaxError("the validator itself broke");
    },
  },
};
/** A plain JSON class, sent on by a relay after it arrives (a `constructor` key must not break that). */
class Plain {
  constructor(readonly n: number) {}
}
/** A class whose instanceof check throws: an error no check of the receive path foresees (the guard's test). */
class TrapError extends Error {
  override readonly name = "TrapError";
}
class Trap {
  static fromJSON(): Trap {
    return new Trap();
  }
  static [Symbol.hasInstance](): boolean {
    throw new TrapError("instanceof trapped");
  }
}

function registry(): MessageRegistry {
  const r = new MessageRegistry();
  r.register(Area, { name: "hostile.area" });
  r.register(Guarded, { name: "hostile.guarded", schema: throwingSchema });
  r.register(Plain, { name: "hostile.plain" });
  r.register(Trap, { name: "hostile.trap" });
  return r;
}

/** Sends every Plain it receives on to `to`. */
class Relay extends AbstractBehavior<unknown> {
  readonly failures: unknown[] = [];
  constructor(private readonly to: () => ActorRef<unknown>) {
    super();
  }
  receive(message: unknown): void {
    try {
      this.to().tell(message);
    } catch (error) {
      this.failures.push(error);
    }
  }
}

/** Records the sender of every message and never answers (so an ask to it stays pending). */
class SenderRecorder extends AbstractBehavior<unknown> {
  constructor(readonly senders: ActorRef<unknown>[]) {
    super();
  }
  receive(_message: unknown, ctx: ActorContext<unknown>): void {
    if (ctx.sender !== null) this.senders.push(ctx.sender);
  }
}

let a: Node;
let b: Node;
const received: unknown[] = [];
const receivedOnB: unknown[] = [];
const senders: ActorRef<unknown>[] = [];
let relay: Relay;
const prototypeNamesBefore = Object.getOwnPropertyNames(Object.prototype).sort();
let nextPort = 20;

before(async () => {
  a = await startNode("hostile-rx-a", { registry: registry() });
  b = await startNode("hostile-rx-b", { registry: registry() });
  a.system.spawn(new EchoBehavior(), "echo");
  a.system.spawn(new Collector(received), "inbox");
  relay = new Relay(() => a.system.actorSelection(`${b.system.address}/user/inbox`));
  a.system.spawn(relay, "relay");
  b.system.spawn(new EchoBehavior(), "echo");
  b.system.spawn(new Collector(receivedOnB), "inbox");
  b.system.spawn(new SenderRecorder(senders), "silent");
});
after(async () => {
  await Promise.all([a.system.terminate(), b.system.terminate()]);
});

/** A raw peer authenticated at `a` (each with its own claimed port). */
function peer(): Promise<RawPeer> {
  return rawPeer(a, { handshake: true, port: nextPort++ });
}

/** A framed user (or ask-failure) envelope with a JSON payload written as it is. */
function userFrame(
  recipient: string,
  typeName: string,
  payload: string,
  kind: FrameKindValue = FrameKind.user,
): Buffer {
  const buf = Buffer.alloc(512 + 3 * payload.length);
  const end = writeUserEnvelope(buf, 0, kind, Buffer.from(recipient), null, null, typeName, payload);
  return buf.subarray(0, end);
}

/** Waits until `a` has read every byte written so far on `raw` (a heartbeat reply comes back after them). */
async function drained(raw: RawPeer): Promise<void> {
  let replied = false;
  const decoder = new FrameDecoder();
  const onData = (chunk: Buffer) => {
    for (const frame of decoder.push(chunk)) if (frame[0] === FrameKind.heartbeatReply) replied = true;
  };
  raw.socket.on("data", onData);
  raw.socket.write(rawJsonFrame(FrameKind.heartbeat, "{}"));
  await eventually(() => replied || raw.isClosed(), { what: "the node to read the frames" });
  raw.socket.off("data", onData);
}

/**
 * Returns a check that every refusal since now came from its own check, none from the connection's last-resort
 * guard (which would also close the connection).
 */
function noInternalErrorsFromNow(): () => void {
  const internal0 = a.remoting.stats.rejected.internal;
  return () => {
    const s = a.remoting.stats;
    assert.equal(s.rejected.internal, internal0, JSON.stringify(s.internalErrors));
  };
}

test("a system message whose sys is an object with a bad toString is dropped as undecodable; the connection stays", async () => {
  const assertNoInternalErrors = noInternalErrorsFromNow();
  const raw = await peer();
  const s0 = a.remoting.stats;
  raw.socket.write(rawJsonFrame(FrameKind.system, '{"seq":1,"to":"/user/echo","sys":{"toString":1}}'));
  raw.socket.write(rawJsonFrame(FrameKind.system, '{"seq":2,"to":{"toString":1},"sys":"stop"}'));
  await drained(raw);
  assert.equal(raw.isClosed(), false);
  assert.equal(a.remoting.stats.rejected.undecodable - s0.rejected.undecodable, 2);
  assertNoInternalErrors();
  raw.socket.destroy();
  await assertAnswersAsk(a, b);
});

test("an ask failure whose message is an object fails the ask with a described message", async () => {
  const assertNoInternalErrors = noInternalErrorsFromNow();
  const pending = a.system.actorSelection(`${b.system.address}/user/silent`).ask(new Ping(1), Ping, 5000);
  await eventually(() => senders.length === 1, { what: "the ask to reach b" });
  const replyTo = senders[0]!.path.localPart;
  const raw = await peer();
  const delivered0 = a.remoting.stats.delivered;
  raw.socket.write(userFrame(replyTo, "", '{"remoteClass":"Boom","message":{"toString":1}}', FrameKind.askFailure));
  await assert.rejects(pending, (error: unknown) => {
    assert.ok(error instanceof RemoteAskError, String(error));
    assert.equal(error.remoteClass, "Boom");
    assert.equal(error.remoteMessage, "an object");
    return true;
  });
  assert.equal(a.remoting.stats.delivered - delivered0, 1, "the ask failure counted as delivered");
  assert.equal(raw.isClosed(), false);
  assertNoInternalErrors();
  raw.socket.destroy();
  await assertAnswersAsk(a, b);
});

test("a payload key naming a getter-only property is not assigned: the message arrives with its getter", async () => {
  const assertNoInternalErrors = noInternalErrorsFromNow();
  received.length = 0;
  const raw = await peer();
  const delivered0 = a.remoting.stats.delivered;
  raw.socket.write(userFrame("/user/inbox", "hostile.area", '{"w":2,"double":7,"toString":5}'));
  await eventually(() => received.length === 1, { what: "the Area to arrive" });
  const area = received[0] as Area;
  assert.ok(area instanceof Area);
  assert.equal(area.w, 2);
  assert.equal(area.double, 4, "the class's getter, not the payload's value");
  assert.equal(Object.hasOwn(area, "toString"), false, "a method is not shadowed by data");
  assert.equal(a.remoting.stats.delivered - delivered0, 1);
  assert.equal(raw.isClosed(), false);
  assertNoInternalErrors();
  raw.socket.destroy();
  await assertAnswersAsk(a, b);
});

test("a schema whose validate throws refuses the envelope as schemaInvalid; the connection stays", async () => {
  const assertNoInternalErrors = noInternalErrorsFromNow();
  const raw = await peer();
  const s0 = a.remoting.stats;
  raw.socket.write(userFrame("/user/inbox", "hostile.guarded", '{"n":1}'));
  await drained(raw);
  assert.equal(raw.isClosed(), false);
  assert.equal(a.remoting.stats.rejected.schemaInvalid - s0.rejected.schemaInvalid, 1);
  assertNoInternalErrors();
  raw.socket.destroy();
  await assertAnswersAsk(a, b);
});

test('a message that arrived with a "constructor" key can be sent on, and still encodes', async () => {
  receivedOnB.length = 0;
  const raw = await peer();
  raw.socket.write(userFrame("/user/relay", "hostile.plain", '{"n":3,"constructor":"x"}'));
  raw.socket.write(userFrame("/user/relay", "hostile.plain", '{"n":4,"constructor":{"prototype":{"polluted":1}}}'));
  await eventually(() => receivedOnB.length === 2 || relay.failures.length > 0, {
    what: "both messages relayed to b",
    describe: () => ({ failures: relay.failures.map(String), onB: receivedOnB }),
  });
  assert.deepEqual(relay.failures, []);
  assert.deepEqual(
    receivedOnB.map((m) => [m instanceof Plain, (m as Plain).n]),
    [
      [true, 3],
      [true, 4],
    ],
  );
  raw.socket.destroy();
  await assertAnswersAsk(a, b);
});

test("an error no check foresaw closes only that connection, is counted by name, and the node keeps serving", async () => {
  const raw = await peer();
  const s0 = a.remoting.stats;
  raw.socket.write(userFrame("/user/inbox", "hostile.trap", "{}"));
  await raw.closed;
  const s = a.remoting.stats;
  assert.equal(s.rejected.internal - s0.rejected.internal, 1);
  assert.equal((s.internalErrors.TrapError ?? 0) - (s0.internalErrors.TrapError ?? 0), 1);
  // Another peer, and the node's own associations, are unaffected.
  const other = await peer();
  received.length = 0;
  other.socket.write(userFrame("/user/inbox", "hostile.area", '{"w":1}'));
  await eventually(() => received.length === 1, { what: "another peer's message delivered" });
  other.socket.destroy();
  await assertAnswersAsk(a, b);
});

test("the guard also covers outbound connections: a hostile server's frame after the handshake closes only that one", async () => {
  const sockets = new Set<Socket>();
  let self: UniqueAddress | null = null;
  let connections = 0;
  const server = createServer((socket) => {
    // Only the first connection is served: the redials after it are cut, so exactly one frame reaches the guard.
    if (++connections > 1) {
      socket.destroy();
      return;
    }
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => {});
    const decoder = new FrameDecoder();
    socket.on("data", (chunk: Buffer) => {
      for (const frame of decoder.push(chunk)) {
        const step = frame[0] === FrameKind.handshake ? readControlFrame(frame).step : null;
        if (step === "hello") {
          const challenge = { step: "challenge", version: protocolVersion, system: "fake", cluster: "" };
          socket.write(
            encodeControlFrame(FrameKind.handshake, { ...challenge, from: self!.toString(), nonce: "01", proof: "" }),
          );
        } else if (step === "confirm") {
          socket.write(encodeControlFrame(FrameKind.handshake, { step: "accepted" }));
          socket.write(userFrame("/user/inbox", "hostile.trap", "{}"));
        }
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
  self = new UniqueAddress(Address.tcp("fake", "127.0.0.1", (server.address() as { port: number }).port), "0b0b");
  const s0 = a.remoting.stats;
  try {
    a.system.actorSelection(`${self.address}/user/anyone`).tell(new Ping(1));
    await eventually(() => a.remoting.stats.rejected.internal > s0.rejected.internal, {
      what: "the client's guard to catch the hostile server's frame",
      describe: () => a.remoting.stats,
    });
    const s = a.remoting.stats;
    assert.ok(s.handshakesOk > s0.handshakesOk, "the handshake itself succeeded");
    assert.equal(s.rejected.internal - s0.rejected.internal, 1);
    assert.equal((s.internalErrors.TrapError ?? 0) - (s0.internalErrors.TrapError ?? 0), 1);
    await assertAnswersAsk(a, b);
  } finally {
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});

test("no hostile payload pollutes a prototype", async () => {
  const assertNoInternalErrors = noInternalErrorsFromNow();
  const raw = await peer();
  const proto = '{"polluted":1,"toString":1}';
  raw.socket.write(userFrame("/user/inbox", "hostile.area", `{"w":1,"__proto__":${proto}}`));
  raw.socket.write(userFrame("/user/inbox", "hostile.plain", `{"n":1,"constructor":{"prototype":${proto}}}`));
  raw.socket.write(rawJsonFrame(FrameKind.system, `{"seq":3,"to":"/user/nobody","sys":"stop","__proto__":${proto}}`));
  raw.socket.write(rawJsonFrame(FrameKind.ack, `{"seq":1,"__proto__":${proto}}`));
  raw.socket.write(userFrame("/temp/x", "", `{"remoteClass":"X","__proto__":${proto}}`, FrameKind.askFailure));
  await drained(raw);
  raw.socket.destroy();
  const hello = await rawClient(a);
  const text = helloFrame(a).subarray(5).toString("utf8");
  hello.socket.write(
    rawJsonFrame(FrameKind.handshake, `${text.slice(0, -1)},"version":{"__proto__":${proto}},"__proto__":${proto}}`),
  );
  await hello.closed;
  assert.equal(hello.replies[0]?.reason, "version", "the later version key wins and is refused");
  assert.deepEqual(Object.getOwnPropertyNames(Object.prototype).sort(), prototypeNamesBefore);
  assert.equal(({} as { polluted?: unknown }).polluted, undefined);
  assert.equal(Object.hasOwn(Area.prototype, "polluted"), false);
  assert.equal(Object.hasOwn(Plain.prototype, "polluted"), false);
  assertNoInternalErrors();
  await assertAnswersAsk(a, b);
});
