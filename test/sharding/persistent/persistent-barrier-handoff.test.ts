// A handoff waits for the shard's retry queue on the old owner (docs/protocol.md §10): deliveries queued there while another
// owner held the lease are delivered in order on the old owner first, and only then does the shard move.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { NoRebalance } from "../../../src/sharding/index.ts";
import { eventually } from "../../fixtures/eventually.ts";
import { freshPostgresStore, rawClient } from "../../persistence/pg-fixture.ts";
import { FakeCluster, type Node } from "../fixtures/fake-cluster.ts";
import { Append, type LogCommand, LogView, logMessages, ReadLog, startLogNode } from "./fixtures/sequence-log.ts";

const cluster = new FakeCluster(logMessages);
const pg = await freshPostgresStore("persistent_barrier_handoff");
after(async () => {
  await cluster.shutdown();
  await pg.dispose();
});

// Window = leaseDuration + leaseRenewInterval = 4 s, well beyond the 1 s the lease is held elsewhere.
const settings = { shardCount: 1, rebalance: new NoRebalance(), leaseDuration: 3_000, leaseRenewInterval: 1_000 };

async function start(name: string): Promise<Node> {
  return (await startLogNode(cluster, name, pg.store, settings)).node;
}

test("a handoff waits for the old owner's retry queue: what was queued is delivered there, in order, then the shard moves", async () => {
  // The owner sorts last and the coordinator first, so that the owner's leave does not change the coordinator: a new
  // coordinator would find the queue's shard unauthorised and reject the queue (docs/protocol.md §10), which is not the
  // case under test.
  const owner = await start("queue-z");
  await eventually(() => owner.sharding.allocations("Log").size === 1, { what: "a plan on the first node" });
  const first = owner.sharding.planGeneration("Log");
  const coordinator = await start("queue-a");
  // The newcomer is the coordinator now; once its bootstrap republished the plan (NoRebalance: the shard stays put)
  // both nodes hold the same plan, authored by it.
  await eventually(
    () =>
      coordinator.sharding.planGeneration("Log") > first &&
      owner.sharding.planGeneration("Log") === coordinator.sharding.planGeneration("Log"),
    { what: "the coordinator's plan on both nodes" },
  );
  assert.equal(coordinator.sharding.ownerFor("Log", "log-1")?.toString(), owner.address.toString());

  // Another owner holds the shard's lease for one more second (database clock), so the deliveries queue on the owner.
  const client = await rawClient(pg.url, pg.schema);
  try {
    await client.query(
      `INSERT INTO shard_lease (cluster_name, entity_type, shard_id, owner, epoch, lease_until_epoch_ms)
         VALUES ('movie-cluster', 'Log', 0, 'movie.tcp://elsewhere@127.0.0.1:9#z', 7, movie_now_ms() + 1000)`,
    );
  } finally {
    await client.end();
  }
  const ref = owner.sharding.entityRefFor<LogCommand>("Log", "log-1");
  for (let line = 0; line < 10; line++) ref.tell(new Append(line, `line-${line}`));
  await eventually(() => owner.sharding.stats.leaseRetries > 0, { what: "the tells to wait in the owner's queue" });

  // The owner leaves while the queue waits: the handoff's drain there must wait for it.
  owner.setStatus("Leaving");
  await eventually(() => coordinator.sharding.ownerFor("Log", "log-1")?.equals(coordinator.address) === true, {
    what: "the shard on the coordinator",
    timeoutMs: 20_000,
  });
  const view = await coordinator.sharding.entityRefFor<LogCommand>("Log", "log-1").ask(new ReadLog(), LogView, 5_000);
  assert.deepEqual(view.lines, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], "every queued tell, once, in order");
  assert.equal(view.host, coordinator.address.address.toString());
  assert.equal(view.epoch, 9, "the old owner wrote at epoch 8 after the other owner's 7; the new one took over at 9");
  assert.equal(owner.sharding.stats.rejectedEnvelopes, 0, "nothing queued on the old owner was rejected");
});
