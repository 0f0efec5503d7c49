import assert from "node:assert/strict";
import { createServer } from "node:net";
import { test } from "node:test";
import {
  AbstractBehavior,
  type ActorContext,
  type ActorRef,
  type Signal,
  STOP,
  Terminated,
} from "../../src/actor/index.ts";
import { type AssociationEvent, backoffDefaults, RemoteActorRef, RemoteDeliveryError } from "../../src/remote/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { Ping, Pong } from "./fixtures/messages.ts";
import { Collector, EchoBehavior, startNode, Watcher } from "./fixtures/nodes.ts";

type Node = Awaited<ReturnType<typeof startNode>>;

/** B's echo actor `target`, reached once from A (so the association is up) and watched by A's `watcher`. */
async function watchedRemoteEcho(a: Node, b: Node) {
  const target = b.system.spawn(new EchoBehavior(), "target");
  const remote = a.system.actorSelection(target.path.toString());
  assert.equal((await remote.ask(new Ping(1), Pong, 3000)).n, 1);
  const terminated: Terminated[] = [];
  a.system.spawn(new Watcher(terminated), "watcher").tell(remote);
  return { target, remote, terminated };
}

/** Watches or unwatches the ref it is told to, and records the Terminated signals it gets. */
class WatchControl extends AbstractBehavior<
  { readonly watch: ActorRef<unknown> } | { readonly unwatch: ActorRef<unknown> }
> {
  constructor(readonly terminated: Terminated[]) {
    super();
  }
  receive(
    command: { readonly watch: ActorRef<unknown> } | { readonly unwatch: ActorRef<unknown> },
    ctx: ActorContext<unknown>,
  ): void {
    if ("watch" in command) ctx.watch(command.watch);
    else ctx.unwatch(command.unwatch);
  }
  override receiveSignal(signal: Signal): void {
    if (signal instanceof Terminated) this.terminated.push(signal);
  }
}

test("disconnect: messages sent meanwhile are dropped and counted, then traffic flows again", async () => {
  const a = await startNode("dc-a");
  const b = await startNode("dc-b");
  try {
    const got: unknown[] = [];
    b.system.spawn(new Collector(got), "inbox");
    const ref = a.system.actorSelection(`${b.system.address}/user/inbox`);
    ref.tell(new Ping(1));
    await eventually(() => got.length === 1, { what: "first delivery" });
    a.remoting.disconnect(b.remoting.selfAddress);
    assert.equal(a.remoting.peerInfo(b.remoting.selfAddress)?.state, "backoff");
    ref.tell(new Ping(2));
    ref.tell(new Ping(3));
    assert.equal(a.remoting.stats.droppedWhileDisconnected, 2);
    // An ask while disconnected fails fast instead of waiting for its timeout.
    await assert.rejects(
      ref.ask(new Ping(4), Pong, 10_000),
      (e: unknown) => e instanceof RemoteDeliveryError && e.reason === "disconnected",
    );
    await eventually(() => a.remoting.peerInfo(b.remoting.selfAddress)?.state === "up", { what: "reconnect" });
    assert.ok(a.remoting.stats.reconnects >= 1);
    ref.tell(new Ping(5));
    await eventually(() => got.length === 2, { what: "delivery after reconnect" });
    assert.deepEqual(
      got.map((m) => (m as Ping).n),
      [1, 5],
    );
  } finally {
    await Promise.all([a.system.terminate(), b.system.terminate()]);
  }
});

