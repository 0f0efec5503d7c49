// System messages whose watcher ref cannot be the sending peer's own actor must be refused, never reach the watch
// bookkeeping: a Watch of a missing actor answers with Terminated at once, and turning a bad watcher back into a
// unique address (refUid "") or dialling it (a ref with no host:port) threw inside the receive path (both found by
// the fuzzer; the connection guard closed the connection). A peer speaks only for its own incarnation, so both are
// refused as unauthorized and the connection stays up.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { encodeControlFrame, FrameKind } from "../../src/remote/envelope.ts";
import { FrameDecoder } from "../../src/remote/frame.ts";
import { eventually } from "../fixtures/eventually.ts";
import { type Node, startNode } from "./fixtures/nodes.ts";
import { type RawPeer, rawPeer } from "./fixtures/raw-peer.ts";

let node: Node;
after(async () => {
  await node.system.terminate();
});

/** Each case claims its own peer address (port), so its seq 1 is not a duplicate of another case's. */
async function refusedWatch(refUid: string, ref: (peer: RawPeer) => string, port: number): Promise<void> {
  const peer = await rawPeer(node, { handshake: true, port });
  let heartbeatReplies = 0;
  const decoder = new FrameDecoder();
  peer.socket.on("data", (chunk: Buffer) => {
    for (const f of decoder.push(chunk)) if (f[0] === FrameKind.heartbeatReply) heartbeatReplies++;
  });
  const before = node.remoting.stats;
  const doc = { seq: 1, to: "/user/none", sys: "watch", ref: ref(peer), refUid };
  peer.socket.write(encodeControlFrame(FrameKind.system, doc));
  peer.socket.write(encodeControlFrame(FrameKind.heartbeat, {}));
  await eventually(() => heartbeatReplies === 1 || peer.isClosed(), { what: "the heartbeat reply" });
  const stats = node.remoting.stats;
  assert.equal(peer.isClosed(), false, "the connection stayed up");
  assert.equal(stats.rejected.internal, before.rejected.internal);
  assert.equal(stats.rejected.unauthorizedSystem, before.rejected.unauthorizedSystem + 1);
  peer.socket.destroy();
}

test("a watch with an empty refUid is refused as unauthorized and the connection stays up", async () => {
  node = await startNode("ref-uid");
  await refusedWatch("", (peer) => `${peer.identity.uniqueAddress.address}/user/watcher`, 1);
});

test("a watch whose ref has no host:port (movie://other/…) is refused as unauthorized and the connection stays up", async () => {
  await refusedWatch("u", () => "movie://other/user/watcher", 2);
});
