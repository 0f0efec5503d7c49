import assert from "node:assert/strict";
import { test } from "node:test";
import {
  ActorSystemTerminatedError,
  AskCancelledError,
  AskReplyTypeError,
  AskTimeoutError,
  Behaviors,
  InvalidArgumentError,
  InvalidMessageError,
  STOP,
  SupervisorStrategies,
} from "../../src/actor/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { manualSystem, Ping, Pong, testSystem } from "./support.ts";

class Question {
  constructor(readonly text: string) {}
}
class Answer {
  constructor(readonly text: string) {}
}
class Other {}

function echo() {
  return Behaviors.receive<Question>((message, context) => context.sender?.tell(new Answer(message.text)));
}

test("ask resolves with the reply and frees its reply actor", async (t) => {
  const system = testSystem(t);
  const ref = system.spawn(echo());
  const pending = ref.ask(new Question("hi"), Answer, 1_000);
  assert.equal(system.pendingAskCount, 1);
  const answer = await pending;
  assert.ok(answer instanceof Answer);
  assert.equal(answer.text, "hi");
  assert.equal(system.pendingAskCount, 0);
});

test("100 asks in flight all resolve with their own reply", async (t) => {
  const system = testSystem(t);
  const ref = system.spawn(echo());
  const answers = await Promise.all(
    Array.from({ length: 100 }, (_, i) => ref.ask(new Question(`q${i}`), Answer, 1_000)),
  );
  assert.deepEqual(
    answers.map((a) => a.text),
    Array.from({ length: 100 }, (_, i) => `q${i}`),
  );
  assert.equal(system.pendingAskCount, 0);
});

test("ask rejects AskTimeoutError exactly at its timeout on the virtual clock; a late reply is a dead letter", async (t) => {
  const [system, clock] = manualSystem(t);
  const held: { reply: (() => void) | null } = { reply: null };
  const ref = system.spawn(
    Behaviors.receive<Question>((_message, context) => {
      const sender = context.sender;
      held.reply = () => sender?.tell(new Answer("late"));
    }),
    "slow",
  );
  const pending = ref.ask(new Question("q"), Answer, 100);
  const outcome = pending.then(
    () => "resolved",
    (error: unknown) => error,
  );
  await eventually(() => held.reply !== null, { what: "the question to arrive" });
  clock.advance(99);
  assert.equal(system.pendingAskCount, 1, "not timed out before 100 ms");
  clock.advance(1);
  const error = await outcome;
  assert.ok(error instanceof AskTimeoutError, String(error));
  assert.equal(error.name, "AskTimeoutError");
  assert.equal(error.timeoutMs, 100);
  assert.equal(error.messageType, "Question");
  assert.equal(error.target, ref.path.toString());
  assert.equal(system.pendingAskCount, 0);
  const before = system.deadLetterCount;
  held.reply!();
  assert.equal(system.deadLetterCount, before + 1);
});

test("aborting the signal rejects AskCancelledError and frees the reply actor", async (t) => {
  const [system] = manualSystem(t);
  const ref = system.spawn(Behaviors.ignore<Question>());
  const controller = new AbortController();
  const pending = ref.ask(new Question("q"), Answer, 10_000, { signal: controller.signal });
  assert.equal(system.pendingAskCount, 1);
  controller.abort();
  await assert.rejects(pending, (error: unknown) => {
    assert.ok(error instanceof AskCancelledError);
    assert.equal(error.name, "AskCancelledError");
    assert.equal(error.messageType, "Question");
    return true;
  });
  assert.equal(system.pendingAskCount, 0);
});

test("an already aborted signal rejects at once without sending", async (t) => {
  const system = testSystem(t);
  let received = 0;
  const ref = system.spawn(
    Behaviors.receive<Question | Ping>((m, c) => {
      if (m instanceof Ping) c.sender?.tell(new Pong());
      else received++;
    }),
  );
  await assert.rejects(ref.ask(new Question("q"), Answer, 1_000, { signal: AbortSignal.abort() }), AskCancelledError);
  await ref.ask(new Ping(), Pong, 1_000);
  assert.equal(received, 0);
  assert.equal(system.pendingAskCount, 0);
});

