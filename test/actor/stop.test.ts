import assert from "node:assert/strict";
import { test } from "node:test";
import {
  AbstractBehavior,
  type ActorContext,
  type ActorSystem,
  type DeadLetter,
  DRAIN_AND_STOP,
  type Signal,
  STOP,
} from "../../src/actor/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { gate, manualSystem, range, testSystem } from "./support.ts";

/** Handles numbers; message 0 waits for the gate, so the test controls what is queued behind it. */
class Worker extends AbstractBehavior<number> {
  stopped = false;
  timeouts = 0;
  /** Set once message 0 is being handled (its receive is awaiting the hold). */
  inProgress = false;
  constructor(
    readonly handled: number[],
    readonly hold: Promise<void>,
  ) {
    super();
  }
  async receive(message: number): Promise<void> {
    if (message === 0) {
      this.inProgress = true;
      await this.hold;
    }
    this.handled.push(message);
  }
  override receiveSignal(_signal: Signal): void {
    this.timeouts++;
  }
  override postStop(): void {
    this.stopped = true;
  }
}

function collectDeadLetters(system: ActorSystem): DeadLetter[] {
  const letters: DeadLetter[] = [];
  system.onDeadLetter((letter) => letters.push(letter));
  return letters;
}

const isStopped = (system: ActorSystem, name: string) => () => system.findLocal(["user", name]) === null;

test("STOP lets the current message finish, then the queued rest and later messages are dead letters", async (t) => {
  const system = testSystem(t);
  const letters = collectDeadLetters(system);
  const handled: number[] = [];
  const hold = gate();
  const worker = new Worker(handled, hold.promise);
  const ref = system.spawn(worker, "w");
  for (const i of range(5)) ref.tell(i);
  await eventually(() => system.findLocal(["user", "w"]) !== null);
  ref.sendSystem(STOP);
  ref.tell(5);
  hold.open();
  await eventually(isStopped(system, "w"), { what: "the actor to stop" });
  assert.deepEqual(handled, [0], "the message in progress completed");
  assert.ok(worker.stopped, "postStop ran");
  assert.deepEqual(
    letters.map((l) => l.message as number).sort((a, b) => a - b),
    [1, 2, 3, 4, 5],
  );
  assert.ok(letters.every((l) => l.recipient === ref.path.toString()));
  ref.tell(6);
  assert.equal(letters.at(-1)?.message, 6);
});

test("STOP on an idle actor stops it at once", async (t) => {
  const system = testSystem(t);
  const worker = new Worker([], Promise.resolve());
  const ref = system.spawn(worker, "idle");
  ref.sendSystem(STOP);
  await eventually(isStopped(system, "idle"), { what: "the actor to stop" });
  assert.ok(worker.stopped);
});

test("DRAIN_AND_STOP finishes every queued message, then stops; later messages are dead letters", async (t) => {
  const system = testSystem(t);
  const letters = collectDeadLetters(system);
  const handled: number[] = [];
  const hold = gate();
  const worker = new Worker(handled, hold.promise);
  const ref = system.spawn(worker, "d");
  for (const i of range(100)) ref.tell(i);
  await eventually(() => system.findLocal(["user", "d"]) !== null);
  ref.sendSystem(DRAIN_AND_STOP);
  ref.tell(100);
  ref.tell(101);
  hold.open();
  await eventually(isStopped(system, "d"), { what: "the actor to drain and stop" });
  assert.deepEqual(handled, range(100));
  assert.ok(worker.stopped);
  assert.deepEqual(
    letters.map((l) => l.message),
    [100, 101],
  );
});

test("DRAIN_AND_STOP sent while a message is in progress does not drain messages sent after it", async (t) => {
  const system = testSystem(t);
  const letters = collectDeadLetters(system);
  const handled: number[] = [];
  const hold = gate();
  const worker = new Worker(handled, hold.promise);
  const ref = system.spawn(worker, "busy");
  ref.tell(0);
  await eventually(() => worker.inProgress, { what: "message 0 in progress" });
  ref.tell(1);
  ref.sendSystem(DRAIN_AND_STOP);
  ref.tell(2);
  ref.tell(3);
  hold.open();
  await eventually(isStopped(system, "busy"), { what: "the actor to drain and stop" });
  assert.deepEqual(handled, [0, 1]);
  assert.deepEqual(
    letters.map((l) => l.message),
    [2, 3],
  );
});

test("DRAIN_AND_STOP on an empty mailbox stops at once", async (t) => {
  const system = testSystem(t);
  const worker = new Worker([], Promise.resolve());
  const ref = system.spawn(worker, "empty");
  ref.sendSystem(DRAIN_AND_STOP);
  await eventually(isStopped(system, "empty"), { what: "the actor to stop" });
  assert.ok(worker.stopped);
});

test("a drain whose mailbox ends with a queued receive timeout still stops", async (t) => {
  const [system, clock] = manualSystem(t);
  const handled: number[] = [];
  const hold = gate();
  class TimingWorker extends Worker {
    override preStart(context: ActorContext<number>): void {
      context.setReceiveTimeout(10);
    }
  }
  const worker = new TimingWorker(handled, hold.promise);
  const ref = system.spawn(worker, "rt");
  ref.tell(0);
  await eventually(() => worker.inProgress, { what: "message 0 in progress" });
  clock.advance(10); // queues a receive timeout behind message 0
  ref.sendSystem(DRAIN_AND_STOP);
  hold.open();
  await eventually(isStopped(system, "rt"), { what: "the drained actor to stop", timeoutMs: 2_000 });
  assert.deepEqual(handled, [0]);
});

test("timer firings while an actor drains are dropped silently, not dead letters", async (t) => {
  const [system, clock] = manualSystem(t);
  const letters = collectDeadLetters(system);
  const hold = gate();
  class TimerWorker extends Worker {
    override preStart(context: ActorContext<number>): void {
      context.startTimerAtFixedRate("tick", 7, 10);
    }
  }
  const handled: number[] = [];
  const worker = new TimerWorker(handled, hold.promise);
  const ref = system.spawn(worker, "tw");
  ref.tell(0);
  await eventually(() => worker.inProgress, { what: "message 0 in progress" });
  ref.sendSystem(DRAIN_AND_STOP);
  clock.advance(30);
  hold.open();
  await eventually(isStopped(system, "tw"), { what: "the actor to stop" });
  assert.deepEqual(handled, [0]);
  assert.deepEqual(letters, []);
  assert.equal(clock.pendingTimers, 0, "its timers were cancelled");
});
