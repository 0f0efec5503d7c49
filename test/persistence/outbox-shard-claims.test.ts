// Outbox claims follow shard ownership (docs/outbox.md, migration 15), beyond the store contract (outbox-contract.ts):
// a dispatcher counts the leases its claim presented that were not current and the outcomes refused because the row's
// lease moved on, and the new owner's dispatcher delivers what the old one could not record; rows written before
// migration 15 (no shard) are still delivered after the upgrade, on SQLite and PostgreSQL.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import Database from "better-sqlite3";
import pg from "pg";
import {
  MemoryStore,
  OutboxDispatcher,
  outboxMessageId,
  PersistenceCodec,
  type PersistenceStore,
  type ShardLeaseKey,
} from "../../src/persistence/index.ts";
import { PostgresStore, postgresMigrations } from "../../src/persistence/postgres/index.ts";
import { SqliteStore, sqliteMigrations } from "../../src/persistence/sqlite/index.ts";
import { dropSchema, postgresTestUrl, uniqueSchema } from "./pg-fixture.ts";

/** The pending, parked and delivered counts (the rest of outboxCounts is asserted elsewhere). */
async function threeCounts(store: { outboxCounts(): Promise<{ pending: number; parked: number; delivered: number }> }) {
  const { pending, parked, delivered } = await store.outboxCounts();
  return { pending, parked, delivered };
}

const dir = mkdtempSync(join(tmpdir(), "movie-outbox-shards-"));
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

const codec = new PersistenceCodec();
const key: ShardLeaseKey = { clusterName: "c", entityType: "Order", shardId: 3 };

/** One order's append under `fence` with one message to Stock. */
async function placeOrder(
  store: PersistenceStore,
  pid: string,
  fence: Parameters<PersistenceStore["appendEvents"]>[0]["fence"],
) {
  await store.appendEvents({
    persistenceId: pid,
    expectedRevision: 0,
    operationId: "place",
    events: [{ manifest: "json", payload: "{}" }],
    fence,
    outbox: [
      {
        messageId: outboxMessageId(pid, "place", 0),
        destination: { kind: "entity", entityType: "Stock", entityId: "sku-1" },
        ...codec.encode({ reserve: 1 }),
      },
    ],
  });
}

test("a dispatcher counts stale leases and refused outcomes; the shard's new owner's dispatcher delivers the row", async () => {
  const store = new MemoryStore();
  const tokenA = (await store.acquireShardLease(key, "node-a", 60_000))!;
  await placeOrder(store, "Order:o1", tokenA);
  const deliveredBy: string[] = [];
  // While node-a's delivery is in flight, its lease is released and node-b takes the shard (epoch + 1).
  let tokenB: Awaited<ReturnType<PersistenceStore["acquireShardLease"]>> = null;
  const a = new OutboxDispatcher({
    store,
    codec,
    owner: "dispatcher-a",
    leases: () => [tokenA],
    deliverToEntity: async () => {
      deliveredBy.push("a");
      assert.equal(await store.releaseShardLease(tokenA), true);
      tokenB = await store.acquireShardLease(key, "node-b", 60_000);
    },
  });
  const b = new OutboxDispatcher({
    store,
    codec,
    owner: "dispatcher-b",
    leases: () => (tokenB === null ? [] : [tokenB]),
    deliverToEntity: async () => void deliveredBy.push("b"),
  });
  assert.deepEqual(await a.runOnce(), { claimed: 1, delivered: 1, retried: 0, parked: 0, stale: 1 });
  assert.equal(tokenB!.epoch, tokenA.epoch + 1);
  assert.equal(a.stats.staleSettles, 1);
  assert.deepEqual(await threeCounts(store), { pending: 1, parked: 0, delivered: 0 }, "node-a recorded nothing");
  // node-a's next claim presents a lease that is no longer current: nothing claimed, counted.
  assert.deepEqual(await a.runOnce(), { claimed: 0, delivered: 0, retried: 0, parked: 0, stale: 0 });
  assert.equal(a.stats.staleLeases, 1);
  // node-b claims the row at once under its epoch (node-a's claim had most of its 30 s left) and records it.
  assert.deepEqual(await b.runOnce(), { claimed: 1, delivered: 1, retried: 0, parked: 0, stale: 0 });
  assert.deepEqual(deliveredBy, ["a", "b"]);
  assert.deepEqual(await threeCounts(store), { pending: 0, parked: 0, delivered: 1 });
  assert.deepEqual(
    { staleLeases: b.stats.staleLeases, staleSettles: b.stats.staleSettles },
    {
      staleLeases: 0,
      staleSettles: 0,
    },
  );
  // A failure recorded under a stale lease is refused too: nothing parked, the row stays for the owner.
  await placeOrder(store, "Order:o2", tokenB);
  const poisoned = new OutboxDispatcher({
    store,
    codec,
    owner: "dispatcher-b2",
    leases: () => [tokenB!],
    retry: { maxAttempts: 1 },
    deliverToEntity: async () => {
      await store.releaseShardLease(tokenB!);
      throw new Error("receiver refused");
    },
  });
  assert.deepEqual(await poisoned.runOnce(), { claimed: 1, delivered: 0, retried: 0, parked: 1, stale: 1 });
  assert.deepEqual(await threeCounts(store), { pending: 1, parked: 0, delivered: 1 });
});

/** An outbox row as a build before migration 15 wrote it (no shard columns). */
const oldRow = {
  messageId: outboxMessageId("Order:old", "place", 0),
  destination: JSON.stringify({ kind: "entity", entityType: "Stock", entityId: "sku-1" }),
  ...codec.encode({ reserve: 1 }),
};

