import assert from "node:assert/strict";
import { createServer, type Socket } from "node:net";
import { test } from "node:test";
import { AbstractBehavior, type ActorContext, Address, UniqueAddress } from "../../src/actor/index.ts";
import { encodeControlFrame, FrameKind, readControlFrame, writeUserEnvelope } from "../../src/remote/envelope.ts";
import { FrameDecoder } from "../../src/remote/frame.ts";
import {
  answerHello,
  type Challenge,
  checkConfirm,
  type HandshakeIdentity,
  type Hello,
} from "../../src/remote/handshake.ts";
import { eventually } from "../fixtures/eventually.ts";
import { Ping } from "./fixtures/messages.ts";
import { startNode } from "./fixtures/nodes.ts";
import { type RawPeer, rawPeer } from "./fixtures/raw-peer.ts";

/** Answers every Ping with a 60 kB Ping to its sender. */
class BigReplies extends AbstractBehavior<unknown> {
  private readonly text = "x".repeat(60_000);
  receive(message: unknown, ctx: ActorContext<unknown>): void {
    if (message instanceof Ping) ctx.sender?.tell(new Ping(message.n, this.text));
  }
}

/** Writes `frame` repeated to `bytes` in 64 KiB writes, waiting for drain, until done or the socket closed. */
async function flood(raw: RawPeer, frame: Buffer, bytes: number, each?: () => void): Promise<number> {
  const perChunk = Math.floor((64 * 1024) / frame.length);
  const chunk = Buffer.concat(Array.from({ length: perChunk }, () => frame));
  let written = 0;
  while (written < bytes && !raw.isClosed()) {
    const more = raw.socket.write(chunk);
    written += chunk.length;
    each?.();
    if (!more) {
      await new Promise<void>((resolve) => {
        raw.socket.once("drain", resolve);
        void raw.closed.then(resolve);
      });
    } else {
      await new Promise((resolve) => setImmediate(resolve));
    }
  }
  return written;
}

/** A framed Ping from the raw peer to `recipient`, its sender the temp actor `/temp/asker` on the peer itself. */
function pingFrom(raw: RawPeer, recipient: string, n: number): Buffer {
  const buf = Buffer.alloc(512);
  const self = raw.identity.uniqueAddress;
  const end = writeUserEnvelope(
    buf,
    0,
    FrameKind.user,
    Buffer.from(recipient),
    `${self.address}/temp/asker`,
    self.uid,
    "test.ping",
    JSON.stringify({ n }),
  );
  return buf.subarray(0, end);
}

test("a peer that sends heartbeats but never reads the replies is closed once they pass maxBufferedBytes; the node's buffer stays bounded", async () => {
  const maxBufferedBytes = 256 * 1024;
  const node = await startNode("replies-heartbeat", { maxFrameBytes: 64 * 1024, maxBufferedBytes });
  let raw: RawPeer | null = null;
  try {
    raw = await rawPeer(node, { handshake: true, port: 21 });
    raw.socket.pause();
    const peer = "127.0.0.1:21";
    let mostBuffered = 0;
    const sample = (): void => {
      mostBuffered = Math.max(mostBuffered, node.remoting.peerInfo(peer)?.bufferedBytes ?? 0);
    };
    // Far more than loopback's socket buffers hold (a few MiB each way): without the bound, the replies pile up in
    // the node's heap for as long as the peer keeps the connection open.
    const written = await flood(raw, encodeControlFrame(FrameKind.heartbeat, {}), 48 * 1024 * 1024, sample);
    await eventually(() => raw!.isClosed(), {
      what: "the node to close the connection of a peer that does not read",
      describe: () => ({ written, mostBuffered, stats: node.remoting.stats }),
    });
    assert.equal(node.remoting.stats.overflowClosed, 1);
    // The check runs before every reply: one reply (a 7-byte frame) past the bound at most, plus what a sample missed.
    assert.ok(mostBuffered <= maxBufferedBytes + 64 * 1024, `the node buffered ${mostBuffered} bytes for the peer`);
  } finally {
    raw?.socket.destroy();
    await node.system.terminate();
  }
});

test("acks of system messages count against maxBufferedBytes too", async () => {
  const maxBufferedBytes = 64 * 1024;
  const node = await startNode("replies-ack", { maxFrameBytes: 16 * 1024, maxBufferedBytes });
  let raw: RawPeer | null = null;
  try {
    raw = await rawPeer(node, { handshake: true, port: 23 });
    raw.socket.pause();
    // The same sequence number again and again: a duplicate (after the first, refused as unknown), acknowledged
    // every time.
    const duplicate = encodeControlFrame(FrameKind.system, { seq: 1, sys: "x", to: "/x" });
    const written = await flood(raw, duplicate, 48 * 1024 * 1024);
    await eventually(() => raw!.isClosed(), {
      what: "the node to close the connection of a peer that does not read its acks",
      describe: () => ({ written, stats: node.remoting.stats }),
    });
    assert.equal(node.remoting.stats.overflowClosed, 1);
  } finally {
    raw?.socket.destroy();
    await node.system.terminate();
  }
});

