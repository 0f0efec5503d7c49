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

/** A parent that spawns, watches, unwatches and stops its own children by name, recording their Terminated. */
type ParentCommand = { readonly op: "spawn" | "watch" | "unwatch" | "stop"; readonly name: string } | Ping;

class Kid extends AbstractBehavior<string> {
  receive(message: string): void {
    if (message === "boom") throw new Error("boom");
  }
}

class Parent extends AbstractBehavior<ParentCommand> {
  readonly terminated: string[] = [];
  readonly kids = new Map<string, ActorRef<string>>();
  receive(message: ParentCommand, context: ActorContext<ParentCommand>): void {
    if (message instanceof Ping) {
      context.sender?.tell(new Pong());
      return;
    }
    if (message.op === "spawn") {
      this.kids.set(message.name, context.spawn(new Kid(), message.name));
      return;
    }
    const kid = this.kids.get(message.name)!;
    if (message.op === "watch") context.watch(kid);
    else if (message.op === "unwatch") context.unwatch(kid);
    else context.stop(kid);
  }
  override receiveSignal(signal: Signal): void {
    if (signal instanceof Terminated) this.terminated.push(signal.ref.path.name);
  }
}

/** A Parent at /user/parent whose child "kid" it has spawned and watched (both applied). */
async function parentWatchingKid(system: ActorSystem): Promise<{ parent: Parent; ref: ActorRef<ParentCommand> }> {
  const parent = new Parent();
  const ref = system.spawn(parent, "parent");
  ref.tell({ op: "spawn", name: "kid" });
  ref.tell({ op: "watch", name: "kid" });
  await ref.ask(new Ping(), Pong, 5_000);
  return { parent, ref };
}

test("a parent's watch of its own child: Terminated on stop, none after unwatch, at once when already stopped", async (t) => {
  const system = testSystem(t);
  const parent = new Parent();
  const ref = system.spawn(parent, "parent");
  const send = (op: "spawn" | "watch" | "unwatch" | "stop", name: string) => ref.tell({ op, name });
  for (const name of ["a", "b", "c", "d"]) send("spawn", name);
  send("watch", "a");
  send("stop", "a");
  await eventually(() => parent.terminated.length === 1, { what: "Terminated of a", describe: () => parent });
  // b is unwatched before it stops; c, watched and stopped after it, is the marker that b's would have come by now.
  send("watch", "b");
  send("unwatch", "b");
  send("stop", "b");
  send("watch", "c");
  send("stop", "c");
  await eventually(() => parent.terminated.length === 2, { what: "Terminated of c", describe: () => parent });
  await ref.ask(new Ping(), Pong, 5_000);
  assert.deepEqual(parent.terminated, ["a", "c"]);
  // d stops unwatched; watching it afterwards answers at once.
  send("stop", "d");
  await eventually(() => system.findLocal(["user", "parent", "d"]) === null, { what: "d to stop" });
  send("watch", "d");
  await eventually(() => parent.terminated.length === 3, { what: "Terminated of d", describe: () => parent });
  assert.deepEqual(parent.terminated, ["a", "c", "d"]);
});

test("a parent's watch of its child survives the child's restart and is answered once", async (t) => {
  const system = testSystem(t);
  const { parent, ref } = await parentWatchingKid(system);
  const kid = parent.kids.get("kid")!;
  kid.tell("boom"); // the default strategy restarts it
  kid.tell("still here");
  ref.tell({ op: "stop", name: "kid" });
  await eventually(() => parent.terminated.length === 1, { what: "Terminated of the kid", describe: () => parent });
  await ref.ask(new Ping(), Pong, 5_000);
  assert.deepEqual(parent.terminated, ["kid"]);
});

test("a sibling's watch of another parent's child still goes through the child's system queue", async (t) => {
  const system = testSystem(t);
  const { parent, ref } = await parentWatchingKid(system);
  const [watcher, watcherRef] = spawnWatcher(system);
  watcherRef.tell(new WatchCmd(parent.kids.get("kid")!));
  await watcherRef.ask(new Ping(), Pong, 5_000);
  ref.tell({ op: "stop", name: "kid" });
  await eventually(() => parent.terminated.length === 1 && watcher.terminated.length === 1, {
    what: "Terminated at both the parent and the other watcher",
    describe: () => ({ parent: parent.terminated, watcher: watcher.terminated }),
  });
  assert.deepEqual(watcher.terminated, [`${system.address}/user/parent/kid`]);
});
