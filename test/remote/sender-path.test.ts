// A user envelope whose sender path names neither this node nor a host:port (`movie://other/…`, an actor system in
// the sender's process that has no remoting) is delivered with that sender, whose path is kept; a reply to it is
// dropped as to an unknown address, counted, and never dialled (before the rule that a node never dials an address it
// only read in a peer's frames, the reply dialled port null and threw inside the replying actor: found by the
// fuzzer behind F7).
import assert from "node:assert/strict";
import { test } from "node:test";
import { FrameKind, writeUserEnvelope } from "../../src/remote/envelope.ts";
import { eventually } from "../fixtures/eventually.ts";
import { EchoBehavior, startNode } from "./fixtures/nodes.ts";
import { rawPeer } from "./fixtures/raw-peer.ts";

function ping(sender: string): Buffer {
  const buf = Buffer.alloc(512);
  const end = writeUserEnvelope(
    buf,
    0,
    FrameKind.user,
    Buffer.from("/user/echo"),
    sender,
    null,
    "test.ping",
    '{"n":1}',
  );
  return buf.subarray(0, end);
}

test("a reply to a sender path without host:port is dropped as to an unknown address, never dialled", async () => {
  const node = await startNode("sender-path");
  node.system.spawn(new EchoBehavior(), "echo");
  const raw = await rawPeer(node, { handshake: true, port: 7 });
  try {
    const before = node.remoting.stats;
    raw.socket.write(ping("movie://other/user/s"));
    await eventually(() => node.remoting.stats.droppedUnknownAddress === before.droppedUnknownAddress + 1, {
      what: "the echo's reply dropped as to an unknown address",
      describe: () => node.remoting.stats,
    });
    const after = node.remoting.stats;
    assert.equal(after.delivered, before.delivered + 1);
    assert.equal(after.connectAttempts, before.connectAttempts);
    assert.equal(after.rejected.internal, before.rejected.internal);
    assert.equal(raw.isClosed(), false);
  } finally {
    raw.socket.destroy();
    await node.system.terminate();
  }
});
