// Migration 8: every event row records the shard epoch it was written under and a write order, in the fenced
// statement itself, so that the chaos soak's checker (docs/soak.md) can verify epochs per shard in write order.
import assert from "node:assert/strict";
import { test } from "node:test";
import { freshPostgresStore, rawClient } from "./pg-fixture.ts";

const ev = (n: number) => ({ manifest: "test.Event", payload: JSON.stringify({ n }) });

test("postgres: each event row records its shard epoch and a write order on every append path", async () => {
  const ctx = await freshPostgresStore("epoch");
  const raw = await rawClient(ctx.url, ctx.schema);
  try {
    const key = { clusterName: "c", entityType: "T", shardId: 3 };
    const first = (await ctx.store.acquireShardLease(key, "node-a", 30_000))!;
    // The one-event hot path (group commit: one alone, then several at once) and the several-event function.
    await ctx.store.appendEvents({
      persistenceId: "T:a",
      expectedRevision: 0,
      operationId: "a1",
      events: [ev(1)],
      fence: first,
    });
    await Promise.all(
      ["b", "c", "d"].map((id) =>
        ctx.store.appendEvents({
          persistenceId: `T:${id}`,
          expectedRevision: 0,
          operationId: `${id}1`,
          events: [ev(1)],
          fence: first,
        }),
      ),
    );
    // A transfer: the lease expires (released) and another owner takes it under the next epoch.
    await ctx.store.releaseShardLease(first);
    const second = (await ctx.store.acquireShardLease(key, "node-b", 30_000))!;
    assert.equal(second.epoch, first.epoch + 1);
    await ctx.store.appendEvents({
      persistenceId: "T:a",
      expectedRevision: 1,
      operationId: "a2",
      events: [ev(2), ev(3)],
      fence: second,
    });
    // Unfenced writes (no cluster owner) record no epoch.
    await ctx.store.appendEvents({ persistenceId: "U:x", expectedRevision: 0, operationId: "x1", events: [ev(1)] });
    const e1 = first.epoch;
    const e2 = second.epoch;
    const rows = async () =>
      (
        await raw.query<{
          persistence_id: string;
          sequence_nr: string;
          shard_epoch: string | null;
          write_order: string;
        }>("SELECT persistence_id, sequence_nr, shard_epoch, write_order FROM event_journal ORDER BY write_order")
      ).rows;
    const before = (await rows()).map((r) => `${r.persistence_id}#${r.sequence_nr}@${r.shard_epoch ?? "-"}`);
    assert.deepEqual(before.slice(0, 1), [`T:a#1@${e1}`]);
    assert.deepEqual(before.slice(1, 4).sort(), [`T:b#1@${e1}`, `T:c#1@${e1}`, `T:d#1@${e1}`]);
    assert.deepEqual(before.slice(4), [`T:a#2@${e2}`, `T:a#3@${e2}`, "U:x#1@-"]);
    // The settle path: retention removed row `expected`, so the hot path's gap check fails and the settle function
    // writes the row (under the same fence).
    await ctx.store.saveSnapshot("T:a", { sequenceNr: 3, manifest: "s", payload: "{}" }, second);
    await ctx.store.deleteEventsTo("T:a", 3, second);
    await ctx.store.appendEvents({
      persistenceId: "T:a",
      expectedRevision: 3,
      operationId: "a4",
      events: [ev(4)],
      fence: second,
    });
    const after = await rows();
    assert.equal(
      `${after.at(-1)!.persistence_id}#${after.at(-1)!.sequence_nr}@${after.at(-1)!.shard_epoch}`,
      `T:a#4@${e2}`,
    );
    assert.ok(
      after.every((r, i) => i === 0 || Number(r.write_order) > Number(after[i - 1]!.write_order)),
      "write order strictly increases",
    );
  } finally {
    await raw.end();
    await ctx.dispose();
  }
});

test("postgres: a several-event append records its epoch on every row", async () => {
  const ctx = await freshPostgresStore("epochmany");
  const raw = await rawClient(ctx.url, ctx.schema);
  try {
    const lease = (await ctx.store.acquireShardLease({ clusterName: "c", entityType: "T", shardId: 1 }, "n", 30_000))!;
    await ctx.store.appendEvents({
      persistenceId: "T:m",
      expectedRevision: 0,
      operationId: "m1",
      events: [ev(1), ev(2), ev(3)],
      fence: lease,
    });
    const epochs = (await raw.query<{ e: string }>("SELECT shard_epoch AS e FROM event_journal ORDER BY sequence_nr"))
      .rows;
    assert.deepEqual(
      epochs.map((r) => Number(r.e)),
      [lease.epoch, lease.epoch, lease.epoch],
    );
  } finally {
    await raw.end();
    await ctx.dispose();
  }
});
