// Persistent shards moving between two nodes of the fake cluster on the real PostgreSQL: handoff releases the old
// owner's lease after its entities drained, the new owner takes the next epoch, no accepted command is lost.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { eventually } from "../../fixtures/eventually.ts";
import { freshPostgresStore, rawClient } from "../../persistence/pg-fixture.ts";
import { FakeCluster, type Node } from "../fixtures/fake-cluster.ts";
import { Append, type LogCommand, LogView, logMessages, ReadLog, startLogNode } from "./fixtures/sequence-log.ts";

const cluster = new FakeCluster(logMessages);
const pg = await freshPostgresStore("persistent_handoff");
after(async () => {
  await cluster.shutdown();
  await pg.dispose();
});

const settings = { shardCount: 4, leaseDuration: 2_000, leaseRenewInterval: 500 };

async function start(name: string): Promise<Node> {
  return (await startLogNode(cluster, name, pg.store, settings)).node;
}

async function leaseRows(): Promise<Map<number, { owner: string; epoch: number; live: boolean }>> {
  const client = await rawClient(pg.url, pg.schema);
  try {
    const result = await client.query(
      "SELECT shard_id, owner, epoch, lease_until_epoch_ms > movie_now_ms() AS live FROM shard_lease WHERE entity_type = 'Log'",
    );
    return new Map(
      result.rows.map((r) => [Number(r.shard_id), { owner: r.owner, epoch: Number(r.epoch), live: r.live }]),
    );
  } finally {
    await client.end();
  }
}

/**
 * Appends line `seq` to `id`'s log until it is accepted, always with the same OperationId so that it applies once even
 * when an earlier attempt was applied but its answer lost (routing fails closed while ownership moves).
 */
async function appendLine(node: Node, id: string, seq: number): Promise<void> {
  const errors: string[] = [];
  await eventually(
    async () => {
      try {
        const ref = node.sharding.entityRefFor<LogCommand>("Log", id);
        await ref.ask(new Append(seq, `${id}-${seq}`), LogView, 5_000);
        return true;
      } catch (error) {
        errors.push(`${(error as Error).name}: ${(error as Error).message.slice(0, 60)}`);
        return false;
      }
    },
    {
      what: `line ${id}-${seq}`,
      timeoutMs: 20_000,
      describe: () => [
        errors.slice(-2),
        node.sharding.stats,
        [...node.sharding.allocations("Log")].map(([s, o]) => `${s}:${o.address.system}`),
      ],
    },
  );
}

test("a graceful leave under traffic moves every shard with its lease at epoch + 1, losing no command", async () => {
  const a = await start("ledger-a");
  const ids = Array.from({ length: 8 }, (_, i) => `acct-${i}`);
  await eventually(() => a.sharding.allocations("Log").size === 4, { what: "a plan on a" });
  for (const id of ids) await appendLine(a, id, 0);
  const before = await leaseRows();
  assert.equal(before.size, 4);
  assert.ok([...before.values()].every((r) => r.owner === a.address.toString() && r.epoch === 1 && r.live));

  // Every change to a lease row, as the database saw it: the release is an update by the old owner at its epoch
  // that ends the lease at once (lease_until_epoch_ms = 0), before the new owner's transfer.
  const audit = await rawClient(pg.url, pg.schema);
  try {
    await audit.query(`CREATE TABLE lease_audit (id BIGSERIAL PRIMARY KEY, shard_id INT, old_owner TEXT, old_epoch BIGINT,
        new_owner TEXT, new_epoch BIGINT, new_until BIGINT);
      CREATE FUNCTION lease_audit_row() RETURNS trigger AS $$ BEGIN
        INSERT INTO lease_audit (shard_id, old_owner, old_epoch, new_owner, new_epoch, new_until)
          VALUES (NEW.shard_id, OLD.owner, OLD.epoch, NEW.owner, NEW.epoch, NEW.lease_until_epoch_ms);
        RETURN NEW; END $$ LANGUAGE plpgsql;
      CREATE TRIGGER lease_audit AFTER UPDATE ON shard_lease FOR EACH ROW EXECUTE FUNCTION lease_audit_row();`);
  } finally {
    await audit.end();
  }
  const b = await start("ledger-b");
  // Traffic from b (a Leaving node routes nothing) while a leaves; each entity's lines are sent in order.
  let stop = false;
  const sent = new Map(ids.map((id) => [id, 1]));
  const traffic = Promise.all(
    ids.map(async (id) => {
      while (!stop) {
        const seq = sent.get(id)!;
        await appendLine(b, id, seq);
        sent.set(id, seq + 1);
      }
    }),
  );
  await eventually(() => b.sharding.allocations("Log").size === 4, { what: "a plan on b" });
  await eventually(() => [...sent.values()].every((n) => n >= 3), { what: "traffic to flow" });
  a.setStatus("Leaving");
  await eventually(() => [...a.sharding.allocations("Log").values()].every((owner) => owner.equals(b.address)), {
    what: "every shard on b",
    timeoutMs: 20_000,
    describe: () => [...a.sharding.allocations("Log")],
  });
  await eventually(() => a.guardsAllow(a), { what: "the departure guard to let a go" });
  stop = true;
  await traffic;

  const after = await leaseRows();
  for (const [shard, row] of after) {
    assert.equal(row.owner, b.address.toString(), `shard ${shard} owned by b`);
    assert.equal(row.epoch, 2, `shard ${shard} moved once, so exactly one epoch higher`);
  }
  const changes = await rawClient(pg.url, pg.schema);
  try {
    const rows = (
      await changes.query(
        "SELECT shard_id, old_owner, old_epoch, new_owner, new_epoch, new_until FROM lease_audit WHERE old_epoch <> new_epoch OR new_until = 0 ORDER BY id",
      )
    ).rows.map(
      (r) =>
        `${r.shard_id}:${r.old_owner === a.address.toString() ? "a" : "b"}@${r.old_epoch}->${r.new_owner === a.address.toString() ? "a" : "b"}@${r.new_epoch}${Number(r.new_until) === 0 ? " released" : ""}`,
    );
    for (const shard of after.keys()) {
      assert.deepEqual(
        rows.filter((r) => r.startsWith(`${shard}:`)),
        [`${shard}:a@1->a@1 released`, `${shard}:a@1->b@2`],
        `shard ${shard}: a released its lease, then b took it at epoch 2 (all changes: ${rows})`,
      );
    }
  } finally {
    await changes.end();
  }
  for (const id of ids) {
    const statement = await b.sharding.entityRefFor<LogCommand>("Log", id).ask(new ReadLog(), LogView, 5_000);
    const expected = Array.from({ length: sent.get(id)! }, (_, i) => i);
    assert.deepEqual(statement.lines, expected, `${id}: every accepted line once, in order`);
    assert.equal(statement.epoch, after.get(b.sharding.shardOf("Log", id))!.epoch);
  }
});