test("shutdown: bytes a peer did not read within the grace are counted as dropped, not silently lost", async () => {
  const node = await startNode("replies-shutdown");
  node.system.spawn(new BigReplies(), "big");
  let raw: RawPeer | null = null;
  try {
    raw = await rawPeer(node, { handshake: true, port: 22 });
    raw.socket.pause();
    const pings = Buffer.concat(Array.from({ length: 400 }, (_, n) => pingFrom(raw!, "/user/big", n)));
    raw.socket.write(pings);
    // 24 MB of replies: more than the loopback socket buffers take, so some wait in the node's heap.
    await eventually(() => (node.remoting.peerInfo("127.0.0.1:22")?.bufferedBytes ?? 0) > 8 * 1024 * 1024, {
      what: "replies waiting for the peer",
      describe: () => node.remoting.peerInfo("127.0.0.1:22"),
    });
    assert.equal(node.remoting.stats.droppedAtShutdownBytes, 0);
    await node.system.terminate();
    // The peer reads nothing, so it never sees the FIN: the grace runs out and the socket is destroyed.
    await eventually(() => node.remoting.stats.droppedAtShutdownBytes > 0, {
      what: "the unread bytes counted when the grace ran out",
      timeoutMs: 3000,
      describe: () => node.remoting.stats.droppedAtShutdownBytes,
    });
  } finally {
    raw?.socket.destroy();
    await node.system.terminate();
  }
});

test("ask replies over the connection of a peer that does not read stop at maxBufferedBytes (dropped and counted)", async () => {
  const maxBufferedBytes = 1024 * 1024;
  const node = await startNode("replies-ask", { maxBufferedBytes, maxFrameBytes: 256 * 1024 });
  node.system.spawn(new BigReplies(), "big");
  let raw: RawPeer | null = null;
  try {
    raw = await rawPeer(node, { handshake: true, port: 24 });
    raw.socket.pause();
    // 400 asks whose 60 kB replies (24 MB) the peer never reads.
    raw.socket.write(Buffer.concat(Array.from({ length: 400 }, (_, n) => pingFrom(raw!, "/user/big", n))));
    let mostBuffered = 0;
    await eventually(
      () => {
        mostBuffered = Math.max(mostBuffered, node.remoting.peerInfo("127.0.0.1:24")?.bufferedBytes ?? 0);
        return node.remoting.stats.droppedOverflow > 0 && node.remoting.stats.delivered === 400;
      },
      { what: "replies past the bound dropped", describe: () => node.remoting.stats },
    );
    // Checked before each reply: one reply past the bound at most.
    assert.ok(mostBuffered <= maxBufferedBytes + 64 * 1024, `the node buffered ${mostBuffered} bytes for the peer`);
  } finally {
    raw?.socket.destroy();
    await node.system.terminate();
  }
});

test("a hostile server that floods this node's own connection with heartbeats and never reads is closed the same way", async () => {
  const maxBufferedBytes = 256 * 1024;
  const node = await startNode("replies-client", { maxFrameBytes: 64 * 1024, maxBufferedBytes });
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  const identity: HandshakeIdentity = {
    system: "hostile",
    cluster: "",
    uniqueAddress: new UniqueAddress(Address.tcp("hostile", "127.0.0.1", port), "00000000000000aa"),
  };
  const sockets: Socket[] = [];
  let flooded = 0;
  // Answers the handshake, then stops reading and writes heartbeats until the node closes the socket.
  server.on("connection", (socket) => {
    sockets.push(socket);
    socket.on("error", () => {});
    const decoder = new FrameDecoder();
    let hello: Hello | null = null;
    let challenge: Challenge | null = null;
    socket.on("data", (chunk) => {
      for (const frame of decoder.push(chunk)) {
        const doc = readControlFrame(frame);
        if (hello === null) {
          const answered = answerHello(identity, null, doc, "ccdd");
          if (!answered.ok) return;
          hello = doc as unknown as Hello;
          challenge = answered.next;
          socket.write(encodeControlFrame(FrameKind.handshake, answered.next));
        } else if (challenge !== null) {
          if (!checkConfirm(identity, null, hello, challenge, doc).ok) return;
          challenge = null;
          socket.write(encodeControlFrame(FrameKind.handshake, { step: "accepted" }));
          socket.pause();
          const heartbeat = encodeControlFrame(FrameKind.heartbeat, {});
          const chunk64k = Buffer.concat(Array.from({ length: Math.floor(65536 / heartbeat.length) }, () => heartbeat));
          const pump = (): void => {
            while (!socket.destroyed && flooded < 64 * 1024 * 1024) {
              flooded += chunk64k.length;
              if (!socket.write(chunk64k)) {
                socket.once("drain", pump);
                return;
              }
            }
          };
          pump();
          return;
        }
      }
    });
  });
  try {
    const key = `127.0.0.1:${port}`;
    node.system.actorSelection(`movie.tcp://hostile@${key}/user/x`).tell(new Ping(1));
    let mostBuffered = 0;
    await eventually(
      () => {
        mostBuffered = Math.max(mostBuffered, node.remoting.peerInfo(key)?.bufferedBytes ?? 0);
        return node.remoting.stats.overflowClosed >= 1;
      },
      { what: "the node to close its connection to a server that does not read", describe: () => ({ flooded }) },
    );
    assert.ok(mostBuffered <= maxBufferedBytes + 64 * 1024, `the node buffered ${mostBuffered} bytes for the server`);
  } finally {
    for (const socket of sockets) socket.destroy();
    server.close();
    await node.system.terminate();
  }
});
