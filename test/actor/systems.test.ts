import assert from "node:assert/strict";
import { test } from "node:test";
import { ActorPath, Behaviors, type DeadLetter, InvalidAddressError, STOP } from "../../src/actor/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { manualSystem, Ping, Pong, testSystem } from "./support.ts";

function pinger() {
  return Behaviors.receive<Ping | string>((message, context) => {
    if (message instanceof Ping) context.sender?.tell(new Pong());
  });
}

test("several actor systems run side by side with the same actor names and separate state", async (t) => {
  const one = testSystem(t, {}, "side-one");
  const [two, clock] = manualSystem(t);
  const a = one.spawn(pinger(), "same");
  const b = two.spawn(pinger(), "same");
  assert.notEqual(a.path.toString(), b.path.toString());
  await Promise.all([a.ask(new Ping(), Pong, 5_000), b.ask(new Ping(), Pong, 5_000)]);
  one.deadLetters.tell("x");
  assert.equal(one.deadLetterCount, 1);
  assert.equal(two.deadLetterCount, 0);
  await one.terminate();
  assert.ok(one.isTerminated);
  assert.ok(!two.isTerminated);
  await b.ask(new Ping(), Pong, 5_000);
  assert.equal(clock.now(), 0, "the other system's virtual clock is its own");
});

test("child paths print hierarchically and actorSelection finds live local actors", async (t) => {
  const system = testSystem(t, {}, "shop");
  let child: { path: ActorPath } | null = null;
  system
    .spawn(
      Behaviors.receive<string>((_m, context) => {
        child = context.spawn(pinger(), "b");
      }),
      "a",
    )
    .tell("spawn");
  await eventually(() => child !== null);
  assert.equal(child!.path.toString(), "movie://shop/user/a/b");
  const selected = system.actorSelection("movie://shop/user/a/b");
  assert.ok(selected.path.equals(child!.path));
  await selected.ask(new Ping(), Pong, 5_000);
  const byPath = system.actorSelection(ActorPath.parse("movie://shop/user/a/b"));
  await byPath.ask(new Ping(), Pong, 5_000);
  const daemon = system.spawnSystemActor(pinger(), "daemon");
  assert.equal(daemon.path.toString(), "movie://shop/system/daemon");
  await system.actorSelection("movie://shop/system/daemon").ask(new Ping(), Pong, 5_000);
  assert.strictEqual(system.actorSelection("movie://shop/deadLetters"), system.deadLetters);
});

test("actorSelection of a missing path, a stopped actor or another system gives a dead-letter ref", async (t) => {
  const system = testSystem(t, {}, "shop2");
  const letters: DeadLetter[] = [];
  system.onDeadLetter((letter) => letters.push(letter));
  system.actorSelection("movie://shop2/user/missing").tell("m1");
  const gone = system.spawn(pinger(), "gone");
  gone.sendSystem(STOP);
  await eventually(() => system.findLocal(["user", "gone"]) === null);
  system.actorSelection("movie://shop2/user/gone").tell("m2");
  system.actorSelection("movie://elsewhere/user/a").tell("m3");
  system.actorSelection("movie.tcp://shop2@127.0.0.1:2551/user/a").tell("m4");
  assert.deepEqual(
    letters.map((l) => [l.message, l.recipient]),
    [
      ["m1", "movie://shop2/user/missing"],
      ["m2", "movie://shop2/user/gone"],
      ["m3", "movie://elsewhere/user/a"],
      ["m4", "movie.tcp://shop2@127.0.0.1:2551/user/a"],
    ],
  );
  assert.throws(() => system.actorSelection("not a path"), InvalidAddressError);
});