test("a reply of the wrong type rejects AskReplyTypeError naming both types", async (t) => {
  const system = testSystem(t);
  const ref = system.spawn(Behaviors.receive<Question>((_m, context) => context.sender?.tell(new Other())));
  await assert.rejects(ref.ask(new Question("q"), Answer, 1_000), (error: unknown) => {
    assert.ok(error instanceof AskReplyTypeError);
    assert.equal(error.expectedType, "Answer");
    assert.equal(error.actualType, "Other");
    assert.match(error.message, /Answer/);
    assert.match(error.message, /Other/);
    return true;
  });
  assert.equal(system.pendingAskCount, 0);
});

test("a target that throws while handling the ask rejects it with that error", async (t) => {
  const system = testSystem(t);
  const ref = system.spawn(
    Behaviors.receive<Question>((message) => {
      throw new RangeError(`cannot answer ${message.text}`);
    }),
  );
  await assert.rejects(ref.ask(new Question("q"), Answer, 1_000), { name: "RangeError", message: "cannot answer q" });
  assert.equal(system.pendingAskCount, 0);
});

test("a target whose async receive rejects fails the ask, and the actor goes on (resume)", async (t) => {
  const system = testSystem(t);
  const ref = system.spawn(
    Behaviors.receive<Question>(async (message, context) => {
      await Promise.resolve();
      if (message.text === "bad") throw new Error("rejected");
      context.sender?.tell(new Answer(message.text));
    }),
    "async-fail",
    { supervision: SupervisorStrategies.resume() },
  );
  await assert.rejects(ref.ask(new Question("bad"), Answer, 1_000), { message: "rejected" });
  assert.equal((await ref.ask(new Question("good"), Answer, 1_000)).text, "good");
  assert.equal(system.pendingAskCount, 0);
});

test("ask validates its arguments with typed rejections", async (t) => {
  const system = testSystem(t);
  const ref = system.spawn(echo());
  await assert.rejects(ref.ask(new Question("q"), Answer, -1), InvalidArgumentError);
  await assert.rejects(ref.ask(new Question("q"), Answer, Number.NaN), InvalidArgumentError);
  await assert.rejects(ref.ask(new Question("q"), Answer, Number.POSITIVE_INFINITY), InvalidArgumentError);
  await assert.rejects(ref.ask(undefined as unknown as Question, Answer, 100), InvalidMessageError);
  await assert.rejects(ref.ask(null as unknown as Question, Answer, 100), InvalidMessageError);
  assert.equal(system.pendingAskCount, 0);
});

test("asking a stopped actor is a dead letter and times out", async (t) => {
  const [system, clock] = manualSystem(t);
  const ref = system.spawn(echo(), "gone");
  ref.sendSystem(STOP);
  await eventually(() => system.findLocal(["user", "gone"]) === null, { what: "the actor to stop" });
  const before = system.deadLetterCount;
  const pending = ref.ask(new Question("q"), Answer, 50);
  assert.equal(system.deadLetterCount, before + 1);
  clock.advance(50);
  await assert.rejects(pending, AskTimeoutError);
  assert.equal(system.pendingAskCount, 0);
});

test("the reply actor is reachable by path while the ask is pending, and gone after", async (t) => {
  const system = testSystem(t);
  let replyPath = "";
  const ref = system.spawn(
    Behaviors.receive<Question>((_m, context) => {
      replyPath = context.sender!.path.toString();
    }),
  );
  const pending = ref.ask(new Question("q"), Answer, 1_000);
  await eventually(() => replyPath !== "", { what: "the question to arrive" });
  assert.match(replyPath, /^movie:\/\/test-\d+\/temp\/\$/);
  const elements = replyPath.split("/").slice(3);
  assert.ok(system.findLocal(elements) !== null);
  system.actorSelection(replyPath).tell(new Answer("by path"));
  assert.equal((await pending).text, "by path");
  assert.equal(system.findLocal(elements), null);
  assert.equal(system.pendingAskCount, 0);
});

test("terminate rejects pending asks with ActorSystemTerminatedError", async (t) => {
  const system = testSystem(t);
  const ref = system.spawn(Behaviors.ignore<Question>());
  const pending = ref.ask(new Question("q"), Answer, 60_000);
  await system.terminate();
  await assert.rejects(pending, ActorSystemTerminatedError);
  assert.equal(system.pendingAskCount, 0);
});
