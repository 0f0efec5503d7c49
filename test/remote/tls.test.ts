import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { eventually } from "../fixtures/eventually.ts";
import { Ping, Pong } from "./fixtures/messages.ts";
import { Collector, EchoBehavior, startNode } from "./fixtures/nodes.ts";
import { rawPeer } from "./fixtures/raw-peer.ts";

/** A throwaway CA and one node certificate for 127.0.0.1 (both client and server use), made with openssl. */
function makeCertificates(dir: string, name: string): { key: Buffer; cert: Buffer; ca: Buffer } {
  const run = (...args: string[]) => execFileSync("openssl", args, { cwd: dir, stdio: "ignore" });
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  run(
    "req",
    "-x509",
    ...ec,
    "-keyout",
    `${name}-ca.key`,
    "-out",
    `${name}-ca.crt`,
    "-days",
    "1",
    "-subj",
    `/CN=${name}-ca`,
  );
  run("req", ...ec, "-keyout", `${name}.key`, "-out", `${name}.csr`, "-subj", "/CN=127.0.0.1");
  writeFileSync(join(dir, `${name}.ext`), "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n");
  run(
    "x509",
    "-req",
    "-in",
    `${name}.csr`,
    "-CA",
    `${name}-ca.crt`,
    "-CAkey",
    `${name}-ca.key`,
    "-CAcreateserial",
    "-out",
    `${name}.crt`,
    "-days",
    "1",
    "-extfile",
    `${name}.ext`,
  );
  const read = (f: string) => readFileSync(join(dir, f));
  return { key: read(`${name}.key`), cert: read(`${name}.crt`), ca: read(`${name}-ca.crt`) };
}

let hasOpenssl = true;
try {
  execFileSync("openssl", ["version"], { stdio: "ignore" });
} catch {
  hasOpenssl = false;
}

test("mutual TLS: nodes with certificates from the shared CA talk; others are refused", {
  skip: !hasOpenssl,
}, async () => {
  const dir = mkdtempSync(join(tmpdir(), "movie-tls-"));
  const good = makeCertificates(dir, "good");
  const rogue = makeCertificates(dir, "rogue");
  const a = await startNode("tls-a", { tls: good, secret: "s" });
  const b = await startNode("tls-b", { tls: good, secret: "s" });
  const plain = await startNode("tls-plain", { secret: "s" });
  const stranger = await startNode("tls-stranger", { tls: rogue, secret: "s" });
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
    rmSync(dir, { recursive: true, force: true });
  }
});

test("mutual TLS: a client that trusts the CA but presents no certificate, or an untrusted one, is refused", {
  skip: !hasOpenssl,
}, async () => {
  const dir = mkdtempSync(join(tmpdir(), "movie-tls-"));
  const good = makeCertificates(dir, "good");
  const rogue = makeCertificates(dir, "rogue");
  const b = await startNode("tls-guarded", { tls: good });
  try {
    const got: unknown[] = [];
    b.system.spawn(new Collector(got), "inbox");
    // The server's certificate checks out for both clients; only the server's check of theirs can refuse them.
    const clients = [
      { what: "no client certificate", tls: { ca: good.ca } },
      { what: "a certificate from another CA", tls: { ca: good.ca, key: rogue.key, cert: rogue.cert } },
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
    rmSync(dir, { recursive: true, force: true });
  }
});
