import assert from "node:assert/strict";
import { createServer } from "node:net";
import { test } from "node:test";
import { STOP, type Terminated } from "../../src/actor/index.ts";
import { encodeControlFrame, FrameKind, writeUserEnvelope } from "../../src/remote/envelope.ts";
import { eventually } from "../fixtures/eventually.ts";
import { Forward, Ping, Pong } from "./fixtures/messages.ts";
import { Collector, EchoBehavior, type Node, startNode, Watcher } from "./fixtures/nodes.ts";
import { type RawPeer, rawPeer } from "./fixtures/raw-peer.ts";

/** A loopback port nothing listens on (bound, then closed). */
async function deadPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  const port = typeof address === "object" && address !== null ? address.port : 0;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** A framed Ping from the raw peer to `recipient` whose sender path claims to be `sender`. */
function pingWithSender(recipient: string, sender: string, n: number): Buffer {
  const buf = Buffer.alloc(512);
  const end = writeUserEnvelope(
    buf,
    0,
    FrameKind.user,
    Buffer.from(recipient),
    sender,
    null,
    "test.ping",
    JSON.stringify({ n }),
  );
  return buf.subarray(0, end);
}

test("replies to sender paths a peer claims at addresses no handshake showed are dropped and counted, never dialled", async () => {
  const node = await startNode("claims-node");
  node.system.spawn(new EchoBehavior(), "echo");
  const victim = node.system.spawn(new Collector([]), "victim");
  let raw: RawPeer | null = null;
  try {
    raw = await rawPeer(node, { handshake: true, port: 61 });
    const port = await deadPort();
    // 50 forged senders: other ports of this host, and names that would need resolving.
    const frames: Buffer[] = [];
    for (let i = 0; i < 25; i++) {
      frames.push(pingWithSender("/user/echo", `movie.tcp://x@127.0.0.1:${port + 1 + i}/user/s`, i));
      frames.push(pingWithSender("/user/echo", `movie.tcp://x@forged-${i}.invalid:2552/user/s`, i));
    }
    // And a watch whose watcher is elsewhere: a peer speaks only for its own actors, so it is refused outright (were it
    // accepted, the victim's end would still not make the node dial the watcher).
    const watch = { seq: 1, sys: "watch", to: "/user/victim", ref: `movie.tcp://x@127.0.0.1:${port}/user/w` };
    frames.push(encodeControlFrame(FrameKind.system, watch));
    raw.socket.write(Buffer.concat(frames));
    await eventually(
      () => node.remoting.stats.rejected.unauthorizedSystem === 1 && node.remoting.stats.delivered === 50,
      {
        what: "the forged envelopes delivered",
        describe: () => node.remoting.stats,
      },
    );
    victim.sendSystem(STOP);
    await eventually(() => node.remoting.stats.droppedUnknownAddress === 50, {
      what: "every reply dropped as to an unknown address",
      describe: () => node.remoting.stats,
    });
    assert.equal(node.remoting.stats.connectAttempts, 0);
    assert.deepEqual(
      node.remoting.peers().map((p) => p.peer),
      ["127.0.0.1:61"],
    );
  } finally {
    raw?.socket.destroy();
    await node.system.terminate();
  }
});

test("a third node replies straight to an asker only once a handshake showed it that node", async () => {
  const a = await startNode("claims-a");
  const b = await startNode("claims-b");
  const c = await startNode("claims-c");
  try {
    const cEcho = c.system.spawn(new EchoBehavior(), "echo");
    b.system.spawn(new EchoBehavior(), "forwarder");
    const forwarder = a.system.actorSelection(`${b.system.address}/user/forwarder`);
    // C never met A: the Pong to A's reply actor is dropped at C, the ask times out.
    await assert.rejects(forwarder.ask(new Forward(cEcho.path.toString(), 1), Pong, 300));
    await eventually(() => c.remoting.stats.droppedUnknownAddress === 1, { what: "C refused to dial A" });
    assert.equal(c.remoting.peerInfo(a.remoting.selfAddress), null);
    // Once A has connected to C, C may dial A.
    assert.equal((await a.system.actorSelection(cEcho.path.toString()).ask(new Ping(2), Pong, 3000)).n, 2);
    assert.equal((await forwarder.ask(new Forward(cEcho.path.toString(), 3), Pong, 3000)).n, 3);
  } finally {
    await Promise.all([a.system.terminate(), b.system.terminate(), c.system.terminate()]);
  }
});

test("an address that never answers is given up after maxConnectAttempts; its watchers get Terminated; a new send starts afresh", async () => {
  const node = await startNode("giveup-node", { maxConnectAttempts: 3 });
  try {
    const port = await deadPort();
    const key = `127.0.0.1:${port}`;
    const ghost = node.system.actorSelection(`movie.tcp://ghost@${key}/user/g`);
    const terminated: Terminated[] = [];
    node.system.spawn(new Watcher(terminated), "watcher").tell(ghost);
    ghost.tell(new Ping(1));
    await eventually(() => node.remoting.stats.associationsGivenUp === 1, {
      what: "the association given up",
      describe: () => node.remoting.stats,
    });
    assert.equal(node.remoting.stats.connectAttempts, 3);
    assert.equal(node.remoting.peerInfo(key), null);
    await eventually(() => terminated.length === 1, { what: "the watcher told" });
    assert.equal(terminated[0]!.addressTerminated, true);
    ghost.tell(new Ping(2));
    await eventually(() => node.remoting.stats.associationsGivenUp === 2, { what: "the second round given up" });
    assert.equal(node.remoting.stats.connectAttempts, 6);
  } finally {
    await node.system.terminate();
  }
});

