// The fuzz target's liveness actor survives hostile Pings: the well-behaved asks of a long fuzz run must measure the
// node, not an actor of the harness that the fuzzer's own frames stopped. A million-frame run lost /user/echo that
// way: Pings whose `n` was nested 20,000 deep were delivered, each reply threw in JSON.stringify, and after 10
// restarts in a minute supervision stopped the echo. Such a payload is now refused at receive (nested deeper than
// jsonNestingMax), and the target's echo also survives a reply that cannot be encoded (json-unencodable.test.ts
// covers the typed MessageEncodeError a tell of such a value gets).
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { FrameKind, PayloadFormat } from "../../src/remote/envelope.ts";
import { eventually } from "../fixtures/eventually.ts";
import { frame, userHeader } from "../fuzz/frames.ts";
import { startTarget, type Target, targetStats } from "../fuzz/harness.ts";
import { clientHandshake, fuzzIdentity, openPeer } from "../fuzz/peer.ts";
import { Ping, Pong } from "./fixtures/messages.ts";
import { type Node, startNode } from "./fixtures/nodes.ts";

let target: Target | null = null;
let peer: Node | null = null;
after(async () => {
  await Promise.all([target?.node.shutdown(10_000), peer?.system.terminate()]);
});

test("fuzz target: a dozen Pings nested 20,000 deep are refused at receive and /user/echo keeps answering", async () => {
  target = await startTarget({ secret: null, maxFrameBytes: 1024 * 1024 });
  const at = target.info.address;
  const colon = at.lastIndexOf(":");
  const raw = await openPeer(at.slice(at.lastIndexOf("@") + 1, colon), Number(at.slice(colon + 1)));
  const identity = fuzzIdentity(1, "liveness0");
  await clientHandshake(raw, identity, target.info.system, null);
  // The default supervision stops an actor after 10 restarts within 60 s: 12 throwing replies would stop it.
  const before = await targetStats(target);
  const deep = "[".repeat(20_000) + "]".repeat(20_000);
  for (let i = 0; i < 12; i++) {
    const head = userHeader({
      kind: FrameKind.user,
      headerId: 0,
      recipient: Buffer.from("/user/echo"),
      sender: Buffer.from(`${identity.uniqueAddress.address}/temp/$d${i}`),
      senderUid: Buffer.alloc(0),
      typeName: Buffer.from("test.ping"),
      format: PayloadFormat.json,
      fingerprint: 0,
    });
    raw.write(frame(Buffer.concat([head, Buffer.from(`{"n":${deep}}`)])));
  }
  await eventually(
    async () => (await targetStats(target!)).stats.rejected.undecodable === before.stats.rejected.undecodable + 12,
    { what: "the 12 hostile Pings refused as undecodable", intervalMs: 50 },
  );
  const stats = await targetStats(target);
  assert.equal(stats.echo.pings, before.echo.pings, "none reached /user/echo");
  assert.equal(stats.stats.rejected.internal, 0);
  raw.destroy();
  // A real node's ask is still answered.
  peer = await startNode("fuzz-liveness-peer");
  const echo = peer.system.actorSelection(`${at}/user/echo`);
  assert.equal((await echo.ask(new Ping(7), Pong, 5000)).n, 7);
});
