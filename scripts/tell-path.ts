// Measures the structure a routed tell runs through (`npx tsx --conditions=movie-source scripts/tell-path.ts`):
// three nodes in this process on loopback (caller = a third node, the entity owned by another non-coordinator, so
// the tell takes 2 hops), then
//  1. files visited: the src/ files with a function that ran at least once per tell while `sequential` tells were
//     sent one at a time (V8 precise coverage; background gossip and heartbeats run far less often and fall out);
//  2. layer crossings: V8 CPU samples of `sampled` tells, every synchronous stack cut into its src/ frames; a
//     crossing is a caller frame in one layer calling a frame in another, and a re-entry is a stack that comes back
//     into a layer it had left (remote → sharding → remote). Printed as distinct file → file call edges per layer
//     direction, the most re-entries seen in one stack, and the most times one stack crossed the same layer
//     boundary in the same direction (the issue-16 rule: at most once each way). Stacks that enter cluster/ from
//     anywhere but sharding are gossip and heartbeats running beside the tells and are left out (the routed path
//     enters cluster/ only to read the membership view).
// Only public API is used, so the same script measures an older tree (copy it there and run it from that root).
import { Session } from "node:inspector/promises";
import { relative } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { AbstractBehavior, ActorSystem, silentLogger } from "../src/actor/index.ts";
import "../src/cluster/index.ts";
import { MessageRegistry } from "../src/remote/index.ts";
import { ClusterSharding, LeastLoadedAllocation, NoRebalance } from "../src/sharding/index.ts";

const sequential = Number(process.env.TELL_PATH_SEQUENTIAL ?? 300);
const sampled = Number(process.env.TELL_PATH_SAMPLED ?? 30_000);
const root = process.cwd();

class Work {
  constructor(
    readonly seq: number,
    readonly text: string,
  ) {}
}
MessageRegistry.register(Work, { name: "tell-path.work", fields: { seq: "number", text: "string" } });

let received = 0;
class Counter extends AbstractBehavior<Work> {
  receive(): void {
    received++;
  }
}

async function until(condition: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 3_000; i++) {
    if (condition()) return;
    await sleep(5);
  }
  throw new Error(`timed out waiting for ${what}`);
}

async function node(seedPort: number | null) {
  const system = ActorSystem.create("movie", { logger: silentLogger });
  const remoting = await system.enableRemoting({ host: "127.0.0.1", port: 0 });
  const port = remoting.selfAddress.address.port!;
  const cluster = await system.enableCluster({ seedNodes: [`127.0.0.1:${seedPort ?? port}`] });
  const sharding = ClusterSharding.get(system);
  sharding.init(
    "Path",
    Work,
    { shardCount: 16, allocation: new LeastLoadedAllocation(), rebalance: new NoRebalance() },
    () => new Counter(),
  );
  return { system, cluster, sharding };
}

const say = (text: string): void => void process.stderr.write(`${text}\n`);
const first = await node(null);
const nodes = [
  first,
  await node(first.cluster.selfAddress.address.port!),
  await node(first.cluster.selfAddress.address.port!),
];
await until(
  () =>
    nodes.every(
      (n) =>
        n.cluster.snapshot().converged && n.cluster.snapshot().members.filter((m) => m.status === "Up").length === 3,
    ),
  "convergence",
);
await until(
  () =>
    nodes.every(
      (n) => n.sharding.inspect("Path").allocations.size === 16 && n.sharding.inspect("Path").coordinator !== null,
    ),
  "a plan",
);
say("converged, plan ready");
const coordinator = nodes[0]!.sharding.inspect("Path").coordinator!;
const others = nodes.filter((n) => !n.cluster.selfAddress.equals(coordinator));
// The owner: a non-coordinator holding shards (LeastLoaded may put them all on one node); the caller: the other one.
const owned = new Set([...nodes[0]!.sharding.inspect("Path").allocations.values()].map((a) => a.toString()));
others.sort(
  (a, b) => Number(owned.has(a.cluster.selfAddress.toString())) - Number(owned.has(b.cluster.selfAddress.toString())),
);
const [caller, owner] = others as [(typeof nodes)[0], (typeof nodes)[0]];
let id = "";
for (let i = 0; id === "" && i < 100_000; i++) {
  if (caller.sharding.ownerFor("Path", `e${i}`)?.equals(owner.cluster.selfAddress)) id = `e${i}`;
}
if (id === "") {
  const owners = [...caller.sharding.inspect("Path").allocations.values()].map((a) => a.toString());
  throw new Error(
    `no entity owned by ${owner.cluster.selfAddress} (owners ${owners.join(", ")}, coordinator ${coordinator})`,
  );
}
say(`entity ${id}`);
const ref = caller.sharding.entityRefFor<Work>("Path", id);
const text = "x".repeat(64);
for (let i = 0; i < 2_000; i++) ref.tell(new Work(i, text));
await until(() => received === 2_000, "warm-up deliveries");

say("warmed up");
const session = new Session();
session.connect();
await session.post("Profiler.enable");
const inSrc = (url: string): string | null => {
  if (!url.includes("/src/")) return null;
  const path = relative(root, url.startsWith("file://") ? new URL(url).pathname : url);
  return path.startsWith("src/") ? path.slice(4) : null;
};
const layerOf = (file: string): string => (file.includes("/") ? file.slice(0, file.indexOf("/")) : "actor");

