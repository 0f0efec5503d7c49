// Group commit of durable-state saves and deletes against the real PostgreSQL (issue 23): coalesced writes with every
// per-row outcome, writes of one id never sharing a statement, a statement-level failure, a batch whose backend is
// terminated, and a lease transfer waiting for a batched fenced write. A trigger on durable_state holds chosen writes
// on advisory locks, so a test decides which statement is in flight and what queues behind it.
import assert from "node:assert/strict";
import { randomInt } from "node:crypto";
import { test } from "node:test";
import type pg from "pg";
import {
  ConcurrentWriteError,
  OperationConflictError,
  PersistenceConnectionError,
  type SaveStateRequest,
  type ShardLeaseToken,
  StaleShardOwnerError,
} from "../../src/persistence/index.ts";
import type { PostgresStore, PostgresStoreOptions } from "../../src/persistence/postgres/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { freshPostgresStore, rawClient } from "./pg-fixture.ts";

interface Held {
  store: PostgresStore;
  raw: pg.Client;
  holder: pg.Client;
  gateKey: number;
  holdKey: number;
  app: string;
  waitingOnLock: (n: number) => Promise<boolean>;
  dispose: () => Promise<void>;
}

/** A store whose state writes of id "gate" wait on `gateKey`, of ids "hold-…" on `holdKey`; "boom" is refused. */
async function heldStore(label: string, options: Partial<PostgresStoreOptions> = {}): Promise<Held> {
  const app = `movie-sgc-${label}`;
  const ctx = await freshPostgresStore(`sgc${label}`, {
    applicationName: app,
    groupCommit: { maxConcurrentBatches: 1 },
    resilience: { operationTimeoutMs: 60_000 },
    ...options,
  });
  const raw = await rawClient(ctx.url, ctx.schema);
  const holder = await rawClient(ctx.url, ctx.schema);
  const gateKey = randomInt(1, 2 ** 40);
  const holdKey = gateKey + 1;
  await raw.query(`CREATE OR REPLACE FUNCTION hold_state() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
      IF NEW.persistence_id = 'gate' THEN PERFORM pg_advisory_xact_lock(${gateKey}); END IF;
      IF NEW.persistence_id LIKE 'hold-%' THEN PERFORM pg_advisory_xact_lock(${holdKey}); END IF;
      IF NEW.persistence_id = 'boom' THEN RAISE EXCEPTION 'boom refused by the test trigger'; END IF;
      RETURN NEW; END $$`);
  await raw.query(`CREATE TRIGGER hold_state BEFORE INSERT OR UPDATE ON durable_state FOR EACH ROW
      EXECUTE FUNCTION hold_state()`);
  const waitingOnLock = async (n: number) =>
    (
      await raw.query(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND wait_event = 'advisory'",
        [app],
      )
    ).rows[0].n === n;
  return {
    store: ctx.store,
    raw,
    holder,
    gateKey,
    holdKey,
    app,
    waitingOnLock,
    dispose: async () => {
      await holder.end().catch(() => {});
      await raw.end().catch(() => {});
      await ctx.dispose();
    },
  };
}

const save = (
  persistenceId: string,
  expectedRevision: number,
  operationId: string,
  n: number,
  fence: ShardLeaseToken | null = null,
): SaveStateRequest => ({
  persistenceId,
  expectedRevision,
  operationId,
  manifest: "test.State",
  payload: JSON.stringify({ n }),
  fence,
});

/** Sends the gate write and waits until it blocks in the trigger; later writes queue behind it. */
async function closeGate(h: Held): Promise<{ gate: Promise<unknown> }> {
  await h.holder.query("SELECT pg_advisory_lock($1)", [h.gateKey]);
  const gate = h.store.saveState(save("gate", 0, "gate", 0));
  await eventually(() => h.waitingOnLock(1), {
    what: "the gate write to wait in its trigger",
    describe: () => h.store.stateGroupCommitStats,
  });
  return { gate };
}

const outcome = (r: PromiseSettledResult<unknown>) =>
  r.status === "fulfilled" ? r.value : (r.reason as Error).constructor.name;

