// Hostile handshakes over real TCP on 127.0.0.1, before any authentication: hello fields that are objects with a bad
// toString, deeply nested arrays and oversized handshake frames, at a node with a secret (server side), from a fake
// server at a node that dials it (client side), and over TLS. The node refuses each, counts it, and keeps serving.
import assert from "node:assert/strict";
import { createServer, type Socket } from "node:net";
import { after, before, test } from "node:test";
import { Address, UniqueAddress } from "../../src/actor/index.ts";
import { describe as describeValue } from "../../src/actor/untrusted.ts";
import { encodeControlFrame, FrameKind, readControlFrame } from "../../src/remote/envelope.ts";
import { FrameDecoder } from "../../src/remote/frame.ts";
import { handshakeFrameBytesMax, protocolVersion } from "../../src/remote/handshake.ts";
import { jsonNestingMax } from "../../src/remote/json-nesting.ts";
import { eventually } from "../fixtures/eventually.ts";
import { createTestPki, hasOpenssl } from "./fixtures/certificates.ts";
import {
  assertAnswersAsk,
  badToString,
  deepArray,
  deepArrayText,
  helloFrame,
  helloFrameWithRaw,
  rawClient,
} from "./fixtures/hostile.ts";
import { Ping } from "./fixtures/messages.ts";
import { EchoBehavior, type Node, startNode } from "./fixtures/nodes.ts";

let a: Node;
let b: Node;

before(async () => {
  // A secret does not help before authentication: the hello is checked before any proof.
  a = await startNode("hostile-hs-a", { secret: "s3cret", handshakeTimeout: 30_000 });
  b = await startNode("hostile-hs-b", { secret: "s3cret" });
  a.system.spawn(new EchoBehavior(), "echo");
  b.system.spawn(new EchoBehavior(), "echo");
});
after(async () => {
  await Promise.all([a.system.terminate(), b.system.terminate()]);
});

test("describe() names hostile values without running their code, bounded", () => {
  assert.equal(describeValue(badToString()), "an object");
  assert.equal(describeValue(deepArray(20_000)), "an array");
  assert.equal(describeValue(7), "7");
  assert.equal(describeValue("x".repeat(10_000)).length < 100, true);
  assert.equal(describeValue("\ud800"), '"\\ud800"');
  const trap = new Proxy({}, { get: () => assert.fail("a trap ran"), getPrototypeOf: () => assert.fail("a trap ran") });
  assert.equal(describeValue(trap), "an object");
});

test("server side: hello fields that throw on String() are refused with a reason, counted, and the node survives", async () => {
  const cases: { field: string; value: unknown; reason: string }[] = [
    { field: "version", value: badToString(), reason: "version" },
    { field: "cluster", value: badToString(), reason: "clusterName" },
    { field: "toSystem", value: badToString(), reason: "systemName" },
    // As deep as any peer JSON may nest (jsonNestingMax, the hello's own object included; deeper is refused unparsed).
    { field: "version", value: deepArray(jsonNestingMax - 1), reason: "version" },
  ];
  for (const c of cases) {
    const failed0 = a.remoting.stats.handshakesFailed;
    const raw = await rawClient(a);
    raw.socket.write(helloFrame(a, { [c.field]: c.value }));
    await raw.closed;
    assert.equal(raw.replies[0]?.step, "reject", `${c.field}: the node answers with a reject`);
    assert.equal(raw.replies[0]?.reason, c.reason, `${c.field}: the reject names the reason`);
    assert.match(String(raw.replies[0]?.detail), /an (object|array)/, `${c.field}: the detail names only the kind`);
    assert.equal(a.remoting.stats.handshakesFailed, failed0 + 1, `${c.field}: the refusal is counted`);
  }
  assert.equal(a.remoting.stats.handshakesOk, 0);
  assert.equal(a.remoting.stats.rejected.internal, 0, JSON.stringify(a.remoting.stats.internalErrors));
  await assertAnswersAsk(a, b);
});

