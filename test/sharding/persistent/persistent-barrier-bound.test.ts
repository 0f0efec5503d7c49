// The retry barrier's flush meets the shard mailbox bound: deliveries that waited behind a lease held elsewhere are
// delivered in one drain when it frees, and past shardMailboxCapacity the rest are refused with
// ShardMailboxOverflowError (asks typed, counted), not queued without limit in the entity's mailbox.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { ShardMailboxOverflowError } from "../../../src/sharding/errors.ts";
import { eventually } from "../../fixtures/eventually.ts";
import { freshPostgresStore, rawClient } from "../../persistence/pg-fixture.ts";
import { FakeCluster } from "../fixtures/fake-cluster.ts";
import { Append, LogView, logMessages, ReadLog, startLogNode } from "./fixtures/sequence-log.ts";

const cluster = new FakeCluster(logMessages);
const pg = await freshPostgresStore("persistent_barrier_bound");
after(async () => {
  await cluster.shutdown();
  await pg.dispose();
});
const { node, type } = await startLogNode(cluster, "barrier-bound", pg.store, {
  shardCount: 2,
  leaseDuration: 1_200,
  leaseRenewInterval: 300,
  shardMailboxCapacity: 3,
});
await eventually(() => node.sharding.allocations(type).size === 2, { what: "a plan" });

test("a lease-barrier flush delivers up to shardMailboxCapacity into the shard and refuses the rest, typed", async () => {
  const id = "log-bound";
  const shard = node.sharding.shardOf(type, id);
  const client = await rawClient(pg.url, pg.schema);
  try {
    await client.query(
      `INSERT INTO shard_lease (cluster_name, entity_type, shard_id, owner, epoch, lease_until_epoch_ms)
         VALUES ('movie-cluster', 'Log', $1, 'movie.tcp://elsewhere@127.0.0.1:9#z', 7, movie_now_ms() + 600)`,
      [shard],
    );
  } finally {
    await client.end();
  }
  const ref = node.sharding.entityRefFor(type, id);
  const retries = node.sharding.stats.leaseRetries;
  const asks = Array.from({ length: 6 }, (_, line) => ref.ask(new Append(line, `bound-${line}`), LogView, 5_000));
  await eventually(() => node.sharding.stats.leaseRetries > retries, { what: "the deliveries to wait in the barrier" });
  const outcomes = await Promise.allSettled(asks);
  const accepted = outcomes.filter((o) => o.status === "fulfilled").length;
  const refused = outcomes.filter(
    (o) => o.status === "rejected" && o.reason instanceof ShardMailboxOverflowError && o.reason.shardId === shard,
  ).length;
  assert.equal(accepted, 3, "the drain put the bound's worth into the shard");
  assert.equal(refused, 3, "the rest were refused with the typed error");
  assert.equal(node.sharding.stats.shardMailboxOverflows, 3);
  assert.deepEqual((await ref.ask(new ReadLog(), LogView, 5_000)).lines, [0, 1, 2], "in order, none of the refused");
});
