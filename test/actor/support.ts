// Shared helpers of the actor runtime tests: a system per test that is terminated afterwards, and a Ping/Pong
// protocol that doubles as a synchronisation point (per-actor FIFO: once Pong is back, everything told before the
// Ping has been handled).
import type { TestContext } from "node:test";
import { ActorSystem, type ActorSystemOptions, type Logger, ManualScheduler } from "../../src/actor/index.ts";

/** Asks for a {@link Pong}; behaviors under test answer it. */
export class Ping {}
/** The answer to {@link Ping}. */
export class Pong {}

/** A logger that keeps every record, for assertions on what the runtime logged. */
export class CapturingLogger implements Logger {
  readonly records: { level: string; context: object; message: string }[] = [];
  debug(context: object, message: string): void {
    this.records.push({ level: "debug", context, message });
  }
  info(context: object, message: string): void {
    this.records.push({ level: "info", context, message });
  }
  warn(context: object, message: string): void {
    this.records.push({ level: "warn", context, message });
  }
  error(context: object, message: string): void {
    this.records.push({ level: "error", context, message });
  }
}

let systemCounter = 0;

/** A fresh system (silent logger unless given) that is terminated when the test ends. */
export function testSystem(t: TestContext, options: ActorSystemOptions = {}, name?: string): ActorSystem {
  const system = ActorSystem.create(name ?? `test-${++systemCounter}`, { logger: new CapturingLogger(), ...options });
  t.after(() => system.terminate());
  return system;
}

/** A fresh system on a virtual clock. */
export function manualSystem(t: TestContext, options: ActorSystemOptions = {}): [ActorSystem, ManualScheduler] {
  const scheduler = new ManualScheduler();
  return [testSystem(t, { ...options, scheduler }), scheduler];
}

/** A Promise plus its resolve function, to hold an async receive open until the test releases it. */
export function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => {
    open = resolve;
  });
  return { promise, open };
}

/** Integers 0..n-1. */
export function range(n: number): number[] {
  return Array.from({ length: n }, (_, i) => i);
}