test("server side: a handshake frame above the cap closes the connection before it is buffered or parsed", async () => {
  const s0 = a.remoting.stats;
  // 20,000-deep nesting: 40 KB of JSON, far above the cap.
  const deep = await rawClient(a);
  deep.socket.write(helloFrameWithRaw(a, "version", deepArrayText(20_000)));
  await deep.closed;
  assert.equal(deep.replies.length, 0, "nothing is parsed, so nothing is answered");
  // A 4 MiB hello announced: the node closes as soon as it reads the length, long before its 30 s handshake timeout,
  // without waiting for (or holding) the rest.
  const huge = await rawClient(a);
  const head = Buffer.alloc(5 + 100, 0x20);
  head.writeUInt32BE(4 * 1024 * 1024 - 1, 0);
  head[4] = FrameKind.handshake;
  huge.socket.write(head);
  await eventually(() => huge.isClosed(), { what: "the oversized hello closed", timeoutMs: 3000 });
  // Just above the cap is refused too; a hello at the cap is parsed (and refused here only for its bad version).
  const over = await rawClient(a);
  over.socket.write(helloFrame(a, { pad: "x".repeat(handshakeFrameBytesMax) }));
  await over.closed;
  const at = await rawClient(a);
  const fixed = helloFrame(a, { version: 99, pad: "" }).length;
  at.socket.write(helloFrame(a, { version: 99, pad: "x".repeat(handshakeFrameBytesMax - (fixed - 4)) }));
  await at.closed;
  assert.equal(at.replies[0]?.reason, "version", "a frame of exactly the cap is read");
  const s = a.remoting.stats;
  assert.equal(s.handshakeOversize - s0.handshakeOversize, 3);
  assert.equal(s.rejected.oversize - s0.rejected.oversize, 3);
  assert.equal(s.handshakesFailed - s0.handshakesFailed, 4);
  await assertAnswersAsk(a, b);
});

test("client side: a hostile server's challenge or reject cannot kill the node that dials it", async () => {
  const c = await startNode("hostile-hs-client");
  const d = await startNode("hostile-hs-asker");
  c.system.spawn(new EchoBehavior(), "echo");
  const sockets = new Set<Socket>();
  let connections = 0;
  let self: UniqueAddress | null = null;
  const challenge = (overrides: Record<string, unknown>) =>
    encodeControlFrame(FrameKind.handshake, {
      step: "challenge",
      version: protocolVersion,
      system: "fake",
      cluster: "",
      from: self!.toString(),
      nonce: "00ff",
      proof: "",
      ...overrides,
    });
  const answers: (() => Buffer)[] = [
    () => challenge({ version: badToString() }),
    () => challenge({ cluster: badToString() }),
    () => challenge({ version: deepArray(1500) }),
    () => encodeControlFrame(FrameKind.handshake, { step: "reject", reason: badToString(), detail: badToString() }),
    () => challenge({ pad: "x".repeat(handshakeFrameBytesMax) }),
  ];
  const server = createServer((socket) => {
    const answer = answers[connections++];
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => {});
    const decoder = new FrameDecoder();
    socket.on("data", (chunk: Buffer) => {
      for (const frame of decoder.push(chunk)) {
        if (readControlFrame(frame).step !== "hello") continue;
        if (answer === undefined) socket.destroy();
        else socket.write(answer());
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
  self = new UniqueAddress(Address.tcp("fake", "127.0.0.1", (server.address() as { port: number }).port), "0a0a");
  try {
    c.system.actorSelection(`${self.address}/user/anyone`).tell(new Ping(1));
    await eventually(() => c.remoting.stats.handshakesFailed >= answers.length, {
      what: "the client to refuse every hostile answer",
      describe: () => c.remoting.stats,
    });
    assert.equal(c.remoting.stats.handshakeOversize, 1);
    // Each was refused by its own check, not caught by the connection's last-resort guard.
    assert.equal(c.remoting.stats.rejected.internal, 0, JSON.stringify(c.remoting.stats.internalErrors));
    assert.equal(c.remoting.stats.handshakesOk, 0);
    await assertAnswersAsk(c, d);
  } finally {
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await Promise.all([c.system.terminate(), d.system.terminate()]);
  }
});

test("TLS: a hostile hello over an authenticated TLS socket is refused and the node survives", {
  skip: !hasOpenssl(),
}, async () => {
  const pki = createTestPki();
  const good = pki.issue("good", "IP:127.0.0.1");
  const t = await startNode("hostile-tls-a", { tls: good, secret: "s" });
  const u = await startNode("hostile-tls-b", { tls: good, secret: "s" });
  try {
    t.system.spawn(new EchoBehavior(), "echo");
    for (const field of ["version", "cluster", "toSystem"]) {
      const failed0 = t.remoting.stats.handshakesFailed;
      const raw = await rawClient(t, { ca: good.ca, key: good.key, cert: good.cert });
      raw.socket.write(helloFrame(t, { [field]: badToString() }));
      await raw.closed;
      assert.equal(raw.replies[0]?.step, "reject", `${field}: refused`);
      assert.equal(t.remoting.stats.handshakesFailed, failed0 + 1);
    }
    assert.equal(t.remoting.stats.rejected.internal, 0);
    await assertAnswersAsk(t, u);
  } finally {
    await Promise.all([t.system.terminate(), u.system.terminate()]);
    pki.dispose();
  }
});