test("a peer restarted on the same port is a new incarnation; refs to the old uid fail fast, watchers get Terminated", async () => {
  const a = await startNode("rs-a");
  let b = await startNode("rs-b");
  const port = b.remoting.selfAddress.address.port!;
  const oldUid = b.remoting.selfAddress.uid;
  const events: AssociationEvent[] = [];
  a.remoting.subscribe((e) => events.push(e));
  try {
    b.system.spawn(new EchoBehavior(), "echo");
    const oldRef = a.system.actorSelection(`${b.system.address}/user/echo`);
    assert.equal((await oldRef.ask(new Ping(1), Pong, 3000)).n, 1);
    assert.ok(oldRef instanceof RemoteActorRef && oldRef.uid === oldUid);
    const terminated: Terminated[] = [];
    a.system.spawn(new Watcher(terminated), "watcher").tell(oldRef);
    await eventually(() => a.remoting.peerInfo(b.remoting.selfAddress)?.pendingSystemMessages === 0, {
      what: "watch acknowledged",
    });
    await b.system.terminate();
    b = await startNode("rs-b", { port });
    assert.notEqual(b.remoting.selfAddress.uid, oldUid);
    b.system.spawn(new EchoBehavior(), "echo");
    // A fresh ref reaches the new incarnation once A has reconnected.
    await eventually(
      async () => {
        const fresh = a.system.actorSelection(`${b.system.address}/user/echo`);
        return (await fresh.ask(new Ping(2), Pong, 200).catch(() => null))?.n === 2;
      },
      { what: "ask to the new incarnation", describe: () => a.remoting.peers() },
    );
    assert.ok(
      events.some((e) => e.kind === "lost" && e.peer.uid === oldUid && e.reason === "uidChanged"),
      JSON.stringify(events.map((e) => `${e.kind} ${e.peer}`)),
    );
    await eventually(() => terminated.length === 1, { what: "Terminated for the old incarnation's actor" });
    assert.equal(terminated[0]!.addressTerminated, true);
    // The old ref never reaches the new incarnation.
    const dropped0 = a.remoting.stats.droppedStaleUid;
    await assert.rejects(
      oldRef.ask(new Ping(3), Pong, 10_000),
      (e: unknown) => e instanceof RemoteDeliveryError && e.reason === "staleUid",
    );
    assert.equal(a.remoting.stats.droppedStaleUid, dropped0 + 1);
    assert.equal(a.remoting.stats.associationsLost, 1);
  } finally {
    await Promise.all([a.system.terminate(), b.system.terminate()]);
  }
});

test("blackhole drops traffic both ways silently; unblackhole restores it", async () => {
  const a = await startNode("bh-a");
  const b = await startNode("bh-b");
  try {
    const gotB: unknown[] = [];
    const gotA: unknown[] = [];
    b.system.spawn(new Collector(gotB), "inbox");
    a.system.spawn(new Collector(gotA), "inbox");
    const toB = a.system.actorSelection(`${b.system.address}/user/inbox`);
    const toA = b.system.actorSelection(`${a.system.address}/user/inbox`);
    toB.tell(new Ping(1));
    toA.tell(new Ping(1));
    await eventually(() => gotA.length === 1 && gotB.length === 1, { what: "both directions" });
    a.remoting.blackhole(b.remoting.selfAddress);
    assert.equal(a.remoting.peerInfo(b.remoting.selfAddress)?.blackholed, true);
    toB.tell(new Ping(2));
    toA.tell(new Ping(2));
    await eventually(() => a.remoting.stats.droppedBlackholed >= 2, { what: "both dropped at A" });
    assert.equal(gotA.length, 1);
    assert.equal(gotB.length, 1);
    a.remoting.unblackhole(`127.0.0.1:${b.remoting.selfAddress.address.port}`);
    toB.tell(new Ping(3));
    toA.tell(new Ping(3));
    await eventually(() => gotA.length === 2 && gotB.length === 2, { what: "traffic after unblackhole" });
    assert.equal((gotB[1] as Ping).n, 3);
  } finally {
    await Promise.all([a.system.terminate(), b.system.terminate()]);
  }
});

test("a header definition lost to the receiver's blackhole does not break the sender's later messages with that header", async () => {
  // The blackhole hook drops frames on an open connection, which a real link never does: the sender's header table
  // (per connection) must still match the receiver's, or every later message with that header is undecodable.
  const a = await startNode("bhdef-a");
  const b = await startNode("bhdef-b");
  try {
    const warm = b.system.spawn(new EchoBehavior(), "warm");
    assert.equal((await a.system.actorSelection(warm.path.toString()).ask(new Ping(0), Pong, 3000)).n, 0);
    const got: Ping[] = [];
    b.system.spawn(new Collector(got), "late");
    const toLate = a.system.actorSelection(`${b.system.address}/user/late`);
    const dropped = b.remoting.stats.droppedBlackholed;
    b.remoting.blackhole(a.remoting.selfAddress);
    toLate.tell(new Ping(1)); // its header's first use: the definition is written, and dropped at B
    await eventually(() => b.remoting.stats.droppedBlackholed > dropped, { what: "the first message dropped at B" });
    b.remoting.unblackhole(a.remoting.selfAddress);
    toLate.tell(new Ping(2));
    toLate.tell(new Ping(3));
    await eventually(() => got.length === 2, {
      what: "the messages after the unblackhole",
      describe: () => ({ got, rejected: b.remoting.stats.rejected }),
    });
    assert.deepEqual(
      got.map((p) => p.n),
      [2, 3],
    );
    assert.equal(b.remoting.stats.rejected.undecodable, 0);
  } finally {
    await Promise.all([a.system.terminate(), b.system.terminate()]);
  }
});

