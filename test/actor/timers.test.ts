import assert from "node:assert/strict";
import { test } from "node:test";
import { AbstractBehavior, type ActorContext, InvalidArgumentError, STOP } from "../../src/actor/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { gate, manualSystem, Ping, Pong } from "./support.ts";

class Start {
  constructor(
    readonly key: string,
    readonly message: string,
    readonly ms: number,
    readonly fixedRate = false,
  ) {}
}
class Cancel {
  constructor(readonly key: string) {}
}
class IsActive {
  constructor(readonly key: string) {}
}
class Active {
  constructor(readonly active: boolean) {}
}
class Block {
  constructor(readonly until: Promise<void>) {}
}
type Cmd = Start | Cancel | IsActive | Block | Ping | string;

class TimerUser extends AbstractBehavior<Cmd> {
  readonly fired: { message: string; atMs: number }[] = [];
  readonly errors: unknown[] = [];
  async receive(message: Cmd, context: ActorContext<Cmd>): Promise<void> {
    if (message instanceof Ping) context.sender?.tell(new Pong());
    else if (message instanceof Start) {
      try {
        if (message.fixedRate) context.startTimerAtFixedRate(message.key, message.message, message.ms);
        else context.startSingleTimer(message.key, message.message, message.ms);
      } catch (error) {
        this.errors.push(error);
      }
    } else if (message instanceof Cancel) context.cancelTimer(message.key);
    else if (message instanceof IsActive) context.sender?.tell(new Active(context.isTimerActive(message.key)));
    else if (message instanceof Block) await message.until;
    else this.fired.push({ message, atMs: context.system.scheduler.now() });
  }
}

async function setup(t: Parameters<typeof manualSystem>[0]) {
  const [system, clock] = manualSystem(t);
  const user = new TimerUser();
  const ref = system.spawn(user, "timers");
  const sync = () => ref.ask(new Ping(), Pong, 1_000_000);
  const active = async (key: string) => (await ref.ask(new IsActive(key), Active, 1_000_000)).active;
  return { system, clock, user, ref, sync, active };
}

test("a single timer fires once after its delay on the virtual clock", async (t) => {
  const { clock, user, ref, sync, active } = await setup(t);
  ref.tell(new Start("once", "ding", 50));
  await sync();
  assert.equal(await active("once"), true);
  clock.advance(49);
  await sync();
  assert.deepEqual(user.fired, []);
  clock.advance(1);
  await eventually(() => user.fired.length === 1, { what: "the timer" });
  assert.deepEqual(user.fired, [{ message: "ding", atMs: 50 }]);
  clock.advance(1_000);
  await sync();
  assert.equal(user.fired.length, 1);
  assert.equal(await active("once"), false);
});

test("a fixed-rate timer fires every interval until cancelled", async (t) => {
  const { clock, user, ref, sync, active } = await setup(t);
  ref.tell(new Start("tick", "tick", 10, true));
  await sync();
  for (let tick = 1; tick <= 3; tick++) {
    clock.advance(10);
    await eventually(() => user.fired.length === tick, { what: `tick ${tick}`, describe: () => user.fired });
  }
  clock.advance(5);
  await sync();
  assert.deepEqual(
    user.fired.map((f) => f.atMs),
    [10, 20, 30],
  );
  clock.advance(35); // several periods at once fire once each
  await eventually(() => user.fired.length === 7, { what: "four more ticks (40..70)", describe: () => user.fired });
  ref.tell(new Cancel("tick"));
  await sync();
  assert.equal(await active("tick"), false);
  clock.advance(100);
  await sync();
  assert.equal(user.fired.length, 7);
  assert.equal(clock.pendingTimers, 0);
});

test("starting a timer with a key in use replaces it", async (t) => {
  const { clock, user, ref, sync } = await setup(t);
  ref.tell(new Start("k", "first", 100));
  ref.tell(new Start("k", "second", 50));
  await sync();
  clock.advance(50);
  await eventually(() => user.fired.length === 1);
  clock.advance(150);
  await sync();
  assert.deepEqual(user.fired, [{ message: "second", atMs: 50 }]);
});

test("cancelling drops a firing that was already queued", async (t) => {
  const { clock, user, ref, sync } = await setup(t);
  const hold = gate();
  ref.tell(new Start("k", "late", 10));
  ref.tell(new Block(hold.promise));
  await new Promise((resolve) => setImmediate(resolve)); // the Block is in progress
  ref.tell(new Cancel("k"));
  clock.advance(10); // the firing is queued behind the Cancel
  hold.open();
  await sync();
  assert.deepEqual(user.fired, []);
});

test("timers and their firings go in order with ordinary messages", async (t) => {
  const { clock, user, ref, sync } = await setup(t);
  ref.tell(new Start("a", "timer-a", 5));
  await sync();
  ref.tell("before");
  clock.advance(5);
  ref.tell("after");
  await eventually(() => user.fired.length === 3);
  assert.deepEqual(
    user.fired.map((f) => f.message),
    ["before", "timer-a", "after"],
  );
});

test("timers are cancelled when the actor stops", async (t) => {
  const { system, clock, ref, sync } = await setup(t);
  ref.tell(new Start("a", "x", 100));
  ref.tell(new Start("b", "y", 10, true));
  await sync();
  assert.equal(clock.pendingTimers, 2);
  ref.sendSystem(STOP);
  await eventually(() => system.findLocal(["user", "timers"]) === null);
  assert.equal(clock.pendingTimers, 0);
});

test("a negative delay or a zero interval is an InvalidArgumentError", async (t) => {
  const { user, ref, sync } = await setup(t);
  ref.tell(new Start("a", "x", -1));
  ref.tell(new Start("b", "x", Number.NaN));
  ref.tell(new Start("c", "x", 0, true));
  await sync();
  assert.equal(user.errors.length, 3);
  assert.ok(user.errors.every((e) => e instanceof InvalidArgumentError));
});
