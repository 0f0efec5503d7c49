// Event feed and projection benchmark (PostgreSQL and SQLite):
// 1. the feed's cost on the write path: fenced one-event appends (each writer its own shard) at concurrency 1, 4 and
//    64 into a schema with the feed and into one whose journal has no offset column (the write path as it was before
//    the feed: the client code of an untagged append is the same), alternating round by round in one process;
// 2. reading the feed: store.queryEvents pages and a live EventFeed.stream, beside a raw SELECT of the same rows
//    (the same journal rows, keyset-paged, through the same pool) measured in the same run;
// 3. exactly-once projection throughput with a handler that runs exactly one statement per event (an upsert of the
//    event's row in the read model, in the same database), beside a ceiling measured in the same run, alternating: a
//    raw keyset SELECT of the same rows and the same upserts sent directly in transactions of the same size (also
//    reported: the upserts alone, without the read);
// 4. the fenced outbox end to end (PostgreSQL): senders append one event with one outbox message each (fenced, in
//    the group commit); a running OutboxDispatcher claims and delivers them to a deliverer that persists the
//    receiver's event with the outbox message id as its OperationId, one receiver entity per sender, its writes in
//    order as an entity's mailbox would; messages/s and the latency from the sender's commit to the receiver's
//    commit (p50, p99), beside a ceiling in the same run, alternating: the same senders writing the same two commits
//    directly (the sender's append, then the receiver's), no outbox row, no claim, no dispatcher. The outbox runs twice:
//    open loop (each sender appends as fast as it can: the rate, with the latency of a backlog) and closed loop (each
//    sender waits for its message's receipt before the next append, as the ceiling does: the latency without one).
// Usage: npm run bench:projections  (MOVIE_POSTGRES_TEST_URL overrides the local server; MOVIE_BENCH_SECONDS the
// duration of each append case, default 0.4; MOVIE_BENCH_ROUNDS the alternating rounds, default 5;
// MOVIE_BENCH_FEED_EVENTS the events read, default 20000; MOVIE_BENCH_PROJECTED_EVENTS the newest of them projected,
// default 5000; MOVIE_BENCH_PARTS a comma list of appends, reads, projections, outbox, default all four;
// MOVIE_BENCH_OUTBOX_MESSAGES the messages of each outbox run, default 2000, over MOVIE_BENCH_OUTBOX_SENDERS, default 16;
// MOVIE_BENCH_BACKENDS a comma list of postgres, sqlite for parts 2 and 3, default both).
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { RealScheduler } from "../src/actor/index.ts";
import {
  EventFeed,
  OutboxDispatcher,
  outboxMessageId,
  PersistenceCodec,
  type PersistenceStore,
  ProjectionRunner,
  type ShardLeaseToken,
} from "../src/persistence/index.ts";
import { PostgresStore } from "../src/persistence/postgres/index.ts";
import { SqliteStore } from "../src/persistence/sqlite/index.ts";

const clock = new RealScheduler();
const url = process.env.MOVIE_POSTGRES_TEST_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const caseMs = Number(process.env.MOVIE_BENCH_SECONDS ?? "0.4") * 1000;
const rounds = Number(process.env.MOVIE_BENCH_ROUNDS ?? "5");
const feedEvents = Number(process.env.MOVIE_BENCH_FEED_EVENTS ?? "20000");
const projectedEvents = Number(process.env.MOVIE_BENCH_PROJECTED_EVENTS ?? "5000");
const parts = new Set((process.env.MOVIE_BENCH_PARTS ?? "appends,reads,projections,outbox").split(","));
const outboxMessages = Number(process.env.MOVIE_BENCH_OUTBOX_MESSAGES ?? "2000");
const outboxSenders = Number(process.env.MOVIE_BENCH_OUTBOX_SENDERS ?? "16");
const backends = new Set((process.env.MOVIE_BENCH_BACKENDS ?? "postgres,sqlite").split(","));
const batchSize = 500;
const warmupMs = 150;
const payload = JSON.stringify({ kind: "ItemAdded", sku: "sku-000042", quantity: 3, note: "x".repeat(64) });
const manifest = "bench.ItemAdded";

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** `concurrency` loops of `op` for a warm-up, then `caseMs`; appends per second. */
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

