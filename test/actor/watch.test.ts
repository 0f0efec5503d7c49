import assert from "node:assert/strict";
import { test } from "node:test";
import {
  AbstractBehavior,
  type ActorContext,
  type ActorRef,
  type ActorSystem,
  Behaviors,
  type Signal,
  STOP,
  Terminated,
} from "../../src/actor/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { gate, Ping, Pong, testSystem } from "./support.ts";

class WatchCmd {
  constructor(
    readonly target: ActorRef<unknown>,
    readonly unwatch = false,
    readonly stopFirst = false,
  ) {}
}

/** Watches (or unwatches) what it is told to and records every Terminated it gets. */
class Watcher extends AbstractBehavior<WatchCmd | Ping> {
  readonly terminated: string[] = [];
  receive(message: WatchCmd | Ping, context: ActorContext<WatchCmd | Ping>): void {
    if (message instanceof Ping) {
      context.sender?.tell(new Pong());
      return;
    }
    if (message.stopFirst) message.target.sendSystem(STOP);
    if (message.unwatch) context.unwatch(message.target);
    else context.watch(message.target);
  }
  override receiveSignal(signal: Signal): void {
    if (signal instanceof Terminated) this.terminated.push(signal.ref.path.toString());
  }
}

function spawnWatcher(system: ActorSystem): [Watcher, ActorRef<WatchCmd | Ping>] {
  const watcher = new Watcher();
  return [watcher, system.spawn(watcher)];
}

test("a watcher gets Terminated with the ref when the watched actor stops", async (t) => {
  const system = testSystem(t);
  const [watcher, watcherRef] = spawnWatcher(system);
  const target = system.spawn(Behaviors.ignore<unknown>(), "target");
  watcherRef.tell(new WatchCmd(target));
  await watcherRef.ask(new Ping(), Pong, 5_000);
  target.sendSystem(STOP);
  await eventually(() => watcher.terminated.length === 1, { what: "Terminated" });
  assert.deepEqual(watcher.terminated, [target.path.toString()]);
});

test("after unwatch no Terminated arrives", async (t) => {
  const system = testSystem(t);
  const [watcher, watcherRef] = spawnWatcher(system);
  const other = system.spawn(Behaviors.ignore<unknown>(), "other");
  const target = system.spawn(Behaviors.ignore<unknown>(), "target");
  watcherRef.tell(new WatchCmd(target));
  watcherRef.tell(new WatchCmd(other));
  watcherRef.tell(new WatchCmd(target, true));
  await watcherRef.ask(new Ping(), Pong, 5_000);
  target.sendSystem(STOP);
  other.sendSystem(STOP);
  // `other` stops after `target` was told to; once its Terminated is in, target's would have been too.
  await eventually(() => watcher.terminated.length >= 1, { what: "Terminated of other" });
  await watcherRef.ask(new Ping(), Pong, 5_000);
  assert.deepEqual(watcher.terminated, [other.path.toString()]);
});

test("watching an actor that already stopped delivers Terminated at once", async (t) => {
  const system = testSystem(t);
  const target = system.spawn(Behaviors.ignore<unknown>(), "short-lived");
  target.sendSystem(STOP);
  await eventually(() => system.findLocal(["user", "short-lived"]) === null);
  const [watcher, watcherRef] = spawnWatcher(system);
  watcherRef.tell(new WatchCmd(target));
  await eventually(() => watcher.terminated.length === 1, { what: "Terminated" });
});

test("watching right after sending STOP still delivers Terminated", async (t) => {
  const system = testSystem(t);
  const [watcher, watcherRef] = spawnWatcher(system);
  await watcherRef.ask(new Ping(), Pong, 5_000);
  const target = system.spawn(Behaviors.ignore<unknown>(), "racing");
  await eventually(() => system.findLocal(["user", "racing"]) !== null);
  watcherRef.tell(new WatchCmd(target, false, true)); // the Watch lands in the target's queue behind the STOP
  await eventually(() => watcher.terminated.length === 1, { what: "Terminated", timeoutMs: 2_000 });
});

