// Read backpressure on a connection this node dialled: a peer that accepted it may write user messages on it too
// (the receive path takes traffic from both directions), so the read gate must cover it as it covers accepted ones.
import assert from "node:assert/strict";
import { createServer, type Socket } from "node:net";
import { test } from "node:test";
import { AbstractBehavior, Address, UniqueAddress } from "../../src/actor/index.ts";
import { encodeControlFrame, FrameKind, readControlFrame, writeUserEnvelope } from "../../src/remote/envelope.ts";
import { FrameDecoder } from "../../src/remote/frame.ts";
import { protocolVersion } from "../../src/remote/handshake.ts";
import { eventually } from "../fixtures/eventually.ts";
import { Ping } from "./fixtures/messages.ts";
import { startNode } from "./fixtures/nodes.ts";

/** Busy on its first message until opened, so every later one waits in its mailbox. */
class Gated extends AbstractBehavior<unknown> {
  seen = 0;
  open: () => void = () => {};
  private readonly opened = new Promise<void>((resolve) => {
    this.open = resolve;
  });
  receive(message: unknown): Promise<void> | void {
    if (message instanceof Ping) this.seen++;
    return this.opened;
  }
}

function pingFrame(recipient: string, n: number): Buffer {
  const payload = JSON.stringify({ n, text: "" });
  const buf = Buffer.alloc(512 + 3 * payload.length);
  return buf.subarray(
    0,
    writeUserEnvelope(buf, 0, FrameKind.user, Buffer.from(recipient), null, null, "test.ping", payload),
  );
}

test("a peer this node dialled cannot flood its mailboxes past maxInboundBacklog: the dialled connection pauses too, and its heartbeat check waits", async () => {
  const maxInboundBacklog = 500;
  const node = await startNode("bp-out", { maxInboundBacklog, heartbeatInterval: 50, heartbeatTimeout: 300 });
  const gated = new Gated();
  node.system.spawn(gated, "gated");
  const count = 20_000;
  const sockets = new Set<Socket>();
  let self: UniqueAddress | null = null;
  let written = 0;
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => {});
    const decoder = new FrameDecoder();
    socket.on("data", (chunk: Buffer) => {
      for (const frame of decoder.push(chunk)) {
        const step = frame[0] === FrameKind.handshake ? readControlFrame(frame).step : null;
        if (step === "hello") {
          const challenge = { step: "challenge", version: protocolVersion, system: "flooder", cluster: "" };
          socket.write(
            encodeControlFrame(FrameKind.handshake, { ...challenge, from: self!.toString(), nonce: "01", proof: "" }),
          );
        } else if (step === "confirm") {
          socket.write(encodeControlFrame(FrameKind.handshake, { step: "accepted" }));
          // Everything at once: the kernel and the socket buffer what the node does not read yet.
          const frames: Buffer[] = [];
          for (let i = 0; i < count; i++) frames.push(pingFrame("/user/gated", i));
          socket.write(Buffer.concat(frames), () => {
            written = count;
          });
        } else if (frame[0] === FrameKind.heartbeat) {
          socket.write(encodeControlFrame(FrameKind.heartbeatReply, {}));
        }
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
  self = new UniqueAddress(Address.tcp("flooder", "127.0.0.1", (server.address() as { port: number }).port), "f100d");
  let most = 0;
  try {
    node.system.actorSelection(`${self.address}/user/anyone`).tell(new Ping(-1));
    await eventually(
      () => {
        most = Math.max(most, node.system.inboundBacklog);
        return node.remoting.stats.readPauses >= 1;
      },
      {
        what: "the node to stop reading the connection it dialled",
        describe: () => ({ backlog: node.system.inboundBacklog, written, stats: node.remoting.stats }),
      },
    );
    // Held for many heartbeat timeouts: the association must not call the paused connection silent.
    const writes = node.remoting.stats.writes;
    await eventually(
      () => {
        most = Math.max(most, node.system.inboundBacklog);
        return node.remoting.stats.writes >= writes + 15;
      },
      { what: "fifteen heartbeat intervals while paused", describe: () => node.remoting.stats },
    );
    assert.ok(most <= maxInboundBacklog + (64 * 1024) / 14, `backlog reached ${most}`);
    assert.equal(node.remoting.stats.heartbeatTimeouts, 0, "a paused read is not the peer's silence");
    gated.open();
    await eventually(() => gated.seen === count, {
      what: "every message delivered once the actor is fast again",
      describe: () => ({ seen: gated.seen, backlog: node.system.inboundBacklog, stats: node.remoting.stats }),
    });
    assert.equal(node.system.inboundBacklog, 0);
  } finally {
    gated.open();
    for (const socket of sockets) socket.destroy();
    server.close();
    await node.system.terminate();
  }
});