test("remote watch: Terminated arrives when the remote actor stops; STOP survives a disconnect", async () => {
  const a = await startNode("w-a");
  const b = await startNode("w-b");
  try {
    const { target, remote, terminated } = await watchedRemoteEcho(a, b);
    await eventually(() => b.remoting.stats.systemDelivered >= 1, { what: "watch delivered" });
    // STOP sent while the association is down is kept and re-sent once it is back (system messages are reliable).
    a.remoting.disconnect(b.remoting.selfAddress);
    remote.sendSystem(STOP);
    await eventually(() => terminated.length === 1, {
      what: "Terminated after remote STOP",
      describe: () => ({ a: a.remoting.stats, peers: a.remoting.peers() }),
    });
    assert.equal(terminated[0]!.addressTerminated, false);
    assert.equal(terminated[0]!.ref.path.toString(), target.path.toString());
    // Watching an actor that does not exist terminates at once.
    const ghost: Terminated[] = [];
    a.system.spawn(new Watcher(ghost), "ghost-watcher").tell(a.system.actorSelection(`${b.system.address}/user/ghost`));
    await eventually(() => ghost.length === 1, { what: "Terminated for a missing remote actor" });
  } finally {
    await Promise.all([a.system.terminate(), b.system.terminate()]);
  }
});

test("quarantine closes the incarnation for good and tells watchers", async () => {
  const a = await startNode("q-a");
  const b = await startNode("q-b");
  try {
    const { remote, terminated } = await watchedRemoteEcho(a, b);
    await eventually(() => b.remoting.stats.systemDelivered >= 1, { what: "watch delivered" });
    const lost: string[] = [];
    a.remoting.onAssociationLost((peer, reason) => lost.push(`${peer.uid} ${reason}`));
    a.remoting.quarantine(b.remoting.selfAddress);
    await eventually(() => terminated.length === 1, { what: "address-terminated watcher" });
    assert.equal(terminated[0]!.addressTerminated, true);
    assert.deepEqual(lost, [`${b.remoting.selfAddress.uid} quarantined`]);
    await assert.rejects(remote.ask(new Ping(2), Pong, 5000), RemoteDeliveryError);
  } finally {
    await Promise.all([a.system.terminate(), b.system.terminate()]);
  }
});

test("terminating a system still sends what was told just before", async () => {
  const a = await startNode("fin-a");
  const b = await startNode("fin-b");
  try {
    const got: unknown[] = [];
    b.system.spawn(new Collector(got), "inbox");
    const ref = a.system.actorSelection(`${b.system.address}/user/inbox`);
    ref.tell(new Ping(0));
    await eventually(() => got.length === 1, { what: "connected" });
    for (let i = 1; i <= 100; i++) ref.tell(new Ping(i));
    await a.system.terminate();
    await eventually(() => got.length === 101, { what: "the last 100 messages", describe: () => got.length });
  } finally {
    await Promise.all([a.system.terminate(), b.system.terminate()]);
  }
});

test("a system message lost to the receiver's blackhole is re-sent when the next one reveals the gap", async () => {
  const a = await startNode("gap-a");
  const b = await startNode("gap-b");
  try {
    const one = b.system.spawn(new EchoBehavior(), "one");
    const two = b.system.spawn(new EchoBehavior(), "two");
    const remoteOne = a.system.actorSelection(one.path.toString());
    const remoteTwo = a.system.actorSelection(two.path.toString());
    await remoteOne.ask(new Ping(1), Pong, 3000);
    b.remoting.blackhole(a.remoting.selfAddress);
    remoteOne.sendSystem(STOP);
    await eventually(() => b.remoting.stats.droppedBlackholed >= 1, { what: "STOP dropped at B" });
    b.remoting.unblackhole(a.remoting.selfAddress);
    remoteTwo.sendSystem(STOP);
    await eventually(
      () => b.system.findLocal(["user", "one"]) === null && b.system.findLocal(["user", "two"]) === null,
      {
        what: "both stopped",
        describe: () => b.remoting.stats,
      },
    );
    await eventually(() => a.remoting.peerInfo(b.remoting.selfAddress)?.pendingSystemMessages === 0, {
      what: "all acknowledged",
    });
  } finally {
    await Promise.all([a.system.terminate(), b.system.terminate()]);
  }
});

