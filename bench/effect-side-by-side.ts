// Movie beside Effect Cluster (`npm run bench:effect`): in one run, on loopback, a client process asks an entity that
// another process hosts, sequentially (1 in flight) and with 100 in flight; asks/s and p50/p99 latency.
//  - Effect Cluster (bench/effect-cluster/node.mjs): a client-only process → a socket runner hosting the entity; the
//    runner registry and shard locks in PostgreSQL (the runner storage a client process needs to find the runner),
//    messages not persisted (MessageStorage.layerNoop, volatile Rpc), msgpack serialization.
//  - Movie (bench/sharding-node.ts): three node processes; the client is the third node (neither the coordinator nor
//    the entity's owner), with coordinator routing (the ask goes client → coordinator → owner, the reply straight
//    back: three network legs) and direct routing (docs/protocol.md §8.8; client → owner and back once the grants are
//    taken: two legs, as Effect's). Movie keeps no message storage.
//  - the ceiling, in the same run between the same Movie processes (client → owner): a raw round trip of Movie's own
//    frame bytes over a plain socket, and a plain Movie remote ask (no sharding).
// Rounds alternate the systems (median of `rounds`), so host load drifting during the run hits them alike. Figures
// are measurements, never assertions. Results go to bench/results/effect-side-by-side.json.
// Effect Cluster is never a dependency of Movie: on first use it is installed into bench/effect-cluster/node_modules
// from the committed package-lock.json (`npm ci --prefix bench/effect-cluster`).
// Environment: MOVIE_POSTGRES_TEST_URL (the PostgreSQL server of Effect's runner storage; default the local `test`
// database), MOVIE_BENCH_EFFECT_PREFIX (its tables' prefix, dropped at the start of each run; default
// movie_bench_effect), MOVIE_BENCH_EFFECT_ROUNDS, MOVIE_BENCH_EFFECT_SEQUENTIAL / _PARALLEL (Effect's asks a round) and
// MOVIE_BENCH_SHARDED_ASKS / _PARALLEL_ASKS (Movie's).
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { cpus } from "node:os";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { benchNodeOptions, converged, median, NodeProcess, until } from "./support/node-process.ts";
import { clock } from "./support/raw-frames.ts";

const env = (name: string, fallback: number): number => Number(process.env[name] ?? fallback);
const rounds = env("MOVIE_BENCH_EFFECT_ROUNDS", 3);
const entities = 16;
const inFlight = 100;
const movieSequential = env("MOVIE_BENCH_SHARDED_ASKS", 2_000);
const movieParallel = env("MOVIE_BENCH_SHARDED_PARALLEL_ASKS", 20_000);
const effectSequential = env("MOVIE_BENCH_EFFECT_SEQUENTIAL", 1_000);
const effectParallel = env("MOVIE_BENCH_EFFECT_PARALLEL", 5_000);
const pgUrl = process.env.MOVIE_POSTGRES_TEST_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const prefix = process.env.MOVIE_BENCH_EFFECT_PREFIX ?? "movie_bench_effect";
if (!/^[a-z_][a-z0-9_]*$/.test(prefix)) throw new Error(`bench: MOVIE_BENCH_EFFECT_PREFIX must be a lowercase name`);

const runStarted = clock.now();
/** Progress on stderr, so the table on stdout stays clean. */
const say = (text: string): void => {
  process.stderr.write(`${((clock.now() - runStarted) / 1000).toFixed(1).padStart(5)}s  ${text}\n`);
};

// ---------------------------------------------------------------- Effect Cluster, installed on first use

