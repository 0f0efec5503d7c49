import assert from "node:assert/strict";
import { test } from "node:test";
import {
  AbstractBehavior,
  type ActorContext,
  type ActorRef,
  Behaviors,
  InvalidArgumentError,
  type Signal,
  SupervisorStrategies,
  type SupervisorStrategy,
  Terminated,
} from "../../src/actor/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { CapturingLogger, manualSystem, Ping, Pong, testSystem } from "./support.ts";

type Cmd = "add" | "fail" | "reject" | Ping;

/** Counts "add"s; "fail" throws, "reject" rejects; replies to Ping with its count. */
class Counter extends AbstractBehavior<Cmd> {
  static instances = 0;
  readonly instance = ++Counter.instances;
  count = 0;
  receive(message: Cmd, context: ActorContext<Cmd>): void | Promise<void> {
    if (message instanceof Ping) return context.sender?.tell(new Count(this.count, this.instance));
    if (message === "fail") throw new Error("boom");
    if (message === "reject") return Promise.reject(new Error("async boom"));
    this.count++;
  }
}
class Count {
  constructor(
    readonly count: number,
    readonly instance: number,
  ) {}
}

async function countOf(ref: ActorRef<Cmd>): Promise<Count> {
  return ref.ask(new Ping(), Count, 5_000);
}

function spawnCounter(t: Parameters<typeof testSystem>[0], supervision?: SupervisorStrategy) {
  const system = testSystem(t);
  const ref = system.spawn(() => new Counter(), "counter", supervision === undefined ? undefined : { supervision });
  return { system, ref };
}

test("restart (the default) makes a fresh instance from the factory and keeps the mailbox", async (t) => {
  const { ref } = spawnCounter(t);
  const first = (await countOf(ref)).instance;
  ref.tell("add");
  ref.tell("add");
  ref.tell("fail");
  ref.tell("add"); // queued behind the failure: handled by the new instance
  const after = await countOf(ref);
  assert.equal(after.count, 1);
  assert.notEqual(after.instance, first);
});

test("a rejected Promise from receive is a failure like a throw", async (t) => {
  const { ref } = spawnCounter(t);
  const first = (await countOf(ref)).instance;
  ref.tell("add");
  ref.tell("reject");
  const after = await countOf(ref);
  assert.equal(after.count, 0);
  assert.notEqual(after.instance, first);
});

test("resume keeps the instance and its state and drops the failed message", async (t) => {
  const { ref } = spawnCounter(t, SupervisorStrategies.resume());
  const first = (await countOf(ref)).instance;
  ref.tell("add");
  ref.tell("fail");
  ref.tell("reject");
  ref.tell("add");
  const after = await countOf(ref);
  assert.equal(after.count, 2);
  assert.equal(after.instance, first);
});

test("stop stops the failed actor: watchers see Terminated, later messages are dead letters", async (t) => {
  const { system, ref } = spawnCounter(t, SupervisorStrategies.stop());
  const terminated: ActorRef<unknown>[] = [];
  system.spawn(
    new (class extends AbstractBehavior<never> {
      override preStart(context: ActorContext<never>): void {
        context.watch(ref);
      }
      receive(): void {}
      override receiveSignal(signal: Signal): void {
        if (signal instanceof Terminated) terminated.push(signal.ref);
      }
    })(),
  );
  ref.tell("fail");
  await eventually(() => terminated.length === 1, { what: "Terminated" });
  assert.ok(terminated[0]!.path.equals(ref.path));
  const before = system.deadLetterCount;
  ref.tell("add");
  assert.equal(system.deadLetterCount, before + 1);
});

test("restart is bounded: more than maxRestarts failures within the window stop the actor", async (t) => {
  const logger = new CapturingLogger();
  const [system, clock] = manualSystem(t, { logger });
  const ref = system.spawn(() => new Counter(), "flaky", {
    supervision: SupervisorStrategies.restart({ maxRestarts: 2, withinMs: 1_000 }),
  });
  ref.tell("fail");
  ref.tell("fail");
  const alive = await countOf(ref);
  assert.equal(alive.count, 0, "two restarts allowed");
  clock.advance(999);
  ref.tell("fail");
  await eventually(() => system.findLocal(["user", "flaky"]) === null, { what: "the third failure to stop it" });
  assert.ok(logger.records.some((r) => r.level === "error" && /restart limit/.test(r.message)));
});

test("restarts spread wider than the window never hit the bound", async (t) => {
  const [system, clock] = manualSystem(t);
  const ref = system.spawn(() => new Counter(), "slow-flaky", {
    supervision: SupervisorStrategies.restart({ maxRestarts: 1, withinMs: 100 }),
  });
  for (let i = 0; i < 5; i++) {
    ref.tell("fail");
    await countOf(ref);
    clock.advance(100);
  }
  ref.tell("add");
  assert.equal((await countOf(ref)).count, 1);
});

test("a restart stops the failed actor's children", async (t) => {
  const system = testSystem(t);
  let childStops = 0;
  const parent = system.spawn(() =>
    Behaviors.receive<string | Ping>((message, context) => {
      if (message instanceof Ping) return context.sender?.tell(new Pong());
      if (message === "spawn")
        context.spawn(
          new (class extends AbstractBehavior<never> {
            receive(): void {}
            override postStop(): void {
              childStops++;
            }
          })(),
          "child",
        );
      if (message === "fail") throw new Error("parent fails");
    }),
  );
  parent.tell("spawn");
  await parent.ask(new Ping(), Pong, 5_000);
  assert.ok(system.findLocal(["user", parent.path.name, "child"]) !== null);
  parent.tell("fail");
  parent.tell("spawn"); // the same name is free again once the old child stopped
  await parent.ask(new Ping(), Pong, 5_000);
  assert.equal(childStops, 1);
  assert.ok(system.findLocal(["user", parent.path.name, "child"]) !== null);
});

test("a parent's supervisorStrategy applies to its children; guardianSupervision to top-level actors", async (t) => {
  const system = testSystem(t, { guardianSupervision: SupervisorStrategies.resume() });
  const top = system.spawn(() => new Counter(), "top");
  top.tell("add");
  top.tell("fail");
  assert.equal((await countOf(top)).count, 1, "resumed by the guardian's strategy");

  let child: ActorRef<Cmd> | null = null;
  system.spawn(
    new (class extends AbstractBehavior<never> {
      override supervisorStrategy = SupervisorStrategies.stop();
      override preStart(context: ActorContext<never>): void {
        child = context.spawn(() => new Counter(), "kid");
      }
      receive(): void {}
    })(),
    "strict-parent",
  );
  await eventually(() => child !== null);
  child!.tell("fail");
  await eventually(() => system.findLocal(["user", "strict-parent", "kid"]) === null, { what: "the child to stop" });
});

test("strategy settings are validated", () => {
  assert.throws(() => SupervisorStrategies.restart({ maxRestarts: -1 }), InvalidArgumentError);
  assert.throws(() => SupervisorStrategies.restart({ maxRestarts: 1.5 }), InvalidArgumentError);
  assert.throws(() => SupervisorStrategies.restart({ withinMs: 0 }), InvalidArgumentError);
  assert.throws(() => SupervisorStrategies.restart({ withinMs: Number.NaN }), InvalidArgumentError);
});
