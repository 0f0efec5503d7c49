// The operator's partition procedure on the real PostgreSQL, over the fake cluster: while a member is unreachable
// routing fails closed and the owner drops its leases without releasing them; after the other side is downed and
// removed, the survivor takes the shard at epoch + 1 once the old lease expired, and the entity recovers there with
// every committed event.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { NoShardOwnerError } from "../../../src/sharding/errors.ts";
import { eventually } from "../../fixtures/eventually.ts";
import { freshPostgresStore, rawClient } from "../../persistence/pg-fixture.ts";
import { FakeCluster, type Node } from "../fixtures/fake-cluster.ts";
import { Append, type LogCommand, LogView, logMessages, ReadLog, startLogNode } from "./fixtures/sequence-log.ts";

const cluster = new FakeCluster(logMessages);
const pg = await freshPostgresStore("persistent_partition");
after(async () => {
  await cluster.shutdown();
  await pg.dispose();
});

async function start(name: string): Promise<Node> {
  // awaitCoordinator false: the partition's fail-closed routing shows as an immediate failure (by default a call
  // would wait for a coordinator, docs/protocol.md §8.6, and go through once the other side is downed).
  const settings = { shardCount: 4, leaseDuration: 1_500, leaseRenewInterval: 300, awaitCoordinator: false };
  return (await startLogNode(cluster, name, pg.store, settings)).node;
}

test("partition: fail closed, leases left to expire; after down, the survivor recovers the entity at epoch + 1", async () => {
  const a = await start("part-a");
  const b = await start("part-b");
  // Wait for the rebalance after b's join to settle: two shards each, the same plan on both nodes.
  const onA = (node: Node) => [...node.sharding.allocations("Log").values()].filter((o) => o.equals(a.address)).length;
  await eventually(
    () =>
      a.sharding.allocations("Log").size === 4 &&
      b.sharding.allocations("Log").size === 4 &&
      onA(a) === 2 &&
      onA(b) === 2 &&
      a.sharding.handoffsInProgress === 0,
    { what: "a settled plan" },
  );
  const id = ["log-1", "log-2", "log-3", "log-4", "log-5", "log-6", "log-7", "log-8"].find((candidate) =>
    b.sharding.ownerFor("Log", candidate)?.equals(a.address),
  )!;
  assert.ok(id !== undefined, "some log lives on a");
  const logOnB = b.sharding.entityRefFor<LogCommand>("Log", id);
  await logOnB.ask(new Append(1, "op-1"), LogView, 5_000);
  const committed = await logOnB.ask(new Append(2, "op-2"), LogView, 5_000);
  assert.deepEqual([committed.lines, committed.epoch], [[1, 2], 1]);

  // The partition: each side sees the other as unreachable, and nothing crosses.
  const aLosses = a.sharding.stats.leaseLosses;
  cluster.blackhole(a, b);
  cluster.blackhole(b, a);
  a.setUnreachable(b);
  b.setUnreachable(a);
  assert.throws(() => logOnB.tell(new Append(3, "op-x")), NoShardOwnerError, "routing fails closed");
  await eventually(() => a.sharding.stats.leaseLosses > aLosses, {
    what: "a to drop its leases",
    describe: () => [a.sharding.stats, aLosses, a.system.name, b.sharding.stats.leaseAcquisitions],
  });
  const shard = b.sharding.shardOf("Log", id);
  const client = await rawClient(pg.url, pg.schema);
  try {
    const row = await client.query(
      "SELECT owner, epoch, lease_until_epoch_ms > 0 AS unreleased FROM shard_lease WHERE entity_type = 'Log' AND shard_id = $1",
      [shard],
    );
    assert.deepEqual(row.rows[0], { owner: a.address.toString(), epoch: "1", unreleased: true }, "not released");

    // The operator downs a through the survivor; a is removed and b sees a converged cluster of one.
    a.setStatus("Removed");
    b.setUnreachable(a, false);
    await eventually(
      async () => {
        try {
          const view = await logOnB.ask(new ReadLog(), LogView, 5_000);
          return view.epoch === 2 && view.lines.join() === "1,2";
        } catch {
          return false;
        }
      },
      { what: "the log to recover on b at epoch 2", timeoutMs: 15_000 },
    );
    const after = await client.query(
      "SELECT owner, epoch FROM shard_lease WHERE entity_type = 'Log' AND shard_id = $1",
      [shard],
    );
    assert.deepEqual(after.rows[0], { owner: b.address.toString(), epoch: "2" });
  } finally {
    await client.end();
  }
  assert.deepEqual((await logOnB.ask(new Append(3, "op-3"), LogView, 5_000)).lines, [1, 2, 3]);
});
