import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { STOP } from "../../src/actor/index.ts";
import { encodeControlFrame, FrameKind } from "../../src/remote/envelope.ts";
import { ResendLimiter, SystemInbox, SystemOutbox, systemPendingMax } from "../../src/remote/system-channel.ts";
import { eventually } from "../fixtures/eventually.ts";
import { Ping, Pong } from "./fixtures/messages.ts";
import { EchoBehavior, type Node, startNode, Watcher } from "./fixtures/nodes.ts";
import { rawPeer } from "./fixtures/raw-peer.ts";

let a: Node;
let b: Node;

before(async () => {
  [a, b] = await Promise.all([startNode("overflow-a"), startNode("overflow-b")]);
});
after(async () => {
  await Promise.all([a.system.terminate(), b.system.terminate()]);
});

test("the channel core: a full outbox restarts its stream at a new epoch; the inbox starts over on it", () => {
  const out = new SystemOutbox();
  for (let i = 0; i < systemPendingMax; i++) out.enqueue({ n: i });
  assert.equal(out.full, true);
  assert.throws(() => out.enqueue({}), RangeError, "nothing is dropped silently");
  assert.equal(out.restartStream(), systemPendingMax);
  assert.equal(out.epoch, 1);
  assert.equal(out.enqueue({}).seq, 1);
  out.ack(5, 0);
  assert.equal(out.pending.length, 1, "an ack of the abandoned stream acknowledges nothing in the new one");
  out.ack(1, 1);
  assert.equal(out.pending.length, 0);
  out.enqueue({});
  assert.equal(out.reset(), 1);
  assert.equal(out.epoch, 0, "a new peer incarnation starts at epoch 0");

  const inbox = new SystemInbox();
  assert.equal(inbox.observe("p", 0), "current");
  assert.equal(inbox.accept("p", 1), "deliver");
  assert.equal(inbox.accept("p", 2), "deliver");
  assert.equal(inbox.observe("p", 1), "restarted");
  assert.equal(inbox.acked("p"), 0);
  assert.equal(inbox.accept("p", 1), "deliver");
  assert.equal(inbox.observe("p", 0), "stale");
  assert.equal(inbox.epochOf("p"), 1);
  assert.equal(inbox.observe("q", 3), "restarted", "a stream first seen past epoch 0 abandoned messages unseen here");
  assert.equal(inbox.observe("q", 3), "current");
  assert.equal(inbox.observe("r", 0), "current");

  const limiter = new ResendLimiter(200);
  assert.equal(limiter.request(1000), "now");
  assert.equal(limiter.request(1050), 150, "too soon: one resend deferred to the end of the interval");
  assert.equal(limiter.request(1060), null, "one deferred resend covers the reports in between");
  limiter.fired(1200);
  assert.equal(limiter.request(1300), 100);
  limiter.cancelled();
  assert.equal(limiter.request(1450), "now");
});

test("a partition holding more than 1,024 system messages: the stream restarts, watchers get Terminated, frames stay bounded, a later STOP is applied", async () => {
  const target = b.system.spawn(new EchoBehavior(), "target");
  const aWatched = a.system.spawn(new EchoBehavior(), "watched");
  const remoteTarget = a.system.actorSelection(target.path.toString());
  assert.equal((await remoteTarget.ask(new Ping(1), Pong, 3000)).n, 1);
  const remoteWatched = b.system.actorSelection(aWatched.path.toString());
  assert.equal((await remoteWatched.ask(new Ping(2), Pong, 3000)).n, 2);
  const aWatcher = new Watcher();
  a.system.spawn(aWatcher, "watcher").tell(remoteTarget);
  const bWatcher = new Watcher();
  b.system.spawn(bWatcher, "watcher").tell(remoteWatched);
  await eventually(
    () => b.remoting.stats.systemDelivered === 1 && a.remoting.stats.systemDelivered === 1 && noPending(a, b),
    { what: "both watches delivered and acknowledged", describe: () => [a.remoting.peers(), b.remoting.peers()] },
  );

  const peerB = b.remoting.selfAddress;
  a.remoting.blackhole(peerB);
  const held = systemPendingMax + 76;
  for (let i = 0; i < held; i++) a.system.actorSelection(`${b.system.address}/user/none-${i}`).sendSystem(STOP);
  assert.equal(a.remoting.stats.systemStreamResets, 1, "the 1,025th message restarted the stream");
  assert.equal(a.remoting.peerInfo(peerB)?.pendingSystemMessages, 76, "the new stream holds what came after");
  await eventually(() => aWatcher.terminated.length === 1, { what: "A's watcher told the watch ended" });
  assert.equal(aWatcher.terminated[0]!.addressTerminated, true);
  assert.equal(aWatcher.terminated[0]!.ref.path.toString(), target.path.toString());

  const framesInB = b.remoting.stats.framesIn;
  const framesOutA = a.remoting.stats.framesOut;
  a.remoting.unblackhole(peerB);
  await eventually(() => noPending(a, b) && bWatcher.terminated.length === 1, {
    what: "the new stream delivered and acknowledged, B's watcher told",
    describe: () => ({ a: a.remoting.stats, b: b.remoting.stats, peers: a.remoting.peers() }),
  });
  assert.equal(b.remoting.stats.systemStreamRestarts, 1);
  assert.equal(bWatcher.terminated[0]!.addressTerminated, true);
  assert.equal(bWatcher.terminated[0]!.ref.path.toString(), aWatched.path.toString());

  // A later STOP is applied (before the fix the receiver waited for the dropped messages forever).
  remoteTarget.sendSystem(STOP);
  await eventually(() => b.system.findLocal(["user", "target"]) === null, {
    what: "the later STOP applied at B",
    describe: () => b.remoting.stats,
  });
  await eventually(() => noPending(a, b), { what: "the STOP acknowledged" });
  const stats = a.remoting.stats;
  assert.ok(stats.systemResent <= 76 + 8, `a bounded resend (${stats.systemResent} resent)`);
  const inB = b.remoting.stats.framesIn - framesInB;
  const outA = a.remoting.stats.framesOut - framesOutA;
  assert.ok(inB < 400, `B received ${inB} frames after the unblackhole (76 system, 1 STOP, heartbeats, acks)`);
  assert.ok(outA < 400, `A wrote ${outA} frames after the unblackhole`);
  assert.equal(b.remoting.stats.systemDuplicates <= 8, true);
});