const effectDir = fileURLToPath(new URL("./effect-cluster/", import.meta.url));
const effectScript = fileURLToPath(new URL("./effect-cluster/node.mjs", import.meta.url));
const effectManifest = JSON.parse(readFileSync(`${effectDir}package.json`, "utf8")) as {
  dependencies: Record<string, string>;
};
/** The installed version of each pinned package; an install is (re)done unless every one matches. */
function effectInstalled(): boolean {
  return Object.entries(effectManifest.dependencies).every(([name, version]) => {
    const manifest = `${effectDir}node_modules/${name}/package.json`;
    return (
      existsSync(manifest) && (JSON.parse(readFileSync(manifest, "utf8")) as { version: string }).version === version
    );
  });
}
if (!effectInstalled()) {
  say("installing Effect Cluster into bench/effect-cluster/node_modules (npm ci --prefix bench/effect-cluster) …");
  const npm = spawnSync("npm", ["ci", "--prefix", effectDir, "--no-audit", "--no-fund"], {
    stdio: ["ignore", "inherit", "inherit"],
  });
  if (npm.status !== 0 || !effectInstalled()) {
    process.stderr.write(
      "bench: could not install Effect Cluster (npm ci exited " +
        `${npm.status ?? npm.signal ?? npm.error?.message}).\n` +
        "  It comes from the npm registry, pinned by bench/effect-cluster/package-lock.json. If the registry is\n" +
        "  unreachable, run `npm ci --prefix bench/effect-cluster` on a machine that reaches it (or behind a proxy:\n" +
        "  `npm config set proxy …`) and copy bench/effect-cluster/node_modules here; then run `npm run bench:effect`\n" +
        "  again. Movie itself does not need it.\n",
    );
    process.exit(1);
  }
  say("Effect Cluster installed");
}

/** Drops this bench's Effect tables (a clean runner registry: no dead runners' locks from an earlier run). */
async function dropEffectTables(): Promise<number> {
  const client = new pg.Client({ connectionString: pgUrl });
  await client.connect();
  try {
    const { rows } = await client.query<{ name: string }>(
      "select table_name as name from information_schema.tables where table_schema = current_schema() and table_name like $1",
      [`${prefix}\\_%`],
    );
    for (const { name } of rows) await client.query(`drop table if exists "${name}" cascade`);
    return rows.length;
  } finally {
    await client.end();
  }
}

interface AskFigures {
  rate: number;
  /** The client process's CPU µs per ask (none for the raw round trip). */
  cpuUs?: number;
  /** The serving processes' CPU µs per ask (see `measured`). */
  serverCpuUs?: number;
  p50: number;
  p99: number;
}

class EffectNode extends NodeProcess<{ role: string; port: number }> {
  constructor(role: "runner" | "client") {
    super(`effect-${role}`, effectScript, [role], {
      execArgv: [],
      env: { MOVIE_BENCH_EFFECT_PG_URL: pgUrl, MOVIE_BENCH_EFFECT_PREFIX: prefix },
      requestTimeoutMs: 120_000,
    });
  }
  ask(ids: string[], count: number, inFlight: number): Promise<AskFigures> {
    return this.request<AskFigures>({ type: "ask", ids, count, inFlight });
  }
}

// ---------------------------------------------------------------- Movie node processes

interface Ready {
  node: string;
  hostPort: string;
  address: string;
  rawEcho: number;
}
interface Status {
  node: string;
  coordinator: string | null;
  converged: boolean;
  up: number;
  planned: number;
  handoffs: number;
}
const movieScript = fileURLToPath(new URL("./sharding-node.ts", import.meta.url));
class MovieNode extends NodeProcess<Ready> {
  constructor(label: string, seed: string) {
    super(label, movieScript, [label, seed], benchNodeOptions({ env: { MOVIE_LOG_LEVEL: "error" } }));
  }
  status(name = "Bench"): Promise<Status> {
    return this.request<Status>({ type: "status", name });
  }
  ask(name: string, ids: string[], count: number, inFlight: number): Promise<AskFigures> {
    return this.request<AskFigures>({ type: "shardedAsk", name, ids, count, inFlight });
  }
}

// ---------------------------------------------------------------- the run

