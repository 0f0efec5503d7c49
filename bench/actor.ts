// Actor runtime benchmark: local tell, ask, spawn and idle-actor memory, each beside a ceiling measured in the same
// run (a plain array queue, a bare Promise round trip, a plain object in a Map). `npm run bench:actor`; prints a table
// and writes bench/results/actor.json. The memory part runs in a child process with --expose-gc.
// Measured, never asserted: the targets are printed for comparison only.
import { execFileSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  AbstractBehavior,
  type ActorContext,
  type ActorRef,
  ActorSystem,
  Behaviors,
  STOP,
} from "../src/actor/index.ts";

const here = dirname(fileURLToPath(import.meta.url));
const now = (): number => performance.now();

class Question {
  constructor(readonly n: number) {}
}
class Answer {
  constructor(readonly n: number) {}
}

/** Runs the measured part of one trial and returns its duration in milliseconds (setup and teardown excluded). */
type Trial = () => Promise<number> | number;

async function timed(body: () => Promise<void> | void): Promise<number> {
  const started = now();
  await body();
  return now() - started;
}

/**
 * Best rate of the ceiling and of the subject over `runs` trials each, after a warm-up of both, alternating the two
 * so that load from other processes on the machine hits both alike.
 */
async function compare(ops: number, runs: number, ceiling: Trial, subject: Trial): Promise<[number, number]> {
  await ceiling();
  await subject();
  let bestCeilingMs = Number.POSITIVE_INFINITY;
  let bestSubjectMs = Number.POSITIVE_INFINITY;
  for (let i = 0; i < runs; i++) {
    bestCeilingMs = Math.min(bestCeilingMs, await ceiling());
    bestSubjectMs = Math.min(bestSubjectMs, await subject());
  }
  return [ops / (bestCeilingMs / 1000), ops / (bestSubjectMs / 1000)];
}

// ---- ceilings ----

let sink = 0;
function handle(message: number): void {
  sink += message;
}

/** A plain array queue: push every message, then drain it in a loop calling a handler. */
function plainQueue(queues: number, perQueue: number): void {
  const all: number[][] = Array.from({ length: queues }, () => []);
  for (let i = 0; i < perQueue; i++) for (let q = 0; q < queues; q++) all[q]!.push(i);
  for (const queue of all) {
    let head = 0;
    while (head < queue.length) handle(queue[head++]!);
  }
}

/** The cheapest async request/reply: a Promise resolved by a "server" on the next microtask. */
function bareRoundTrip(n: number): Promise<number> {
  return new Promise((resolve) => queueMicrotask(() => resolve(n + 1)));
}

/**
 * The cheapest many-in-flight request/reply: requests queue in an array and one microtask answers the whole batch,
 * as an actor does with the asks queued in its mailbox.
 */
class BatchingServer {
  private readonly pending: ((reply: number) => void)[] = [];
  private readonly requests: number[] = [];
  private scheduled = false;
  private readonly drain = (): void => {
    this.scheduled = false;
    for (let i = 0; i < this.pending.length; i++) this.pending[i]!(this.requests[i]! + 1);
    this.pending.length = 0;
    this.requests.length = 0;
  };
  call(n: number): Promise<number> {
    return new Promise((resolve) => {
      this.pending.push(resolve);
      this.requests.push(n);
      if (!this.scheduled) {
        this.scheduled = true;
        queueMicrotask(this.drain);
      }
    });
  }
}

async function bareSequential(n: number): Promise<void> {
  for (let i = 0; i < n; i++) sink += await bareRoundTrip(i);
}

async function inFlight(n: number, width: number, one: (i: number) => Promise<unknown>): Promise<void> {
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < n) await one(next++);
  };
  await Promise.all(Array.from({ length: width }, lane));
}

// ---- the runtime ----

class CountTo extends AbstractBehavior<number> {
  private count = 0;
  constructor(
    private readonly target: number,
    private readonly done: () => void,
  ) {
    super();
  }
  receive(message: number): void {
    sink += message;
    if (++this.count === this.target) this.done();
  }
}

async function tellBench(actors: number, perActor: number): Promise<number> {
  const system = ActorSystem.create("bench-tell");
  let remaining = actors;
  let finish!: () => void;
  const finished = new Promise<void>((resolve) => {
    finish = resolve;
  });
  const refs: ActorRef<number>[] = [];
  for (let a = 0; a < actors; a++) {
    refs.push(system.spawn(new CountTo(perActor, () => --remaining === 0 && finish())));
  }
  await new Promise((resolve) => setImmediate(resolve)); // every actor started
  const elapsedMs = await timed(async () => {
    for (let i = 0; i < perActor; i++) for (const ref of refs) ref.tell(i);
    await finished;
  });
  await system.terminate();
  return elapsedMs;
}