test("a ref made with anyIncarnation follows a restarted peer instead of failing fast", async () => {
  const a = await startNode("any-a");
  let b = await startNode("any-b");
  const port = b.remoting.selfAddress.address.port!;
  try {
    b.system.spawn(new EchoBehavior(), "echo");
    const floating = a.remoting.refFor(`${b.system.address}/user/echo`, { anyIncarnation: true });
    assert.equal((await floating.ask(new Ping(1), Pong, 3000)).n, 1);
    await b.system.terminate();
    b = await startNode("any-b", { port });
    b.system.spawn(new EchoBehavior(), "echo");
    await eventually(async () => (await floating.ask(new Ping(2), Pong, 300).catch(() => null))?.n === 2, {
      what: "the same ref reaching the new incarnation",
    });
  } finally {
    await Promise.all([a.system.terminate(), b.system.terminate()]);
  }
});

test("remote unwatch: a remote actor stopped after its watcher unwatched it sends no Terminated", async () => {
  const a = await startNode("uw-a");
  const b = await startNode("uw-b");
  try {
    b.system.spawn(new EchoBehavior(), "first");
    const second = b.system.spawn(new EchoBehavior(), "second");
    const remoteFirst = a.system.actorSelection(`${b.system.address}/user/first`);
    const remoteSecond = a.system.actorSelection(second.path.toString());
    assert.equal((await remoteFirst.ask(new Ping(1), Pong, 3000)).n, 1);
    const terminated: Terminated[] = [];
    const watcher = a.system.spawn(new WatchControl(terminated), "watcher");
    watcher.tell({ watch: remoteFirst });
    watcher.tell({ unwatch: remoteFirst });
    await eventually(
      () =>
        b.remoting.stats.systemDelivered === 2 &&
        a.remoting.peerInfo(b.remoting.selfAddress)?.pendingSystemMessages === 0,
      { what: "watch and unwatch applied at B and acknowledged", describe: () => b.remoting.stats },
    );
    // Stopped on its own node: had B kept A's watch, its Terminated would now be queued towards A.
    b.system.findLocal(["user", "first"])!.sendSystem(STOP);
    await eventually(() => b.system.findLocal(["user", "first"]) === null, { what: "first stopped" });
    // The marker: a second watched actor's Terminated travels behind anything about the first (system messages are
    // sequenced per association), so once it is here a Terminated for the first would have arrived before it.
    watcher.tell({ watch: remoteSecond });
    remoteSecond.sendSystem(STOP);
    await eventually(() => terminated.length >= 1, {
      what: "Terminated of the second actor",
      describe: () => ({ a: a.remoting.stats, b: b.remoting.stats }),
    });
    assert.deepEqual(
      terminated.map((t) => t.ref.path.toString()),
      [second.path.toString()],
    );
    // The watcher's own cell would drop a stray Terminated for an unwatched ref, so count what crossed the wire:
    // B sent A one system message, and A applied one.
    assert.equal(b.remoting.stats.systemSent, 1, "B sent a Terminated for the unwatched actor");
    assert.equal(a.remoting.stats.systemDelivered, 1, "A received a Terminated for the unwatched actor");
  } finally {
    await Promise.all([a.system.terminate(), b.system.terminate()]);
  }
});