test("an association without traffic expires after associationIdleTimeout; a watched one stays; the next send dials again", async () => {
  const settings = { heartbeatInterval: 20, heartbeatTimeout: 2_000, associationIdleTimeout: 200 };
  const a = await startNode("idle-a", settings);
  const b = await startNode("idle-b", settings);
  const c = await startNode("idle-c", settings);
  try {
    const bEcho = b.system.spawn(new EchoBehavior(), "echo");
    const cEcho = c.system.spawn(new EchoBehavior(), "echo");
    const toB = a.system.actorSelection(bEcho.path.toString());
    const toC = a.system.actorSelection(cEcho.path.toString());
    assert.equal((await toB.ask(new Ping(1), Pong, 3000)).n, 1);
    const terminated: Terminated[] = [];
    a.system.spawn(new Watcher(terminated), "watcher").tell(toB);
    await eventually(() => a.remoting.peerInfo(b.remoting.selfAddress)?.pendingSystemMessages === 0, {
      what: "the watch acknowledged",
    });
    // C's association starts after B's and carries nothing afterwards either.
    assert.equal((await toC.ask(new Ping(2), Pong, 3000)).n, 2);
    await eventually(() => a.remoting.stats.associationsExpired === 1, {
      what: "A's association to C expired",
      describe: () => ({ stats: a.remoting.stats, peers: a.remoting.peers() }),
    });
    assert.equal(a.remoting.peerInfo(c.remoting.selfAddress)?.state ?? "none", "none");
    // B's is older and as quiet, but A watches an actor there.
    assert.equal(a.remoting.peerInfo(b.remoting.selfAddress)?.state, "up");
    const attempts = a.remoting.stats.connectAttempts;
    assert.equal((await toC.ask(new Ping(3), Pong, 3000)).n, 3);
    assert.equal(a.remoting.stats.connectAttempts, attempts + 1);
    assert.equal(terminated.length, 0);
  } finally {
    await Promise.all([a.system.terminate(), b.system.terminate(), c.system.terminate()]);
  }
});

test("maxAssociations: a new association retires the one idle longest; with none retirable the send is dropped", async () => {
  const a = await startNode("cap-a", { maxAssociations: 2 });
  const nodes: Node[] = [];
  try {
    for (const name of ["cap-b", "cap-c", "cap-d"]) nodes.push(await startNode(name));
    const echoes = nodes.map((n) => n.system.spawn(new EchoBehavior(), "echo"));
    const refs = echoes.map((e) => a.system.actorSelection(e.path.toString()));
    assert.equal((await refs[0]!.ask(new Ping(1), Pong, 3000)).n, 1);
    assert.equal((await refs[1]!.ask(new Ping(2), Pong, 3000)).n, 2);
    // The third retires B's (the least recent traffic), not C's.
    assert.equal((await refs[2]!.ask(new Ping(3), Pong, 3000)).n, 3);
    assert.equal(a.remoting.stats.associationsExpired, 1);
    assert.equal(a.remoting.peerInfo(nodes[0]!.remoting.selfAddress)?.state ?? "none", "none");
    assert.equal(a.remoting.peerInfo(nodes[1]!.remoting.selfAddress)?.state, "up");
    // Two associations each holding an unacknowledged system message: neither may go, so a third is refused.
    for (const node of nodes) node.remoting.blackhole(a.remoting.selfAddress);
    for (const node of nodes) a.remoting.blackhole(node.remoting.selfAddress);
    const terminated: Terminated[] = [];
    const watcher = a.system.spawn(new Watcher(terminated), "watcher");
    watcher.tell(refs[1]!);
    watcher.tell(refs[2]!);
    await eventually(() => a.remoting.peerInfo(nodes[2]!.remoting.selfAddress)?.pendingSystemMessages === 1, {
      what: "the watches queued",
    });
    watcher.tell(refs[0]!);
    await eventually(() => a.remoting.stats.droppedAssociationLimit === 1 && terminated.length === 1, {
      what: "the watch of a third address refused at the limit, its watcher told",
      describe: () => ({ stats: a.remoting.stats, terminated: terminated.length }),
    });
  } finally {
    await Promise.all([a.system.terminate(), ...nodes.map((n) => n.system.terminate())]);
  }
});

test("maxAssociations: an address that does not answer is retired before a live peer, however recent", async () => {
  const a = await startNode("cap2-a", { maxAssociations: 2 });
  const b = await startNode("cap2-b");
  const c = await startNode("cap2-c");
  try {
    const toB = a.system.actorSelection(b.system.spawn(new EchoBehavior(), "echo").path.toString());
    const toC = a.system.actorSelection(c.system.spawn(new EchoBehavior(), "echo").path.toString());
    assert.equal((await toB.ask(new Ping(1), Pong, 3000)).n, 1);
    const port = await deadPort();
    a.system.actorSelection(`movie.tcp://ghost@127.0.0.1:${port}/user/g`).tell(new Ping(2));
    await eventually(() => a.remoting.peerInfo(`127.0.0.1:${port}`)?.state === "backoff", {
      what: "the ghost failing",
    });
    // B's association is the older one, but it is up: the ghost's goes.
    assert.equal((await toC.ask(new Ping(3), Pong, 3000)).n, 3);
    assert.equal(a.remoting.stats.associationsExpired, 1);
    assert.equal(a.remoting.peerInfo(`127.0.0.1:${port}`), null);
    assert.equal(a.remoting.peerInfo(b.remoting.selfAddress)?.state, "up");
  } finally {
    await Promise.all([a.system.terminate(), b.system.terminate(), c.system.terminate()]);
  }
});
