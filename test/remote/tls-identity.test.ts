// With TLS, a node's identity is its certificate: the address a peer claims in the handshake must be one its
// certificate names (IP or DNS subjectAltName for the host, or a movie.tcp:// URI for one exact address), checked by
// the server against the client's hello and by the client against the server's challenge (which must be the address
// it dialled). Certificates are made here with the openssl CLI in a temp dir; no key is committed.
import assert from "node:assert/strict";
import { createServer, connect as netConnect, type Server } from "node:net";
import { after, before, test } from "node:test";
import { Address, UniqueAddress } from "../../src/actor/index.ts";
import { FrameKind, writeUserEnvelope } from "../../src/remote/envelope.ts";
import { certificateNamesAddress, parseSubjectAltName } from "../../src/remote/peer-identity.ts";
import { eventually } from "../fixtures/eventually.ts";
import { createTestPki, freePort, hasOpenssl, type TestPki } from "./fixtures/certificates.ts";
import { Fail, Ping, Pong } from "./fixtures/messages.ts";
import { Collector, EchoBehavior, type Node, startNode } from "./fixtures/nodes.ts";
import { rawPeer } from "./fixtures/raw-peer.ts";

const openssl = hasOpenssl();
let pki: TestPki;
let b: Node;
const atB: unknown[] = [];

before(async () => {
  if (!openssl) return;
  pki = createTestPki();
  b = await startNode("tlsid-b", { tls: pki.issue("b", "IP:127.0.0.1") });
  b.system.spawn(new EchoBehavior(), "echo");
  b.system.spawn(new Collector(atB), "inbox");
});
after(async () => {
  if (!openssl) return;
  await b.system.terminate();
  pki.dispose();
});

test("subjectAltName parsing and the address rule (pure)", () => {
  const at = (text: string) => Address.parse(text);
  const names = parseSubjectAltName('DNS:node1.example.com, IP Address:10.0.0.7, DNS:*.pods.local, DNS:"a, b"');
  assert.deepEqual(names, { ips: ["10.0.0.7"], dns: ["node1.example.com", "*.pods.local", "a, b"], uris: [] });
  assert.equal(certificateNamesAddress(names, at("movie.tcp://s@10.0.0.7:2551")), true);
  assert.equal(certificateNamesAddress(names, at("movie.tcp://s@10.0.0.8:2551")), false);
  assert.equal(certificateNamesAddress(names, at("movie.tcp://s@NODE1.example.com:1")), true);
  assert.equal(certificateNamesAddress(names, at("movie.tcp://s@x.pods.local:1")), true);
  assert.equal(certificateNamesAddress(names, at("movie.tcp://s@y.x.pods.local:1")), false, "one label only");
  assert.equal(certificateNamesAddress(names, at("movie.tcp://s@node2.example.com:1")), false);
  // A movie.tcp URI binds to exactly that address: the IP entry beside it no longer covers other ports.
  const uri = parseSubjectAltName("IP Address:127.0.0.1, URI:movie.tcp://s@127.0.0.1:2551");
  assert.equal(certificateNamesAddress(uri, at("movie.tcp://s@127.0.0.1:2551")), true);
  assert.equal(certificateNamesAddress(uri, at("movie.tcp://s@127.0.0.1:2552")), false);
  assert.equal(certificateNamesAddress(uri, at("movie.tcp://other@127.0.0.1:2551")), false);
  // IPv6 in Node's uncompressed spelling matches the compressed host.
  const v6 = parseSubjectAltName("IP Address:0:0:0:0:0:0:0:1");
  assert.equal(certificateNamesAddress(v6, new Address("movie.tcp", "s", "::1", 1)), true);
  // Total on anything: no names, never a throw, never a match.
  for (const bad of [undefined, null, 42, {}, "", "garbage", 'DNS:"unterminated', "IP Address", "DNS:"]) {
    const parsed = parseSubjectAltName(bad);
    assert.equal(certificateNamesAddress(parsed, at("movie.tcp://s@127.0.0.1:1")), false, String(bad));
  }
  // Seeded random text from the format's own characters: never a throw, never more than 64 names.
  let seed = 15;
  const random = () => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed / 2 ** 31;
  };
  const pieces = [
    "DNS:",
    "IP Address:",
    "URI:",
    ", ",
    '"',
    "\\",
    "\\u00",
    ":",
    ",",
    "127.0.0.1",
    "movie.tcp://s@h:1",
    "*.",
  ];
  for (let i = 0; i < 2000; i++) {
    let text = "";
    const n = Math.floor(random() * 40);
    for (let j = 0; j < n; j++) text += pieces[Math.floor(random() * pieces.length)];
    const parsed = parseSubjectAltName(text);
    assert.ok(parsed.ips.length + parsed.dns.length + parsed.uris.length <= 64, text);
    certificateNamesAddress(parsed, at("movie.tcp://s@127.0.0.1:1"));
  }
  const many = parseSubjectAltName(Array.from({ length: 1000 }, () => "DNS:a").join(", "));
  assert.equal(many.dns.length, 64);
});