test("state group commit: coalesced saves and deletes with mixed outcomes each get their own answer", async () => {
  const h = await heldStore("mixed");
  try {
    const { store } = h;
    const lease = (shardId: number, owner: string, ms: number) =>
      store.acquireShardLease({ clusterName: "c", entityType: "Mixed", shardId }, owner, ms);
    const live = (await lease(1, "node-a", 600_000))!;
    const stale = (await lease(2, "node-a", 600_000))!;
    await store.saveState(save("stale-dup", 0, "sd-1", 1, stale));
    assert.equal(await store.releaseShardLease(stale), true);
    assert.equal((await lease(2, "node-b", 600_000))?.epoch, stale.epoch + 1);
    const expired = (await lease(3, "node-a", 1))!;
    await eventually(
      async () =>
        (
          await h.raw.query(
            "SELECT lease_until_epoch_ms <= movie_now_ms() AS expired FROM shard_lease WHERE shard_id = 3",
          )
        ).rows[0].expired === true,
      { what: "the lease to expire on the database clock" },
    );
    await store.saveState(save("next", 0, "n-1", 1, live));
    await store.saveState(save("dup", 0, "dup-1", 1, live));
    await store.saveState(save("conflict", 0, "c-1", 1, live));
    await store.saveState(save("moved", 0, "m-1", 1, live));
    await store.saveState(save("moved", 1, "m-2", 2, live));
    await store.saveState(save("taken", 0, "t-1", 1, live));
    await store.saveState(save("ahead", 0, "a-1", 1, live));
    await store.saveState(save("doomed", 0, "d-1", 1, live));
    const before = store.stateGroupCommitStats;

    const { gate } = await closeGate(h);
    const requests: [string, () => Promise<unknown>][] = [
      ["success", () => store.saveState(save("ok", 0, "ok-1", 1))],
      ["fenced success", () => store.saveState(save("ok-fenced", 0, "of-1", 1, live))],
      ["success after an earlier save", () => store.saveState(save("next", 1, "n-2", 2, live))],
      [
        "delete",
        () => store.deleteState({ persistenceId: "doomed", expectedRevision: 1, operationId: "d-2", fence: live }),
      ],
      ["duplicate", () => store.saveState(save("dup", 0, "dup-1", 1, live))],
      ["operation conflict", () => store.saveState(save("conflict", 0, "c-1", 2, live))],
      ["concurrent write", () => store.saveState(save("moved", 1, "m-x", 9, live))],
      ["writer ahead of the row", () => store.saveState(save("ahead", 5, "a-y", 9, live))],
      ["insert over an existing row", () => store.saveState(save("taken", 0, "t-x", 9, live))],
      ["update of a missing row", () => store.saveState(save("missing", 3, "mi-1", 9, live))],
      ["stale owner", () => store.saveState(save("stale", 0, "s-1", 1, stale))],
      ["stale owner retrying a committed id", () => store.saveState(save("stale-dup", 0, "sd-1", 1, stale))],
      ["expired lease", () => store.saveState(save("expired", 0, "e-1", 1, expired))],
    ];
    const pending = requests.map(([, r]) => r());
    await eventually(() => store.stateGroupCommitStats.waiting === requests.length, {
      what: "every write to queue behind the gate",
      describe: () => store.stateGroupCommitStats,
    });
    await h.holder.query("SELECT pg_advisory_unlock($1)", [h.gateKey]);
    await gate;
    const settled = await Promise.allSettled(pending);
    const answers = Object.fromEntries(requests.map(([name], i) => [name, outcome(settled[i]!)]));
    assert.deepEqual(answers, {
      success: { revision: 1, duplicate: false },
      "fenced success": { revision: 1, duplicate: false },
      "success after an earlier save": { revision: 2, duplicate: false },
      delete: { revision: 2, duplicate: false },
      duplicate: { revision: 1, duplicate: true },
      "operation conflict": "OperationConflictError",
      "concurrent write": "ConcurrentWriteError",
      "writer ahead of the row": "ConcurrentWriteError",
      "insert over an existing row": "ConcurrentWriteError",
      "update of a missing row": "ConcurrentWriteError",
      "stale owner": "StaleShardOwnerError",
      "stale owner retrying a committed id": "StaleShardOwnerError",
      "expired lease": "StaleShardOwnerError",
    });
    const reason = (name: string) => (settled[requests.findIndex(([n]) => n === name)] as PromiseRejectedResult).reason;
    assert.ok(reason("operation conflict") instanceof OperationConflictError);
    assert.ok(reason("concurrent write") instanceof ConcurrentWriteError);
    assert.deepEqual(
      [reason("concurrent write").expectedRevision, reason("concurrent write").actualRevision],
      [1, 2],
      "ConcurrentWriteError(expected, actual)",
    );
    assert.equal(reason("writer ahead of the row").actualRevision, 1);
    assert.equal(reason("insert over an existing row").actualRevision, 1);
    assert.equal(reason("update of a missing row").actualRevision, 0);
    assert.equal((reason("stale owner") as StaleShardOwnerError).epoch, stale.epoch);
    assert.ok(reason("expired lease") instanceof StaleShardOwnerError);

    // All of them left in one statement, after the gate's.
    const after = store.stateGroupCommitStats;
    assert.equal(after.statements - before.statements, 2);
    assert.equal(after.batches - before.batches, 1);
    assert.equal(after.batchedItems - before.batchedItems, requests.length);
    // What is stored: each row exactly as its answer says.
    const stored: Record<string, unknown> = {};
    for (const pid of ["ok", "ok-fenced", "next", "doomed", "dup", "conflict", "moved", "taken", "missing", "stale"]) {
      const row = await store.loadState(pid);
      stored[pid] = row === null ? null : `${row.revision}:${row.deleted ? "deleted" : row.payload}`;
    }
    assert.deepEqual(stored, {
      ok: '1:{"n":1}',
      "ok-fenced": '1:{"n":1}',
      next: '2:{"n":2}',
      doomed: "2:deleted",
      dup: '1:{"n":1}',
      conflict: '1:{"n":1}',
      moved: '2:{"n":2}',
      taken: '1:{"n":1}',
      missing: null,
      stale: null,
    });
    // The operation ids of the written rows are recorded: a retry of each is a duplicate.
    assert.deepEqual(await store.saveState(save("next", 1, "n-2", 2, live)), { revision: 2, duplicate: true });
    assert.deepEqual(
      await store.deleteState({ persistenceId: "doomed", expectedRevision: 1, operationId: "d-2", fence: live }),
      { revision: 2, duplicate: true },
    );
  } finally {
    await h.dispose();
  }
});