test("a system message re-sent after a reconnect is applied once; the receiver drops the duplicate", async () => {
  const a = await startNode("dup-a");
  const b = await startNode("dup-b");
  try {
    const { target, remote, terminated } = await watchedRemoteEcho(a, b);
    await eventually(
      () =>
        b.remoting.stats.systemDelivered === 1 &&
        a.remoting.peerInfo(b.remoting.selfAddress)?.pendingSystemMessages === 0,
      { what: "watch applied and acknowledged" },
    );
    // STOP is written to the open connection (it is flushed after this synchronous block), and A then ignores all
    // that B sends, so B applies the STOP but its ack never reaches A: A has to send it again.
    remote.sendSystem(STOP);
    a.remoting.blackhole(b.remoting.selfAddress);
    await eventually(
      () =>
        b.remoting.stats.systemDelivered === 2 &&
        b.system.findLocal(["user", "target"]) === null &&
        // B's ack of the STOP and B's Terminated for the watcher (nothing else B sends is blackholed).
        a.remoting.stats.droppedBlackholed >= 2,
      {
        what: "STOP applied at B, its ack dropped at A",
        describe: () => ({ a: a.remoting.stats, b: b.remoting.stats }),
      },
    );
    assert.equal(a.remoting.peerInfo(b.remoting.selfAddress)?.pendingSystemMessages, 1);
    const resent0 = a.remoting.stats.systemResent;
    a.remoting.disconnect(b.remoting.selfAddress);
    assert.equal(a.remoting.peerInfo(b.remoting.selfAddress)?.state, "backoff");
    // Nothing is re-sent here (there is no connection): the STOP goes again once the association is back.
    a.remoting.unblackhole(b.remoting.selfAddress);
    assert.equal(a.remoting.stats.systemResent, resent0);
    await eventually(
      () => terminated.length === 1 && a.remoting.peerInfo(b.remoting.selfAddress)?.pendingSystemMessages === 0,
      {
        what: "reconnect, STOP acknowledged, Terminated delivered",
        describe: () => ({ a: a.remoting.stats, b: b.remoting.stats, peers: a.remoting.peers() }),
      },
    );
    assert.ok(a.remoting.stats.reconnects >= 1);
    assert.equal(
      a.remoting.stats.systemResent,
      resent0 + 1,
      "the unacknowledged STOP was re-sent on the new connection",
    );
    assert.equal(b.remoting.stats.systemDuplicates, 1, "B recognised the re-sent STOP");
    assert.equal(b.remoting.stats.systemDelivered, 2, "B applied the watch and the STOP once each");
    assert.equal(terminated[0]!.ref.path.toString(), target.path.toString());
  } finally {
    await Promise.all([a.system.terminate(), b.system.terminate()]);
  }
});

test("reconnect attempts back off: each retry waits at least the growing backoff delay", async () => {
  // A real listener that accepts and at once closes each connection, recording when it accepted: the handshake never
  // completes, so every accept is one connection attempt of A's association.
  const accepted: number[] = [];
  const server = createServer((socket) => {
    accepted.push(performance.now());
    socket.destroy();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  assert.ok(address !== null && typeof address === "object");
  const a = await startNode("bo-a");
  try {
    a.system.actorSelection(`movie.tcp://bo-b@127.0.0.1:${address.port}/user/inbox`).tell(new Ping(1));
    const attempts = 4;
    await eventually(() => accepted.length >= attempts, {
      what: `${attempts} connection attempts`,
      describe: () => ({ accepted, connectAttempts: a.remoting.stats.connectAttempts }),
    });
    const seen = accepted.length;
    const connectAttempts = a.remoting.stats.connectAttempts;
    // Attempt k+1 starts after attempt k was closed (after its accept) plus the backoff of retry k, which is at least
    // minMs * factor^k less the jitter; a slow machine only makes the gaps longer. 2 ms allow for timers that count
    // whole milliseconds.
    const { minMs, factor, jitter } = backoffDefaults;
    for (let k = 0; k + 1 < attempts; k++) {
      const gap = accepted[k + 1]! - accepted[k]!;
      const least = minMs * factor ** k * (1 - jitter) - 2;
      assert.ok(gap >= least, `retry ${k} came ${gap.toFixed(1)} ms after the attempt before, expected >= ${least} ms`);
    }
    // No attempts beside the ones the listener saw (one may be on its way).
    assert.ok(connectAttempts <= seen + 1, `${connectAttempts} attempts for ${seen} accepted connections`);
    assert.equal(a.remoting.stats.handshakesOk, 0);
    assert.equal(a.remoting.peerInfo(`127.0.0.1:${address.port}`)?.state === "up", false);
  } finally {
    await a.system.terminate();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
});
