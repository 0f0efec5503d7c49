// A user envelope whose sender path names neither this node nor a host:port (`movie://other/…`) is refused as
// undecodable: a reply to it would dial an address with no port and throw inside the replying actor (found by the
// fuzzer behind F7). A sender on another host:port is still delivered.
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

test("a sender path without host:port is refused as undecodable; the connection and the actor stay up", async () => {
  const node = await startNode("sender-path");
  node.system.spawn(new EchoBehavior(), "echo");
  const raw = await rawPeer(node, { handshake: true, port: 7 });
  try {
    const before = node.remoting.stats;
    raw.socket.write(Buffer.concat([ping("movie://other/user/s"), ping("movie.tcp://x@127.0.0.1:9/user/s")]));
    await eventually(() => node.remoting.stats.delivered === before.delivered + 1, {
      what: "the envelope with a host:port sender delivered",
      describe: () => node.remoting.stats,
    });
    const after = node.remoting.stats;
    assert.equal(after.rejected.undecodable, before.rejected.undecodable + 1);
    assert.equal(after.rejected.internal, before.rejected.internal);
    assert.equal(raw.isClosed(), false);
  } finally {
    raw.socket.destroy();
    await node.system.terminate();
  }
});
