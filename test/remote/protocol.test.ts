import assert from "node:assert/strict";
import { test } from "node:test";
import { Address, UniqueAddress } from "../../src/actor/index.ts";
import { backoffDelayMs } from "../../src/remote/backoff.ts";
import {
  FrameKind,
  PayloadFormat,
  readUserEnvelope,
  userEnvelopeBytesBound,
  writeUserEnvelope,
} from "../../src/remote/envelope.ts";
import { EnvelopeDecodeError, type HandshakeError } from "../../src/remote/errors.ts";
import { FrameDecoder } from "../../src/remote/frame.ts";
import {
  answerChallenge,
  answerHello,
  checkAccepted,
  checkConfirm,
  type HandshakeIdentity,
  makeHello,
} from "../../src/remote/handshake.ts";
import { SystemInbox, SystemOutbox } from "../../src/remote/system-channel.ts";

test("a user envelope is written in one pass and read back once", () => {
  const recipient = Buffer.from("/user/orders");
  const payload = JSON.stringify({ parcel: "p-7", n: 1, s: "ü€" });
  const bound = userEnvelopeBytesBound(recipient, "movie.tcp://a@127.0.0.1:1/temp/$1", "00ff", "shop.deliver", payload);
  const buf = Buffer.alloc(bound);
  const end = writeUserEnvelope(
    buf,
    0,
    FrameKind.user,
    recipient,
    "movie.tcp://a@127.0.0.1:1/temp/$1",
    "00ff",
    "shop.deliver",
    payload,
  );
  const [frame] = new FrameDecoder().push(buf.subarray(0, end));
  const envelope = readUserEnvelope(frame!);
  assert.deepEqual(envelope, {
    kind: FrameKind.user,
    headerId: 0,
    format: PayloadFormat.json,
    fingerprint: 0,
    recipient: "/user/orders",
    sender: "movie.tcp://a@127.0.0.1:1/temp/$1",
    senderUid: "00ff",
    typeName: "shop.deliver",
    payload: { parcel: "p-7", n: 1, s: "ü€" },
  });
  // The payload is raw JSON in the frame, not a quoted string inside another document.
  assert.ok(frame!.includes(Buffer.from(payload)));
  const noSender = Buffer.alloc(200);
  const end2 = writeUserEnvelope(noSender, 0, FrameKind.user, recipient, null, null, "t", "{}");
  assert.equal(readUserEnvelope(noSender.subarray(4, end2)).sender, null);
});

test("truncated headers and bad payload JSON are undecodable envelopes", () => {
  assert.throws(() => readUserEnvelope(Buffer.from([1, 0, 0, 0, 9, 47])), EnvelopeDecodeError);
  const buf = Buffer.alloc(100);
  const end = writeUserEnvelope(buf, 0, FrameKind.user, Buffer.from("/user/a"), null, null, "t", "{not json");
  assert.throws(
    () => readUserEnvelope(buf.subarray(4, end)),
    (e: unknown) => e instanceof EnvelopeDecodeError && e.reason === "undecodable",
  );
});

const server: HandshakeIdentity = {
  system: "srv",
  cluster: "c1",
  uniqueAddress: new UniqueAddress(Address.tcp("srv", "127.0.0.1", 2552), "aa"),
};
const client: HandshakeIdentity = {
  system: "cli",
  cluster: "c1",
  uniqueAddress: new UniqueAddress(Address.tcp("cli", "127.0.0.1", 2553), "bb"),
};

function run(serverSecret: string | null, clientSecret: string | null, clientIdentity = client) {
  const hello = makeHello(clientIdentity, "srv", "n1");
  const challenge = answerHello(server, serverSecret, JSON.parse(JSON.stringify(hello)), "n2");
  if (!challenge.ok) return { stage: "hello", reason: challenge.error.reason };
  const confirm = answerChallenge(clientIdentity, clientSecret, "srv", hello, challenge.next);
  if (!confirm.ok) return { stage: "challenge", reason: confirm.error.reason };
  const done = checkConfirm(server, serverSecret, hello, challenge.next, confirm.next);
  if (!done.ok) return { stage: "confirm", reason: done.error.reason };
  return { stage: "ok", peers: [challenge.peer.toString(), confirm.peer.toString()] };
}

test("the handshake authenticates both sides with HMAC over both nonces; the secret never travels", () => {
  const ok = run("s3cret", "s3cret");
  assert.deepEqual(ok, { stage: "ok", peers: [client.uniqueAddress.toString(), server.uniqueAddress.toString()] });
  assert.deepEqual(run(null, null).stage, "ok");
  assert.deepEqual(run("s3cret", "wrong"), { stage: "challenge", reason: "authentication" });
  assert.deepEqual(run("s3cret", null), { stage: "confirm", reason: "authentication" });
  assert.deepEqual(run(null, "s3cret"), { stage: "challenge", reason: "authentication" });
  const hello = makeHello(client, "srv", "n1");
  const challenge = answerHello(server, "s3cret", hello, "n2");
  assert.ok(challenge.ok && !JSON.stringify(challenge.next).includes("s3cret"));
});

