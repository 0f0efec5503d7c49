// MailboxBudget: actors spawned with one shared budget count their queued messages into it (queued adds one; a run,
// or a stop draining the mailbox, takes out what left), so the count is what the group holds and has not started.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { AbstractBehavior, ActorSystem, MailboxBudget, STOP, silentLogger } from "../../src/actor/index.ts";
import { eventually } from "../fixtures/eventually.ts";

const system = ActorSystem.create("budget", { logger: silentLogger });
after(() => system.terminate());

let openGate: () => void = () => {};
let gate = new Promise<void>((resolve) => {
  openGate = resolve;
});
const seen: string[] = [];

/** "hold" waits for the gate (so the rest queue); anything else is recorded. */
class Gated extends AbstractBehavior<string> {
  constructor(private readonly name: string) {
    super();
  }
  async receive(message: string): Promise<void> {
    if (message === "hold") await gate;
    else seen.push(`${this.name}:${message}`);
  }
}

test("two actors share one budget: it counts what both hold queued, and returns to 0 as they run", async () => {
  const budget = new MailboxBudget(100);
  const a = system.spawn(new Gated("a"), "a", { mailboxBudget: budget });
  const b = system.spawn(new Gated("b"), "b", { mailboxBudget: budget });
  a.tell("hold");
  b.tell("hold");
  assert.equal(budget.count, 2, "queued, not started");
  await eventually(() => budget.count === 0, { what: "both started their hold", describe: () => budget.count });
  a.tell("1");
  a.tell("2");
  b.tell("3");
  assert.equal(budget.count, 3);
  assert.equal(budget.full, false);
  openGate();
  await eventually(() => seen.length === 3, { what: "the queued ones ran", describe: () => seen });
  assert.equal(budget.count, 0);
  assert.deepEqual([...seen].sort(), ["a:1", "a:2", "b:3"]);
});

test("a stop that drains queued messages to dead letters takes them out of the budget", async () => {
  gate = new Promise<void>((resolve) => {
    openGate = resolve;
  });
  const budget = new MailboxBudget(2);
  const ref = system.spawn(new Gated("c"), "c", { mailboxBudget: budget });
  ref.tell("hold");
  await eventually(() => budget.count === 0, { what: "the hold started" });
  ref.tell("4");
  ref.tell("5");
  assert.equal(budget.count, 2);
  assert.equal(budget.full, true, "the deliverer would refuse now");
  const dead = system.deadLetterCount;
  ref.sendSystem(STOP);
  openGate();
  await eventually(() => system.deadLetterCount === dead + 2, { what: "the two queued ones as dead letters" });
  assert.equal(budget.count, 0);
  assert.equal(budget.full, false);
});
