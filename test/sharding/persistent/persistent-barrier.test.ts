// The retry barrier in front of persistent shards on the real PostgreSQL: while another owner holds the lease,
// deliveries queue in FIFO order and succeed in order once it frees; when the window ends they are rejected.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { ClusterShardingConfigurationError, ShardLeaseUnavailableError } from "../../../src/sharding/errors.ts";
import { initEventSourced } from "../../../src/sharding/persistent/index.ts";
import { eventually } from "../../fixtures/eventually.ts";
import { freshPostgresStore, rawClient } from "../../persistence/pg-fixture.ts";
import { FakeCluster } from "../fixtures/fake-cluster.ts";
import { Append, LogView, logMessages, ReadLog, startLogNode } from "./fixtures/sequence-log.ts";

const cluster = new FakeCluster(logMessages);
const pg = await freshPostgresStore("persistent_barrier");
after(async () => {
  await cluster.shutdown();
  await pg.dispose();
});
// Window = leaseDuration + leaseRenewInterval = 1.5 s.
const { node, logs, type } = await startLogNode(cluster, "barrier", pg.store, {
  shardCount: 2,
  leaseDuration: 1_200,
  leaseRenewInterval: 300,
});
await eventually(() => node.sharding.allocations(type).size === 2, { what: "a plan" });

/** Makes another owner hold `shardId`'s lease for `ms` more milliseconds (database clock). */
async function holdElsewhere(shardId: number, ms: number, entityType = "Log"): Promise<void> {
  const client = await rawClient(pg.url, pg.schema);
  try {
    await client.query(
      `INSERT INTO shard_lease (cluster_name, entity_type, shard_id, owner, epoch, lease_until_epoch_ms)
         VALUES ('movie-cluster', $3, $1, 'movie.tcp://elsewhere@127.0.0.1:9#z', 7, movie_now_ms() + $2)
       ON CONFLICT (cluster_name, entity_type, shard_id)
         DO UPDATE SET owner = EXCLUDED.owner, epoch = shard_lease.epoch + 1, lease_until_epoch_ms = EXCLUDED.lease_until_epoch_ms`,
      [shardId, ms, entityType],
    );
  } finally {
    await client.end();
  }
}

test("deliveries wait behind a lease held elsewhere in FIFO order, then succeed in order once it expires", async () => {
  const id = "log-fifo";
  const shard = node.sharding.shardOf(type, id);
  await holdElsewhere(shard, 600);
  const ref = node.sharding.entityRefFor(type, id);
  const retriesBefore = node.sharding.stats.leaseRetries;
  for (let line = 0; line < 10; line++) ref.tell(new Append(line, `fifo-${line}`));
  const view = await ref.ask(new ReadLog(), LogView, 5_000);
  assert.deepEqual(view.lines, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], "every queued tell, in order, before the ask");
  assert.ok(node.sharding.stats.leaseRetries > retriesBefore, "the waiting counted lease retries");
  assert.equal(node.sharding.stats.leaseAcquisitions >= 1, true);
});

test("when the window ends first, what waits is rejected with ShardLeaseUnavailableError and never replayed", async () => {
  // A shard this node never held, so the only lease is the other owner's.
  const used = node.sharding.shardOf(type, "log-fifo");
  const id = ["log-late-a", "log-late-b", "log-late-c", "log-late-d", "log-late-e"].find(
    (candidate) => node.sharding.shardOf(type, candidate) !== used,
  )!;
  const shard = node.sharding.shardOf(type, id);
  await holdElsewhere(shard, 60_000);
  const ref = node.sharding.entityRefFor(type, id);
  const rejectedBefore = node.sharding.stats.rejectedEnvelopes;
  ref.tell(new Append(1, "late-1"));
  await assert.rejects(ref.ask(new Append(2, "late-2"), LogView, 10_000), ShardLeaseUnavailableError);
  assert.ok(node.sharding.stats.rejectedEnvelopes >= rejectedBefore + 2, "both counted as rejected");
  // Free the lease: nothing queued earlier comes back.
  const client = await rawClient(pg.url, pg.schema);
  try {
    await client.query("UPDATE shard_lease SET lease_until_epoch_ms = 0 WHERE entity_type = 'Log' AND shard_id = $1", [
      shard,
    ]);
  } finally {
    await client.end();
  }
  assert.deepEqual((await ref.ask(new ReadLog(), LogView, 5_000)).lines, []);
});

