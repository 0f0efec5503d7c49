import assert from "node:assert/strict";
import { test } from "node:test";
import { type AssociationEvent, RemoteDeliveryError } from "../../src/remote/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { startChild } from "./fixtures/child.ts";
import { Forward, Ping, Pong } from "./fixtures/messages.ts";
import { EchoBehavior, startNode } from "./fixtures/nodes.ts";

test("a second OS process: ask both ways, kill -9, drops counted, restart on the same port is a new uid", async () => {
  const local = await startNode("parent");
  let child = await startChild("child");
  const events: AssociationEvent[] = [];
  local.remoting.subscribe((e) => events.push(e));
  try {
    const localEcho = local.system.spawn(new EchoBehavior(), "echo");
    const remoteEcho = local.system.actorSelection(`${child.uniqueAddress.address}/user/echo`);
    assert.equal((await remoteEcho.ask(new Ping(1), Pong, 5000)).n, 1);
    // The child tells our echo (with our ask's reply actor as sender); our echo replies locally.
    assert.equal((await remoteEcho.ask(new Forward(localEcho.path.toString(), 2), Pong, 5000)).n, 2);
    assert.ok(local.remoting.peerInfo(child.uniqueAddress)!.inbound >= 1);

    const port = child.uniqueAddress.address.port!;
    child.process.kill("SIGKILL");
    await child.exited;
    await eventually(() => local.remoting.peerInfo(child.uniqueAddress)?.state !== "up", { what: "loss noticed" });
    const dropped0 = local.remoting.stats.droppedWhileDisconnected;
    remoteEcho.tell(new Ping(3));
    assert.equal(local.remoting.stats.droppedWhileDisconnected, dropped0 + 1);

    const oldUid = child.uniqueAddress.uid;
    child = await startChild("child", port);
    assert.notEqual(child.uniqueAddress.uid, oldUid);
    await eventually(
      async () => {
        const fresh = local.system.actorSelection(`${child.uniqueAddress.address}/user/echo`);
        return (await fresh.ask(new Ping(4), Pong, 300).catch(() => null))?.n === 4;
      },
      { what: "ask to the restarted process", describe: () => local.remoting.peers() },
    );
    assert.ok(events.some((e) => e.kind === "lost" && e.peer.uid === oldUid));
    await assert.rejects(remoteEcho.ask(new Ping(5), Pong, 5000), RemoteDeliveryError);
  } finally {
    child.process.stdin?.end();
    child.process.kill("SIGKILL");
    await local.system.terminate();
  }
});

test("heartbeats: a SIGSTOPped peer's connection is closed after the timeout and re-made after SIGCONT", async () => {
  const local = await startNode("hb-parent", { heartbeatInterval: 50, heartbeatTimeout: 300, handshakeTimeout: 300 });
  const child = await startChild("hb-child");
  try {
    const remoteEcho = local.system.actorSelection(`${child.uniqueAddress.address}/user/echo`);
    assert.equal((await remoteEcho.ask(new Ping(1), Pong, 5000)).n, 1);
    child.process.kill("SIGSTOP");
    await eventually(() => local.remoting.stats.heartbeatTimeouts >= 1, { what: "heartbeat timeout" });
    assert.notEqual(local.remoting.peerInfo(child.uniqueAddress)?.state, "up");
    child.process.kill("SIGCONT");
    await eventually(async () => (await remoteEcho.ask(new Ping(2), Pong, 300).catch(() => null))?.n === 2, {
      what: "traffic after SIGCONT",
      describe: () => local.remoting.peers(),
    });
    // Same incarnation: no loss reported.
    assert.equal(local.remoting.stats.associationsLost, 0);
  } finally {
    child.process.kill("SIGCONT");
    child.process.kill("SIGKILL");
    await local.system.terminate();
  }
});

test("backpressure: when a paused peer stops reading, messages beyond maxBufferedBytes are dropped and counted", async () => {
  const local = await startNode("bp-parent", { maxFrameBytes: 64 * 1024, maxBufferedBytes: 256 * 1024 });
  const child = await startChild("bp-child");
  try {
    const remoteEcho = local.system.actorSelection(`${child.uniqueAddress.address}/user/echo`);
    assert.equal((await remoteEcho.ask(new Ping(1), Pong, 5000)).n, 1);
    child.process.kill("SIGSTOP");
    const text = "y".repeat(1000);
    let sent = 0;
    while (local.remoting.stats.droppedOverflow === 0 && sent < 200_000) {
      for (let i = 0; i < 1000; i++) remoteEcho.tell(new Ping(i, text));
      sent += 1000;
      await new Promise((resolve) => setImmediate(resolve));
    }
    assert.ok(local.remoting.stats.droppedOverflow > 0, `sent ${sent} without overflow`);
    assert.equal(local.remoting.peerInfo(child.uniqueAddress)?.state, "up");
  } finally {
    child.process.kill("SIGCONT");
    child.process.kill("SIGKILL");
    await local.system.terminate();
  }
});