// 1. Files visited: functions that ran at least once per tell more often than in an idle window as long.
await session.post("Profiler.startPreciseCoverage", { callCount: true, detailed: false });
await session.post("Profiler.takePreciseCoverage");
const windowStart = performance.now();
for (let i = 0; i < sequential; i++) {
  const before = received;
  ref.tell(new Work(i, text));
  while (received === before) await new Promise((resolve) => setImmediate(resolve));
}
const windowMs = performance.now() - windowStart;
const busy = await session.post("Profiler.takePreciseCoverage");
await sleep(windowMs);
const idle = await session.post("Profiler.takePreciseCoverage");
await session.post("Profiler.stopPreciseCoverage");
const counts = (result: typeof busy.result): Map<string, number> => {
  const map = new Map<string, number>();
  for (const script of result) {
    const file = inSrc(script.url);
    if (file === null) continue;
    for (const fn of script.functions) {
      const key = `${file}\t${fn.functionName}\t${fn.ranges[0]?.startOffset}`;
      map.set(key, (map.get(key) ?? 0) + (fn.ranges[0]?.count ?? 0));
    }
  }
  return map;
};
const idleCounts = counts(idle.result);
const visited = new Map<string, string[]>();
for (const [key, count] of counts(busy.result)) {
  const [file, name] = key.split("\t") as [string, string];
  if (name === "" || count - (idleCounts.get(key) ?? 0) < sequential) continue;
  visited.set(file, [...(visited.get(file) ?? []), name]);
}
say("coverage taken");
// 2. Crossings: sampled stacks of many tells.
await session.post("Profiler.setSamplingInterval", { interval: 20 });
await session.post("Profiler.start");
const base = received;
for (let i = 0; i < sampled; i++) {
  ref.tell(new Work(i, text));
  if (i % 1_000 === 999) await until(() => received >= base + i - 5_000, "the pipeline to drain");
}
await until(() => received === base + sampled, "sampled deliveries");
const { profile } = await session.post("Profiler.stop");
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const edges = new Map<string, Set<string>>();
let maxReentries = 0;
let worst: string[] = [];
let maxSameDirection = 0;
let worstSameDirection = "";
let stacks = 0;
for (const n of profile.nodes) {
  if ((n.children ?? []).length > 0) continue;
  const frames: string[] = [];
  for (let at: number | undefined = n.id; at !== undefined; at = parent.get(at)) {
    const file = inSrc(byId.get(at)!.callFrame.url);
    if (file !== null && frames[0] !== file) frames.unshift(file);
  }
  // Gossip and heartbeats enter cluster/ from the actor runtime or remoting (a daemon's turn, a timer, a received
  // control frame): those stacks run beside the tells and are left out. The routed path only reads the membership
  // view (sharding → cluster/cluster.ts snapshot), and those stacks stay in.
  if (frames.some((f, i) => f.startsWith("cluster/") && i > 0 && layerOf(frames[i - 1]!) !== "sharding")) continue;
  if (frames[0]?.startsWith("cluster/") === true) continue;
  const left = new Set<string>();
  const crossed = new Map<string, number>();
  let reentries = 0;
  for (let i = 1; i < frames.length; i++) {
    const [from, to] = [layerOf(frames[i - 1]!), layerOf(frames[i]!)];
    if (from === to) continue;
    const direction = `${from} → ${to}`;
    if (!edges.has(direction)) edges.set(direction, new Set());
    edges.get(direction)!.add(`${frames[i - 1]} → ${frames[i]}`);
    crossed.set(direction, (crossed.get(direction) ?? 0) + 1);
    left.add(from);
    if (left.has(to)) reentries++;
  }
  for (const [direction, times] of crossed) {
    if (times > maxSameDirection) {
      maxSameDirection = times;
      worstSameDirection = `${direction} ${times} times: ${frames.join(" > ")}`;
    }
  }
  stacks++;
  if (reentries > maxReentries) {
    maxReentries = reentries;
    worst = frames;
  }
}
await session.post("Profiler.disable");
session.disconnect();

const layers = new Map<string, number>();
for (const file of visited.keys()) layers.set(layerOf(file), (layers.get(layerOf(file)) ?? 0) + 1);
console.log(`files visited per 2-hop tell (caller → coordinator → owner): ${visited.size}`);
console.log(`  by layer: ${[...layers].map(([l, n]) => `${l} ${n}`).join(", ")}`);
for (const [file, fns] of [...visited].sort()) console.log(`  ${file}: ${fns.join(", ")}`);
let total = 0;
for (const set of edges.values()) total += set.size;
console.log(`cross-layer call edges (file → file) in ${sampled} sampled tells: ${total}`);
for (const [direction, set] of [...edges].sort()) {
  console.log(`  ${direction}: ${set.size}`);
  for (const e of [...set].sort()) console.log(`    ${e}`);
}
console.log(
  `most layer re-entries in one synchronous stack: ${maxReentries}${worst.length > 0 ? ` (${worst.join(" > ")})` : ""}`,
);
console.log(
  `most crossings of one layer boundary in one direction in one synchronous stack (of ${stacks} distinct sampled stacks): ${maxSameDirection}${worstSameDirection === "" ? "" : ` (${worstSameDirection})`}`,
);
await Promise.all(nodes.map((n) => n.system.terminate()));
