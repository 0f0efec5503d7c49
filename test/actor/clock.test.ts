import assert from "node:assert/strict";
import { test } from "node:test";
import { ManualScheduler, RealScheduler, TimeoutQueue } from "../../src/actor/index.ts";

test("ManualScheduler runs due timers in (due time, scheduling order) order, including ones scheduled meanwhile", () => {
  const clock = new ManualScheduler(1_000);
  const log: string[] = [];
  clock.scheduleOnce(20, () => log.push(`b@${clock.now()}`));
  clock.scheduleOnce(10, () => {
    log.push(`a@${clock.now()}`);
    clock.scheduleOnce(5, () => log.push(`a2@${clock.now()}`));
  });
  clock.scheduleOnce(20, () => log.push(`c@${clock.now()}`));
  const cancelled = clock.scheduleOnce(15, () => log.push("never"));
  cancelled.cancel();
  cancelled.cancel();
  assert.equal(clock.pendingTimers, 3);
  clock.advance(19);
  assert.deepEqual(log, ["a@1010", "a2@1015"]);
  clock.advance(1);
  assert.deepEqual(log, ["a@1010", "a2@1015", "b@1020", "c@1020"]);
  assert.equal(clock.now(), 1020);
  assert.equal(clock.wallNow(), 1_700_000_000_000 + 1020);
  assert.equal(clock.pendingTimers, 0);
});

test("TimeoutQueue fires each deadline exactly at its delay on the virtual clock, on one timer per delay", () => {
  const clock = new ManualScheduler();
  const queue = new TimeoutQueue(clock);
  const fired: string[] = [];
  queue.schedule(100, () => fired.push(`a@${clock.now()}`));
  clock.advance(30);
  const b = queue.schedule(100, () => fired.push(`b@${clock.now()}`));
  queue.schedule(100, () => fired.push(`c@${clock.now()}`));
  queue.schedule(50, () => fired.push(`d@${clock.now()}`));
  assert.equal(clock.pendingTimers, 2, "one scheduler timer per distinct delay");
  b.cancel();
  clock.advance(49);
  assert.deepEqual(fired, []);
  clock.advance(1);
  assert.deepEqual(fired, ["d@80"]);
  clock.advance(19);
  assert.deepEqual(fired, ["d@80"]);
  clock.advance(1);
  assert.deepEqual(fired, ["d@80", "a@100"]);
  clock.advance(29);
  assert.deepEqual(fired, ["d@80", "a@100"]);
  clock.advance(1);
  assert.deepEqual(fired, ["d@80", "a@100", "c@130"]);
  assert.equal(clock.pendingTimers, 0);
  assert.equal(queue.laneCount, 0, "idle lanes are dropped");
});

test("TimeoutQueue cancels its virtual timer once every deadline of a delay is cancelled", () => {
  const clock = new ManualScheduler();
  const queue = new TimeoutQueue(clock);
  const handles = Array.from({ length: 5 }, () => queue.schedule(10, () => assert.fail("cancelled")));
  for (const h of handles) h.cancel();
  assert.equal(clock.pendingTimers, 0);
  clock.advance(100);
  const fired: number[] = [];
  queue.schedule(10.2, () => fired.push(clock.now()));
  clock.advance(10);
  assert.deepEqual(fired, [], "fractions round up");
  clock.advance(1);
  assert.deepEqual(fired, [111]);
});

test("TimeoutQueue on the real scheduler fires and does not hold the process for cancelled deadlines", async () => {
  const queue = new TimeoutQueue(new RealScheduler());
  const idle = queue.schedule(60_000, () => assert.fail("cancelled"));
  idle.cancel(); // the armed 60 s timer is unref'd: this test file still exits at once
  await new Promise<void>((resolve) => queue.schedule(1, resolve));
});

test("ManualScheduler keeps (due, order) order across many timers, cancellations and nested scheduling", () => {
  let seed = 42;
  const random = (n: number): number => {
    seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648;
    return seed % n;
  };
  const clock = new ManualScheduler();
  const expected: { dueMs: number; seq: number }[] = [];
  const ran: { dueMs: number; seq: number }[] = [];
  let seq = 0;
  const handles: { cancel(): void; entry: { dueMs: number; seq: number } }[] = [];
  for (let i = 0; i < 2_000; i++) {
    const entry = { dueMs: random(500), seq: seq++ };
    const handle = clock.scheduleOnce(entry.dueMs, () => {
      ran.push(entry);
      if (entry.seq % 7 === 0) {
        const nested = { dueMs: clock.now() + random(50), seq: seq++ };
        expected.push(nested);
        clock.scheduleOnce(nested.dueMs - clock.now(), () => ran.push(nested));
      }
    });
    handles.push({ cancel: () => handle.cancel(), entry });
    expected.push(entry);
  }
  for (const h of handles) {
    if (random(3) === 0) {
      h.cancel();
      expected.splice(expected.indexOf(h.entry), 1);
    }
  }
  clock.advance(1_000);
  const order = (a: { dueMs: number; seq: number }, b: { dueMs: number; seq: number }) =>
    a.dueMs - b.dueMs || a.seq - b.seq;
  assert.deepEqual(ran, [...expected].sort(order));
  assert.equal(clock.pendingTimers, 0);
});

test("a TimeoutQueue callback that throws does not strand the deadlines behind it", () => {
  const clock = new ManualScheduler();
  const queue = new TimeoutQueue(clock);
  const fired: string[] = [];
  queue.schedule(10, () => {
    throw new Error("callback bug");
  });
  clock.advance(1);
  queue.schedule(10, () => fired.push("second"));
  assert.throws(() => clock.advance(9), /callback bug/);
  clock.advance(1);
  assert.deepEqual(fired, ["second"]);
});
