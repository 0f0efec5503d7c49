// Projections run in the cluster (fake cluster, real PostgreSQL): sharding.initProjection on two nodes; one node at a
// time owns the projection through its shard lease and runs it exactly-once with the lease as its fence. When the
// owner leaves, the projection moves to the other node at the next epoch and continues from the checkpoint, each
// event applied to the read model once; an instance holding the old owner's lease commits nothing (StaleShardOwnerError),
// and neither does the running instance once its lease is taken from it.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { RealScheduler } from "../../../src/actor/index.ts";
import { Database, type ExactlyOnceProjection, OperationId, ProjectionRunner } from "../../../src/persistence/index.ts";
import { KeepProjectionRunning, type ShardedProjection } from "../../../src/sharding/persistent/index.ts";
import { eventually } from "../../fixtures/eventually.ts";
import { freshPostgresStore, rawClient } from "../../persistence/pg-fixture.ts";
import { FakeCluster, type Node } from "../fixtures/fake-cluster.ts";

const cluster = new FakeCluster([KeepProjectionRunning]);
const pg = await freshPostgresStore("sharded_projection");
after(async () => {
  await cluster.shutdown();
  await pg.dispose();
});

const settings = { leaseDuration: 2_000, leaseRenewInterval: 500, keepAliveIntervalMs: 100 };
// Every event handled increments its own row: a row above 1 is an event applied twice.
const definition: ExactlyOnceProjection = {
  name: "item-counts",
  mode: "exactly-once",
  source: { entityTypes: ["Item"] },
  pollIntervalMs: 50,
  handler: async (event, tx) => {
    await tx.query(
      `INSERT INTO item_seen (event_offset, times) VALUES ($1, 1)
        ON CONFLICT (event_offset) DO UPDATE SET times = item_seen.times + 1`,
      [event.offset],
    );
  },
};

async function start(name: string): Promise<{ node: Node; projection: ShardedProjection }> {
  const node = cluster.addNode(name);
  await Database.get(node.system).use(pg.store);
  return { node, projection: node.sharding.initProjection(definition, settings) };
}

// Read through a function: assert.equal narrows a property path it was given.
const runnerOf = (p: ShardedProjection) => p.local;

let written = 0;
async function writeItems(n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    const id = `Item:${written % 7}`;
    await pg.store.appendEvents({
      persistenceId: id,
      expectedRevision: await pg.store.loadRevision(id),
      operationId: OperationId.random(),
      events: [{ manifest: "test.ItemAdded", payload: JSON.stringify({ n: written }) }],
    });
    written++;
  }
}

async function readModel(): Promise<{ events: number; maxTimes: number }> {
  const raw = await rawClient(pg.url, pg.schema);
  try {
    const row = (await raw.query("SELECT count(*) AS events, coalesce(max(times), 0) AS max FROM item_seen")).rows[0];
    return { events: Number(row.events), maxTimes: Number(row.max) };
  } finally {
    await raw.end();
  }
}

async function lease(): Promise<{ owner: string; epoch: number; until: number }> {
  const raw = await rawClient(pg.url, pg.schema);
  try {
    const rows = (
      await raw.query(
        "SELECT owner, epoch, lease_until_epoch_ms FROM shard_lease WHERE entity_type = 'projection-item-counts'",
      )
    ).rows;
    assert.equal(rows.length, 1, "one shard, one lease row");
    return { owner: rows[0].owner, epoch: Number(rows[0].epoch), until: Number(rows[0].lease_until_epoch_ms) };
  } finally {
    await raw.end();
  }
}

test("a projection owned through sharding moves with its lease on a leave, applying every event once", async () => {
  const raw = await rawClient(pg.url, pg.schema);
  await raw.query("CREATE TABLE item_seen (event_offset BIGINT PRIMARY KEY, times INT NOT NULL)");
  await raw.end();
  await writeItems(30);
  const a = await start("proj-a");
  // a is alone (and the coordinator): the keep-alive starts the projection there.
  await eventually(async () => (await readModel()).events === 30, {
    what: "the projection caught up on a",
    describe: () => a.projection.stats,
  });
  const b = await start("proj-b");
  const first = await lease();
  assert.equal(first.owner, a.node.address.toString());
  assert.notEqual(runnerOf(a.projection), null, "a runs it");
  assert.equal(runnerOf(b.projection), null, "b does not");

  // Events keep coming while a leaves and the projection is handed off to b.
  const writing = writeItems(40);
  a.node.setStatus("Leaving");
  await eventually(async () => (await lease()).owner === b.node.address.toString(), {
    what: "the projection's lease on b",
    timeoutMs: 20_000,
  });
  await writing;
  await eventually(async () => (await readModel()).events === written, {
    what: "the projection caught up on b",
    timeoutMs: 20_000,
    describe: () => ({ a: a.projection.stats, b: b.projection.stats }),
  });
  const moved = await lease();
  assert.equal(moved.epoch, first.epoch + 1, "handed off once: the next epoch");
  assert.equal(runnerOf(a.projection), null, "a stopped it");
  assert.equal(runnerOf(b.projection)?.status, "running");
  assert.deepEqual(await readModel(), { events: written, maxTimes: 1 }, "every event applied exactly once");
  assert.equal(await pg.store.loadProjectionOffset("item-counts"), await pg.store.latestOffset());

  // An instance still holding a's lease (a paused old owner that resumes) commits nothing.
  const stale = ProjectionRunner.start({ ...definition, name: "item-counts" }, pg.store, new RealScheduler(), {
    fence: {
      key: { clusterName: "movie-cluster", entityType: "projection-item-counts", shardId: 0 },
      owner: first.owner,
      epoch: first.epoch,
      leaseUntilEpochMs: first.until,
    },
  });
  // It starts from the current checkpoint; give it something to do.
  await writeItems(5);
  await eventually(() => stale.status === "stale", {
    what: "the old lease's instance fenced out",
    describe: () => stale.stats,
  });
  assert.match(stale.stats.lastError ?? "", /StaleShardOwnerError/);
  await eventually(async () => (await readModel()).events === written, { what: "b applies the new events" });
  assert.deepEqual(await readModel(), { events: written, maxTimes: 1 }, "still once each");

  // The lease is taken from b behind its back (as a new owner would after b was cut off): b's running instance, bound
  // to its epoch by sharding, commits nothing more and is fenced out.
  const bRunner = runnerOf(b.projection)!;
  const intruder = await rawClient(pg.url, pg.schema);
  try {
    await intruder.query(
      `UPDATE shard_lease SET owner = 'intruder', epoch = epoch + 1, lease_until_epoch_ms = movie_now_ms() + 600000
        WHERE entity_type = 'projection-item-counts'`,
    );
  } finally {
    await intruder.end();
  }
  const applied = (await readModel()).events;
  await writeItems(5);
  await eventually(() => bRunner.status === "stale", {
    what: "b's instance fenced out once its lease moved",
    describe: () => bRunner.stats,
  });
  assert.match(bRunner.stats.lastError ?? "", /StaleShardOwnerError/);
  assert.equal((await readModel()).events, applied, "nothing applied under the moved lease");
  for (const p of [a.projection, b.projection]) p.stopKeepAlive();
});
