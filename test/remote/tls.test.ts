import assert from "node:assert/strict";
import { test } from "node:test";
import { eventually } from "../fixtures/eventually.ts";
import { createTestPki, hasOpenssl } from "./fixtures/certificates.ts";
import { Ping, Pong } from "./fixtures/messages.ts";
import { Collector, EchoBehavior, startNode } from "./fixtures/nodes.ts";
import { rawPeer } from "./fixtures/raw-peer.ts";

/** A throwaway CA (its own temp dir) and one node certificate for 127.0.0.1 that both client and server use. */
function makeCertificates(name: string) {
  const pki = createTestPki();
  return { tls: pki.issue(name, "IP:127.0.0.1"), dispose: () => pki.dispose() };
}

const openssl = hasOpenssl();

test("mutual TLS: nodes with certificates from the shared CA talk; others are refused", {
  skip: !openssl,
}, async () => {
  const good = makeCertificates("good");
  const rogue = makeCertificates("rogue");
  const a = await startNode("tls-a", { tls: good.tls, secret: "s" });
  const b = await startNode("tls-b", { tls: good.tls, secret: "s" });
  const plain = await startNode("tls-plain", { secret: "s" });
  const stranger = await startNode("tls-stranger", { tls: rogue.tls, secret: "s" });
  try {
    b.system.spawn(new EchoBehavior(), "echo");
    const got: unknown[] = [];
    b.system.spawn(new Collector(got), "inbox");
    const reply = await a.system.actorSelection(`${b.system.address}/user/echo`).ask(new Ping(1), Pong, 5000);
    assert.equal(reply.n, 1);
    plain.system.actorSelection(`${b.system.address}/user/inbox`).tell(new Ping(2));
    stranger.system.actorSelection(`${b.system.address}/user/inbox`).tell(new Ping(3));
    await eventually(() => b.remoting.stats.handshakesFailed >= 2, {
      what: "the plain and the rogue node refused",
      describe: () => b.remoting.stats,
    });
    assert.equal(got.length, 0);
  } finally {
    await Promise.all([a, b, plain, stranger].map((n) => n.system.terminate()));
    good.dispose();
    rogue.dispose();
  }
});

test("mutual TLS: a client that trusts the CA but presents no certificate, or an untrusted one, is refused", {
  skip: !openssl,
}, async () => {
  const good = makeCertificates("good");
  const rogue = makeCertificates("rogue");
  const b = await startNode("tls-guarded", { tls: good.tls });
  try {
    const got: unknown[] = [];
    b.system.spawn(new Collector(got), "inbox");
    // The server's certificate checks out for both clients; only the server's check of theirs can refuse them.
    const clients = [
      { what: "no client certificate", tls: { ca: good.tls.ca } },
      { what: "a certificate from another CA", tls: { ca: good.tls.ca, key: rogue.tls.key, cert: rogue.tls.cert } },
    ];
    for (const [i, client] of clients.entries()) {
      const failed0 = b.remoting.stats.handshakesFailed;
      // The remoting handshake would succeed without a secret, so only TLS stands between this client and the actor.
      await assert.rejects(
        rawPeer(b, { handshake: true, port: 10 + i, tls: client.tls }),
        /closed/,
        `${client.what}: the connection must not get through the handshake`,
      );
      await eventually(() => b.remoting.stats.handshakesFailed === failed0 + 1, {
        what: `the refusal of the client with ${client.what} counted`,
        describe: () => b.remoting.stats,
      });
    }
    assert.equal(b.remoting.stats.handshakesOk, 0);
    assert.equal(b.remoting.stats.delivered, 0);
    assert.equal(got.length, 0);
  } finally {
    await b.system.terminate();
    good.dispose();
    rogue.dispose();
  }
});
