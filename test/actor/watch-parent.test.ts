import assert from "node:assert/strict";
import { test } from "node:test";
import {
  AbstractBehavior,
  type ActorContext,
  type ActorRef,
  DRAIN_AND_STOP,
  type Signal,
  STOP,
  SupervisorStrategies,
  Terminated,
} from "../../src/actor/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { gate, Ping, Pong, testSystem } from "./support.ts";

/** Records the order of what a parent sees: its children's messages and their Terminated. */
class Recorder extends AbstractBehavior<unknown> {
  readonly seen: string[] = [];
  constructor(private readonly onStart: (context: ActorContext<unknown>, self: Recorder) => void) {
    super();
  }
  override preStart(context: ActorContext<unknown>): void {
    this.onStart(context, this);
  }
  receive(message: unknown, context: ActorContext<unknown>): void {
    if (message instanceof Ping) context.sender?.tell(new Pong());
    else if (typeof message === "string") this.seen.push(message);
    else if (typeof message === "function") (message as (c: ActorContext<unknown>) => void)(context);
  }
  override receiveSignal(signal: Signal): void {
    if (signal instanceof Terminated) this.seen.push(`T:${signal.ref.path.name}`);
  }
}

class Chatty extends AbstractBehavior<string> {
  constructor(private readonly parent: ActorRef<unknown>) {
    super();
  }
  receive(message: string, context: ActorContext<string>): void {
    this.parent.tell(`${context.self.path.name}:${message}`);
  }
}

test("parent watch: watch while the child's async postStop runs -> one Terminated", async (t) => {
  const system = testSystem(t);
  const g = gate();
  let kid!: ActorRef<unknown>;
  const rec = new Recorder((ctx) => {
    kid = ctx.spawn(
      new (class extends AbstractBehavior<unknown> {
        receive(): void {}
        override postStop(): Promise<void> {
          return g.promise;
        }
      })(),
      "kid",
    );
  });
  const ref = system.spawn(rec, "p");
  await ref.ask(new Ping(), Pong, 5_000);
  ref.tell((c: ActorContext<unknown>) => c.stop(kid));
  await ref.ask(new Ping(), Pong, 5_000);
  ref.tell((c: ActorContext<unknown>) => c.watch(kid));
  await ref.ask(new Ping(), Pong, 5_000);
  g.open();
  await eventually(() => rec.seen.length >= 1, { what: "Terminated", describe: () => rec.seen });
  await ref.ask(new Ping(), Pong, 5_000);
  assert.deepEqual(rec.seen, ["T:kid"]);
});

test("parent watch: child failing in preStart under stop supervision -> one Terminated", async (t) => {
  const system = testSystem(t);
  const rec = new Recorder((ctx) => {
    const kid = ctx.spawn(
      new (class extends AbstractBehavior<unknown> {
        override preStart(): void {
          throw new Error("nope");
        }
        receive(): void {}
      })(),
      "kid",
      { supervision: SupervisorStrategies.stop() },
    );
    ctx.watch(kid);
  });
  const ref = system.spawn(rec, "p");
  await eventually(() => rec.seen.length >= 1, { what: "Terminated", describe: () => rec.seen });
  await ref.ask(new Ping(), Pong, 5_000);
  assert.deepEqual(rec.seen, ["T:kid"]);
});

test("parent watch: messages a child sent before DRAIN_AND_STOP / STOP arrive before its Terminated", async (t) => {
  const system = testSystem(t);
  let kid!: ActorRef<string>;
  let kid2!: ActorRef<string>;
  const rec = new Recorder((ctx) => {
    kid = ctx.spawn(new Chatty(ctx.self), "kid");
    kid2 = ctx.spawn(new Chatty(ctx.self), "kid2");
    ctx.watch(kid);
    ctx.watch(kid2);
  });
  const ref = system.spawn(rec, "p");
  await ref.ask(new Ping(), Pong, 5_000);
  for (let i = 0; i < 100; i++) kid.tell(String(i));
  kid.sendSystem(DRAIN_AND_STOP);
  kid.tell("late");
  await eventually(() => rec.seen.includes("T:kid"), { what: "Terminated", describe: () => rec.seen });
  assert.equal(rec.seen.length, 101);
  assert.equal(rec.seen[100], "T:kid");
  kid2.tell("x");
  ref.tell((c: ActorContext<unknown>) => c.stop(kid2));
  await eventually(() => rec.seen.includes("T:kid2"), { what: "Terminated 2", describe: () => rec.seen });
  assert.deepEqual(rec.seen.slice(101), ["kid2:x", "T:kid2"]);
});

test("parent watch: double watch, unwatch of never-watched, watch/unwatch/watch -> exactly one Terminated", async (t) => {
  const system = testSystem(t);
  let kid!: ActorRef<unknown>;
  let other!: ActorRef<unknown>;
  const rec = new Recorder((ctx) => {
    kid = ctx.spawn(new Chatty(ctx.self), "kid");
    other = ctx.spawn(new Chatty(ctx.self), "other");
    ctx.unwatch(other);
    ctx.watch(kid);
    ctx.watch(kid);
    ctx.unwatch(kid);
    ctx.watch(kid);
    ctx.watch(kid);
  });
  const ref = system.spawn(rec, "p");
  await ref.ask(new Ping(), Pong, 5_000);
  ref.tell((c: ActorContext<unknown>) => {
    c.stop(kid);
    c.stop(other);
  });
  await eventually(() => rec.seen.length >= 1, { what: "Terminated", describe: () => rec.seen });
  ref.tell((c: ActorContext<unknown>) => c.watch(other));
  await eventually(() => rec.seen.length >= 2, { what: "Terminated other", describe: () => rec.seen });
  await ref.ask(new Ping(), Pong, 5_000);
  assert.deepEqual(rec.seen, ["T:kid", "T:other"]);
});

test("parent watch: parent stopping while watching children, system terminates", async (t) => {
  const system = testSystem(t);
  const rec = new Recorder((ctx) => {
    for (let i = 0; i < 10; i++) ctx.watch(ctx.spawn(new Chatty(ctx.self), `k${i}`));
  });
  const ref = system.spawn(rec, "p");
  await ref.ask(new Ping(), Pong, 5_000);
  ref.sendSystem(STOP);
  await eventually(() => system.findLocal(["user", "p"]) === null, { what: "p stopped" });
  await system.terminate();
  assert.deepEqual(rec.seen, []);
});

test("parent watch: a parent restarted re-spawns its child under the same name and watches it: the new one's Terminated arrives", async (t) => {
  const system = testSystem(t);
  const recs: Recorder[] = [];
  const ref = system.spawn(() => {
    const r = new Recorder((ctx) => {
      ctx.watch(ctx.spawn(new Chatty(ctx.self), "kid"));
    });
    recs.push(r);
    return r;
  }, "p");
  await ref.ask(new Ping(), Pong, 5_000);
  ref.tell(() => {
    throw new Error("restart me");
  });
  await eventually(() => recs.length === 2, { what: "restart" });
  await ref.ask(new Ping(), Pong, 5_000);
  ref.tell((c: ActorContext<unknown>) => c.stop(c.children[0]!));
  await eventually(() => recs[1]!.seen.length >= 2, {
    what: "both Terminated",
    describe: () => recs.map((r) => r.seen),
  });
  assert.deepEqual(recs[1]!.seen, ["T:kid", "T:kid"]);
});