test("a handshake proof is bound to both nonces: replayed under another client or server nonce it is refused", () => {
  const secret = "s3cret";
  const reason = (r: { ok: true } | { ok: false; error: { reason: string } }) => (r.ok ? "ok" : r.error.reason);
  // One complete exchange: client nonce n1, server nonce n2.
  const hello = makeHello(client, "srv", "n1");
  const challenge = answerHello(server, secret, hello, "n2");
  assert.ok(challenge.ok);
  const confirm = answerChallenge(client, secret, "srv", hello, challenge.next);
  assert.ok(confirm.ok);
  assert.equal(reason(checkConfirm(server, secret, hello, challenge.next, confirm.next)), "ok");

  // The server's proof, replayed to a client that said hello with a fresh nonce.
  const freshHello = makeHello(client, "srv", "n1-fresh");
  assert.equal(reason(answerChallenge(client, secret, "srv", freshHello, challenge.next)), "authentication");
  // The server's proof, replayed with another server nonce beside it.
  const otherServerNonce = { ...challenge.next, nonce: "n2-other" };
  assert.equal(reason(answerChallenge(client, secret, "srv", hello, otherServerNonce)), "authentication");

  // The client's confirm, replayed with the recorded hello on a new connection: the server picks a new nonce.
  const replayed = answerHello(server, secret, hello, "n3");
  assert.ok(replayed.ok);
  assert.equal(reason(checkConfirm(server, secret, hello, replayed.next, confirm.next)), "authentication");
  // The client's confirm, replayed after another client nonce (the server's nonce happening to repeat).
  const other = answerHello(server, secret, freshHello, "n2");
  assert.ok(other.ok);
  assert.equal(reason(checkConfirm(server, secret, freshHello, other.next, confirm.next)), "authentication");
});

test("the handshake refuses another version, system name or cluster name", () => {
  const hello = makeHello(client, "srv", "n1");
  const bad = (doc: object) => {
    const r = answerHello(server, null, doc, "n2");
    return r.ok ? "ok" : r.error.reason;
  };
  assert.equal(bad({ ...hello, version: 99 }), "version");
  assert.equal(bad({ ...hello, toSystem: "other" }), "systemName");
  assert.equal(bad({ ...hello, cluster: "c2" }), "clusterName");
  assert.equal(bad({ ...hello, from: "garbage" }), "malformed");
  assert.equal(bad([1, 2]), "malformed");
});

test("a refusal from the peer is reported with the peer's reason at every step, and not answered", () => {
  const hello = makeHello(client, "srv", "n1");
  const challenge = answerHello(server, null, hello, "n2");
  assert.ok(challenge.ok);
  const refusal = (reason: unknown) => ({ step: "reject", reason, detail: "because" });
  const seen = (r: { ok: true } | { ok: false; error: HandshakeError; reply: object | null }) =>
    r.ok ? "ok" : `${r.error.reason}:${r.error.byPeer ? "by peer" : "own"}:${r.reply === null ? "silent" : "answers"}`;
  // The client, refused at the hello.
  assert.equal(seen(answerChallenge(client, null, "srv", hello, refusal("clusterName"))), "clusterName:by peer:silent");
  // The server, refused at the challenge (the client's reason, not "expected a confirm").
  assert.equal(seen(checkConfirm(server, null, hello, challenge.next, refusal("version"))), "version:by peer:silent");
  assert.equal(seen(checkConfirm(server, null, hello, challenge.next, { step: "x" })), "malformed:own:answers");
  // The client, refused at the confirm (the server's reason, not always "authentication").
  assert.equal(seen(checkAccepted(refusal("closed"))), "closed:by peer:silent");
  assert.equal(seen(checkAccepted(refusal("authentication"))), "authentication:by peer:silent");
  assert.equal(seen(checkAccepted({ step: "accepted" })), "ok");
  assert.equal(checkAccepted({ step: "x" }).ok, false);
  // A reason this node does not know reads as malformed, still the peer's refusal.
  assert.equal(seen(checkAccepted(refusal("bored"))), "malformed:by peer:silent");
  const refused = checkAccepted(refusal("clusterName"));
  assert.ok(!refused.ok);
  assert.equal(refused.error.message, "Remoting handshake failed (peer refused: clusterName): because");
});

test("backoff doubles from 50 ms to 2 s with ±20 % jitter", () => {
  assert.equal(backoffDelayMs(0, 0.5), 50);
  assert.equal(backoffDelayMs(1, 0.5), 100);
  assert.equal(backoffDelayMs(10, 0.5), 2000);
  assert.equal(backoffDelayMs(0, 0), 40);
  assert.ok(backoffDelayMs(100, 0.999) <= 2400);
});

test("system messages are numbered, acked cumulatively, de-duplicated and gaps reported", () => {
  const out = new SystemOutbox();
  const m1 = out.enqueue({ sys: "stop" });
  const m2 = out.enqueue({ sys: "watch" });
  out.enqueue({ sys: "unwatch" });
  assert.deepEqual([m1.seq, m2.seq], [1, 2]);
  out.ack(2, 0);
  assert.deepEqual(
    out.pending.map((m) => m.seq),
    [3],
  );
  const inbox = new SystemInbox();
  assert.equal(inbox.accept("p", 1), "deliver");
  assert.equal(inbox.accept("p", 1), "duplicate");
  assert.equal(inbox.accept("p", 3), "gap");
  assert.equal(inbox.accept("p", 2), "deliver");
  assert.equal(inbox.acked("p"), 2);
  assert.equal(out.reset(), 1);
  assert.equal(out.enqueue({}).seq, 1);
});
