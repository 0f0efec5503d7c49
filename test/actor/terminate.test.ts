import assert from "node:assert/strict";
import { test } from "node:test";
import {
  AbstractBehavior,
  type ActorContext,
  ActorSystemTerminatedError,
  Behaviors,
  type Extension,
  type ExtensionId,
} from "../../src/actor/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { CapturingLogger, testSystem } from "./support.ts";

/** Spawns the given children (names, nested) and records its postStop in `log`. */
class Node extends AbstractBehavior<never> {
  constructor(
    readonly label: string,
    readonly log: string[],
    readonly children: Record<string, Record<string, unknown>> = {},
    readonly asyncStop = false,
  ) {
    super();
  }
  override preStart(context: ActorContext<never>): void {
    for (const [name, grandchildren] of Object.entries(this.children)) {
      context.spawn(
        new Node(`${this.label}/${name}`, this.log, grandchildren as Record<string, Record<string, unknown>>),
        name,
      );
    }
  }
  receive(): void {}
  override async postStop(): Promise<void> {
    if (this.asyncStop) await new Promise((resolve) => setImmediate(resolve));
    this.log.push(this.label);
  }
}

test("terminate stops children before parents, runs every postStop, and resolves when all are done", async (t) => {
  const system = testSystem(t);
  const log: string[] = [];
  system.spawn(new Node("a", log, { b: { c: {} }, d: {} }, true), "a");
  system.spawn(new Node("e", log, { f: {} }), "e");
  await eventually(
    () => system.findLocal(["user", "a", "b", "c"]) !== null && system.findLocal(["user", "e", "f"]) !== null,
  );
  const done = system.terminate();
  assert.equal(system.terminate(), done, "calling again returns the same Promise");
  await done;
  assert.ok(system.isTerminated);
  assert.deepEqual([...log].sort(), ["a", "a/b", "a/b/c", "a/d", "e", "e/f"]);
  const before = (x: string, y: string) => log.indexOf(x) < log.indexOf(y);
  assert.ok(before("a/b/c", "a/b") && before("a/b", "a") && before("a/d", "a") && before("e/f", "e"), log.join(" "));
});

test("user actors stop first, then extensions in reverse order, then system actors", async (t) => {
  const system = testSystem(t);
  const log: string[] = [];
  const extensionId = (key: string): ExtensionId<Extension> => ({
    key,
    create: () => ({ stop: () => void log.push(`extension ${key}`) }),
  });
  system.spawnSystemActor(new Node("system-daemon", log), "daemon");
  system.extension(extensionId("first"));
  system.extension(extensionId("second"));
  system.spawn(new Node("user-actor", log, { child: {} }), "u");
  await eventually(() => system.findLocal(["user", "u", "child"]) !== null);
  await system.terminate();
  assert.deepEqual(log, ["user-actor/child", "user-actor", "extension second", "extension first", "system-daemon"]);
});

test("after terminate, spawning throws ActorSystemTerminatedError and tells are dead letters", async (t) => {
  const system = testSystem(t);
  const ref = system.spawn(Behaviors.ignore<string>(), "x");
  await system.terminate();
  assert.throws(() => system.spawn(Behaviors.ignore<string>()), ActorSystemTerminatedError);
  assert.throws(() => system.spawnSystemActor(Behaviors.ignore<string>(), "late"), ActorSystemTerminatedError);
  const before = system.deadLetterCount;
  ref.tell("hello");
  assert.equal(system.deadLetterCount, before + 1);
  await system.whenTerminated;
});

test("terminate waits for an async receive in progress before that actor's postStop", async (t) => {
  const system = testSystem(t);
  const log: string[] = [];
  let started = false;
  const ref = system.spawn(
    new (class extends AbstractBehavior<string> {
      async receive(message: string): Promise<void> {
        started = true;
        await new Promise((resolve) => setImmediate(resolve));
        log.push(`handled ${message}`);
      }
      override postStop(): void {
        log.push("postStop");
      }
    })(),
  );
  ref.tell("m");
  await eventually(() => started, { what: "the receive of m in progress" });
  await system.terminate();
  assert.deepEqual(log, ["handled m", "postStop"]);
});

test("a postStop that throws is logged and does not stop terminate from finishing", async (t) => {
  const logger = new CapturingLogger();
  const system = testSystem(t, { logger });
  system.spawn(
    new (class extends AbstractBehavior<never> {
      receive(): void {}
      override postStop(): void {
        throw new Error("cleanup failed");
      }
    })(),
    "clumsy",
  );
  await eventually(() => system.findLocal(["user", "clumsy"]) !== null);
  await system.terminate();
  assert.ok(system.isTerminated);
  assert.ok(logger.records.some((r) => r.level === "warn" && r.message === "postStop failed"));
});
