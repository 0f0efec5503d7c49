// Membership tells remoting when a member is Removed (markIncarnationGone): a successor incarnation on the removed
// node's host:port is then admitted even while the removed process is still connected, where a mere claim is refused.
import assert from "node:assert/strict";
import { test } from "node:test";
import { UniqueAddress } from "../../src/actor/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { rawPeer } from "../remote/fixtures/raw-peer.ts";
import { allUp, describe, startClusterNodes, terminateAll } from "./fixtures/nodes.ts";

test("after a graceful leave, the removed node's successor uid is admitted while the old process is still connected", async () => {
  const nodes = await startClusterNodes(2);
  const [a, b] = nodes as [(typeof nodes)[0], (typeof nodes)[0]];
  try {
    await eventually(() => nodes.every((n) => allUp(n, 2)), { what: "both Up", describe: describe(nodes) });
    const asNode = { system: a.system, remoting: a.remoting, pathOf: () => "" };
    const successor = new UniqueAddress(b.remoting.selfAddress.address, "5151515151515151");
    // While B is a live member, a new uid claiming its host:port is refused.
    await assert.rejects(rawPeer(asNode, { handshake: true, as: successor }), /incarnationClaim/);
    await b.cluster.leave();
    await eventually(() => a.events.some((e) => e.type === "MemberRemoved"), {
      what: "A saw B Removed",
      describe: describe(nodes),
    });
    // B's process is still there and still connected to A.
    const info = a.remoting.peerInfo(b.remoting.selfAddress);
    assert.equal(info?.uid, b.remoting.selfAddress.uid);
    assert.ok(info !== null && (info.state === "up" || info.inbound > 0), JSON.stringify(info));
    const raw = await rawPeer(asNode, { handshake: true, as: successor });
    try {
      assert.equal(a.remoting.peerInfo(b.remoting.selfAddress)?.uid, successor.uid);
    } finally {
      raw.socket.destroy();
    }
  } finally {
    await terminateAll(nodes);
  }
});