async function appendRate(store: PersistenceStore, label: string, fences: ShardLeaseToken[]): Promise<number> {
  const revisions = new Array<number>(fences.length).fill(0);
  let op = 0;
  return measure(fences.length, async (w) => {
    const r = await store.appendEvents({
      persistenceId: `Bench:${label}-${w}`,
      expectedRevision: revisions[w]!,
      operationId: `${label}-${w}-${++op}`,
      events: [{ manifest, payload }],
      fence: fences[w]!,
    });
    revisions[w] = r.revision;
  });
}

async function leases(store: PersistenceStore, concurrency: number): Promise<ShardLeaseToken[]> {
  const out: ShardLeaseToken[] = [];
  for (let w = 0; w < concurrency; w++) {
    out.push(
      (await store.acquireShardLease(
        { clusterName: "bench", entityType: `B${concurrency}`, shardId: w },
        "bench",
        600_000,
      ))!,
    );
  }
  return out;
}

/** Fenced appends with and without the feed, alternating. */
async function appendOverhead(withFeed: PostgresStore, withoutFeed: PostgresStore) {
  const rows: { concurrency: number; withFeed: number; withoutFeed: number; ratio: number; pairs: number[][] }[] = [];
  for (const concurrency of [1, 4, 64]) {
    const on = await leases(withFeed, concurrency);
    const off = await leases(withoutFeed, concurrency);
    const pairs: number[][] = [];
    for (let round = 0; round < rounds; round++) {
      // Alternate which side goes first, so drifting load does not favour one.
      const first = round % 2 === 0;
      const a = first ? await appendRate(withoutFeed, `off${concurrency}r${round}`, off) : 0;
      const b = await appendRate(withFeed, `on${concurrency}r${round}`, on);
      const c = first ? a : await appendRate(withoutFeed, `off${concurrency}r${round}`, off);
      pairs.push([c, b]);
    }
    const before = median(pairs.map((p) => p[0]!));
    const after = median(pairs.map((p) => p[1]!));
    rows.push({ concurrency, withFeed: after, withoutFeed: before, ratio: after / before, pairs });
  }
  return rows;
}

/** Appends `count` events over 100 entities, 100 events per append. */
async function fill(store: PersistenceStore, count: number, type: string): Promise<void> {
  const perAppend = 100;
  const revisions = new Map<string, number>();
  for (let i = 0; i < count / perAppend; i++) {
    const pid = `${type}:${i % 100}`;
    const revision = revisions.get(pid) ?? 0;
    const r = await store.appendEvents({
      persistenceId: pid,
      expectedRevision: revision,
      operationId: `fill-${type}-${i}`,
      events: Array.from({ length: perAppend }, () => ({ manifest, payload })),
    });
    revisions.set(pid, r.revision);
  }
}

/** This process's CPU time (user + system) in microseconds. */
const cpuMicros = (): number => {
  const usage = process.cpuUsage();
  return usage.user + usage.system;
};

async function timeIt(fn: () => Promise<number>): Promise<number> {
  const started = clock.now();
  const n = await fn();
  return (n * 1000) / (clock.now() - started);
}

async function readRates(store: PersistenceStore, raw: () => Promise<number>) {
  const query = () =>
    timeIt(async () => {
      let after = 0;
      let n = 0;
      for (;;) {
        const page = await store.queryEvents({ afterOffset: after, limit: 1000 });
        n += page.events.length;
        after = page.nextOffset;
        if (!page.hasMore) return n;
      }
    });
  const stream = () =>
    timeIt(async () => {
      const abort = new AbortController();
      let n = 0;
      const total = await store.latestOffset();
      for await (const e of new EventFeed(store, clock).stream({ pageSize: 1000, signal: abort.signal })) {
        n++;
        if (e.offset >= total) break;
      }
      return n;
    });
  const samples = { raw: [] as number[], query: [] as number[], stream: [] as number[] };
  for (let round = 0; round < 3; round++) {
    samples.raw.push(await raw());
    samples.query.push(await query());
    samples.stream.push(await stream());
  }
  return { raw: median(samples.raw), query: median(samples.query), stream: median(samples.stream) };
}