test("state group commit: writes of one id never share a statement; racing writers, exactly one wins each", async () => {
  const h = await heldStore("race");
  try {
    const { store } = h;
    const rows = 12;
    for (let i = 0; i < rows; i++) await store.saveState(save(`r-${i}`, 0, `seed-${i}`, 0));
    const { gate } = await closeGate(h);
    const pending: Promise<unknown>[] = [];
    for (let i = 0; i < rows; i++) {
      for (const writer of ["a", "b"]) pending.push(store.saveState(save(`r-${i}`, 1, `${writer}-${i}`, 1)));
    }
    await eventually(() => store.stateGroupCommitStats.waiting === 2 * rows, { what: "the racing writes to queue" });
    await h.holder.query("SELECT pg_advisory_unlock($1)", [h.gateKey]);
    await gate;
    const settled = await Promise.allSettled(pending);
    for (let i = 0; i < rows; i++) {
      const pair = [settled[2 * i]!, settled[2 * i + 1]!];
      assert.equal(pair.filter((r) => r.status === "fulfilled").length, 1, `row r-${i}: ${pair.map(outcome)}`);
      const lost = pair.find((r) => r.status === "rejected") as PromiseRejectedResult;
      assert.ok(lost.reason instanceof ConcurrentWriteError, String(lost.reason));
      assert.equal(lost.reason.actualRevision, 2);
      assert.equal((await store.loadState(`r-${i}`))?.revision, 2);
    }
    const stats = store.stateGroupCommitStats;
    assert.equal(stats.batches, 2, "the first writer of each row in one batch, the second in the next");
    assert.equal(stats.largestBatch, rows);
  } finally {
    await h.dispose();
  }
});

test("state group commit: a statement-level failure of a batch does not fail its batch-mates", async () => {
  const h = await heldStore("boom");
  try {
    const { store } = h;
    const { gate } = await closeGate(h);
    const ids = ["a-1", "boom", "c-1", "d-1"];
    const pending = ids.map((pid) => store.saveState(save(pid, 0, `op-${pid}`, 1)));
    await eventually(() => store.stateGroupCommitStats.waiting === ids.length, { what: "the writes to queue" });
    await h.holder.query("SELECT pg_advisory_unlock($1)", [h.gateKey]);
    await gate;
    const settled = await Promise.allSettled(pending);
    assert.deepEqual(
      settled.map((r) => (r.status === "fulfilled" ? r.value : (r.reason as Error).message)),
      [
        { revision: 1, duplicate: false },
        "boom refused by the test trigger",
        { revision: 1, duplicate: false },
        { revision: 1, duplicate: false },
      ],
    );
    assert.equal(store.stateGroupCommitStats.batchedItems, ids.length);
    assert.equal(await store.loadState("boom"), null);
  } finally {
    await h.dispose();
  }
});

