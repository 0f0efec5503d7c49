// Outbox benchmark (PostgreSQL):
// 1. the outbox's cost on the write path: fenced one-event appends without messages (the group-commit path), with a
//    tag and no message (the same unbatched append-function statement the outbox path uses, without its WITH), with
//    one outbox message each in the group commit (the batch statement with the messages in a data-modifying WITH),
//    the same sent alone as before the batching (store.batchOutboxAppends = false: one append-function statement with
//    the outbox insert, outside the group commit), and a ceiling of the alone path: a raw transaction inserting the
//    journal row and the outbox row through the same pool, at concurrency 1, 16 and 64, rotating round by round;
// 2. dispatch throughput: OutboxDispatcher.runOnce with a deliverer that acknowledges at once, beside the ceiling of
//    its SQL (claim a batch, mark it delivered) on the same rows, reset between runs. The rows are written under the
//    fences of MOVIE_BENCH_OUTBOX_SHARDS shards (default 8), and the claims present those shards' leases (claims
//    follow shard ownership, migration 15); 0 writes them unfenced (rows without a shard, as every row was before).
// Usage: npm run bench:outbox  (MOVIE_POSTGRES_TEST_URL overrides the local server; MOVIE_BENCH_SECONDS the duration
// of each append case, default 0.4; MOVIE_BENCH_ROUNDS the alternating rounds, default 3; MOVIE_BENCH_OUTBOX_ROWS the
// rows dispatched per run, default 10000).
import { mkdirSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import pg from "pg";
import { RealScheduler } from "../src/actor/index.ts";
import { OutboxDispatcher, outboxMessageId, PersistenceCodec, type ShardLeaseToken } from "../src/persistence/index.ts";
import { PostgresStore } from "../src/persistence/postgres/index.ts";
import { CLAIM_OUTBOX_SQL, COMPLETE_OUTBOX_SQL } from "../src/persistence/postgres/outbox-sql.ts";

const clock = new RealScheduler();
const url = process.env.MOVIE_POSTGRES_TEST_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const caseMs = Number(process.env.MOVIE_BENCH_SECONDS ?? "0.4") * 1000;
const rounds = Number(process.env.MOVIE_BENCH_ROUNDS ?? "3");
const outboxRows = Number(process.env.MOVIE_BENCH_OUTBOX_ROWS ?? "10000");
const outboxShards = Number(process.env.MOVIE_BENCH_OUTBOX_SHARDS ?? "8");
const warmupMs = 150;
const payload = JSON.stringify({ kind: "ItemAdded", sku: "sku-000042", quantity: 3, note: "x".repeat(64) });
const manifest = "bench.ItemAdded";
const destination = { kind: "entity" as const, entityType: "Stock", entityId: "sku-000042" };

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** `concurrency` loops of `op` for a warm-up, then `caseMs`; operations per second. */
async function measure(concurrency: number, op: (worker: number) => Promise<unknown>): Promise<number> {
  let phaseEnd = clock.now() + warmupMs;
  let count = 0;
  let recording = false;
  const worker = async (w: number) => {
    while (clock.now() < phaseEnd) {
      await op(w);
      if (recording) count++;
    }
  };
  const workers = Array.from({ length: concurrency }, (_, w) => w);
  await Promise.all(workers.map(worker));
  recording = true;
  const started = clock.now();
  phaseEnd = started + caseMs;
  await Promise.all(workers.map(worker));
  return (count * 1000) / (clock.now() - started);
}

type Case = "plain" | "tagged" | "outbox" | "alone" | "ceiling";
const cases: Case[] = ["plain", "tagged", "outbox", "alone", "ceiling"];

function appendCase(store: PostgresStore, kind: Case, label: string, fences: ShardLeaseToken[]) {
  const revisions = new Array<number>(fences.length).fill(0);
  let op = 0;
  return measure(fences.length, async (w) => {
    const persistenceId = `Bench:${label}-${w}`;
    const operationId = `${label}-${w}-${++op}`;
    if (kind === "ceiling") {
      const client = await store.pool.connect();
      try {
        await client.query("BEGIN");
        await client.query(
          `INSERT INTO event_journal (persistence_id, sequence_nr, manifest, payload, operation_id, shard_epoch)
            VALUES ($1, $2, $3, $4, $5, $6)`,
          [persistenceId, revisions[w]! + 1, manifest, payload, operationId, fences[w]!.epoch],
        );
        await client.query(
          `INSERT INTO persistence_outbox (message_id, persistence_id, operation_id, destination, manifest, payload)
            VALUES ($1, $2, $3, $4, $5, $6)`,
          [
            outboxMessageId(persistenceId, operationId, 0),
            persistenceId,
            operationId,
            JSON.stringify(destination),
            manifest,
            payload,
          ],
        );
        await client.query("COMMIT");
      } finally {
        client.release();
      }
      revisions[w]!++;
      return;
    }
    store.batchOutboxAppends = kind !== "alone";
    const r = await store.appendEvents({
      persistenceId,
      expectedRevision: revisions[w]!,
      operationId,
      events: [kind === "tagged" ? { manifest, payload, tags: ["sku-000042"] } : { manifest, payload }],
      fence: fences[w]!,
      ...(kind === "outbox" || kind === "alone"
        ? { outbox: [{ messageId: outboxMessageId(persistenceId, operationId, 0), destination, manifest, payload }] }
        : {}),
    });
    revisions[w] = r.revision;
  });
}

async function leases(store: PostgresStore, concurrency: number): Promise<ShardLeaseToken[]> {
  const out: ShardLeaseToken[] = [];
  for (let w = 0; w < concurrency; w++) {
    const key = { clusterName: "bench", entityType: `B${concurrency}`, shardId: w };
    out.push((await store.acquireShardLease(key, "bench", 600_000))!);
  }
  return out;
}

async function appendCosts(store: PostgresStore) {
  const rows: ({ concurrency: number } & Record<Case, number>)[] = [];
  for (const concurrency of [1, 16, 64]) {
    const fences = await leases(store, concurrency);
    const samples: Record<Case, number[]> = { plain: [], tagged: [], outbox: [], alone: [], ceiling: [] };
    for (let round = 0; round < rounds; round++) {
      // Rotate the order so that drifting load favours no case.
      const order = cases.map((_, i, all) => all[(i + round) % all.length]!);
      for (const kind of order) {
        samples[kind].push(await appendCase(store, kind, `${kind}${concurrency}r${round}`, fences));
      }
    }
    rows.push({
      concurrency,
      plain: median(samples.plain),
      tagged: median(samples.tagged),
      outbox: median(samples.outbox),
      alone: median(samples.alone),
      ceiling: median(samples.ceiling),
    });
  }
  return rows;
}

/** Writes `count` outbox rows: appends of 500 messages each, in turn under each of `fences` (unfenced without any). */
async function fillOutbox(store: PostgresStore, count: number, fences: readonly ShardLeaseToken[]): Promise<void> {
  const codec = new PersistenceCodec();
  const message = codec.encode({ sku: "sku-000042", quantity: 3 });
  for (let i = 0; i < count / 500; i++) {
    const persistenceId = `Order:${i}`;
    await store.appendEvents({
      persistenceId,
      expectedRevision: 0,
      operationId: "place",
      events: [{ manifest, payload }],
      fence: fences.length === 0 ? null : fences[i % fences.length]!,
      outbox: Array.from({ length: 500 }, (_, k) => ({
        messageId: outboxMessageId(persistenceId, "place", k),
        destination,
        ...message,
      })),
    });
  }
}

async function dispatchRates(store: PostgresStore, fences: readonly ShardLeaseToken[]) {
  const reset = () =>
    store.pool.query(
      "UPDATE persistence_outbox SET delivered = false, delivered_at = NULL, attempts = 0, lease_until_epoch_ms = 0, lease_owner = NULL, claim_epoch = NULL",
    );
  const leaseColumns = [
    fences.map((f) => f.key.clusterName),
    fences.map((f) => f.key.entityType),
    fences.map((f) => f.key.shardId),
    fences.map((f) => f.owner),
    fences.map((f) => f.epoch),
  ];
  const raw = async () => {
    const started = clock.now();
    let n = 0;
    for (;;) {
      const result = await store.pool.query(CLAIM_OUTBOX_SQL, ["raw", 60_000, 500, ...leaseColumns, true]);
      const claimed = result.rows.filter((r) => r.held_lease === null);
      if (claimed.length === 0) break;
      await store.pool.query(COMPLETE_OUTBOX_SQL, [
        claimed.map((r) => r.outbox_offset),
        claimed.map((r) => r.claim_epoch),
      ]);
      n += claimed.length;
    }
    return (n * 1000) / (clock.now() - started);
  };
  const dispatcher = async () => {
    const d = new OutboxDispatcher({
      store,
      codec: new PersistenceCodec(),
      batchSize: 500,
      leases: () => fences,
      deliverToEntity: async () => {},
    });
    const started = clock.now();
    let n = 0;
    for (;;) {
      const batch = await d.runOnce();
      if (batch.claimed === 0) break;
      n += batch.delivered;
    }
    return (n * 1000) / (clock.now() - started);
  };
  const samples = { raw: [] as number[], dispatcher: [] as number[] };
  for (let round = 0; round < rounds; round++) {
    await reset();
    samples.raw.push(await raw());
    await reset();
    samples.dispatcher.push(await dispatcher());
  }
  return { raw: median(samples.raw), dispatcher: median(samples.dispatcher) };
}

async function main(): Promise<void> {
  const load = loadavg();
  const schema = `movie_bencho_${process.pid}`;
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  const stores: PostgresStore[] = [];
  try {
    const store = await PostgresStore.connect({ connectionUri: url, schema, poolSize: 8 });
    stores.push(store);
    console.log(`1-minute load ${load[0]!.toFixed(2)} at the start; ${rounds} rotating rounds of ${caseMs} ms`);
    const appends = await appendCosts(store);
    console.log("fenced one-event appends (each writer its own shard), PostgreSQL, median appends/s:");
    console.log("conc  no outbox  tagged  1 msg batched  1 msg alone  ceiling  batched/no outbox  batched/alone");
    const pct = (x: number, y: number) => `${((x / y) * 100).toFixed(0)}%`;
    for (const r of appends) {
      console.log(
        `${String(r.concurrency).padEnd(6)}${r.plain.toFixed(0).padEnd(11)}${r.tagged.toFixed(0).padEnd(8)}${r.outbox.toFixed(0).padEnd(15)}${r.alone.toFixed(0).padEnd(13)}${r.ceiling.toFixed(0).padEnd(9)}${pct(r.outbox, r.plain).padEnd(19)}${pct(r.outbox, r.alone)}`,
      );
    }
    const dispatchSchema = `${schema}_d`;
    const dispatchStore = await PostgresStore.connect({ connectionUri: url, schema: dispatchSchema, poolSize: 4 });
    stores.push(dispatchStore);
    const dispatchFences: ShardLeaseToken[] = [];
    for (let shardId = 0; shardId < outboxShards; shardId++) {
      const key = { clusterName: "bench", entityType: "Order", shardId };
      dispatchFences.push((await dispatchStore.acquireShardLease(key, "bench", 600_000))!);
    }
    await fillOutbox(dispatchStore, outboxRows, dispatchFences);
    const dispatch = await dispatchRates(dispatchStore, dispatchFences);
    console.log(
      `dispatching ${outboxRows} rows ${outboxShards === 0 ? "without a shard" : `of ${outboxShards} shards`} in batches of 500, acknowledged at once (messages/s, median):`,
    );
    console.log(
      `raw claim+complete ${dispatch.raw.toFixed(0)}  dispatcher ${dispatch.dispatcher.toFixed(0)}  ${((dispatch.dispatcher / dispatch.raw) * 100).toFixed(0)}% of the ceiling`,
    );
    console.log(`1-minute load ${loadavg()[0]!.toFixed(2)} at the end`);
    mkdirSync("bench/results", { recursive: true });
    writeFileSync(
      "bench/results/outbox.json",
      `${JSON.stringify({ caseMs, rounds, outboxRows, outboxShards, loadAverage: { start: load, end: loadavg() }, appends, dispatch }, null, 2)}\n`,
    );
  } finally {
    for (const store of stores) await store.close();
    for (const suffix of ["", "_d"]) await admin.query(`DROP SCHEMA IF EXISTS ${schema}${suffix} CASCADE`);
    await admin.end();
  }
}

await main();
