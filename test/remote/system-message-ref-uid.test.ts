// A system message whose refUid is "" must be refused, not reach the watch bookkeeping: a Watch of a missing actor
// answers with Terminated at once, and turning that watcher back into a unique address threw InvalidAddressError
// inside the receive path (found by the fuzzer; the connection guard closed the connection). A peer speaks only for
// its own incarnation, so a refUid that is not the peer's uid is refused as unauthorized.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { encodeControlFrame, FrameKind } from "../../src/remote/envelope.ts";
import { FrameDecoder } from "../../src/remote/frame.ts";
import { eventually } from "../fixtures/eventually.ts";
import { type Node, startNode } from "./fixtures/nodes.ts";
import { rawPeer } from "./fixtures/raw-peer.ts";

let node: Node;
after(async () => {
  await node.system.terminate();
});

test("a watch with an empty refUid is refused as unauthorized and the connection stays up", async () => {
  node = await startNode("ref-uid");
  const peer = await rawPeer(node, { handshake: true });
  let heartbeatReplies = 0;
  const decoder = new FrameDecoder();
  peer.socket.on("data", (chunk: Buffer) => {
    for (const f of decoder.push(chunk)) if (f[0] === FrameKind.heartbeatReply) heartbeatReplies++;
  });
  const before = node.remoting.stats;
  const ref = `${peer.identity.uniqueAddress.address}/user/watcher`;
  peer.socket.write(encodeControlFrame(FrameKind.system, { seq: 1, to: "/user/none", sys: "watch", ref, refUid: "" }));
  peer.socket.write(encodeControlFrame(FrameKind.heartbeat, {}));
  await eventually(() => heartbeatReplies === 1 || peer.isClosed(), { what: "the heartbeat reply" });
  const stats = node.remoting.stats;
  assert.equal(peer.isClosed(), false, "the connection stayed up");
  assert.equal(stats.rejected.internal, before.rejected.internal);
  assert.equal(stats.rejected.unauthorizedSystem, before.rejected.unauthorizedSystem + 1);
  peer.socket.destroy();
});
