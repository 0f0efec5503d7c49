// A uid is a node's incarnation. A claim alone never retires a live one: a handshake claiming a live node's host:port
// with another uid is refused (counted, closed) while that node's connections are open and heard from, and admitted
// once they are closed or silent, or once membership marks the node gone. A ref binds to the incarnation it first
// reaches, never to a uid merely remembered from before a restart. The memory of uids per host:port is bounded.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Address, UniqueAddress } from "../../src/actor/index.ts";
import { type AssociationEvent, RemoteActorRef } from "../../src/remote/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { Ping, Pong } from "./fixtures/messages.ts";
import { EchoBehavior, type Node, startNode } from "./fixtures/nodes.ts";
import { rawPeer } from "./fixtures/raw-peer.ts";

/** `victim`'s address with a fresh uid: what an impostor claiming to be a restarted `victim` sends. */
function impostorOf(victim: Node): UniqueAddress {
  return new UniqueAddress(victim.remoting.selfAddress.address, "feedfacefeedface");
}

async function roundTrip(from: Node, to: Node, n: number): Promise<void> {
  const reply = await from.system.actorSelection(`${to.system.address}/user/echo`).ask(new Ping(n), Pong, 3000);
  assert.equal(reply.n, n);
}

test("an impostor claiming a live node's host:port with a new uid is refused on both nodes; the real node keeps working", async () => {
  const a = await startNode("inc-a");
  const b = await startNode("inc-b");
  const events: AssociationEvent[] = [];
  a.remoting.subscribe((e) => events.push(e));
  b.remoting.subscribe((e) => events.push(e));
  try {
    a.system.spawn(new EchoBehavior(), "echo");
    b.system.spawn(new EchoBehavior(), "echo");
    await roundTrip(a, b, 1);
    await roundTrip(b, a, 2);
    // To B, claiming to be A restarted; to A, claiming to be B restarted.
    for (const [victim, target] of [
      [a, b],
      [b, a],
    ] as const) {
      const refused0 = target.remoting.stats.incarnationClaimsRefused;
      await assert.rejects(
        rawPeer(target, { handshake: true, as: impostorOf(victim) }),
        /raw handshake refused: .*incarnationClaim/,
      );
      assert.equal(target.remoting.stats.incarnationClaimsRefused, refused0 + 1);
      assert.equal(target.remoting.peerInfo(victim.remoting.selfAddress)?.uid, victim.remoting.selfAddress.uid);
    }
    assert.deepEqual(
      events.filter((e) => e.kind === "lost").map((e) => `${e.peer}`),
      [],
      "no incarnation was retired",
    );
    assert.equal(a.remoting.stats.associationsLost + b.remoting.stats.associationsLost, 0);
    // The real nodes still reach each other, both ways, over the associations they had.
    await roundTrip(a, b, 3);
    await roundTrip(b, a, 4);
    assert.equal(a.remoting.stats.reconnects + b.remoting.stats.reconnects, 0);
  } finally {
    await Promise.all([a.system.terminate(), b.system.terminate()]);
  }
});

test("a new uid is admitted once the known incarnation's connection is silent for heartbeatTimeout, though still open", async () => {
  const b = await startNode("silent-b", { heartbeatInterval: 50, heartbeatTimeout: 300 });
  const lost: string[] = [];
  b.remoting.onAssociationLost((peer, reason) => lost.push(`${peer.uid}:${reason}`));
  try {
    // The known incarnation: a peer that completes the handshake and then never sends another byte (a hung process
    // whose socket stays open).
    const known = new UniqueAddress(Address.tcp("silent", "127.0.0.1", 61), "1111111111111111");
    const successor = new UniqueAddress(known.address, "2222222222222222");
    const hung = await rawPeer(b, { handshake: true, as: known });
    try {
      await assert.rejects(rawPeer(b, { handshake: true, as: successor }), /incarnationClaim/);
      assert.equal(b.remoting.peerInfo(known)?.uid, known.uid);
      let tries = 0;
      await eventually(
        async () => {
          tries++;
          const next = await rawPeer(b, { handshake: true, as: successor }).catch(() => null);
          next?.socket.destroy();
          return next !== null;
        },
        { what: "the successor admitted after the known one fell silent", describe: () => b.remoting.stats },
      );
      assert.ok(tries >= 1);
      assert.deepEqual(lost, [`${known.uid}:uidChanged`]);
      await eventually(() => hung.isClosed(), { what: "the silent incarnation's connection closed" });
    } finally {
      hung.socket.destroy();
    }
  } finally {
    await b.system.terminate();
  }
});