say(`dropping Effect's tables ${prefix}_* (runner storage) in ${pgUrl.replace(/\/\/[^@/]*@/, "//…@")}`);
const dropped = await dropEffectTables().catch((error: unknown) => {
  process.stderr.write(
    `bench: PostgreSQL is unreachable (${(error as Error).message}); Effect Cluster's runner storage needs it. ` +
      "Set MOVIE_POSTGRES_TEST_URL to a server this benchmark may create tables in.\n",
  );
  process.exit(1);
});
say(`dropped ${dropped} tables`);

say("Movie: three node processes");
const first = new MovieNode("n1", "self");
const seed = (await first.ready).hostPort;
const nodes = [first, new MovieNode("n2", seed), new MovieNode("n3", seed)];
const ready = await Promise.all(nodes.map((n) => n.ready));
const statuses = await converged(nodes);
const coordinator = nodes[ready.findIndex((r) => r.node === statuses[0]!.coordinator)]!;
const [owner, client] = nodes.filter((n) => n !== coordinator) as [MovieNode, MovieNode];
const info = (n: MovieNode) => ready[nodes.indexOf(n)]!;
for (const [name, routing] of [
  ["Bench", "coordinator"],
  ["BenchDirect", "direct"],
] as const) {
  // The non-coordinators first, so that the coordinator's first plan already covers every node.
  for (const n of nodes) if (n !== coordinator) await n.request({ type: "init", name, allocation: "default", routing });
  await coordinator.request({ type: "init", name, allocation: "default", routing });
  await until(`a full plan of ${name} on every node`, async () => {
    const all = await Promise.all(nodes.map((n) => n.status(name)));
    return all.every((s) => s.planned === 256 && s.handoffs === 0);
  });
}
const pick = async (name: string, prefix: string) =>
  (await client.request<{ ids: string[] }>({ type: "pick", name, owner: info(owner).node, prefix, count: entities }))
    .ids;
const coordinatorIds = await pick("Bench", "c");
const directIds = await pick("BenchDirect", "d");

say("Effect Cluster: a runner and a client-only process");
const runner = new EffectNode("runner");
await runner.ready;
const effectClient = new EffectNode("client");
await effectClient.ready;
const effectIds = Array.from({ length: entities }, (_, i) => `e-${i}`);

say("warm-up (Effect: until the client finds the runner's shards; Movie: direct routing's grants)");
await effectClient.ask(effectIds, 200, 1);
await effectClient.ask(effectIds, 1_000, inFlight);
await client.ask("Bench", coordinatorIds, 500, 1);
await client.ask("Bench", coordinatorIds, 5_000, inFlight);
await client.ask("BenchDirect", directIds, 500, 1);
await client.ask("BenchDirect", directIds, 5_000, inFlight);
await client.request({ type: "plainAsk", address: info(owner).address, count: 500, inFlight: 1 });

const target = info(owner);
const samples = {
  rawRtt: [] as AskFigures[],
  plainAsk1: [] as AskFigures[],
  plainAskN: [] as AskFigures[],
  effect1: [] as AskFigures[],
  effectN: [] as AskFigures[],
  coordinator1: [] as AskFigures[],
  coordinatorN: [] as AskFigures[],
  direct1: [] as AskFigures[],
  directN: [] as AskFigures[],
};
const cpuOf = async (n: { request<T>(command: { type: string }): Promise<T> }) =>
  (await n.request<{ cpuUs: number }>({ type: "cpu" })).cpuUs;
/**
 * One run of `count` asks, with the CPU time the serving processes spent on it per ask (`serverCpuUs`): the runner
 * for Effect; the owner and the coordinator for Movie (the coordinator forwards under coordinator routing).
 */
