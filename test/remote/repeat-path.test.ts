import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { AbstractBehavior, type ActorContext, ActorSystem, STOP, UniqueAddress } from "../../src/actor/index.ts";
import { MessageEncodeError, MessageRegistry } from "../../src/remote/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { binaryPayload, compressedFrame, definingFrame } from "./fixtures/frames.ts";
import { Collector, type Node, startNode } from "./fixtures/nodes.ts";
import { rawPeer } from "./fixtures/raw-peer.ts";

/** Semantics the repeated-tell fast path, the inline inbound path and the write-time surrogate check must keep. */

class Reading {
  constructor(
    readonly sensor: string,
    readonly value: number,
  ) {}
}

/** Records the path of each message's sender. */
class SenderPaths extends AbstractBehavior<unknown> {
  constructor(readonly seen: (string | null)[]) {
    super();
  }
  receive(_message: unknown, ctx: ActorContext<unknown>): void {
    this.seen.push(ctx.sender?.path.toString() ?? null);
  }
}

let registry: MessageRegistry;
let a: Node;
let c: Node;
let received: unknown[];
let senders: (string | null)[];

before(async () => {
  registry = new MessageRegistry();
  registry.register(Reading, { name: "review.reading", fields: { sensor: "string", value: "number" } });
  a = await startNode("review-a", { registry });
  c = await startNode("review-c", { registry });
  received = [];
  senders = [];
  c.system.spawn(new Collector(received), "inbox");
  c.system.spawn(new SenderPaths(senders), "senders");
});
after(async () => {
  await Promise.all([a.system.terminate(), c.system.terminate()]);
});

const lone = (e: unknown) => e instanceof MessageEncodeError && /well-formed UTF-16/.test(e.message);

test("a lone surrogate is refused at tell even when the message would be dropped (blackholed peer)", async () => {
  const inbox = a.system.actorSelection(`${c.system.address}/user/inbox`);
  inbox.tell(new Reading("up", 0));
  await eventually(() => received.length === 1, { what: "the association to come up" });
  const unencodable0 = a.remoting.stats.unencodable;
  const blackholed0 = a.remoting.stats.droppedBlackholed;
  a.remoting.blackhole(c.remoting.selfAddress);
  try {
    // Connected, the same value throws; a partition must not turn the refusal into a silent, counted drop.
    assert.throws(() => inbox.tell(new Reading("lone \ud800", 1)), lone);
    assert.equal(a.remoting.stats.unencodable, unencodable0 + 1);
    assert.equal(a.remoting.stats.droppedBlackholed, blackholed0, "a refused message is not a dropped one");
  } finally {
    a.remoting.unblackhole(c.remoting.selfAddress);
  }
});

test("a lone surrogate is refused at tell even on a ref bound to a lost incarnation", () => {
  const stale = a.remoting.refFor(`${c.system.address}/user/inbox`, "00000000deadbeef");
  const unencodable0 = a.remoting.stats.unencodable;
  const stale0 = a.remoting.stats.droppedStaleUid;
  assert.throws(() => stale.tell(new Reading("\udc00", 1)), lone);
  assert.equal(a.remoting.stats.unencodable, unencodable0 + 1);
  assert.equal(a.remoting.stats.droppedStaleUid, stale0);
  // A well-formed message on the same ref is dropped and counted as before.
  stale.tell(new Reading("fine", 1));
  assert.equal(a.remoting.stats.droppedStaleUid, stale0 + 1);
});

test("repeated tells carry the sender's current path: a sender of another in-process system that starts remoting", async () => {
  // A second system in this process, not remoting yet: its actors' paths change when it enables remoting.
  const b = ActorSystem.create("review-b");
  try {
    const x = b.spawn(new Collector([]), "x");
    const target = a.system.actorSelection(`${c.system.address}/user/senders`);
    target.tell(new Reading("1", 1), x);
    target.tell(new Reading("2", 2), x);
    await eventually(() => senders.length === 2, { what: "two messages" });
    const before = String(x.path);
    await b.enableRemoting({ host: "127.0.0.1", port: 0, registry });
    assert.notEqual(String(x.path), before, "enabling remoting changed the sender's path");
    // Same target ref, same LocalActorRef sender, same type: the general path would define a new header.
    target.tell(new Reading("3", 3), x);
    await eventually(() => senders.length === 3, { what: "the third message" });
    assert.deepEqual(senders, [before, before, String(x.path)]);
  } finally {
    await b.terminate();
  }
});

/** Records each Reading's value and its sender's path. */
class ValueAndSender extends AbstractBehavior<unknown> {
  constructor(readonly seen: string[]) {
    super();
  }
  receive(message: unknown, ctx: ActorContext<unknown>): void {
    this.seen.push(`${(message as Reading).value} ${ctx.sender?.path}`);
  }
}