/** After the upgrade: the old row is claimed by a dispatcher that takes rows without a shard, and only by one. */
async function deliversOldRow(store: PersistenceStore): Promise<void> {
  const heldLease = (await store.acquireShardLease(key, "node-a", 60_000))!;
  const shardsOnly = new OutboxDispatcher({
    store,
    codec,
    leases: () => [heldLease],
    unsharded: false,
    deliverToEntity: async () => assert.fail("a dispatcher without unsharded rows must not take it"),
  });
  assert.equal((await shardsOnly.runOnce()).claimed, 0);
  const seen: string[] = [];
  const any = new OutboxDispatcher({
    store,
    codec,
    leases: () => [heldLease],
    deliverToEntity: async (d) => void seen.push(d.messageId),
  });
  assert.deepEqual(await any.runOnce(), { claimed: 1, delivered: 1, retried: 0, parked: 0, stale: 0 });
  assert.deepEqual(seen, [oldRow.messageId]);
  assert.deepEqual(await threeCounts(store), { pending: 0, parked: 1, delivered: 1 });
  // The row parked before the upgrade stays parked, listed, and claimable again once an operator retries it.
  const [parked] = await store.parkedOutbox(10);
  assert.equal(parked?.lastError, "parked before the upgrade");
  assert.equal(await store.retryParkedOutbox([parked!.offset]), 1);
  const claim = await store.claimOutbox({ owner: "op", limit: 10, leaseMs: 60_000 });
  assert.deepEqual(
    claim.rows.map((r) => [r.offset, r.senderShard, r.claimEpoch]),
    [[parked!.offset, null, null]],
  );
  assert.deepEqual(await store.completeOutbox(claim.rows), { settled: 1, stale: 0 });
}

test("SQLite: rows written before migration 15 (no shard) are delivered after the upgrade", async () => {
  const path = join(dir, "v14.sqlite3");
  const raw = new Database(path);
  raw.exec(`CREATE TABLE movie_schema_migration (version INTEGER PRIMARY KEY, name TEXT NOT NULL,
    checksum TEXT NOT NULL, applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)`);
  for (const m of sqliteMigrations.slice(0, 14)) {
    for (const sql of m.statements) raw.exec(sql);
    raw
      .prepare("INSERT INTO movie_schema_migration (version, name, checksum) VALUES (?, ?, ?)")
      .run(m.version, m.name, m.checksum);
  }
  const insert = raw.prepare(`INSERT INTO persistence_outbox (message_id, persistence_id, operation_id, destination,
    manifest, payload, last_error, lease_until_epoch_ms) VALUES (?, ?, 'place', ?, ?, ?, ?, ?)`);
  insert.run(oldRow.messageId, "Order:old", oldRow.destination, oldRow.manifest, oldRow.payload, null, 0);
  insert.run(
    "parked-1",
    "Order:old",
    oldRow.destination,
    oldRow.manifest,
    oldRow.payload,
    "parked before the upgrade",
    Number.MAX_SAFE_INTEGER,
  );
  raw.close();
  const store = SqliteStore.open({ dbPath: path });
  try {
    await deliversOldRow(store);
  } finally {
    await store.close();
  }
});

test("PostgreSQL: rows written before migration 15 (no shard) are delivered after the upgrade", async () => {
  const url = await postgresTestUrl();
  const schema = uniqueSchema("outbox_v14");
  const raw = new pg.Client({ connectionString: url });
  await raw.connect();
  try {
    await raw.query(`CREATE SCHEMA ${schema}`);
    await raw.query(`SET search_path = ${schema}`);
    await raw.query(`CREATE TABLE movie_schema_migration (version INTEGER PRIMARY KEY, name TEXT NOT NULL,
      checksum TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`);
    for (const m of postgresMigrations.slice(0, 14)) {
      for (const sql of m.statements) await raw.query(sql);
      await raw.query("INSERT INTO movie_schema_migration (version, name, checksum) VALUES ($1, $2, $3)", [
        m.version,
        m.name,
        m.checksum,
      ]);
    }
    const insert = `INSERT INTO persistence_outbox (message_id, persistence_id, operation_id, destination, manifest,
      payload, last_error, lease_until_epoch_ms) VALUES ($1, 'Order:old', 'place', $2, $3, $4, $5, $6)`;
    await raw.query(insert, [oldRow.messageId, oldRow.destination, oldRow.manifest, oldRow.payload, null, 0]);
    await raw.query(insert, [
      "parked-1",
      oldRow.destination,
      oldRow.manifest,
      oldRow.payload,
      "parked before the upgrade",
      Number.MAX_SAFE_INTEGER,
    ]);
  } finally {
    await raw.end();
  }
  const store = await PostgresStore.connect({ connectionUri: url, schema });
  try {
    await deliversOldRow(store);
    const indexes = await store.pool.query(
      "SELECT indexname FROM pg_indexes WHERE schemaname = $1 AND tablename = 'persistence_outbox' ORDER BY 1",
      [schema],
    );
    const names = indexes.rows.map((r: { indexname: string }) => r.indexname);
    assert.ok(names.includes("persistence_outbox_shard_claim_idx"), names.join(", "));
    assert.ok(names.includes("persistence_outbox_unsharded_claim_idx"), names.join(", "));
    assert.ok(!names.includes("persistence_outbox_claim_idx"), "migration 10's claim index replaced");
  } finally {
    await store.close();
    await dropSchema(url, schema);
  }
});