async function measured(
  servers: readonly { request<T>(command: { type: string }): Promise<T> }[],
  count: number,
  run: () => Promise<AskFigures>,
): Promise<AskFigures> {
  const before = await Promise.all(servers.map(cpuOf));
  const figures = await run();
  const after = await Promise.all(servers.map(cpuOf));
  const serverCpuUs = after.reduce((sum, x, i) => sum + x - before[i]!, 0) / count;
  return { ...figures, serverCpuUs };
}
const movieServers = [owner, coordinator];
for (let round = 1; round <= rounds; round++) {
  say(`round ${round} of ${rounds}: ceiling`);
  samples.rawRtt.push(
    await client.request<AskFigures>({
      type: "rawRtt",
      address: target.address,
      port: target.rawEcho,
      count: movieSequential,
    }),
  );
  samples.plainAsk1.push(
    await measured([owner], movieSequential, () =>
      client.request<AskFigures>({ type: "plainAsk", address: target.address, count: movieSequential, inFlight: 1 }),
    ),
  );
  samples.plainAskN.push(
    await measured([owner], movieParallel, () =>
      client.request<AskFigures>({ type: "plainAsk", address: target.address, count: movieParallel, inFlight }),
    ),
  );
  say(`round ${round}: sequential asks`);
  samples.effect1.push(
    await measured([runner], effectSequential, () => effectClient.ask(effectIds, effectSequential, 1)),
  );
  samples.coordinator1.push(
    await measured(movieServers, movieSequential, () => client.ask("Bench", coordinatorIds, movieSequential, 1)),
  );
  samples.direct1.push(
    await measured(movieServers, movieSequential, () => client.ask("BenchDirect", directIds, movieSequential, 1)),
  );
  say(`round ${round}: ${inFlight} in flight`);
  samples.effectN.push(
    await measured([runner], effectParallel, () => effectClient.ask(effectIds, effectParallel, inFlight)),
  );
  samples.coordinatorN.push(
    await measured(movieServers, movieParallel, () => client.ask("Bench", coordinatorIds, movieParallel, inFlight)),
  );
  samples.directN.push(
    await measured(movieServers, movieParallel, () => client.ask("BenchDirect", directIds, movieParallel, inFlight)),
  );
}

say("shutting down");
await Promise.all([effectClient.shutdown(), ...nodes.map((n) => n.shutdown())]);
await runner.shutdown();
const totalSeconds = (clock.now() - runStarted) / 1000;

// ---------------------------------------------------------------- the table

/** Medians over the rounds of each figure. */
const med = (list: AskFigures[]): AskFigures => ({
  rate: median(list.map((x) => x.rate)),
  cpuUs: median(list.map((x) => x.cpuUs ?? Number.NaN)),
  serverCpuUs: median(list.map((x) => x.serverCpuUs ?? Number.NaN)),
  p50: median(list.map((x) => x.p50)),
  p99: median(list.map((x) => x.p99)),
});
const m = Object.fromEntries(Object.entries(samples).map(([k, v]) => [k, med(v)])) as Record<
  keyof typeof samples,
  AskFigures
