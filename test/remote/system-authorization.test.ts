import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import {
  AbstractBehavior,
  type ActorContext,
  type ActorRef,
  ActorSystem,
  Address,
  type Logger,
  type Signal,
  STOP,
  Terminated,
  UniqueAddress,
} from "../../src/actor/index.ts";
import { encodeControlFrame, FrameKind } from "../../src/remote/envelope.ts";
import { type RemoteActorRef, type Remoting, resolveRemotingSettings } from "../../src/remote/index.ts";
import { inboundWatchesPerPeerMax, RemoteWatches } from "../../src/remote/remote-watches.ts";
import { authorizeSystemMessage } from "../../src/remote/system-authorization.ts";
import { eventually } from "../fixtures/eventually.ts";
import { Ping, Pong } from "./fixtures/messages.ts";
import { Collector, type Node, startNode } from "./fixtures/nodes.ts";
import { type RawPeer, rawPeer } from "./fixtures/raw-peer.ts";

/** Holds asks without replying and watches what it is told to watch, recording what it receives. */
class Probe extends AbstractBehavior<unknown> {
  readonly received: unknown[] = [];
  readonly senders: ActorRef<unknown>[] = [];
  receive(message: unknown, ctx: ActorContext<unknown>): void {
    if (message instanceof Watching) {
      ctx.watch(message.ref);
      return;
    }
    this.received.push(message);
    if (ctx.sender !== null) this.senders.push(ctx.sender);
  }
  override receiveSignal(signal: Signal): void {
    this.received.push(signal);
  }
}
class Watching {
  constructor(readonly ref: ActorRef<unknown>) {}
}

/** A logger that records warnings. */
function recordingLogger(warnings: { message: string; context: object }[]): Logger {
  return {
    debug() {},
    info() {},
    warn(context, message) {
      warnings.push({ context, message });
    },
    error() {},
  };
}

const warnings: { message: string; context: object }[] = [];
let node: Node;
let denyNode: Node;
let watcherNode: Node;

before(async () => {
  const system = ActorSystem.create("target", { logger: recordingLogger(warnings) });
  const remoting: Remoting = await system.enableRemoting({ host: "127.0.0.1", port: 0 });
  node = { system, remoting, pathOf: (ref) => ref.path.toString() };
  [denyNode, watcherNode] = await Promise.all([startNode("denying", { remoteStop: "deny" }), startNode("watcher")]);
});
after(async () => {
  await Promise.all([node.system.terminate(), denyNode.system.terminate(), watcherNode.system.terminate()]);
});

/** Sequence numbers per receiving node (every raw peer is the same incarnation, so one stream per node). */
const seqs = new Map<Node, number>();
function system(to: Node, peer: RawPeer, body: Record<string, unknown>): void {
  const seq = (seqs.get(to) ?? 0) + 1;
  seqs.set(to, seq);
  peer.socket.write(encodeControlFrame(FrameKind.system, { seq, ...body }));
}

test("the policy: nothing reaches /temp or other roots; STOP/DRAIN never reach /system; /user needs an authorized peer", () => {
  for (const kind of ["stop", "drain", "watch", "unwatch", "terminated"] as const) {
    assert.equal(authorizeSystemMessage(kind, "temp", true, "allow"), "protectedPath", kind);
    assert.equal(authorizeSystemMessage(kind, "deadLetters", true, "allow"), "protectedPath", kind);
  }
  for (const kind of ["stop", "drain"] as const) {
    assert.equal(authorizeSystemMessage(kind, "system", true, "allow"), "protectedPath");
    assert.equal(authorizeSystemMessage(kind, "user", true, "allow"), null);
    assert.equal(authorizeSystemMessage(kind, "user", false, "allow"), "notMember");
    assert.equal(authorizeSystemMessage(kind, "user", true, "deny"), "stopDenied");
  }
  for (const kind of ["watch", "unwatch"] as const) {
    for (const root of ["user", "system"]) {
      assert.equal(authorizeSystemMessage(kind, root, true, "deny"), null);
      assert.equal(authorizeSystemMessage(kind, root, false, "allow"), "notMember");
    }
  }
  assert.equal(resolveRemotingSettings({ host: "127.0.0.1", port: 0 }).remoteStop, "allow", "the default");
  assert.throws(
    () => resolveRemotingSettings({ host: "127.0.0.1", port: 0, remoteStop: "maybe" as "deny" }),
    (error: Error) => error.name === "InvalidArgumentError" && error.message.includes("remoteStop"),
  );
  // The watched side's answer: the caller checks it matches a watch this node holds.
  assert.equal(authorizeSystemMessage("terminated", "system", false, "allow"), null);
  assert.equal(authorizeSystemMessage("terminated", "user", false, "allow"), null);
});