test("TLS: a certificate naming the node's IP is accepted both ways; a movie.tcp URI subjectAltName alone works too", {
  skip: !openssl,
}, async () => {
  const a = await startNode("tlsid-a", { tls: pki.issue("a", "IP:127.0.0.1") });
  const port = await freePort();
  const u = await startNode("tlsid-u", { port, tls: pki.issue("u", `URI:movie.tcp://tlsid-u@127.0.0.1:${port}`) });
  try {
    a.system.spawn(new EchoBehavior(), "echo");
    u.system.spawn(new EchoBehavior(), "echo");
    for (const [from, to] of [
      [a, b],
      [b, a],
      [u, b],
      [b, u],
    ] as const) {
      const reply = await from.system.actorSelection(`${to.system.address}/user/echo`).ask(new Ping(7), Pong, 5000);
      assert.equal(reply.n, 7, `${from.system.name} → ${to.system.name}`);
    }
    assert.equal(b.remoting.stats.identityMismatches, 0);
  } finally {
    await Promise.all([a.system.terminate(), u.system.terminate()]);
  }
});

/** Tells `to`'s inbox from `from` and waits until `counter` saw one more identity refusal. */
async function expectRefused(from: Node, to: Node, counter: Node, what: string): Promise<void> {
  const before0 = counter.remoting.stats.identityMismatches;
  from.system.actorSelection(`${to.system.address}/user/inbox`).tell(new Ping(1));
  await eventually(() => counter.remoting.stats.identityMismatches > before0, {
    what,
    describe: () => ({ counter: counter.remoting.stats, from: from.remoting.stats }),
  });
}

test("TLS: a node whose valid certificate names another IP is refused as a client and as a server", {
  skip: !openssl,
}, async () => {
  // Signed by the shared CA, so TLS alone accepts it: only the identity check stands in the way.
  const m = await startNode("tlsid-m", { tls: pki.issue("m", "IP:127.0.0.2") });
  const atM: unknown[] = [];
  m.system.spawn(new Collector(atM), "inbox");
  try {
    const ok0 = b.remoting.stats.handshakesOk;
    const delivered0 = b.remoting.stats.delivered;
    // M dials B: B, the server, checks M's client certificate against M's hello.
    await expectRefused(m, b, b, "B refused M's hello");
    // B dials M: B, the client, checks M's server certificate against M's challenge.
    await expectRefused(b, m, b, "B refused M's challenge");
    assert.equal(b.remoting.stats.handshakesOk, ok0);
    assert.equal(b.remoting.stats.delivered, delivered0);
    assert.equal(atB.length, 0);
    assert.equal(atM.length, 0);
    assert.equal(m.remoting.stats.handshakesOk, 0);
  } finally {
    await m.system.terminate();
  }
});

test("TLS: a certificate whose movie.tcp URI names another port is refused both ways", { skip: !openssl }, async () => {
  const named = await freePort();
  const v = await startNode("tlsid-v", { tls: pki.issue("v", `URI:movie.tcp://tlsid-v@127.0.0.1:${named}`) });
  const atV: unknown[] = [];
  v.system.spawn(new Collector(atV), "inbox");
  try {
    assert.notEqual(v.remoting.selfAddress.address.port, named);
    await expectRefused(v, b, b, "B refused V's hello");
    await expectRefused(b, v, b, "B refused V's challenge");
    assert.equal(atB.length, 0);
    assert.equal(atV.length, 0);
    assert.equal(v.remoting.stats.handshakesOk, 0);
  } finally {
    await v.system.terminate();
  }
});