test("watching a path where no actor lives delivers Terminated at once", async (t) => {
  const system = testSystem(t);
  const [watcher, watcherRef] = spawnWatcher(system);
  const nobody = system.actorSelection(`${system.address}/user/nobody`);
  watcherRef.tell(new WatchCmd(nobody));
  await eventually(() => watcher.terminated.length === 1, { what: "Terminated" });
  assert.deepEqual(watcher.terminated, [`${system.address}/user/nobody`]);
});

test("a parent can watch its child and stop it with context.stop", async (t) => {
  const system = testSystem(t);
  const signals: string[] = [];
  system.spawn(
    new (class extends AbstractBehavior<never> {
      override preStart(context: ActorContext<never>): void {
        const child = context.spawn(Behaviors.ignore<unknown>(), "kid");
        context.watch(child);
        context.stop(child);
      }
      receive(): void {}
      override receiveSignal(signal: Signal, context: ActorContext<never>): void {
        if (signal instanceof Terminated) signals.push(`${signal.ref.path.name} children=${context.children.length}`);
      }
    })(),
    "parent",
  );
  await eventually(() => signals.length === 1, { what: "Terminated of the child" });
  assert.deepEqual(signals, ["kid children=0"]);
});

test("an actor can stop itself with context.stop(context.self)", async (t) => {
  const system = testSystem(t);
  const ref = system.spawn(
    Behaviors.receive<string>((_m, context) => {
      context.stop(context.self);
    }),
    "self-stopper",
  );
  ref.tell("go");
  await eventually(() => system.findLocal(["user", "self-stopper"]) === null, { what: "the actor to stop itself" });
});

test("Terminated comes after the messages the watched actor sent before it stopped", async (t) => {
  const system = testSystem(t);
  const seen: string[] = [];
  class Recorder extends AbstractBehavior<string> {
    override receiveSignal(signal: Signal): void {
      if (signal instanceof Terminated) seen.push(`Terminated ${signal.ref.path.name}`);
    }
    receive(message: string): void | Promise<void> {
      if (message === "hold") return hold.promise;
      seen.push(message);
    }
  }
  const hold = gate();
  let watcherRef: ActorRef<string> | null = null;
  const speaker = system.spawn(
    Behaviors.receive<string>((message, context) => {
      watcherRef!.tell(`last words: ${message}`);
      context.stop(context.self);
    }),
    "speaker",
  );
  watcherRef = system.spawn(
    new (class extends Recorder {
      override preStart(context: ActorContext<string>): void {
        context.watch(speaker);
      }
    })(),
  );
  await eventually(() => system.findLocal(["user", watcherRef!.path.name]) !== null);
  await new Promise((resolve) => setImmediate(resolve)); // the watch is registered
  watcherRef.tell("hold"); // the watcher is busy while the speaker talks and stops
  speaker.tell("bye");
  await eventually(() => system.findLocal(["user", "speaker"]) === null, { what: "the speaker to stop" });
  hold.open();
  await eventually(() => seen.length === 2, { what: "the last words and Terminated", describe: () => seen });
  assert.deepEqual(seen, ["last words: bye", "Terminated speaker"]);
});

test("a watcher of thousands of actors stopped in one burst gets each Terminated exactly once", async (t) => {
  // The system queue drains by index (no shift per message); every queued Terminated must still run once.
  const system = testSystem(t);
  const [watcher, watcherRef] = spawnWatcher(system);
  const targets = Array.from({ length: 5_000 }, (_, i) => system.spawn(Behaviors.ignore<unknown>(), `burst-${i}`));
  for (const target of targets) watcherRef.tell(new WatchCmd(target));
  await watcherRef.ask(new Ping(), Pong, 5_000);
  for (const target of targets) target.sendSystem(STOP);
  await eventually(() => watcher.terminated.length >= targets.length, {
    what: "a Terminated per stopped actor",
    describe: () => `${watcher.terminated.length} of ${targets.length}`,
  });
  await watcherRef.ask(new Ping(), Pong, 5_000);
  assert.equal(watcher.terminated.length, targets.length);
  assert.deepEqual(new Set(watcher.terminated), new Set(targets.map((r) => r.path.toString())));
});
