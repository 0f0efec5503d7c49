// Long runs of the seeded node simulator: `npm run sim -- --seeds 10000 --from 1 [--liveness] [--churn] [--moves]
// [--direct | --coordinator] [--held-bound N]` (`--moves`: operators move shards during the faults, as
// node-sim.test.ts's operator-move histories; `--held-bound N`: every node holds at most N deliveries per shard and
// clients send bursts of one to four tells, so bursts pass the bound while direct-route probes are out). Without --direct or --coordinator the routing mode is the suite's (directBySeed: half of
// the seeds route directly). Prints a progress line every 3 s and a final table; a failing seed prints its trace and
// how to replay it, and the run exits 1.
import { runHistory, SimFailure } from "../test/sim/node-sim.ts";

function option(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  if (i < 0) return fallback;
  const value = Number(process.argv[i + 1]);
  if (!Number.isInteger(value) || value < 0) {
    console.error(`--${name} needs a non-negative integer, got ${process.argv[i + 1] ?? "nothing"}`);
    process.exit(2);
  }
  return value;
}

const seeds = option("seeds", 1_000);
const from = option("from", 1);
const liveness = process.argv.includes("--liveness");
const coordinatorChurn = process.argv.includes("--churn");
const operatorMoves = process.argv.includes("--moves");
const direct = process.argv.includes("--direct") ? true : process.argv.includes("--coordinator") ? false : undefined;
const heldBound = process.argv.includes("--held-bound") ? option("held-bound", 1) : undefined;
const started = performance.now();
const cpuStarted = process.cpuUsage();
let lastPrint = started;
let delivered = 0;
let handoffs = 0;
let writes = 0;
let staleWrites = 0;
let leaseLosses = 0;
const operatorRestarts: number[] = [];
let relayed = 0;
let relayedDelivered = 0;
let flushes = 0;
let directDelivered = 0;
let directRefusals = 0;
let directBurstProbes = 0;
const notLive: number[] = [];
for (let seed = from; seed < from + seeds; seed++) {
  try {
    const result = runHistory({
      seed,
      liveness,
      coordinatorChurn,
      operatorMoves,
      ...(direct === undefined ? {} : { direct }),
      ...(heldBound === undefined ? {} : { heldBound }),
    });
    directBurstProbes += result.directBurstProbes;
    directDelivered += result.directDelivered;
    directRefusals += result.directRefusals;
    delivered += result.delivered;
    handoffs += result.handoffs;
    writes += result.writes;
    staleWrites += result.staleWrites;
    leaseLosses += result.leaseLosses;
    if (result.operatorRestarts > 0) operatorRestarts.push(seed);
    relayed += result.relayed;
    relayedDelivered += result.relayedDelivered;
    flushes += result.flushes;
    if (result.liveness !== null && result.liveness !== undefined) notLive.push(seed);
  } catch (error) {
    console.error(error instanceof SimFailure ? error.message : error);
    process.exit(1);
  }
  const now = performance.now();
  if (now - lastPrint >= 3_000) {
    lastPrint = now;
    const done = seed - from + 1;
    console.log(`${done}/${seeds} histories, ${((now - started) / done).toFixed(1)} ms each, ${delivered} delivered`);
  }
}
const ms = performance.now() - started;
const cpu = process.cpuUsage(cpuStarted);
console.table({
  histories: seeds,
  seconds: Number((ms / 1000).toFixed(1)),
  msPerHistory: Number((ms / seeds).toFixed(1)),
  cpuMsPerHistory: Number(((cpu.user + cpu.system) / 1000 / seeds).toFixed(1)),
  delivered,
  handoffs,
  writes,
  staleWrites,
  leaseLosses,
  flushesAnswered: flushes,
  relayedByOldCoordinator: relayed,
  relayedThenDelivered: relayedDelivered,
  deliveredDirectly: directDelivered,
  directRefusals,
  directBurstProbes,
  notLiveAfterHealing: notLive.length,
  operatorRestarted: operatorRestarts.length,
});
if (operatorRestarts.length > 0) {
  console.log(
    `seeds where the operator stopped a node whose member table disagreed with the leader's: ${operatorRestarts.slice(0, 50).join(", ")}`,
  );
}
if (notLive.length > 0) console.log(`seeds not live after healing: ${notLive.slice(0, 50).join(", ")}`);
