// One Effect Cluster process of bench/effect-side-by-side.ts, driven over IPC like bench/sharding-node.ts (the driver
// forks it; every command carries an `id` and gets one reply with the same `id`, or `error`; `{ id: 0 }` says ready).
// Usage: node bench/effect-cluster/node.mjs runner|client
// Plain JavaScript on purpose: Effect Cluster is installed only in this folder (never a dependency of Movie), so the
// project's tsc does not see this file (no allowJs); biome formats and lints it.
//
// - runner: a socket runner on 127.0.0.1 hosting the `Bench` entity (one Rpc, `Ping { seq, payload } → seq`).
// - client: a client-only process (no shards, no server) that asks the runner's entities.
// Both share the runner storage (runner registry and shard locks) in PostgreSQL through @effect/sql-pg, since a
// client process must learn where the shards are. Messages are not persisted: the Rpc is not marked Persisted and the
// message storage is MessageStorage.layerNoop, the volatile setting closest to Movie's (no message storage).
// Environment: MOVIE_BENCH_EFFECT_PG_URL (the PostgreSQL URL), MOVIE_BENCH_EFFECT_PREFIX (the tables' prefix).
import { createServer } from "node:net";
import * as Entity from "@effect/cluster/Entity";
import * as MessageStorage from "@effect/cluster/MessageStorage";
import * as RunnerAddress from "@effect/cluster/RunnerAddress";
import * as ShardingConfig from "@effect/cluster/ShardingConfig";
import * as SqlRunnerStorage from "@effect/cluster/SqlRunnerStorage";
import * as NodeClusterSocket from "@effect/platform-node/NodeClusterSocket";
import * as Rpc from "@effect/rpc/Rpc";
import * as PgClient from "@effect/sql-pg/PgClient";
import { Effect, Layer, Logger, LogLevel, ManagedRuntime, Option, Redacted, Schema } from "effect";

const role = process.argv[2];
if (role !== "runner" && role !== "client") throw new Error(`effect node: role must be runner or client, not ${role}`);
const url = process.env.MOVIE_BENCH_EFFECT_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const prefix = process.env.MOVIE_BENCH_EFFECT_PREFIX ?? "movie_bench_effect";

const Ping = Rpc.make("Ping", { payload: { seq: Schema.Number, payload: Schema.String }, success: Schema.Number });
const Bench = Entity.make("Bench", [Ping]);

/** A free loopback port for the runner's socket server (the address other processes dial must be a real port). */
async function freePort() {
  const server = createServer();
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

const port = role === "runner" ? await freePort() : 0;
// Every other setting is Effect's default (tracing on, as it ships).
const shardingConfig = {
  runnerAddress: role === "runner" ? Option.some(RunnerAddress.make("127.0.0.1", port)) : Option.none(),
};
const storage = Layer.merge(
  MessageStorage.layerNoop,
  SqlRunnerStorage.layerWith({ prefix }).pipe(
    Layer.provide(PgClient.layer({ url: Redacted.make(url), maxConnections: 4 })),
    Layer.provide(ShardingConfig.layer(shardingConfig)),
  ),
);
const cluster = NodeClusterSocket.layer({
  clientOnly: role === "client",
  storage: "byo",
  serialization: "msgpack",
  shardingConfig,
}).pipe(Layer.provideMerge(storage));
const entity = Bench.toLayer({ Ping: (envelope) => Effect.succeed(envelope.payload.seq) });
const main = role === "runner" ? Layer.merge(entity.pipe(Layer.provide(cluster)), cluster) : cluster;
// Warnings and errors only, so that the runner's "Listening on" line does not land in the driver's table.
const runtime = ManagedRuntime.make(main.pipe(Layer.provide(Logger.minimumLogLevel(LogLevel.Warning))));
await runtime.runtime();

const payload = "x".repeat(64);

/** The value at percentile `p` of sorted `values` (nearest rank). */
function pct(sorted, p) {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

/** `count` asks round robin over `ids` with `inFlight` outstanding: rate, p50/p99 (ms), this process's CPU per ask. */
const askRun = (ids, count, inFlight) =>
  Effect.gen(function* () {
    const makeClient = yield* Bench.client;
    const clients = ids.map((id) => makeClient(id));
    const latencies = [];
    const cpu = process.cpuUsage();
    const started = performance.now();
    yield* Effect.forEach(
      Array.from({ length: count }, (_, i) => i),
      (seq) =>
        Effect.suspend(() => {
          const t0 = performance.now();
          return clients[seq % clients.length]
            .Ping({ seq, payload })
            .pipe(
              Effect.tap((answer) =>
                answer === seq
                  ? Effect.sync(() => latencies.push(performance.now() - t0))
                  : Effect.die(new Error(`ask ${seq} answered ${answer}`)),
              ),
            );
        }),
      { concurrency: inFlight, discard: true },
    );
    const rate = (count / (performance.now() - started)) * 1000;
    const used = process.cpuUsage(cpu);
    latencies.sort((a, b) => a - b);
    return { rate, cpuUs: (used.user + used.system) / count, p50: pct(latencies, 50), p99: pct(latencies, 99) };
  });

async function handle(command) {
  switch (command.type) {
    case "ask":
      return runtime.runPromise(askRun(command.ids, Number(command.count), Number(command.inFlight)));
    case "cpu": {
      // This process's CPU time so far (µs): the driver takes differences around a run.
      const used = process.cpuUsage();
      return { cpuUs: used.user + used.system };
    }
    case "shutdown":
      await runtime.dispose();
      setImmediate(() => process.exit(0));
      return {};
    default:
      throw new Error(`effect ${role}: unknown command ${command.type}`);
  }
}

process.on("message", (command) => {
  handle(command).then(
    (reply) => process.send?.({ id: command.id, ...reply }),
    (error) => process.send?.({ id: command.id, error: String(error?.stack ?? error) }),
  );
});
process.on("disconnect", () => process.exit(0));
process.send?.({ id: 0, role, port });