test("markIncarnationGone (membership downed or removed it) lets a new uid take over a still-connected host:port", async () => {
  const a = await startNode("gone-a");
  const b = await startNode("gone-b");
  const lost: string[] = [];
  b.remoting.onAssociationLost((peer, reason) => lost.push(`${peer.uid}:${reason}`));
  try {
    b.system.spawn(new EchoBehavior(), "echo");
    await roundTrip(a, b, 1);
    const successor = impostorOf(a);
    await assert.rejects(rawPeer(b, { handshake: true, as: successor }), /incarnationClaim/);
    b.remoting.markIncarnationGone(a.remoting.selfAddress);
    const raw = await rawPeer(b, { handshake: true, as: successor });
    try {
      assert.equal(b.remoting.peerInfo(a.remoting.selfAddress)?.uid, successor.uid);
      assert.deepEqual(lost, [`${a.remoting.selfAddress.uid}:uidChanged`]);
    } finally {
      raw.socket.destroy();
    }
  } finally {
    await Promise.all([a.system.terminate(), b.system.terminate()]);
  }
});

test("a ref looked up after the peer went down, before this node reconnected, binds to the incarnation it reaches", async () => {
  const a = await startNode("win-a");
  let b = await startNode("win-b");
  const port = b.remoting.selfAddress.address.port!;
  const oldUid = b.remoting.selfAddress.uid;
  try {
    b.system.spawn(new EchoBehavior(), "echo");
    await roundTrip(a, b, 1);
    await b.system.terminate();
    await eventually(() => a.remoting.peerInfo(`127.0.0.1:${port}`)?.state !== "up", {
      what: "A noticed B's connection closed",
      describe: () => a.remoting.peers(),
    });
    // A still remembers the old uid for the address; the ref must not take it.
    assert.equal(a.remoting.peerInfo(`127.0.0.1:${port}`)?.uid, oldUid);
    const ref = a.system.actorSelection(`movie.tcp://win-b@127.0.0.1:${port}/user/echo`);
    b = await startNode("win-b", { port });
    b.system.spawn(new EchoBehavior(), "echo");
    await eventually(async () => (await ref.ask(new Ping(2), Pong, 300).catch(() => null))?.n === 2, {
      what: "the ref made in the window reaching the restarted peer",
      describe: () => ({ ref: String(ref), stats: a.remoting.stats, peers: a.remoting.peers() }),
    });
    assert.ok(ref instanceof RemoteActorRef);
    assert.equal(ref.uid, b.remoting.selfAddress.uid);
    // And it stays bound: it does not drop as staleUid afterwards.
    const stale0 = a.remoting.stats.droppedStaleUid;
    assert.equal((await ref.ask(new Ping(3), Pong, 3000)).n, 3);
    assert.equal(a.remoting.stats.droppedStaleUid, stale0);
  } finally {
    await Promise.all([a.system.terminate(), b.system.terminate()]);
  }
});

test("remembered incarnations are capped: the oldest of peers with no association or connection go first", async () => {
  const b = await startNode("cap-b");
  const a = await startNode("cap-a");
  b.remoting.incarnationsLimit = 4;
  try {
    a.system.spawn(new EchoBehavior(), "echo");
    // B's association to A makes A's entry the oldest one that must stay.
    await roundTrip(b, a, 1);
    const aKey = a.remoting.selfAddress.address.hostPort;
    for (let port = 20; port < 30; port++) {
      const raw = await rawPeer(b, { handshake: true, port });
      raw.socket.destroy();
      await eventually(() => (b.remoting.peerInfo(`127.0.0.1:${port}`)?.inbound ?? 0) === 0, {
        what: `raw peer ${port} closed on B`,
      });
    }
    const remembered = b.remoting.peers().filter((p) => p.uid !== null);
    assert.ok(remembered.length <= 4, JSON.stringify(remembered));
    assert.ok(
      remembered.some((p) => p.peer === aKey),
      "the peer with an association is kept",
    );
    // The newest raw peers are the ones kept.
    assert.ok(remembered.some((p) => p.peer === "127.0.0.1:29"));
    assert.ok(!remembered.some((p) => p.peer === "127.0.0.1:20"));
    await roundTrip(b, a, 2);
  } finally {
    await Promise.all([a.system.terminate(), b.system.terminate()]);
  }
});
