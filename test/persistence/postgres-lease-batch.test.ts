// Batched lease statements on the real PostgreSQL (issue 23): one statement renews or acquires many rows, skips a
// row a fenced write holds rather than waiting with every other row's lock held, and that row still gets the answer
// the single statement gives (after waiting for the write, as before).
import assert from "node:assert/strict";
import { after, test } from "node:test";
import type { ShardLeaseKey } from "../../src/persistence/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { freshPostgresStore, rawClient } from "./pg-fixture.ts";

const ctx = await freshPostgresStore("lease_batch", { applicationName: "movie-lease-batch" });
after(() => ctx.dispose());
const key = (shardId: number, type = "Batch"): ShardLeaseKey => ({ clusterName: "lb", entityType: type, shardId });

async function untilOf(shardId: number, type = "Batch"): Promise<number> {
  const r = await ctx.store.pool.query(
    "SELECT lease_until_epoch_ms FROM shard_lease WHERE cluster_name = 'lb' AND entity_type = $1 AND shard_id = $2",
    [type, shardId],
  );
  return Number(r.rows[0].lease_until_epoch_ms);
}

test("a renewal batch renews the free rows at once and waits only for the row a fenced write holds", async () => {
  const tokens = await ctx.store.acquireShardLeases([key(1), key(2), key(3)], "node-a", 5_000);
  assert.deepEqual(
    tokens.map((t) => t?.epoch),
    [1, 1, 1],
  );
  const writer = await rawClient(ctx.url, ctx.schema);
  try {
    // A fenced write in flight holds its lease row FOR SHARE until it commits.
    await writer.query("BEGIN");
    await writer.query("SELECT 1 FROM shard_lease WHERE cluster_name = 'lb' AND shard_id = 2 FOR SHARE");
    const before = await Promise.all([1, 2, 3].map((s) => untilOf(s)));
    let answered = false;
    const renewal = ctx.store
      .renewShardLeases(
        tokens.map((t) => t!),
        60_000,
      )
      .finally(() => {
        answered = true;
      });
    await eventually(async () => (await untilOf(1)) > before[0]! + 30_000 && (await untilOf(3)) > before[2]! + 30_000, {
      what: "rows 1 and 3 renewed by the batch while row 2 is held",
    });
    // The batch skipped row 2 and answered rows 1 and 3; row 2's own statement is sent after that, so it may not be
    // waiting yet when they show renewed: awaited, then exactly one session waits (no batch holding other rows).
    const lockWaiters = async (): Promise<number> =>
      (
        await writer.query(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'movie-lease-batch' AND wait_event_type = 'Lock'",
        )
      ).rows[0].n;
    let waiting = 0;
    await eventually(async () => (waiting = await lockWaiters()) > 0, {
      what: "row 2's single renewal waiting for the write's lock",
      describe: () => ({ waiting }),
    });
    assert.equal(waiting, 1, "only row 2's single renewal waits for the write");
    assert.equal(answered, false);
    assert.equal(await untilOf(2), before[1], "row 2 not renewed while the write holds it");
    await writer.query("COMMIT");
    const renewed = await renewal;
    assert.deepEqual(
      renewed.map((t) => t?.epoch),
      [1, 1, 1],
    );
    assert.ok((await untilOf(2)) > before[1]! + 30_000, "row 2 renewed once the write committed");
  } finally {
    await writer.end();
  }
});

test("an acquisition batch takes free, released and own rows in one statement, the rest answered alone", async () => {
  const type = "Acquire";
  await ctx.store.acquireShardLease(key(5, type), "node-b", 60_000);
  const released = (await ctx.store.acquireShardLease(key(6, type), "node-b", 60_000))!;
  await ctx.store.releaseShardLease(released);
  const keys = [0, 1, 2, 3, 4, 5, 6].map((s) => key(s, type));
  const tokens = await ctx.store.acquireShardLeases(keys, "node-a", 60_000);
  assert.deepEqual(
    tokens.map((t) => (t === null ? null : `${t.key.shardId}@${t.epoch}`)),
    ["0@1", "1@1", "2@1", "3@1", "4@1", null, "6@2"],
  );
  // A second batch for the same owner renews in place (same epoch), node-b's row still refused.
  const again = await ctx.store.acquireShardLeases(keys, "node-a", 60_000);
  assert.deepEqual(
    again.map((t) => t?.epoch ?? null),
    [1, 1, 1, 1, 1, null, 2],
  );
});

test("two nodes acquiring overlapping new rows at once: each row goes to exactly one", async () => {
  const type = "Race";
  const keys = Array.from({ length: 200 }, (_, s) => key(s, type));
  const reversed = [...keys].reverse();
  const [a, b] = await Promise.all([
    ctx.store.acquireShardLeases(keys, "node-a", 60_000),
    ctx.store.acquireShardLeases(reversed, "node-b", 60_000),
  ]);
  for (let s = 0; s < keys.length; s++) {
    const ta = a[s];
    const tb = b[keys.length - 1 - s];
    assert.ok((ta === null) !== (tb === null), `shard ${s}: exactly one owner (a ${ta?.owner}, b ${tb?.owner})`);
    assert.equal((ta ?? tb)!.epoch, 1);
  }
});