test("the 1,025th delivery queued behind one shard's lease is rejected", async () => {
  const facade = initEventSourced(node.sharding, logs, {
    shardCount: 1,
    leaseDuration: 20_000,
    leaseRenewInterval: 5_000,
    routingName: "Log-overflow",
  });
  await eventually(() => node.sharding.allocations(facade).size === 1, { what: "a plan" });
  await holdElsewhere(0, 60_000, "Log-overflow");
  const ref = node.sharding.entityRefFor(facade, "log-full");
  const rejectedBefore = node.sharding.stats.rejectedEnvelopes;
  for (let line = 0; line < 1_024; line++) ref.tell(new Append(line, `full-${line}`));
  await assert.rejects(
    ref.ask(new ReadLog(), LogView, 5_000),
    (e: unknown) =>
      e instanceof ClusterShardingConfigurationError &&
      /^Shard delivery retry buffer is full for Log-overflow\/0/.test(e.message),
  );
  // The daemon handles deliveries in order, so the tells were all handled before the ask: only the ask was refused.
  assert.equal(node.sharding.stats.rejectedEnvelopes, rejectedBefore + 1, "the 1,024 before it were queued");
});

test("asks behind a write fenced by StaleShardOwnerError are rejected at once with the typed error, not timed out", async () => {
  const facade = initEventSourced(node.sharding, logs, {
    shardCount: 1,
    leaseDuration: 3_000,
    leaseRenewInterval: 1_000,
    routingName: "Log-stale",
  });
  await eventually(() => node.sharding.allocations(facade).size === 1, { what: "a plan" });
  const ref = node.sharding.entityRefFor(facade, "log-stale");
  assert.deepEqual((await ref.ask(new Append(0, "stale-0"), LogView, 5_000)).lines, [0]);
  // Another owner takes the lease behind this node's back (as after a pause): the cached token is still valid here.
  const client = await rawClient(pg.url, pg.schema);
  try {
    await client.query(
      `UPDATE shard_lease SET owner = 'movie.tcp://elsewhere@127.0.0.1:9#z', epoch = epoch + 1,
         lease_until_epoch_ms = movie_now_ms() + 60000 WHERE entity_type = 'Log-stale'`,
    );
  } finally {
    await client.end();
  }
  const rejectedBefore = node.sharding.stats.rejectedEnvelopes;
  // The first write fails on the fence and stops the entity with the other four still in its mailbox.
  const outcomes = await Promise.allSettled(
    [1, 2, 3, 4, 5].map((line) => ref.ask(new Append(line, `stale-${line}`), LogView, 30_000)),
  );
  const names = outcomes.map((o) => (o.status === "rejected" ? (o.reason as Error).name : "fulfilled"));
  assert.equal(names[0], "StaleShardOwnerError", `the fenced write: ${names}`);
  assert.ok(
    names.every((n) => n === "StaleShardOwnerError" || n === "ShardLeaseUnavailableError"),
    `every ask rejected with a typed error, none timed out: ${names}`,
  );
  assert.ok(names.includes("ShardLeaseUnavailableError"), `the queued ones got the barrier's error: ${names}`);
  assert.ok(node.sharding.stats.rejectedEnvelopes >= rejectedBefore + names.filter((n) => n !== names[0]).length);
  const check = await rawClient(pg.url, pg.schema);
  try {
    const rows = await check.query(
      "SELECT count(*)::int AS n FROM event_journal WHERE persistence_id = 'Log:log-stale'",
    );
    assert.equal(rows.rows[0].n, 1, "nothing after the transfer was committed");
  } finally {
    await check.end();
  }
});