async function spawnBench(count: number): Promise<number> {
  const system = ActorSystem.create("bench-spawn");
  const elapsedMs = await timed(async () => {
    for (let i = 0; i < count; i++) system.spawn(() => new IdleEntity(i));
    await allStarted(system);
  });
  await system.terminate();
  return elapsedMs;
}

function echo(): AbstractBehavior<Question> {
  return Behaviors.receive<Question>((message: Question, context: ActorContext<Question>) =>
    context.sender?.tell(new Answer(message.n)),
  );
}

async function askSequential(ref: ActorRef<Question>, n: number): Promise<void> {
  for (let i = 0; i < n; i++) sink += (await ref.ask(new Question(i), Answer, 5_000)).n;
}

/**
 * Resolves once every actor spawned so far has started: the dispatcher runs actors in FIFO order, so when one more
 * actor spawned last has answered, all earlier ones ran their first turn.
 */
async function allStarted(system: ActorSystem): Promise<void> {
  const marker = system.spawn(echo());
  await marker.ask(new Question(0), Answer, 600_000);
  marker.sendSystem(STOP);
}

// ---- memory (child process) ----

class IdleEntity extends AbstractBehavior<string> {
  constructor(readonly id: number) {
    super();
  }
  receive(): void {}
}

/** An entity as sharding holds it: its own name (the entity id) and an idle receive timeout. */
class TimedEntity extends IdleEntity {
  override preStart(context: ActorContext<string>): void {
    context.setReceiveTimeout(120_000);
  }
}

interface MemoryResult {
  count: number;
  floorBytes: number;
  anonymousBytes: number;
  entityBytes: number;
  spawnMs: number;
}

/** The entity variant runs on a quarter of the actors to keep the whole benchmark under a minute. */
async function memoryChild(count: number, entityCount = count / 4): Promise<void> {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (gc === undefined) throw new Error("run with --expose-gc");
  const settle = async (): Promise<void> => {
    for (let i = 0; i < 3; i++) {
      await new Promise((resolve) => setImmediate(resolve));
      gc();
    }
  };
  /** Heap retained per item by what `build` creates (and keeps reachable until measured). */
  const perItem = async (build: () => unknown | Promise<unknown>): Promise<[number, unknown]> => {
    await settle();
    const before = process.memoryUsage().heapUsed;
    const kept = await build();
    await settle();
    return [(process.memoryUsage().heapUsed - before) / count, kept];
  };
  // A plain object per entry in a Map: the floor any registry of live things pays.
  const [floorBytes] = await perItem(() => {
    const floor = new Map<string, { id: number }>();
    for (let i = 0; i < count; i++) floor.set(`$${i.toString(36)}`, { id: i });
    return floor;
  });

  let system = ActorSystem.create("bench-memory");
  let spawnMs = 0;
  const [anonymousBytes] = await perItem(async () => {
    const started = now();
    for (let i = 0; i < count; i++) system.spawn(() => new IdleEntity(i));
    await allStarted(system);
    spawnMs = now() - started;
    return null;
  });
  await system.terminate();

  system = ActorSystem.create("bench-memory-entities");
  const [entityBytes] = await perItem(async () => {
    for (let i = 0; i < entityCount; i++) system.spawn(() => new TimedEntity(i), `order-${i}`);
    await allStarted(system);
    return null;
  });
  const result: MemoryResult = {
    count,
    floorBytes,
    anonymousBytes,
    entityBytes: (entityBytes * count) / entityCount,
    spawnMs,
  };
  process.stdout.write(JSON.stringify(result));
  process.exit(0); // skip terminating a million actors
}

// ---- main ----

interface Row {
  figure: string;
  value: number;
  unit: string;
  ceiling: number | null;
  ceilingName: string;
  ratio: number | null;
  target: string;
}