test("state group commit: pg_terminate_backend during a batch fails it; each write retries and commits once", async () => {
  const h = await heldStore("term", { resilience: { operationTimeoutMs: 60_000, maxRetries: 2 } });
  const lone = await heldStore("term0", { resilience: { operationTimeoutMs: 60_000, maxRetries: 0 } });
  try {
    const batchPid = async (x: Held) =>
      (
        await x.raw.query(
          "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event = 'advisory' AND query LIKE '%unnest%'",
          [x.app],
        )
      ).rows[0]?.pid as number | undefined;
    const run = async (x: Held) => {
      await x.holder.query("SELECT pg_advisory_lock($1)", [x.holdKey]);
      const { gate } = await closeGate(x);
      const ids = ["hold-a", "hold-b", "hold-c"];
      const pending = ids.map((pid) => x.store.saveState(save(pid, 0, `op-${pid}`, 1)));
      for (const p of pending) p.catch(() => {});
      await eventually(() => x.store.stateGroupCommitStats.waiting === ids.length, { what: "the writes to queue" });
      await x.holder.query("SELECT pg_advisory_unlock($1)", [x.gateKey]);
      await gate;
      await eventually(async () => (await batchPid(x)) !== undefined, {
        what: "the batch to wait in its trigger",
        describe: () => x.store.stateGroupCommitStats,
      });
      assert.equal(x.store.stateGroupCommitStats.batchedItems, ids.length);
      await x.raw.query("SELECT pg_terminate_backend($1)", [await batchPid(x)]);
      return { ids, pending };
    };

    const failed = await run(lone);
    for (const r of await Promise.allSettled(failed.pending)) {
      assert.equal(r.status, "rejected");
      assert.ok((r as PromiseRejectedResult).reason instanceof PersistenceConnectionError);
    }
    await lone.holder.query("SELECT pg_advisory_unlock($1)", [lone.holdKey]);
    for (const id of failed.ids) assert.equal(await lone.store.loadState(id), null, "nothing committed");
    assert.deepEqual(await lone.store.saveState(save("hold-a", 0, "op-hold-a", 1)), { revision: 1, duplicate: false });

    const retried = await run(h);
    await eventually(() => h.store.resilienceStats.retries >= retried.ids.length, {
      what: "each write to retry after the lost connection",
      describe: () => h.store.resilienceStats,
    });
    await h.holder.query("SELECT pg_advisory_unlock($1)", [h.holdKey]);
    assert.deepEqual(await Promise.all(retried.pending), [
      { revision: 1, duplicate: false },
      { revision: 1, duplicate: false },
      { revision: 1, duplicate: false },
    ]);
    for (const id of retried.ids) assert.equal((await h.store.loadState(id))?.revision, 1);
    assert.deepEqual(await h.store.saveState(save("hold-b", 0, "op-hold-b", 1)), { revision: 1, duplicate: true });
  } finally {
    await lone.dispose();
    await h.dispose();
  }
});

test("state group commit: a lease transfer waits for a batched fenced write to commit, then gets epoch + 1", async () => {
  const h = await heldStore("transfer");
  try {
    const { store } = h;
    const key = { clusterName: "c", entityType: "Held", shardId: 1 };
    const old = (await store.acquireShardLease(key, "node-a", 2_000))!;
    await h.holder.query("SELECT pg_advisory_lock($1)", [h.holdKey]);
    const { gate } = await closeGate(h);
    // Rows go in persistence-id order; the last waits in the trigger once every row's fence check has run.
    const ids = ["fenced-1", "fenced-2", "hold-3"];
    let written = 0;
    const pending = ids.map((pid) =>
      store.saveState(save(pid, 0, `w-${pid}`, 1, old)).finally(() => {
        written++;
      }),
    );
    await eventually(() => store.stateGroupCommitStats.waiting === ids.length, { what: "the fenced writes to queue" });
    await h.holder.query("SELECT pg_advisory_unlock($1)", [h.gateKey]);
    await gate;
    await eventually(() => h.waitingOnLock(1), { what: "the batch to wait in its trigger" });
    assert.equal(store.stateGroupCommitStats.batchedItems, ids.length);
    await eventually(
      async () =>
        (
          await h.raw.query(
            "SELECT lease_until_epoch_ms <= movie_now_ms() AS expired FROM shard_lease WHERE entity_type = 'Held'",
          )
        ).rows[0].expired === true,
      { what: "the lease to expire on the database clock" },
    );
    let transferred = false;
    const transfer = store.acquireShardLease(key, "node-b", 30_000).finally(() => {
      transferred = true;
    });
    await eventually(
      async () =>
        (
          await h.raw.query(
            "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND wait_event = 'transactionid' AND query LIKE '%INSERT INTO shard_lease%'",
            [h.app],
          )
        ).rows[0].n === 1,
      { what: "the transfer to wait on the batch's row lock" },
    );
    assert.equal(transferred, false);
    assert.equal(written, 0);
    await h.holder.query("SELECT pg_advisory_unlock($1)", [h.holdKey]);
    assert.deepEqual(await Promise.all(pending), [
      { revision: 1, duplicate: false },
      { revision: 1, duplicate: false },
      { revision: 1, duplicate: false },
    ]);
    const next = await transfer;
    assert.equal(next?.owner, "node-b");
    assert.equal(next?.epoch, old.epoch + 1);
    await assert.rejects(store.saveState(save("fenced-1", 1, "w2", 2, old)), StaleShardOwnerError);
  } finally {
    await h.dispose();
  }
});
