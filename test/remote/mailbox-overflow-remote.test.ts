// A bounded mailbox reached over TCP: a remote ask past the bound rejects at once at the asker with the refusal's
// class (RemoteAskError, remoteClass "MailboxOverflowError") instead of timing out; a remote tell is counted as an
// overflow at the receiver.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { AbstractBehavior, type ActorContext } from "../../src/actor/index.ts";
import { RemoteAskError } from "../../src/remote/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { Ping, Pong } from "./fixtures/messages.ts";
import { type Node, startNode } from "./fixtures/nodes.ts";

let release: () => void = () => {};
const held = new Promise<void>((resolve) => {
  release = resolve;
});

/** Answers Ping with Pong; the Ping numbered 0 keeps it busy until `release`. */
class Holder extends AbstractBehavior<unknown> {
  readonly seen: number[] = [];
  async receive(message: unknown, ctx: ActorContext<unknown>): Promise<void> {
    if (!(message instanceof Ping)) return;
    this.seen.push(message.n);
    if (message.n === 0) await held;
    ctx.sender?.tell(new Pong(message.n));
  }
}

let a: Node;
let b: Node;
before(async () => {
  [a, b] = await Promise.all([startNode("asker"), startNode("bounded")]);
});
after(async () => {
  release();
  await Promise.all([a.system.terminate(), b.system.terminate()]);
});

test("a remote ask to a full bounded mailbox rejects at once with MailboxOverflowError's class", async () => {
  const holder = new Holder();
  b.system.spawn(holder, "holder", { mailboxCapacity: 1 });
  const ref = a.system.actorSelection(`${b.system.address}/user/holder`);
  const first = ref.ask(new Ping(0), Pong, 10_000);
  await eventually(() => holder.seen.length === 1, { what: "the holder to be inside Ping 0" });
  const queued = ref.ask(new Ping(1), Pong, 10_000);
  // One association delivers in order: Ping 1 fills the mailbox before Ping 2 arrives, so Ping 2 is refused there
  // and the asker hears why at once.
  await assert.rejects(ref.ask(new Ping(2), Pong, 5_000), (error: unknown) => {
    assert.ok(error instanceof RemoteAskError, String(error));
    assert.equal(error.remoteClass, "MailboxOverflowError");
    assert.match(error.remoteMessage, /is full \(1 messages\)/);
    return true;
  });
  assert.equal(b.system.mailboxOverflowCount, 1);
  ref.tell(new Ping(3));
  await eventually(() => b.system.mailboxOverflowCount === 2, { what: "the remote tell to be counted" });
  release();
  assert.equal((await first).n, 0);
  assert.equal((await queued).n, 1);
  assert.deepEqual(holder.seen, [0, 1]);
});