async function main(): Promise<void> {
  const started = now();
  const rows: Row[] = [];
  const add = (
    figure: string,
    value: number,
    unit: string,
    ceiling: number | null,
    ceilingName: string,
    target: string,
  ): void => {
    rows.push({ figure, value, unit, ceiling, ceilingName, ratio: ceiling === null ? null : value / ceiling, target });
  };
  const oneN = 2_000_000;
  const [queue1, tell1] = await compare(
    oneN,
    5,
    () => timed(() => plainQueue(1, oneN)),
    () => tellBench(1, oneN),
  );
  add("tell, 1 actor x 2M msgs", tell1, "msg/s", queue1, "plain array queue", ">= 25%");

  const [queueK, tellK] = await compare(
    oneN,
    5,
    () => timed(() => plainQueue(1_000, 2_000)),
    () => tellBench(1_000, 2_000),
  );
  add("tell, 1,000 actors x 2,000 msgs", tellK, "msg/s", queueK, "1,000 plain array queues", ">= 25%");

  const system = ActorSystem.create("bench");
  const askN = 300_000;
  const ref = system.spawn(echo(), "echo");
  const [bareSeq, askSeq] = await compare(
    askN,
    5,
    () => timed(() => bareSequential(askN)),
    () => timed(() => askSequential(ref, askN)),
  );
  add("ask, sequential", askSeq, "asks/s", bareSeq, "bare Promise round trip", ">= 30%");

  const [bareWide, askWide] = await compare(
    askN,
    5,
    () => {
      const server = new BatchingServer();
      return timed(() => inFlight(askN, 100, (i) => server.call(i)));
    },
    () => timed(() => inFlight(askN, 100, (i) => ref.ask(new Question(i), Answer, 5_000))),
  );
  add("ask, 100 in flight", askWide, "asks/s", bareWide, "bare round trips to a batching server, 100 in flight", "");
  await system.terminate();

  const spawnN = 100_000;
  const [mapFloor, spawnRate] = await compare(
    spawnN,
    5,
    () =>
      timed(() => {
        const map = new Map<string, { id: number }>();
        for (let i = 0; i < spawnN; i++) map.set(`$${i.toString(36)}`, { id: i });
      }),
    () => spawnBench(spawnN),
  );
  add("spawn (100k actors)", spawnRate, "actors/s", mapFloor, "plain object into a Map", "");

  const memoryCount = 1_000_000;
  const memory = JSON.parse(
    execFileSync(
      process.execPath,
      [
        "--expose-gc",
        "--max-old-space-size=4096",
        "--import",
        "tsx",
        fileURLToPath(import.meta.url),
        "--memory",
        String(memoryCount),
      ],
      { encoding: "utf8", cwd: join(here, "..") },
    ),
  ) as MemoryResult;
  const floorName = "plain object in a Map";
  const addMemory = (figure: string, bytes: number, target: string): void => {
    rows.push({
      figure,
      value: bytes,
      unit: "bytes",
      ceiling: memory.floorBytes,
      ceilingName: floorName,
      ratio: bytes / memory.floorBytes,
      target,
    });
  };
  addMemory("heap per idle actor (1M spawned, anonymous)", memory.anonymousBytes, "<= 400 bytes");
  addMemory("heap per idle entity (250k, named, receive timeout)", memory.entityBytes, "");
  add("spawn (1M actors, memory run)", memoryCount / (memory.spawnMs / 1000), "actors/s", null, "", "");

  const fmt = (v: number): string => (v >= 1000 ? Math.round(v).toLocaleString("en-US") : v.toFixed(v >= 100 ? 0 : 1));
  const table = rows.map((r) => ({
    figure: r.figure,
    value: `${fmt(r.value)} ${r.unit}`,
    ceiling: r.ceiling === null ? "" : `${fmt(r.ceiling)} (${r.ceilingName})`,
    ratio: r.ratio === null ? "" : `${(r.ratio * 100).toFixed(1)}%`,
    target: r.target,
  }));
  console.table(table);
  // Other processes share the machine: the load average says how much to trust the absolute figures (the ratios
  // hold up better, since ceiling and subject alternate).
  const machine = {
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model ?? "",
    node: process.version,
    loadAverage1m: loadavg()[0],
  };
  const totalMs = now() - started;
  console.log(
    `${machine.cpus} cores (${machine.cpuModel}), Node ${machine.node}, load average ${machine.loadAverage1m?.toFixed(1)}; ${(totalMs / 1000).toFixed(1)} s`,
  );
  mkdirSync(join(here, "results"), { recursive: true });
  writeFileSync(
    join(here, "results", "actor.json"),
    `${JSON.stringify({ at: new Date().toISOString(), machine, totalMs, rows, sink: sink > 0 }, null, 2)}\n`,
  );
}

if (process.argv[2] === "--memory") await memoryChild(Number(process.argv[3]));
else await main();
