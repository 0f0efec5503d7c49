import assert from "node:assert/strict";
import { test } from "node:test";
import {
  AbstractBehavior,
  type ActorContext,
  InvalidArgumentError,
  ReceiveTimeout,
  type Signal,
} from "../../src/actor/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { manualSystem, Ping, Pong } from "./support.ts";

type Cmd = Ping | "off" | { set: number };

class Idle extends AbstractBehavior<Cmd> {
  readonly timeoutsAtMs: number[] = [];
  readonly errors: unknown[] = [];
  override preStart(context: ActorContext<Cmd>): void {
    context.setReceiveTimeout(100);
  }
  receive(message: Cmd, context: ActorContext<Cmd>): void {
    if (message instanceof Ping) context.sender?.tell(new Pong());
    else if (message === "off") context.setReceiveTimeout(null);
    else {
      try {
        context.setReceiveTimeout(message.set);
      } catch (error) {
        this.errors.push(error);
      }
      context.sender?.tell(new Pong());
    }
  }
  override receiveSignal(signal: Signal, context: ActorContext<Cmd>): void {
    if (signal instanceof ReceiveTimeout) this.timeoutsAtMs.push(context.system.scheduler.now());
  }
}

test("ReceiveTimeout arrives after the idle time on the virtual clock; each message postpones it", async (t) => {
  const [system, clock] = manualSystem(t);
  const idle = new Idle();
  const ref = system.spawn(idle);
  await ref.ask(new Ping(), Pong, 60_000); // t=0, also activity
  clock.advance(99);
  await ref.ask(new Ping(), Pong, 60_000); // t=99: not yet idle for 100 ms
  assert.deepEqual(idle.timeoutsAtMs, []);
  clock.advance(99);
  await ref.ask(new Ping(), Pong, 60_000); // t=198
  assert.deepEqual(idle.timeoutsAtMs, []);
  clock.advance(100); // t=298: idle for 100 ms since the last Ping
  await eventually(() => idle.timeoutsAtMs.length === 1, { what: "ReceiveTimeout" });
  assert.deepEqual(idle.timeoutsAtMs, [298]);
  clock.advance(100); // still idle: it repeats every timeout
  await eventually(() => idle.timeoutsAtMs.length === 2, { what: "the second ReceiveTimeout" });
  assert.deepEqual(idle.timeoutsAtMs, [298, 398]);
});

test("setReceiveTimeout(null) turns it off", async (t) => {
  const [system, clock] = manualSystem(t);
  const idle = new Idle();
  const ref = system.spawn(idle);
  ref.tell("off");
  await ref.ask(new Ping(), Pong, 60_000);
  clock.advance(10_000);
  await ref.ask(new Ping(), Pong, 60_000);
  assert.deepEqual(idle.timeoutsAtMs, []);
  assert.equal(clock.pendingTimers, 0);
});

test("a non-positive or non-finite receive timeout is an InvalidArgumentError", async (t) => {
  const [system] = manualSystem(t);
  const idle = new Idle();
  const ref = system.spawn(idle);
  for (const bad of [0, -5, Number.NaN, Number.POSITIVE_INFINITY]) await ref.ask({ set: bad }, Pong, 60_000);
  assert.equal(idle.errors.length, 4);
  assert.ok(idle.errors.every((e) => e instanceof InvalidArgumentError));
});

test("a receive timeout that fired while a message was still queued is dropped once that message is handled", async (t) => {
  const [system, clock] = manualSystem(t);
  const idle = new Idle();
  const ref = system.spawn(idle);
  await ref.ask(new Ping(), Pong, 60_000); // t=0
  clock.advance(60);
  ref.tell({ set: 100 }); // re-arms at t=60; the reply goes to no one
  await eventually(() => clock.pendingTimers >= 1);
  clock.advance(99); // t=159
  ref.tell("noop" as unknown as Cmd);
  clock.advance(1); // t=160: the timer sees no handled message for 100 ms and queues a firing behind "noop"
  await ref.ask(new Ping(), Pong, 60_000);
  assert.deepEqual(idle.timeoutsAtMs, [], "the firing went stale when noop was handled");
  clock.advance(100);
  await eventually(() => idle.timeoutsAtMs.length === 1, { what: "the next ReceiveTimeout" });
});

test("an async receive that runs longer than the receive timeout is not idleness", async (t) => {
  const [system, clock] = manualSystem(t);
  let release!: () => void;
  const held = new Promise<void>((resolve) => {
    release = resolve;
  });
  class Slow extends Idle {
    override receive(message: Cmd, context: ActorContext<Cmd>): void | Promise<void> {
      if (message === "off") return held;
      super.receive(message, context);
    }
  }
  const slow = new Slow();
  const ref = system.spawn(slow);
  await ref.ask(new Ping(), Pong, 60_000);
  ref.tell("off" as Cmd); // held open; "off" is never acted on
  await new Promise((resolve) => setImmediate(resolve));
  clock.advance(500);
  release();
  await ref.ask(new Ping(), Pong, 60_000); // t=500
  assert.deepEqual(slow.timeoutsAtMs, []);
  clock.advance(100);
  await eventually(() => slow.timeoutsAtMs.length === 1, { what: "ReceiveTimeout after the idle time" });
  assert.deepEqual(slow.timeoutsAtMs, [600]);
});