/** The handler's writes alone, batch by batch, for the ceiling: runs `upserts` (one per event) in one transaction. */
type RawBatch = (rows: readonly (readonly [string, number])[]) => Promise<void>;
/** A raw keyset page of the feed after `offset`, `limit` rows: [persistence id, sequence nr] and the last offset. */
type RawPage = (offset: number, limit: number) => Promise<{ rows: [string, number][]; last: number }>;

/**
 * Exactly-once projection throughput over the newest `projectedEvents` events, with a handler that runs exactly one
 * statement per event (an upsert keyed by persistence id), beside a ceiling measured in the same run: a raw keyset
 * page of the same rows read and their upserts sent directly in one transaction per page of the batch size (no
 * checkpoint, no fence, no event decoding). `writeOnly` is the upserts alone (the rows read beforehand). Rounds
 * alternate runner, ceiling and write-only; medians.
 */
async function projectionRate(
  store: PersistenceStore,
  ddl: (table: string) => string,
  upsert: (table: string) => string,
  rawBatch: (table: string) => RawBatch,
  rawPage: RawPage,
): Promise<{
  runner: number;
  ceiling: number;
  ratio: number;
  writeOnly: number;
  /** This process's CPU time per event, µs: on SQLite all of the work, so far steadier under load than the rates. */
  runnerCpuMicros: number;
  ceilingCpuMicros: number;
  statementsPerEvent: number;
}> {
  await store.runProjectionBatch({ name: "bench-ddl", expectedOffset: 0, newOffset: 0 }, async (tx) => {
    await tx.query(ddl("bench_model"));
    await tx.query(ddl("bench_model_raw"));
  });
  const total = await store.latestOffset();
  const from = Math.max(0, total - projectedEvents);
  const rows: [string, number][] = [];
  for (let after = from; ; ) {
    const page = await store.queryEvents({ afterOffset: after, limit: 1000 });
    for (const e of page.events) rows.push([e.persistenceId, e.sequenceNr]);
    after = page.nextOffset;
    if (!page.hasMore) break;
  }
  const runnerRates: number[] = [];
  const ceilingRates: number[] = [];
  const writeOnlyRates: number[] = [];
  const runnerCpu: number[] = [];
  const ceilingCpu: number[] = [];
  let statements = 0;
  let handled = 0;
  const sql = upsert("bench_model");
  for (let round = 0; round < 3; round++) {
    const started = clock.now();
    const startedCpu = cpuMicros();
    const runner = ProjectionRunner.start(
      {
        name: `bench-${round}`,
        mode: "exactly-once",
        batchSize,
        startOffset: from,
        handler: async (event, tx) => {
          statements++;
          await tx.query(sql, [event.persistenceId, event.sequenceNr]);
        },
      },
      store,
      clock,
    );
    await runner.caughtUpTo(total);
    handled += runner.stats.processed;
    runnerRates.push((runner.stats.processed * 1000) / (clock.now() - started));
    runnerCpu.push((cpuMicros() - startedCpu) / runner.stats.processed);
    await runner.stop();
    const raw = rawBatch("bench_model_raw");
    const ceilingStartedCpu = cpuMicros();
    let ceilingEvents = 0;
    ceilingRates.push(
      await timeIt(async () => {
        let n = 0;
        for (let after = from; after < total; ) {
          const page = await rawPage(after, batchSize);
          if (page.rows.length === 0) break;
          await raw(page.rows);
          n += page.rows.length;
          after = page.last;
        }
        ceilingEvents = n;
        return n;
      }),
    );
    ceilingCpu.push((cpuMicros() - ceilingStartedCpu) / ceilingEvents);
    writeOnlyRates.push(
      await timeIt(async () => {
        for (let i = 0; i < rows.length; i += batchSize) await raw(rows.slice(i, i + batchSize));
        return rows.length;
      }),
    );
  }
  const runner = median(runnerRates);
  const ceiling = median(ceilingRates);
  return {
    runner,
    ceiling,
    ratio: runner / ceiling,
    writeOnly: median(writeOnlyRates),
    runnerCpuMicros: median(runnerCpu),
    ceilingCpuMicros: median(ceilingCpu),
    statementsPerEvent: statements / handled,
  };
}