test("a peer cannot STOP or DRAIN a system actor or an ask's reply actor; a /user actor it can (remoteStop allow)", async () => {
  const daemon = node.system.spawnSystemActor(new Collector([]), "daemon");
  node.system.spawn(new Probe(), "stoppable");
  // A pending ask of the node, whose reply actor name the peer would have learnt from the ask.
  const other = await startNode("asked-peer");
  try {
    const probe = new Probe();
    other.system.spawn(probe, "holder");
    const pending = node.system.actorSelection(`${other.system.address}/user/holder`).ask(new Ping(1), Pong, 5_000);
    await eventually(() => probe.received.length === 1, { what: "the ask at the peer" });
    const tempName = probe.senders[0]!.path.name;

    const peer = await rawPeer(node, { handshake: true });
    const before = node.remoting.stats.rejected.unauthorizedSystem;
    system(node, peer, { sys: "stop", to: "/system/daemon" });
    system(node, peer, { sys: "drain", to: "/system/daemon" });
    system(node, peer, { sys: "stop", to: `/temp/${tempName}` });
    system(node, peer, { sys: "drain", to: `/temp/${tempName}` });
    system(node, peer, { sys: "stop", to: "/deadLetters" });
    await eventually(() => node.remoting.stats.rejected.unauthorizedSystem === before + 5, {
      what: "five refusals",
      describe: () => node.remoting.stats,
    });
    assert.equal(node.system.findLocal(["system", "daemon"]), daemon, "the system actor still runs");
    system(node, peer, { sys: "stop", to: "/user/stoppable" });
    await eventually(() => node.system.findLocal(["user", "stoppable"]) === null, { what: "the /user actor stopped" });
    assert.equal(node.remoting.stats.rejected.unauthorizedSystem, before + 5);
    // The reply actor was not touched: the real reply still completes the ask.
    probe.senders[0]!.tell(new Pong(7));
    assert.equal((await pending).n, 7);
    assert.equal(
      warnings.filter((w) => w.message.startsWith("refused a remote system message")).length,
      1,
      "one log line for the peer, however many refusals",
    );
    peer.socket.destroy();
  } finally {
    await other.system.terminate();
  }
});

test("remoteStop: deny refuses remote STOP and DRAIN of /user actors; watch still works", async () => {
  const victim = denyNode.system.spawn(new Probe(), "victim");
  const peer = await rawPeer(denyNode, { handshake: true });
  system(denyNode, peer, { sys: "stop", to: "/user/victim" });
  system(denyNode, peer, { sys: "drain", to: "/user/victim" });
  await eventually(() => denyNode.remoting.stats.rejected.unauthorizedSystem === 2, { what: "two refusals" });
  assert.equal(denyNode.system.findLocal(["user", "victim"]), victim);
  // A watch from the peer's own actor is applied (remote DeathWatch is not a stop).
  system(denyNode, peer, { sys: "watch", to: "/user/victim", ref: `${peer.identity.uniqueAddress.address}/user/w` });
  await eventually(() => denyNode.remoting.stats.systemDelivered === 3, { what: "the watch delivered" });
  assert.equal(denyNode.remoting.stats.rejected.unauthorizedSystem, 2);
  // But only for its own actors: a watch on behalf of another node's actor would send that node Terminated.
  system(denyNode, peer, { sys: "watch", to: "/user/victim", ref: `${watcherNode.system.address}/user/w` });
  system(denyNode, peer, { sys: "unwatch", to: "/user/victim", ref: `${watcherNode.system.address}/user/w` });
  // Nor for another incarnation at its own address.
  const ownRef = `${peer.identity.uniqueAddress.address}/user/w`;
  system(denyNode, peer, { sys: "watch", to: "/user/victim", ref: ownRef, refUid: "ffffffffffffffff" });
  await eventually(() => denyNode.remoting.stats.rejected.unauthorizedSystem === 5, { what: "foreign refs refused" });
  peer.socket.destroy();
});

