// Bounded mailboxes: past the capacity a message is a counted dead letter and an ask behind it fails with a typed
// error; the default stays unbounded; the actor's own timer firings are never refused.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  type ActorContext,
  ActorSystem,
  Behaviors,
  type DeadLetter,
  InvalidArgumentError,
  MailboxOverflowError,
} from "../../src/actor/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { CapturingLogger, gate, manualSystem, Ping, Pong, range, testSystem } from "./support.ts";

/** An actor that records each message and holds the first one open until `held` opens. */
function holder(seen: unknown[], held: Promise<void>) {
  return Behaviors.receive<unknown>(async (message, ctx: ActorContext<unknown>) => {
    seen.push(message);
    if (message === "first") await held;
    if (message instanceof Ping) ctx.sender?.tell(new Pong());
  });
}

test("a full bounded mailbox refuses: a counted dead letter, an ask rejects with MailboxOverflowError; FIFO kept", async (t) => {
  // Opened first when the test ends (hooks run in order), so a failed assertion cannot leave terminate waiting on it.
  const { promise, open } = gate();
  t.after(open);
  const logger = new CapturingLogger();
  const system = testSystem(t, { logger });
  const letters: DeadLetter[] = [];
  system.onDeadLetter((letter) => letters.push(letter));
  const seen: unknown[] = [];
  const ref = system.spawn(holder(seen, promise), "bounded", { mailboxCapacity: 3 });
  ref.tell("first");
  await eventually(() => seen.length === 1, { what: "the first message to be in progress" });
  for (const n of [1, 2, 3]) ref.tell(`queued-${n}`);
  ref.tell("over");
  const asked = ref.ask(new Ping(), Pong, 5_000);
  await assert.rejects(asked, (error: unknown) => {
    assert.ok(error instanceof MailboxOverflowError);
    assert.equal(error.name, "MailboxOverflowError");
    assert.equal(error.capacity, 3);
    assert.equal(error.recipient, ref.path.toString());
    assert.equal(error.messageType, "Ping");
    assert.match(error.message, /raise its mailboxCapacity/);
    return true;
  });
  assert.equal(system.mailboxOverflowCount, 2);
  assert.deepEqual(
    letters.map((l) => [l.message instanceof Ping ? "Ping" : l.message, l.reason]),
    [
      ["over", "mailboxOverflow"],
      ["Ping", "mailboxOverflow"],
    ],
  );
  assert.equal(system.pendingAskCount, 0, "the refused ask holds no reply actor");
  ref.tell("over-again");
  assert.equal(system.mailboxOverflowCount, 3);
  assert.equal(logger.records.filter((r) => /bounded mailbox is full/.test(r.message)).length, 1, "logged once");
  open();
  await eventually(() => seen.length === 4, { what: "the queued messages to run", describe: () => seen });
  assert.deepEqual(seen, ["first", "queued-1", "queued-2", "queued-3"]);
  // Room again: an ask goes through.
  assert.ok((await ref.ask(new Ping(), Pong, 5_000)) instanceof Pong);
});

test("the default stays unbounded; a system default bounds /user actors and their children, not /system ones", async (t) => {
  const { promise: heldPlain, open: openPlain } = gate();
  const { promise, open } = gate();
  t.after(openPlain);
  t.after(open);
  const plain = testSystem(t);
  const seenPlain: unknown[] = [];
  const unbounded = plain.spawn(holder(seenPlain, heldPlain), "unbounded");
  unbounded.tell("first");
  await eventually(() => seenPlain.length === 1);
  for (const n of range(5000)) unbounded.tell(n);
  assert.equal(plain.mailboxOverflowCount, 0);
  openPlain();
  await eventually(() => seenPlain.length === 5001, { what: "every message to run" });

  const system = testSystem(t, { mailboxCapacity: 2 });
  const top: unknown[] = [];
  const child: unknown[] = [];
  const sys: unknown[] = [];
  const own: unknown[] = [];
  const parent = system.spawn(
    Behaviors.receive<unknown>((message, ctx) => {
      if (message === "spawn") {
        ctx.spawn(holder(child, promise), "child").tell("first");
        ctx.spawn(holder(own, promise), "own", { mailboxCapacity: 10 }).tell("first");
      }
    }),
    "parent",
  );
  parent.tell("spawn");
  const topRef = system.spawn(holder(top, promise), "top");
  const sysRef = system.spawnSystemActor(holder(sys, promise), "infra");
  topRef.tell("first");
  sysRef.tell("first");
  await eventually(
    () => [top, child, sys, own].every((s) => s.length === 1) && system.findLocal(["user", "parent", "child"]) !== null,
    { what: "every holder to be in its first message" },
  );
  const childRef = system.findLocal(["user", "parent", "child"])!;
  const ownRef = system.findLocal(["user", "parent", "own"])!;
  for (const n of range(5)) for (const r of [topRef, childRef, sysRef, ownRef]) r.tell(n);
  // top and child: 2 queued, 3 refused each; the system actor and the one with its own capacity: none refused.
  assert.equal(system.mailboxOverflowCount, 6);
});

test("a bounded actor's own timer firings are never refused", async (t) => {
  const { promise, open } = gate();
  t.after(open);
  const [system, scheduler] = manualSystem(t);
  const seen: unknown[] = [];
  const ref = system.spawn(
    Behaviors.receive<unknown>(async (message, ctx) => {
      seen.push(message);
      if (message === "first") {
        ctx.startSingleTimer("tick", "tick", 10);
        await promise;
      }
    }),
    "timed",
    { mailboxCapacity: 1 },
  );
  ref.tell("first");
  await eventually(() => seen.length === 1);
  ref.tell("queued");
  ref.tell("refused");
  scheduler.advance(10);
  assert.equal(system.mailboxOverflowCount, 1);
  open();
  await eventually(() => seen.length === 3, { what: "the queued message and the timer", describe: () => seen });
  assert.deepEqual(seen, ["first", "queued", "tick"]);
});

test("mailbox capacities are validated", (t) => {
  const system = testSystem(t);
  for (const bad of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 1_000_001, "3", { valueOf: 3 }]) {
    assert.throws(
      () => system.spawn(Behaviors.ignore<unknown>(), undefined, { mailboxCapacity: bad as number }),
      InvalidArgumentError,
    );
    assert.throws(() => ActorSystem.create("bad-capacity", { mailboxCapacity: bad as number }), InvalidArgumentError);
  }
  assert.equal(system.findLocal(["user"])?.path.toString(), `movie://${system.name}/user`);
  system.spawn(Behaviors.ignore<unknown>(), "max", { mailboxCapacity: 1_000_000 });
});

test("an overflowing message with a hostile constructor key is refused cleanly, named by its prototype", async (t) => {
  const { promise, open } = gate();
  t.after(open);
  const system = testSystem(t);
  const seen: unknown[] = [];
  const ref = system.spawn(holder(seen, promise), "hostile", { mailboxCapacity: 1 });
  ref.tell("first");
  await eventually(() => seen.length === 1);
  ref.tell("queued");
  // As a JSON payload decodes: own data properties named like the prototype's.
  const hostile = JSON.parse('{"constructor":{"name":{"toString":1}},"__proto__":{"x":1}}') as object;
  await assert.rejects(ref.ask(hostile, Pong, 5_000), (error: unknown) => {
    assert.ok(error instanceof MailboxOverflowError);
    assert.equal(error.messageType, "Object");
    return true;
  });
  assert.equal(system.mailboxOverflowCount, 1);
});
