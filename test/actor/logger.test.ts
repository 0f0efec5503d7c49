import assert from "node:assert/strict";
import { test } from "node:test";
import { Behaviors, ConsoleLogger, silentLogger } from "../../src/actor/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { CapturingLogger, testSystem } from "./support.ts";

test("ConsoleLogger writes records at or above its level, with bindings and errors in the JSON", () => {
  const lines: string[] = [];
  const logger = new ConsoleLogger("warn", { system: "shop" }, (line) => lines.push(line));
  logger.debug({ a: 1 }, "debug line");
  logger.info({ a: 1 }, "info line");
  logger.warn({ shard: 7 }, "shard moved");
  logger.error({ error: new TypeError("bad") }, "it broke");
  assert.deepEqual(lines, [
    '[movie] warn shard moved {"system":"shop","shard":7}\n',
    '[movie] error it broke {"system":"shop","error":{"name":"TypeError","message":"bad"}}\n',
  ]);
});

test("ConsoleLogger levels debug and silent, and a context that cannot be serialised", () => {
  const lines: string[] = [];
  const debug = new ConsoleLogger("debug", {}, (line) => lines.push(line));
  debug.debug({ big: 10n }, "d");
  debug.info({}, "i");
  const cyclic: Record<string, unknown> = {};
  cyclic.self = cyclic;
  debug.warn(cyclic, "cyclic");
  assert.deepEqual(lines, ['[movie] debug d {"big":"10"}\n', "[movie] info i {}\n", "[movie] warn cyclic {}\n"]);
  const silent: string[] = [];
  const quiet = new ConsoleLogger("silent", {}, (line) => silent.push(line));
  quiet.error({}, "nothing");
  assert.deepEqual(silent, []);
  silentLogger.error({}, "dropped");
});

test("the runtime logs through the system's logger: a failing actor is a warning with its path", async (t) => {
  const logger = new CapturingLogger();
  const system = testSystem(t, { logger });
  const ref = system.spawn(
    Behaviors.receive<string>(() => {
      throw new Error("kaput");
    }),
    "fails",
  );
  ref.tell("x");
  await eventually(() => logger.records.some((r) => r.level === "warn"), { what: "a warning" });
  const record = logger.records.find((r) => r.level === "warn")!;
  assert.equal((record.context as { actor: string }).actor, ref.path.toString());
  assert.equal((record.context as { error: Error }).error.message, "kaput");
  assert.strictEqual(system.log, logger);
});