test("with an authorizer installed, a peer it refuses can neither stop, watch nor unwatch", async () => {
  const refusedPeers: string[] = [];
  node.remoting.setPeerAuthorizer((peer: UniqueAddress) => {
    if (peer.address.port === 1) {
      refusedPeers.push(peer.toString());
      return false;
    }
    return true;
  });
  try {
    const victim = node.system.spawn(new Probe(), "member-only");
    const peer = await rawPeer(node, { handshake: true });
    const own = `${peer.identity.uniqueAddress.address}/user/w`;
    const before = node.remoting.stats.rejected.unauthorizedSystem;
    system(node, peer, { sys: "stop", to: "/user/member-only" });
    system(node, peer, { sys: "drain", to: "/user/member-only" });
    system(node, peer, { sys: "watch", to: "/user/member-only", ref: own });
    system(node, peer, { sys: "unwatch", to: "/user/member-only", ref: own });
    system(node, peer, { sys: "watch", to: "/system/daemon", ref: own });
    // A watch on behalf of another node's actor (the peer speaks only for its own).
    system(node, peer, { sys: "watch", to: "/user/member-only", ref: `${watcherNode.system.address}/user/w` });
    await eventually(() => node.remoting.stats.rejected.unauthorizedSystem === before + 6, {
      what: "six refusals",
      describe: () => node.remoting.stats.rejected,
    });
    assert.equal(node.system.findLocal(["user", "member-only"]), victim);
    assert.ok(refusedPeers.length >= 5, "the authorizer was asked about the peer");
    peer.socket.destroy();
  } finally {
    node.remoting.setPeerAuthorizer(null);
  }
});

test("remote DeathWatch between authorized peers still works, and a third peer cannot forge its Terminated", async () => {
  // Both nodes authorize each other (as cluster members would be).
  const members = new Set([node.remoting.selfAddress.toString(), watcherNode.remoting.selfAddress.toString()]);
  node.remoting.setPeerAuthorizer((peer) => members.has(peer.toString()));
  watcherNode.remoting.setPeerAuthorizer((peer) => members.has(peer.toString()));
  try {
    const watched = node.system.spawn(new Probe(), "watched");
    const watcher = new Probe();
    const watcherRef = watcherNode.system.spawn(watcher, "watcher");
    const remote = watcherNode.system.actorSelection(`${node.system.address}/user/watched`);
    watcherRef.tell(new Watching(remote));
    await eventually(() => node.remoting.stats.systemDelivered >= 1, { what: "the watch at the watched node" });
    const deliveredBefore = node.remoting.stats.systemDelivered;

    // A third (unauthorized, foreign) peer forges the watched actor's Terminated, and a watch for someone else.
    const forger = await rawPeer(watcherNode, { handshake: true });
    system(watcherNode, forger, {
      sys: "terminated",
      to: "/user/watcher",
      ref: `${node.system.address}/user/watched`,
      addressTerminated: false,
    });
    system(watcherNode, forger, { sys: "watch", to: "/user/watcher", ref: `${node.system.address}/user/other` });
    await eventually(() => watcherNode.remoting.stats.rejected.unauthorizedSystem === 2, {
      what: "the forged Terminated refused",
      describe: () => watcherNode.remoting.stats.rejected,
    });
    assert.equal(watcher.received.length, 0, "no forged Terminated reached the watcher");

    watched.sendSystem(STOP);
    await eventually(() => watcher.received.some((m) => m instanceof Terminated), {
      what: "the real Terminated from the watched side",
      describe: () => watcherNode.remoting.stats,
    });
    assert.ok(node.remoting.stats.systemDelivered >= deliveredBefore);
    forger.socket.destroy();
  } finally {
    node.remoting.setPeerAuthorizer(null);
    watcherNode.remoting.setPeerAuthorizer(null);
  }
});

test("one peer holds at most a bounded number of watches on this node's actors; unwatching frees room", () => {
  const watches = new RemoteWatches(3);
  const peer = new UniqueAddress(Address.tcp("p", "127.0.0.1", 9), "00");
  const other = new UniqueAddress(Address.tcp("q", "127.0.0.1", 8), "01");
  const watchee = { path: "movie.tcp://n@127.0.0.1:1/user/a" } as unknown as ActorRef<unknown>;
  const watcher = (n: number) => ({ pathText: `${peer.address}/user/w${n}` }) as unknown as RemoteActorRef;
  for (let i = 0; i < 3; i++) assert.equal(watches.watchInbound(peer, watchee, watcher(i)), true);
  assert.equal(watches.watchInbound(peer, watchee, watcher(3)), false, "a fourth distinct watch is refused");
  assert.equal(watches.watchInbound(peer, watchee, watcher(1)), true, "a repeated watch costs nothing");
  assert.equal(watches.watchInbound(other, watchee, watcher(9)), true, "the bound is per peer");
  watches.unwatchInbound(peer, watchee, watcher(0));
  assert.equal(watches.watchInbound(peer, watchee, watcher(3)), true);
  assert.equal(inboundWatchesPerPeerMax, 100_000);
});
