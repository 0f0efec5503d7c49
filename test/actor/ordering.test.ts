import assert from "node:assert/strict";
import { test } from "node:test";
import { AbstractBehavior, type ActorContext, Behaviors } from "../../src/actor/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { gate, Ping, Pong, range, testSystem } from "./support.ts";

type Msg = number | Ping;

/** Records what it handled; some messages take longer (more awaits) than later ones. */
class SlowRecorder extends AbstractBehavior<Msg> {
  active = 0;
  maxActive = 0;
  constructor(readonly seen: number[]) {
    super();
  }
  async receive(message: Msg, context: ActorContext<Msg>): Promise<void> {
    if (message instanceof Ping) {
      context.sender?.tell(new Pong());
      return;
    }
    this.active++;
    this.maxActive = Math.max(this.maxActive, this.active);
    const awaits = (97 - message) % 7;
    for (let i = 0; i < awaits; i++) await Promise.resolve();
    if (message % 10 === 0) await new Promise((resolve) => setImmediate(resolve));
    this.seen.push(message);
    this.active--;
  }
}

test("an async receive finishes before the next message starts: per-actor FIFO, one at a time", async (t) => {
  const system = testSystem(t);
  const seen: number[] = [];
  const behavior = new SlowRecorder(seen);
  const ref = system.spawn(behavior);
  for (const i of range(200)) ref.tell(i);
  await ref.ask(new Ping(), Pong, 10_000);
  assert.deepEqual(seen, range(200));
  assert.equal(behavior.maxActive, 1);
});

test("messages told while an async receive is pending queue behind it in send order", async (t) => {
  const system = testSystem(t);
  const seen: string[] = [];
  const hold = gate();
  const ref = system.spawn(
    Behaviors.receive<string | Ping>(async (message, context) => {
      if (message instanceof Ping) return context.sender?.tell(new Pong());
      if (message === "first") await hold.promise;
      seen.push(message);
    }),
  );
  ref.tell("first");
  await Promise.resolve();
  ref.tell("second");
  ref.tell("third");
  const pong = ref.ask(new Ping(), Pong, 10_000);
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(seen, [], "nothing else ran while the first message was pending");
  hold.open();
  await pong;
  assert.deepEqual(seen, ["first", "second", "third"]);
});

test("many actors interleave but each keeps its own order, beyond one dispatcher batch", async (t) => {
  const system = testSystem(t);
  const perActor = 300; // more than one run's batch of 64 and than the mailbox's first ring size
  const logs: number[][] = range(20).map(() => []);
  const refs = logs.map((log) =>
    system.spawn(
      Behaviors.receive<Msg>((message, context) => {
        if (message instanceof Ping) context.sender?.tell(new Pong());
        else log.push(message);
      }),
    ),
  );
  for (const i of range(perActor)) for (const ref of refs) ref.tell(i);
  await Promise.all(refs.map((ref) => ref.ask(new Ping(), Pong, 10_000)));
  for (const log of logs) assert.deepEqual(log, range(perActor));
});

test("a message an actor tells itself is handled after what was already queued", async (t) => {
  const system = testSystem(t);
  const seen: string[] = [];
  const ref = system.spawn(
    Behaviors.receive<string | Ping>((message, context) => {
      if (message instanceof Ping) return context.sender?.tell(new Pong());
      seen.push(message);
      if (message === "a") context.self.tell("self");
    }),
  );
  ref.tell("a");
  ref.tell("b");
  await eventually(() => seen.length === 3, { what: "three messages", describe: () => seen });
  await ref.ask(new Ping(), Pong, 10_000);
  assert.deepEqual(seen, ["a", "b", "self"]);
});

test("context.sender stays the asker across awaits inside an async receive", async (t) => {
  const system = testSystem(t);
  const ref = system.spawn(
    Behaviors.receive<Ping>(async (_message, context) => {
      await new Promise((resolve) => setImmediate(resolve));
      context.sender?.tell(new Pong());
    }),
  );
  const replies = await Promise.all([ref.ask(new Ping(), Pong, 10_000), ref.ask(new Ping(), Pong, 10_000)]);
  assert.equal(replies.length, 2);
  assert.equal(system.pendingAskCount, 0);
});

test("messages wait until an async preStart has finished", async (t) => {
  const system = testSystem(t);
  const seen: string[] = [];
  const ref = system.spawn(
    new (class extends AbstractBehavior<Msg> {
      override async preStart(): Promise<void> {
        await new Promise((resolve) => setImmediate(resolve));
        seen.push("started");
      }
      receive(message: Msg, context: ActorContext<Msg>): void {
        if (message instanceof Ping) context.sender?.tell(new Pong());
        else seen.push(`message ${message}`);
      }
    })(),
  );
  ref.tell(1);
  await ref.ask(new Ping(), Pong, 10_000);
  assert.deepEqual(seen, ["started", "message 1"]);
});