test("TLS: a client with a valid certificate for 127.0.0.1 that claims another host in its hello is refused", {
  skip: !openssl,
}, async () => {
  const cert = pki.issue("claimer", "IP:127.0.0.1");
  const mismatches0 = b.remoting.stats.identityMismatches;
  const ok0 = b.remoting.stats.handshakesOk;
  for (const claimed of ["movie.tcp://raw@127.0.0.2:2551#00000000000000aa", "movie.tcp://raw@node1.example.com:1#bb"]) {
    await assert.rejects(
      rawPeer(b, { handshake: true, tls: cert, as: UniqueAddress.parse(claimed) }),
      /peer refused: identity|closed during the handshake/,
      claimed,
    );
  }
  await eventually(() => b.remoting.stats.identityMismatches === mismatches0 + 2, {
    what: "both claims refused as identity",
    describe: () => b.remoting.stats,
  });
  assert.equal(b.remoting.stats.handshakesOk, ok0);
});

/** A TCP relay to `port` that records what the client sends and, when `flip` is set, corrupts the next chunk. */
async function relay(port: number): Promise<{ server: Server; port: number; sent: Buffer[]; flipNext: () => void }> {
  const sent: Buffer[] = [];
  let flip = false;
  const server = createServer((client) => {
    const upstream = netConnect({ host: "127.0.0.1", port });
    client.on("error", () => {});
    upstream.on("error", () => {});
    client.on("data", (chunk: Buffer) => {
      const copy = Buffer.from(chunk);
      if (flip) {
        flip = false;
        // The last byte of a TLS record is part of its AEAD tag.
        copy[copy.length - 1]! ^= 0x01;
      }
      sent.push(copy);
      upstream.write(copy);
    });
    upstream.on("data", (chunk: Buffer) => client.write(chunk));
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  return {
    server,
    port: typeof address === "object" && address !== null ? address.port : 0,
    sent,
    flipNext: () => {
      flip = true;
    },
  };
}

/** A JSON envelope of Fail(reason) for B's /user/inbox. */
function failEnvelope(reason: string): Buffer {
  const buf = Buffer.alloc(400);
  const end = writeUserEnvelope(
    buf,
    0,
    FrameKind.user,
    Buffer.from("/user/inbox"),
    null,
    null,
    "test.fail",
    JSON.stringify({ reason }),
  );
  return buf.subarray(0, end);
}

test("TLS protects every frame: the handshake and payloads are not readable on the wire, a flipped bit closes the connection", {
  skip: !openssl,
}, async () => {
  const proxy = await relay(b.remoting.selfAddress.address.port!);
  const raw = pki.issue("raw", "IP:127.0.0.1");
  const secretText = "confidential-order-4711";
  try {
    const delivered0 = b.remoting.stats.delivered;
    const peer = await rawPeer(b, { handshake: true, port: 40, via: proxy.port, tls: raw });
    peer.socket.write(failEnvelope(secretText));
    await eventually(() => atB.some((m) => m instanceof Fail && m.reason === secretText), {
      what: "the message through the relay",
      describe: () => b.remoting.stats,
    });
    const wire = Buffer.concat(proxy.sent);
    for (const plain of [secretText, "/user/inbox", "test.fail", '"step"', "movie.tcp://"]) {
      assert.equal(wire.includes(Buffer.from(plain)), false, `"${plain}" is readable on the wire`);
    }
    // Integrity: the relay flips one bit of the next record; TLS refuses it and the connection closes undelivered.
    const count = atB.length;
    const failures0 = b.remoting.stats.integrityFailures;
    proxy.flipNext();
    peer.socket.write(failEnvelope("tampered"));
    await eventually(() => peer.isClosed(), {
      what: "B closing the connection after a record failed its integrity check",
      describe: () => b.remoting.stats,
    });
    assert.equal(b.remoting.stats.integrityFailures, failures0 + 1);
    assert.equal(atB.length, count);
    assert.equal(b.remoting.stats.delivered, delivered0 + 1);
    // B is unharmed: a real TLS node still gets through.
    const a = await startNode("tlsid-after", { tls: pki.issue("after", "IP:127.0.0.1") });
    try {
      const reply = await a.system.actorSelection(`${b.system.address}/user/echo`).ask(new Ping(9), Pong, 5000);
      assert.equal(reply.n, 9);
    } finally {
      await a.system.terminate();
    }
  } finally {
    proxy.server.close();
  }
});