test("a stream restart reaches a watcher whose node never got a system message from the restarting one", async () => {
  const [c, d] = await Promise.all([startNode("overflow-c"), startNode("overflow-d")]);
  try {
    // D watches C's actor; C never sent D a system message, so D's inbox has no stream from C yet.
    const watched = c.system.spawn(new EchoBehavior(), "watched");
    const remote = d.system.actorSelection(watched.path.toString());
    assert.equal((await remote.ask(new Ping(3), Pong, 3000)).n, 3);
    const watcher = new Watcher();
    d.system.spawn(watcher, "watcher").tell(remote);
    await eventually(() => c.remoting.stats.systemDelivered === 1 && noPending(d), { what: "the watch at C" });
    const peerD = d.remoting.selfAddress;
    c.remoting.blackhole(peerD);
    for (let i = 0; i <= systemPendingMax; i++)
      c.system.actorSelection(`${d.system.address}/user/n-${i}`).sendSystem(STOP);
    assert.equal(c.remoting.stats.systemStreamResets, 1);
    c.remoting.unblackhole(peerD);
    await eventually(() => watcher.terminated.length === 1 && noPending(c), {
      what: "D's watcher told the watch ended",
      describe: () => ({ c: c.remoting.stats, d: d.remoting.stats }),
    });
    assert.equal(watcher.terminated[0]!.addressTerminated, true);
    assert.equal(d.remoting.stats.systemStreamRestarts, 1);
  } finally {
    await Promise.all([c.system.terminate(), d.system.terminate()]);
  }
});

test("a peer that reports a gap on every frame gets at most one resend per interval, not one per report", async () => {
  const inbox = (b.remoting as unknown as { inbox: SystemInbox }).inbox;
  const accept = inbox.accept.bind(inbox);
  let gaps = true;
  inbox.accept = (peer, seq) => (gaps ? "gap" : accept(peer, seq));
  const peerB = b.remoting.selfAddress;
  try {
    const resentBefore = a.remoting.stats.systemResent;
    const started = Date.now();
    const burst = 50;
    for (let i = 0; i < burst; i++) a.system.actorSelection(`${b.system.address}/user/gone-${i}`).sendSystem(STOP);
    await eventually(() => a.remoting.stats.systemResent - resentBefore >= 3 * burst, {
      what: "three rounds of resends",
      describe: () => a.remoting.stats,
    });
    const resent = a.remoting.stats.systemResent - resentBefore;
    const rounds = Math.ceil(resent / burst);
    const elapsed = Date.now() - started;
    assert.ok(
      rounds <= Math.floor(elapsed / 200) + 2,
      `${resent} frames resent in ${elapsed} ms: at most one resend of the ${burst} pending per 200 ms`,
    );
    assert.ok(a.remoting.stats.systemResendsThrottled > 0);
  } finally {
    gaps = false;
    inbox.accept = accept;
  }
  await eventually(() => a.remoting.peerInfo(peerB)?.pendingSystemMessages === 0, {
    what: "the stream caught up once the peer stopped reporting gaps",
    describe: () => a.remoting.stats,
  });
});

test("hostile epochs and acks are refused as undecodable, counted, and the connection stays up", async () => {
  const peer = await rawPeer(a, { handshake: true });
  const before = a.remoting.stats.rejected.undecodable;
  const hostile: unknown[] = [{ toString: 1 }, -1, 1.5, "2", Number.MAX_SAFE_INTEGER + 2, [1], null];
  for (const epoch of hostile) {
    peer.socket.write(encodeControlFrame(FrameKind.system, { seq: 1, epoch, sys: "stop", to: "/user/x" }));
    peer.socket.write(encodeControlFrame(FrameKind.ack, { seq: 1, epoch }));
  }
  await eventually(() => a.remoting.stats.rejected.undecodable === before + 2 * hostile.length, {
    what: "every hostile frame refused",
    describe: () => a.remoting.stats.rejected,
  });
  assert.equal(peer.isClosed(), false);
  // A huge but valid epoch only restarts this peer's own stream with the node.
  peer.socket.write(encodeControlFrame(FrameKind.system, { seq: 1, sys: "stop", to: "/user/x" }));
  peer.socket.write(encodeControlFrame(FrameKind.system, { seq: 1, epoch: 2 ** 40, sys: "stop", to: "/user/x" }));
  await eventually(() => a.remoting.stats.systemStreamRestarts === 1, { what: "the peer's stream restarted" });
  peer.socket.destroy();
});

function noPending(...nodes: Node[]): boolean {
  return nodes.every((n) => n.remoting.peers().every((p) => p.pendingSystemMessages === 0));
}