/** The outbox message the bench sends: registered with the dispatcher's codec so that it decodes. */
class BenchMessage {
  constructor(
    readonly kind: string,
    readonly sku: string,
  ) {}
}
const outboxCodec = new PersistenceCodec();
outboxCodec.register(BenchMessage, { manifest: "bench.BenchMessage" });
const outboxPayload = JSON.stringify({ kind: "Reserve", sku: "sku-000042" });

/** The `q` quantile (0..1) of `xs`, nearest rank. */
const quantile = (xs: number[], q: number) => {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
};

interface OutboxRun {
  /** Messages per second from the first sender append to the last receiver commit. */
  readonly rate: number;
  /** Milliseconds from the sender's commit to the receiver's commit. */
  readonly p50: number;
  readonly p99: number;
}

/**
 * One end-to-end run of `outboxMessages` messages over `outboxSenders` fenced senders. `direct` is the ceiling: each
 * sender writes the receiver's event itself right after its own commit (no outbox row, no dispatcher); otherwise the
 * sender's append carries the message and a running dispatcher delivers it ("closed": each sender waits for its
 * message's receipt before its next append; "open": it does not).
 */
async function outboxRun(
  store: PersistenceStore,
  label: string,
  fences: ShardLeaseToken[],
  mode: "direct" | "open" | "closed",
) {
  const direct = mode === "direct";
  const receipts = new Map<string, () => void>();
  const perSender = Math.ceil(outboxMessages / fences.length);
  const committedAt = new Map<string, number>();
  const latencies: number[] = [];
  const receiverRevision = new Map<string, number>();
  /** One receiver's writes in order, as its entity's mailbox would run them. */
  const receiverQueue = new Map<string, Promise<void>>();
  let received = 0;
  let allReceived: () => void = () => {};
  const done = new Promise<void>((resolve) => {
    allReceived = resolve;
  });
  const total = perSender * fences.length;
  const receive = (receiver: string, messageId: string): Promise<void> => {
    const write = (receiverQueue.get(receiver) ?? Promise.resolve()).then(async () => {
      const r = await store.appendEvents({
        persistenceId: receiver,
        expectedRevision: receiverRevision.get(receiver) ?? 0,
        operationId: messageId,
        events: [{ manifest, payload }],
      });
      receiverRevision.set(receiver, r.revision);
      latencies.push(clock.now() - committedAt.get(messageId)!);
      receipts.get(messageId)?.();
      if (++received === total) allReceived();
    });
    receiverQueue.set(
      receiver,
      write.catch(() => {}),
    );
    return write;
  };
  const dispatcher = direct
    ? null
    : new OutboxDispatcher({
        store,
        codec: outboxCodec,
        batchSize: 64,
        owner: `bench-${label}`,
        // The senders write under these leases: claims follow them (docs/outbox.md).
        leases: () => fences,
        purge: false,
        deliverToEntity: async (delivery) => {
          if (delivery.destination.kind !== "entity") throw new Error("not an entity destination");
          await receive(`Receiver:${label}-${delivery.destination.entityId}`, delivery.messageId);
        },
      });
  dispatcher?.start();
  const started = clock.now();
  await Promise.all(
    fences.map(async (fence, w) => {
      const sender = `Sender:${label}-${w}`;
      for (let i = 0; i < perSender; i++) {
        const operationId = `${label}-${w}-${i}`;
        const messageId = outboxMessageId(sender, operationId, 0);
        const destination = { kind: "entity" as const, entityType: "Receiver", entityId: String(w) };
        await store.appendEvents({
          persistenceId: sender,
          expectedRevision: i,
          operationId,
          events: [{ manifest, payload }],
          fence,
          ...(direct
            ? {}
            : { outbox: [{ messageId, destination, manifest: "bench.BenchMessage", payload: outboxPayload }] }),
        });
        const receipt =
          mode === "closed" ? new Promise<void>((resolve) => receipts.set(messageId, resolve)) : Promise.resolve();
        committedAt.set(messageId, clock.now());
        if (direct) await receive(`Receiver:${label}-${w}`, messageId);
        await receipt;
      }
    }),
  );
  // A dispatcher that cannot deliver (a message it cannot decode is parked) would leave `done` waiting forever.
  let timer: ReturnType<typeof setTimeout> | undefined;
  await Promise.race([
    done,
    new Promise((_, reject) => {
      timer = setTimeout(
        () =>
          reject(new Error(`${received} of ${total} received after 120 s; ${JSON.stringify(dispatcher?.stats ?? {})}`)),
        120_000,
      );
    }),
  ]);
  clearTimeout(timer);
  const elapsed = clock.now() - started;
  await dispatcher?.stop();
  if (dispatcher !== null && dispatcher.stats.delivered !== total) {
    throw new Error(`the dispatcher delivered ${dispatcher.stats.delivered} of ${total}`);
  }
  return { rate: (total * 1000) / elapsed, p50: quantile(latencies, 0.5), p99: quantile(latencies, 0.99) };
}

