import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { AbstractBehavior, type ActorContext } from "../../src/actor/index.ts";
import { headerTableSize, OutboundHeaderTable } from "../../src/remote/header-table.ts";
import { eventually } from "../fixtures/eventually.ts";
import { Ping } from "./fixtures/messages.ts";
import { type Node, startNode } from "./fixtures/nodes.ts";

test("ids are handed out from 1; a known header keeps its id", () => {
  const table = new OutboundHeaderTable(4);
  assert.equal(table.lookup("a"), 0);
  assert.equal(table.assign("a"), 1);
  assert.equal(table.assign("b"), 2);
  assert.equal(table.lookup("a"), 1);
  assert.equal(table.lookup("b"), 2);
  assert.equal(table.size, 2);
  assert.equal(table.evictions, 0);
});

test("a full table evicts with CLOCK: headers used since the last sweep keep their ids", () => {
  const evicted: number[] = [];
  const table = new OutboundHeaderTable(3, () => evicted.push(1));
  table.assign("a"); // 1
  table.assign("b"); // 2
  table.assign("c"); // 3
  // Every bit is set: the hand clears 1, 2, 3 and takes 1.
  assert.equal(table.assign("d"), 1);
  assert.equal(table.lookup("a"), 0);
  assert.equal(table.keyOf(1), "d");
  // b is used again, c is not: the next eviction passes over b (clearing it) and takes c.
  table.lookup("b");
  assert.equal(table.assign("e"), 3);
  assert.equal(table.lookup("c"), 0);
  assert.equal(table.lookup("b"), 2);
  assert.equal(table.size, 3);
  assert.equal(table.evictions, 2);
  assert.equal(evicted.length, 2);
});

test("a released id is free: its header is forgotten and the id is reused before any live one", () => {
  const table = new OutboundHeaderTable(2);
  table.assign("a");
  table.assign("b");
  table.release(1);
  assert.equal(table.lookup("a"), 0);
  assert.equal(table.size, 1);
  table.lookup("b");
  assert.equal(table.assign("c"), 1);
  assert.equal(table.evictions, 0);
  assert.equal(table.lookup("b"), 2);
});

test("capacity is bounded to what a 16-bit id can name", () => {
  assert.throws(() => new OutboundHeaderTable(0), RangeError);
  assert.throws(() => new OutboundHeaderTable(65536), RangeError);
  assert.equal(new OutboundHeaderTable().capacity, headerTableSize);
});

/** Records each message with the path of its sender. */
class SenderRecorder extends AbstractBehavior<unknown> {
  readonly seen: { n: number; sender: string | null }[] = [];
  receive(message: unknown, ctx: ActorContext<unknown>): void {
    if (message instanceof Ping) this.seen.push({ n: message.n, sender: ctx.sender?.path.toString() ?? null });
  }
}

let a: Node;
let b: Node;
let recorder: SenderRecorder;

before(async () => {
  a = await startNode("hdr-a");
  b = await startNode("hdr-b");
  recorder = new SenderRecorder();
  b.system.spawn(recorder, "recorder");
});
after(async () => {
  await Promise.all([a.system.terminate(), b.system.terminate()]);
});

test("more distinct headers than the table holds: ids are reused and every message arrives with its own sender", async () => {
  const target = a.system.actorSelection(`${b.system.address}/user/recorder`);
  const senderPath = (i: number) => `${a.system.address}/user/sender-${i}`;
  const senders = Array.from({ length: headerTableSize + 200 }, (_, i) => a.system.actorSelection(senderPath(i)));
  const before = { a: a.remoting.stats, b: b.remoting.stats };
  recorder.seen.length = 0;
  for (const [i, sender] of senders.entries()) target.tell(new Ping(i), sender);
  // The first senders' ids were taken back; they must be defined again, not sent as stale ids.
  for (let i = 0; i < 50; i++) target.tell(new Ping(10_000 + i), senders[i]);
  const expected = senders.length + 50;
  await eventually(() => recorder.seen.length === expected, { what: `${expected} messages at the recorder` });
  recorder.seen.forEach(({ n, sender }, index) => {
    const i = n >= 10_000 ? n - 10_000 : n;
    assert.equal(sender, senderPath(i), `message ${index} (n=${n})`);
  });
  assert.deepEqual(
    recorder.seen.map((s) => s.n),
    [...senders.map((_, i) => i), ...Array.from({ length: 50 }, (_, i) => 10_000 + i)],
  );
  const evictions = a.remoting.stats.headerEvictions - before.a.headerEvictions;
  assert.ok(evictions >= 200, `expected at least 200 evictions, saw ${evictions}`);
  assert.equal(b.remoting.stats.rejected.undecodable, before.b.rejected.undecodable);
});

test("after a reconnect both sides start with empty tables: a known header is defined again and delivered", async () => {
  const target = a.system.actorSelection(`${b.system.address}/user/recorder`);
  recorder.seen.length = 0;
  const undecodable0 = b.remoting.stats.rejected.undecodable;
  for (let i = 0; i < 3; i++) target.tell(new Ping(i));
  await eventually(() => recorder.seen.length === 3, { what: "3 messages before the disconnect" });
  const reconnects0 = a.remoting.stats.reconnects;
  a.remoting.disconnect(b.remoting.selfAddress);
  await eventually(
    () => {
      // Messages while down are dropped (at-most-once); keep offering until one gets through the new connection.
      target.tell(new Ping(100));
      return a.remoting.stats.reconnects > reconnects0 && recorder.seen.some((s) => s.n === 100);
    },
    { what: "a message over the new connection" },
  );
  for (let i = 0; i < 3; i++) target.tell(new Ping(200 + i));
  await eventually(() => [200, 201, 202].every((n) => recorder.seen.some((s) => s.n === n)), {
    what: "3 messages after the reconnect",
    describe: () => ({ seen: recorder.seen.map((s) => s.n), b: b.remoting.stats.rejected }),
  });
  assert.equal(b.remoting.stats.rejected.undecodable, undecodable0);
});

test("a peer restarted on the same port (new uid) gets every header defined afresh", async () => {
  const { port } = b.remoting.selfAddress.address;
  const path = `${b.system.address}/user/recorder`;
  const target = a.remoting.refFor(path, { anyIncarnation: true });
  for (let i = 0; i < 3; i++) target.tell(new Ping(i));
  await eventually(() => recorder.seen.filter((s) => s.n < 3).length >= 3, {
    what: "messages to the first incarnation",
  });
  const oldUid = b.remoting.selfAddress.uid;
  await b.system.terminate();
  b = await startNode("hdr-b", { port: port! });
  assert.notEqual(b.remoting.selfAddress.uid, oldUid);
  recorder = new SenderRecorder();
  b.system.spawn(recorder, "recorder");
  await eventually(
    () => {
      target.tell(new Ping(7));
      return recorder.seen.length > 0;
    },
    { what: "a message at the restarted peer" },
  );
  for (let i = 0; i < 3; i++) target.tell(new Ping(300 + i));
  await eventually(() => [300, 301, 302].every((n) => recorder.seen.some((s) => s.n === n)), {
    what: "3 more messages at the restarted peer",
    describe: () => ({ seen: recorder.seen.map((s) => s.n), b: b.remoting.stats.rejected }),
  });
  assert.equal(b.remoting.stats.rejected.undecodable, 0);
});