>;
const round = (x: number) => (Number.isFinite(x) ? +x.toFixed(x >= 100 ? 0 : x >= 1 ? 2 : 3) : null);
interface Row {
  system: string;
  inFlight: number;
  asksPerSecond: number | null;
  p50Ms: number | null;
  p99Ms: number | null;
  clientCpuUsPerAsk: number | null;
  serverCpuUsPerAsk: number | null;
  vsEffect: number | null;
  note: string;
}
const rowOf = (system: string, n: number, f: AskFigures, effect: AskFigures | null, note = ""): Row => ({
  system,
  inFlight: n,
  asksPerSecond: round(f.rate),
  p50Ms: round(f.p50),
  p99Ms: round(f.p99),
  clientCpuUsPerAsk: round(f.cpuUs ?? Number.NaN),
  serverCpuUsPerAsk: round(f.serverCpuUs ?? Number.NaN),
  vsEffect: effect === null ? null : +(f.rate / effect.rate).toFixed(1),
  note,
});
const effectNote = "2 legs; runner storage in PostgreSQL, messages not stored";
const rows: Row[] = [
  rowOf("raw TCP round trip, client → owner (ceiling)", 1, m.rawRtt, m.effect1, "Movie's frame bytes, plain socket"),
  rowOf("Movie remote ask, no sharding (reference)", 1, m.plainAsk1, m.effect1),
  rowOf("Movie remote ask, no sharding (reference)", inFlight, m.plainAskN, m.effectN),
  rowOf("Effect Cluster, client process → runner", 1, m.effect1, m.effect1, effectNote),
  rowOf(
    "Movie, coordinator routing (client = third node)",
    1,
    m.coordinator1,
    m.effect1,
    "ask via the coordinator: 3 legs",
  ),
  rowOf("Movie, direct routing (client = third node)", 1, m.direct1, m.effect1, "ask straight to the owner: 2 legs"),
  rowOf("Effect Cluster, client process → runner", inFlight, m.effectN, m.effectN, effectNote),
  rowOf(
    "Movie, coordinator routing (client = third node)",
    inFlight,
    m.coordinatorN,
    m.effectN,
    "ask via the coordinator: 3 legs",
  ),
  rowOf(
    "Movie, direct routing (client = third node)",
    inFlight,
    m.directN,
    m.effectN,
    "ask straight to the owner: 2 legs",
  ),
];
const ratios = {
  coordinatorSequential: m.coordinator1.rate / m.effect1.rate,
  directSequential: m.direct1.rate / m.effect1.rate,
  coordinatorInFlight: m.coordinatorN.rate / m.effectN.rate,
  directInFlight: m.directN.rate / m.effectN.rate,
};
const effectVersions = Object.entries(effectManifest.dependencies)
  .filter(([name]) => name === "@effect/cluster" || name === "effect")
  .map(([name, version]) => `${name} ${version}`)
  .join(", ");

console.log(
  `Movie beside Effect Cluster (${effectVersions}), processes on loopback; ${cpus().length} CPUs, Node ${process.version}; ` +
    `${entities} entities; medians of ${rounds} alternating rounds (Movie ${movieSequential} sequential and ` +
    `${movieParallel} parallel asks a round, Effect ${effectSequential} and ${effectParallel}); total ${totalSeconds.toFixed(1)} s`,
);
console.table(
  rows.map((r) => ({
    system: r.system,
    "in flight": r.inFlight,
    "asks/s": r.asksPerSecond,
    "p50 ms": r.p50Ms,
    "p99 ms": r.p99Ms,
    "client CPU µs/ask": r.clientCpuUsPerAsk ?? "",
    "server CPU µs/ask": r.serverCpuUsPerAsk ?? "",
    "× Effect": r.vsEffect,
    note: r.note,
  })),
);
const verdict = (ratio: number, target: number) =>
  `${ratio.toFixed(1)}× (target ≥ ${target}×: ${ratio >= target ? "met" : "NOT met"})`;
console.log(
  `Movie / Effect asks/s — sequential: coordinator ${verdict(ratios.coordinatorSequential, 3)}, direct ` +
    `${verdict(ratios.directSequential, 3)}; ${inFlight} in flight: coordinator ${verdict(ratios.coordinatorInFlight, 10)}, ` +
    `direct ${verdict(ratios.directInFlight, 10)}`,
);
console.log(
  `p50 / raw round trip (${m.rawRtt.p50.toFixed(3)} ms): Effect ${(m.effect1.p50 / m.rawRtt.p50).toFixed(1)}×, ` +
    `Movie coordinator ${(m.coordinator1.p50 / m.rawRtt.p50).toFixed(1)}×, direct ${(m.direct1.p50 / m.rawRtt.p50).toFixed(1)}×`,
);
mkdirSync(new URL("./results/", import.meta.url), { recursive: true });
writeFileSync(
  new URL("./results/effect-side-by-side.json", import.meta.url),
  `${JSON.stringify(
    {
      bench: "effect-side-by-side",
      node: process.version,
      cpus: cpus().length,
      effect: effectManifest.dependencies,
      effectStorage: effectNote,
      totalSeconds,
      workload: { rounds, entities, inFlight, movieSequential, movieParallel, effectSequential, effectParallel },
      movie: { coordinator: info(coordinator).node, owner: info(owner).node, client: info(client).node },
      rows,
      ratios,
      samples,
    },
    null,
    2,
  )}\n`,
);