/** The outbox end to end and its ceiling, alternating rounds; medians of each figure. */
async function outboxEndToEnd(store: PersistenceStore) {
  const fences: ShardLeaseToken[] = [];
  for (let w = 0; w < outboxSenders; w++) {
    const key = { clusterName: "bench", entityType: "OutboxSender", shardId: w };
    fences.push((await store.acquireShardLease(key, "bench", 600_000))!);
  }
  const runs = { open: [] as OutboxRun[], closed: [] as OutboxRun[], direct: [] as OutboxRun[] };
  const modes = ["direct", "open", "closed"] as const;
  for (let round = 0; round < 3; round++) {
    // Rotate the order so that drifting load favours no case.
    for (let i = 0; i < modes.length; i++) {
      const mode = modes[(i + round) % modes.length]!;
      runs[mode].push(await outboxRun(store, `${mode}${round}`, fences, mode));
    }
  }
  const summary = (xs: OutboxRun[]): OutboxRun => ({
    rate: median(xs.map((x) => x.rate)),
    p50: median(xs.map((x) => x.p50)),
    p99: median(xs.map((x) => x.p99)),
  });
  return { open: summary(runs.open), closed: summary(runs.closed), direct: summary(runs.direct), runs };
}

async function main(): Promise<void> {
  const load = loadavg();
  const schema = `movie_benchp_${process.pid}`;
  const dir = mkdtempSync(join(tmpdir(), "movie-benchp-"));
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  const stores: PostgresStore[] = [];
  try {
    console.log(`1-minute load ${load[0]!.toFixed(2)} at the start; ${rounds} alternating rounds of ${caseMs} ms`);
    let appends: Awaited<ReturnType<typeof appendOverhead>> = [];
    if (parts.has("appends")) {
      // A small pool: group commit keeps one append statement in flight (default), so four connections suffice.
      const withFeed = await PostgresStore.connect({ connectionUri: url, schema: `${schema}_on`, poolSize: 4 });
      const withoutFeed = await PostgresStore.connect({ connectionUri: url, schema: `${schema}_off`, poolSize: 4 });
      stores.push(withFeed, withoutFeed);
      // The write path before the feed: the journal without its offset column (migration 16), whose default takes
      // the feed lock and the offset; the event_feed view reads that column.
      await withoutFeed.pool.query("DROP VIEW event_feed; ALTER TABLE event_journal DROP COLUMN event_offset");
      appends = await appendOverhead(withFeed, withoutFeed);
      console.log("fenced one-event appends (each writer its own shard), PostgreSQL, median appends/s:");
      console.log("conc  without feed  with feed  ratio   pairs (without/with)");
      for (const r of appends) {
        console.log(
          `${String(r.concurrency).padEnd(6)}${r.withoutFeed.toFixed(0).padEnd(14)}${r.withFeed.toFixed(0).padEnd(11)}${(r.ratio * 100).toFixed(0).padEnd(8)}${r.pairs.map((p) => `${p[0]!.toFixed(0)}/${p[1]!.toFixed(0)}`).join(" ")}`,
        );
      }
    }

    const reads: Record<string, { raw: number; query: number; stream: number }> = {};
    const projections: Record<string, Awaited<ReturnType<typeof projectionRate>>> = {};
    if (backends.has("postgres")) {
      const feedSchema = `${schema}_feed`;
      const pgStore = await PostgresStore.connect({ connectionUri: url, schema: feedSchema, poolSize: 4 });
      stores.push(pgStore);
      await fill(pgStore, feedEvents, "Feed");
      const pgPage = async (after: number, limit: number) =>
        (
          await pgStore.pool.query(
            `SELECT j.event_offset, j.persistence_id, j.sequence_nr, j.manifest, j.payload FROM event_journal j
              WHERE j.event_offset > $1 ORDER BY j.event_offset LIMIT $2`,
            [after, limit],
          )
        ).rows as { event_offset: string; persistence_id: string; sequence_nr: string }[];
      if (parts.has("reads")) {
        reads.postgres = await readRates(pgStore, () =>
          timeIt(async () => {
            let after = 0;
            let n = 0;
            for (;;) {
              const rows = await pgPage(after, 1000);
              n += rows.length;
              if (rows.length < 1000) return n;
              after = Number(rows[rows.length - 1]!.event_offset);
            }
          }),
        );
      }
      const pgUpsert = (t: string) =>
        `INSERT INTO ${t} (id, seq) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET seq = EXCLUDED.seq`;
      if (parts.has("projections")) {
        projections.postgres = await projectionRate(
          pgStore,
          (t) => `CREATE TABLE IF NOT EXISTS ${t} (id TEXT PRIMARY KEY, seq BIGINT NOT NULL)`,
          pgUpsert,
          (t) => async (rows) => {
            const client = await pgStore.pool.connect();
            try {
              await client.query("BEGIN");
              for (const [id, seq] of rows) await client.query(pgUpsert(t), [id, seq]);
              await client.query("COMMIT");
            } finally {
              client.release();
            }
          },
          async (after, limit) => {
            const rows = await pgPage(after, limit);
            return {
              rows: rows.map((r) => [r.persistence_id, Number(r.sequence_nr)]),
              last: rows.length === 0 ? after : Number(rows[rows.length - 1]!.event_offset),
            };
          },
        );
      }
    }

    let outbox: Awaited<ReturnType<typeof outboxEndToEnd>> | null = null;
    if (parts.has("outbox")) {
      const outboxStore = await PostgresStore.connect({ connectionUri: url, schema: `${schema}_outbox`, poolSize: 8 });
      stores.push(outboxStore);
      outbox = await outboxEndToEnd(outboxStore);
    }

    if (backends.has("sqlite")) {
      const sqlite = SqliteStore.open({ dbPath: join(dir, "feed.sqlite3") });
      await fill(sqlite, feedEvents, "Feed");
      const rawDb = new (await import("better-sqlite3")).default(join(dir, "feed.sqlite3"));
      // On SQLite the offset is the journal row's own (migration 12).
      const rawPage = rawDb.prepare(
        `SELECT event_offset, persistence_id, sequence_nr, manifest, payload FROM event_journal
          WHERE event_offset > ? ORDER BY event_offset LIMIT ?`,
      );
      type RawRow = { event_offset: number; persistence_id: string; sequence_nr: number };
      if (parts.has("reads")) {
        reads.sqlite = await readRates(sqlite, () =>
          timeIt(async () => {
            let after = 0;
            let n = 0;
            for (;;) {
              const rows = rawPage.all(after, 1000) as RawRow[];
              n += rows.length;
              if (rows.length < 1000) return n;
              after = rows[rows.length - 1]!.event_offset;
            }
          }),
        );
      }
      const sqliteUpsert = (t: string) =>
        `INSERT INTO ${t} (id, seq) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET seq = excluded.seq`;
      if (parts.has("projections")) {
        projections.sqlite = await projectionRate(
          sqlite,
          (t) => `CREATE TABLE IF NOT EXISTS ${t} (id TEXT PRIMARY KEY, seq INTEGER NOT NULL)`,
          sqliteUpsert,
          (t) => {
            const statement = rawDb.prepare(sqliteUpsert(t));
            return async (rows) => {
              rawDb.exec("BEGIN IMMEDIATE");
              for (const [id, seq] of rows) statement.run(id, seq);
              rawDb.exec("COMMIT");
            };
          },
          async (after, limit) => {
            const rows = rawPage.all(after, limit) as RawRow[];
            return {
              rows: rows.map((r) => [r.persistence_id, r.sequence_nr]),
              last: rows.length === 0 ? after : rows[rows.length - 1]!.event_offset,
            };
          },
        );
      }
      rawDb.close();
      await sqlite.close();
    }

    console.log(`reading ${feedEvents} events (events/s, median of 3):`);
    console.log("backend   raw SELECT  queryEvents  vs raw  stream   vs raw");
    for (const [backend, r] of Object.entries(reads)) {
      console.log(
        `${backend.padEnd(10)}${r.raw.toFixed(0).padEnd(12)}${r.query.toFixed(0).padEnd(13)}${`${((r.query / r.raw) * 100).toFixed(0)}%`.padEnd(8)}${r.stream.toFixed(0).padEnd(9)}${((r.stream / r.raw) * 100).toFixed(0)}%`,
      );
    }
    console.log(
      `exactly-once projection of ${projectedEvents} events, one upsert statement per event, batches of ${batchSize} (events/s, median of 3):`,
    );
    console.log(
      "backend   runner   raw read + same upserts  ratio  upserts alone  ratio  CPU µs/event runner / raw  ratio  statements/event",
    );
    for (const [backend, r] of Object.entries(projections)) {
      const cpu = `${r.runnerCpuMicros.toFixed(2)} / ${r.ceilingCpuMicros.toFixed(2)}`;
      console.log(
        `${backend.padEnd(10)}${r.runner.toFixed(0).padEnd(9)}${r.ceiling.toFixed(0).padEnd(25)}${`${(r.ratio * 100).toFixed(0)}%`.padEnd(7)}${r.writeOnly.toFixed(0).padEnd(15)}${`${((r.runner / r.writeOnly) * 100).toFixed(0)}%`.padEnd(7)}${cpu.padEnd(27)}${`${((r.ceilingCpuMicros / r.runnerCpuMicros) * 100).toFixed(0)}%`.padEnd(7)}${r.statementsPerEvent.toFixed(2)}`,
      );
    }
    if (outbox !== null) {
      console.log(
        `outbox end to end, PostgreSQL, ${outboxMessages} messages from ${outboxSenders} fenced senders (median of 3):`,
      );
      console.log(
        "path                                      messages/s  ratio  p50 ms  p99 ms  (commit → receiver's commit)",
      );
      const row = (name: string, r: OutboxRun, ratio: string) =>
        console.log(
          `${name.padEnd(42)}${r.rate.toFixed(0).padEnd(12)}${ratio.padEnd(7)}${r.p50.toFixed(1).padEnd(8)}${r.p99.toFixed(1)}`,
        );
      const ratio = (r: OutboxRun) => `${((r.rate / outbox!.direct.rate) * 100).toFixed(0)}%`;
      row("outbox + dispatcher, open loop", outbox.open, ratio(outbox.open));
      row("outbox + dispatcher, closed loop", outbox.closed, ratio(outbox.closed));
      row("ceiling: sender then receiver, directly", outbox.direct, "");
    }
    console.log(`1-minute load ${loadavg()[0]!.toFixed(2)} at the end`);
    mkdirSync("bench/results", { recursive: true });
    // A partial run (MOVIE_BENCH_PARTS, MOVIE_BENCH_BACKENDS) writes beside the full run's file, not over it.
    const partial = parts.size < 4 || backends.size < 2;
    writeFileSync(
      partial ? "bench/results/projections-partial.json" : "bench/results/projections.json",
      `${JSON.stringify({ caseMs, rounds, feedEvents, projectedEvents, loadAverage: { start: load, end: loadavg() }, appends, reads, projections, outbox }, null, 2)}\n`,
    );
  } finally {
    for (const store of stores) await store.close();
    for (const suffix of ["_on", "_off", "_feed", "_outbox"])
      await admin.query(`DROP SCHEMA IF EXISTS ${schema}${suffix} CASCADE`);
    await admin.end();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