test("tells through two refs to one remote actor, interleaved, arrive in order with their sender", async () => {
  const seen: string[] = [];
  c.system.spawn(new ValueAndSender(seen), "two-refs");
  const teller = a.system.spawn(new Collector([]), "teller");
  const path = `${c.system.address}/user/two-refs`;
  // Two ref objects for one actor: the repeated-tell path compares the target by path, not by ref.
  const refs = [a.remoting.refFor(path), a.remoting.refFor(path)];
  assert.notEqual(refs[0], refs[1]);
  refs[0]!.tell(new Reading("0", 0), teller);
  await eventually(() => seen.length === 1, { what: "the association to come up" });
  for (let i = 1; i <= 20; i++) refs[i % 2]!.tell(new Reading(String(i), i), teller);
  await eventually(() => seen.length === 21, { what: "21 messages" });
  assert.deepEqual(
    seen,
    Array.from({ length: 21 }, (_, i) => `${i} ${teller.path}`),
  );
});

/** Receives one message and stays busy with it until `release` is called (a stop then waits). */
class Busy extends AbstractBehavior<unknown> {
  release: (() => void) | null = null;
  receive(): Promise<void> {
    return new Promise((resolve) => {
      this.release = resolve;
    });
  }
}

test("frames after the one whose delivery closed the connection are not delivered (inline path too)", async () => {
  const codec = registry.lookupName("review.reading")!.codec!;
  const payload = (value: number): Buffer => binaryPayload(codec, new Reading("r", value));
  const defining = (id: number, recipient: string, body: Buffer): Buffer =>
    definingFrame(id, { recipient, typeName: "review.reading", fingerprint: codec.fingerprint }, body);
  const busy = new Busy();
  const stopping = c.system.spawn(busy, "stopping");
  const live: unknown[] = [];
  const liveRef = c.system.spawn(new Collector(live), "live");
  const raw = await rawPeer(c, { handshake: true, port: 21 });
  // Both headers decode once, so their later frames take the inline path.
  raw.socket.write(Buffer.concat([defining(1, "/user/stopping", payload(1)), defining(2, "/user/live", payload(2))]));
  await eventually(() => busy.release !== null && live.length === 1, { what: "both headers defined" });
  // Stopped while busy: its mailbox is closed (tells become dead letters) but it has not terminated yet.
  stopping.sendSystem(STOP);
  const rawPeerAddress = new UniqueAddress(raw.identity.uniqueAddress.address, raw.identity.uniqueAddress.uid);
  const unsubscribe = c.system.deadLetterOffice.subscribe((letter) => {
    // Whoever reacts to the dead letter (here: downing the peer) closes the connection before the next frame.
    if (letter.recipient.endsWith("/user/stopping")) c.remoting.quarantine(rawPeerAddress);
  });
  try {
    // One chunk: a frame for the stopping actor, then one for the live actor.
    raw.socket.write(Buffer.concat([compressedFrame(1, payload(3)), compressedFrame(2, payload(4))]));
    await raw.closed;
    // Anything enqueued for `live` before this marker is handled before it.
    liveRef.tell("marker");
    await eventually(() => live.includes("marker"), { what: "the marker" });
    assert.deepEqual(live, [new Reading("r", 2), "marker"], "nothing from a quarantined peer after the close");
  } finally {
    unsubscribe();
    busy.release?.();
  }
});

test("a refused redefinition of a header id takes the id's old meaning with it", async () => {
  const codec = registry.lookupName("review.reading")!.codec!;
  const payload = (value: number): Buffer => binaryPayload(codec, new Reading("r", value));
  const defining = (id: number, recipient: string, sender: string | null, body: Buffer): Buffer =>
    definingFrame(id, { recipient, sender, typeName: "review.reading", fingerprint: codec.fingerprint }, body);
  const old: unknown[] = [];
  c.system.spawn(new Collector(old), "old-meaning");
  const raw = await rawPeer(c, { handshake: true, port: 23 });
  const undecodable0 = c.remoting.stats.rejected.undecodable;
  raw.socket.write(defining(3, "/user/old-meaning", null, payload(1)));
  raw.socket.write(compressedFrame(3, payload(2)));
  await eventually(() => old.length === 2, { what: "id 3 in use" });
  // The sender reuses id 3 for another header (as after a CLOCK eviction); this node refuses the definition.
  raw.socket.write(defining(3, "/user/someone-else", "not a path", payload(3)));
  // Meant for the refused header: must not reach the id's previous recipient.
  raw.socket.write(compressedFrame(3, payload(4)));
  raw.socket.write(defining(0, "/user/old-meaning", null, payload(5)));
  await eventually(() => old.some((m) => (m as Reading).value === 5), { what: "the marker" });
  assert.deepEqual(
    old.map((m) => (m as Reading).value),
    [1, 2, 5],
  );
  assert.equal(c.remoting.stats.rejected.undecodable, undecodable0 + 2);
  assert.equal(raw.isClosed(), false, "the connection stays up");
  raw.socket.destroy();
});
