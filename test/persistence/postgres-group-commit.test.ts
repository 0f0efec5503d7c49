// Group commit of one-event appends against the real PostgreSQL: coalesced appends with mixed outcomes, a batch whose
// backend is terminated, a statement-level failure, the fence lock held by a batch, and the batch statement's plan.
// A trigger on event_journal holds chosen inserts on advisory locks, so a test decides which statement is in flight
// and what queues behind it.
import assert from "node:assert/strict";
import { randomInt } from "node:crypto";
import { test } from "node:test";
import type pg from "pg";
import {
  type AppendEventsRequest,
  ConcurrentWriteError,
  OperationConflictError,
  type OutboxRecord,
  outboxMessageId,
  PersistenceConfigurationError,
  PersistenceConnectionError,
  PersistenceOverloadedError,
  type ShardLeaseToken,
  StaleShardOwnerError,
} from "../../src/persistence/index.ts";
import { PostgresStore, type PostgresStoreOptions } from "../../src/persistence/postgres/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { freshPostgresStore, rawClient } from "./pg-fixture.ts";

const ev = (n: number) => ({ manifest: "test.Event", payload: JSON.stringify({ n }) });

interface Held {
  store: PostgresStore;
  raw: pg.Client;
  /** Holds the advisory locks the trigger waits on. */
  holder: pg.Client;
  /** Inserts of persistence id "gate" wait on this key, of ids starting "hold-" on `holdKey`. */
  gateKey: number;
  holdKey: number;
  app: string;
  /** True once `n` of this store's statements wait for an advisory lock. */
  waitingOnLock: (n: number) => Promise<boolean>;
  dispose: () => Promise<void>;
}

/**
 * A store whose appends wait in a trigger while the test holds the gate or hold lock. maxConcurrentBatches 1: while
 * the gate append is in flight, every later append queues, and they leave as one batch when the gate opens.
 */
async function heldStore(label: string, options: Partial<PostgresStoreOptions> = {}): Promise<Held> {
  const app = `movie-gc-${label}`;
  const ctx = await freshPostgresStore(`gc${label}`, {
    applicationName: app,
    groupCommit: { maxConcurrentBatches: 1 },
    resilience: { operationTimeoutMs: 60_000 },
    ...options,
  });
  const raw = await rawClient(ctx.url, ctx.schema);
  const holder = await rawClient(ctx.url, ctx.schema);
  const gateKey = randomInt(1, 2 ** 40);
  const holdKey = gateKey + 1;
  await raw.query(`CREATE OR REPLACE FUNCTION hold_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
      IF NEW.persistence_id = 'gate' THEN PERFORM pg_advisory_xact_lock(${gateKey}); END IF;
      IF NEW.persistence_id LIKE 'hold-%' THEN PERFORM pg_advisory_xact_lock(${holdKey}); END IF;
      IF NEW.persistence_id = 'boom' THEN RAISE EXCEPTION 'boom refused by the test trigger'; END IF;
      RETURN NEW; END $$`);
  await raw.query(`CREATE TRIGGER hold_insert BEFORE INSERT ON event_journal FOR EACH ROW
      EXECUTE FUNCTION hold_insert()`);
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

/**
 * Sends the gate append and waits until it blocks in the trigger; later appends queue behind it. Returns the gate's
 * append wrapped (an async function returning a promise would wait for it).
 */
async function closeGate(h: Held): Promise<{ gate: Promise<unknown> }> {
  await h.holder.query("SELECT pg_advisory_lock($1)", [h.gateKey]);
  const gate = h.store.appendEvents({
    persistenceId: "gate",
    expectedRevision: 0,
    operationId: "gate",
    events: [ev(0)],
  });
  await eventually(() => h.waitingOnLock(1), {
    what: "the gate append to wait in its trigger",
    describe: () => h.store.groupCommitStats,
  });
  return { gate };
}

const outcome = (r: PromiseSettledResult<unknown>) =>
  r.status === "fulfilled" ? r.value : (r.reason as Error).constructor.name;

test("group commit: coalesced appends with mixed outcomes each get their own answer", async () => {
  const h = await heldStore("mixed");
  try {
    const { store } = h;
    const lease = (shardId: number, owner: string, ms: number) =>
      store.acquireShardLease({ clusterName: "c", entityType: "Mixed", shardId }, owner, ms);
    const live = (await lease(1, "node-a", 600_000))!;
    // A stale token: released, then taken by another owner (epoch + 1).
    const stale = (await lease(2, "node-a", 600_000))!;
    await store.appendEvents({
      persistenceId: "stale-dup",
      expectedRevision: 0,
      operationId: "sd-1",
      events: [ev(1)],
      fence: stale,
    });
    assert.equal(await store.releaseShardLease(stale), true);
    assert.equal((await lease(2, "node-b", 600_000))?.epoch, stale.epoch + 1);
    // A stale epoch of the same owner: released, then taken again by node-a (epoch + 1).
    const oldEpoch = (await lease(4, "node-a", 600_000))!;
    assert.equal(await store.releaseShardLease(oldEpoch), true);
    assert.equal((await lease(4, "node-a", 600_000))?.epoch, oldEpoch.epoch + 1);
    // An expired token: same owner and epoch, lease run out on the database clock.
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
    const setup = (persistenceId: string, expectedRevision: number, operationId: string, n: number) =>
      store.appendEvents({ persistenceId, expectedRevision, operationId, events: [ev(n)], fence: live });
    await setup("dup", 0, "dup-1", 1);
    await setup("conflict", 0, "c-1", 1);
    await setup("moved", 0, "m-1", 1);
    await setup("moved", 1, "m-2", 2);
    await setup("gap", 0, "g-1", 1);
    await setup("next", 0, "n-1", 1);
    // Operation ids whose rows retention removed (kept in journal_operation), retried at the current revision.
    for (const pid of ["retained-dup", "retained-conflict", "retained-zero"]) {
      await setup(pid, 0, "r-1", 1);
      await setup(pid, 1, "r-2", 2);
      await store.saveSnapshot(pid, { sequenceNr: 1, manifest: "S", payload: "{}" }, live);
      assert.deepEqual(await store.deleteEventsTo(pid, 1, live), { deletedEvents: 1, throughSeq: 1 });
    }
    const before = store.groupCommitStats;

    const { gate } = await closeGate(h);
    const append = (
      persistenceId: string,
      expectedRevision: number,
      operationId: string,
      n: number,
      fence: ShardLeaseToken | null,
    ): AppendEventsRequest => ({ persistenceId, expectedRevision, operationId, events: [ev(n)], fence });
    const requests: [string, AppendEventsRequest][] = [
      ["success", append("ok", 0, "ok-1", 1, null)],
      ["fenced success", append("ok-fenced", 0, "of-1", 1, live)],
      ["success after an earlier append", append("next", 1, "n-2", 2, live)],
      ["duplicate", append("dup", 0, "dup-1", 1, live)],
      ["operation conflict", append("conflict", 0, "c-1", 2, live)],
      ["concurrent write", append("moved", 1, "m-x", 9, live)],
      ["writer ahead of the stream", append("gap", 3, "g-x", 9, live)],
      ["stale owner", append("stale", 0, "s-1", 1, stale)],
      ["stale owner retrying a committed id", append("stale-dup", 0, "sd-1", 1, stale)],
      ["expired lease", append("expired", 0, "e-1", 1, expired)],
      ["stale epoch of the same owner", append("old-epoch", 0, "oe-1", 1, oldEpoch)],
      ["retry of an id moved by retention", append("retained-dup", 2, "r-1", 1, live)],
      ["id moved by retention, other content", append("retained-conflict", 2, "r-1", 9, live)],
      ["writer at revision 0 after retention", append("retained-zero", 0, "rz-1", 1, live)],
    ];
    const pending = requests.map(([, r]) => store.appendEvents(r));
    await eventually(() => store.groupCommitStats.waiting === requests.length, {
      what: "every append to queue behind the gate",
      describe: () => store.groupCommitStats,
    });
    await h.holder.query("SELECT pg_advisory_unlock($1)", [h.gateKey]);
    await gate;
    const settled = await Promise.allSettled(pending);
    const answers = Object.fromEntries(requests.map(([name], i) => [name, outcome(settled[i]!)]));
    assert.deepEqual(answers, {
      success: { revision: 1, duplicate: false },
      "fenced success": { revision: 1, duplicate: false },
      "success after an earlier append": { revision: 2, duplicate: false },
      duplicate: { revision: 1, duplicate: true },
      "operation conflict": "OperationConflictError",
      "concurrent write": "ConcurrentWriteError",
      "writer ahead of the stream": "ConcurrentWriteError",
      "stale owner": "StaleShardOwnerError",
      "stale owner retrying a committed id": "StaleShardOwnerError",
      "expired lease": "StaleShardOwnerError",
      "stale epoch of the same owner": "StaleShardOwnerError",
      "retry of an id moved by retention": { revision: 1, duplicate: true },
      "id moved by retention, other content": "OperationConflictError",
      "writer at revision 0 after retention": "ConcurrentWriteError",
    });
    const reason = (name: string) => (settled[requests.findIndex(([n]) => n === name)] as PromiseRejectedResult).reason;
    assert.ok(reason("operation conflict") instanceof OperationConflictError);
    assert.deepEqual(
      [reason("concurrent write").expectedRevision, reason("concurrent write").actualRevision],
      [1, 2],
      "ConcurrentWriteError(expected, actual)",
    );
    assert.ok(reason("concurrent write") instanceof ConcurrentWriteError);
    assert.equal(reason("writer ahead of the stream").actualRevision, 1);
    assert.equal((reason("stale owner") as StaleShardOwnerError).epoch, stale.epoch);
    assert.equal((reason("expired lease") as StaleShardOwnerError).epoch, expired.epoch);

    // All of them left in one statement, after the gate's.
    const after = store.groupCommitStats;
    assert.equal(after.statements - before.statements, 2);
    assert.equal(after.batches - before.batches, 1);
    assert.equal(after.batchedItems - before.batchedItems, requests.length);
    // What is stored: each stream exactly as its answer says.
    const revisions: Record<string, number> = {};
    for (const pid of [
      "ok",
      "ok-fenced",
      "next",
      "dup",
      "conflict",
      "moved",
      "gap",
      "stale",
      "stale-dup",
      "expired",
      "old-epoch",
      "retained-dup",
      "retained-conflict",
      "retained-zero",
    ])
      revisions[pid] = await store.loadRevision(pid);
    assert.deepEqual(revisions, {
      ok: 1,
      "ok-fenced": 1,
      next: 2,
      dup: 1,
      conflict: 1,
      moved: 2,
      gap: 1,
      stale: 0,
      "stale-dup": 1,
      expired: 0,
      "old-epoch": 0,
      "retained-dup": 2,
      "retained-conflict": 2,
      "retained-zero": 2,
    });
    assert.deepEqual(
      (await store.loadEvents("retained-zero")).map((e) => e.sequenceNr),
      [2],
      "no sequence number below the snapshot is written again",
    );
    assert.deepEqual(
      (await store.loadEvents("conflict")).map((e) => e.payload),
      [JSON.stringify({ n: 1 })],
    );
  } finally {
    await h.dispose();
  }
});

test("group commit: appends with outbox messages share the batch; each writes its messages exactly when it writes its event", async () => {
  const h = await heldStore("outbox");
  try {
    const { store } = h;
    const lease = (shardId: number, owner: string) =>
      store.acquireShardLease({ clusterName: "c", entityType: "Outbox", shardId }, owner, 600_000);
    const live = (await lease(1, "node-a"))!;
    const stale = (await lease(2, "node-a"))!;
    assert.equal(await store.releaseShardLease(stale), true);
    assert.equal((await lease(2, "node-b"))?.epoch, stale.epoch + 1);
    const messages = (pid: string, op: string, n: number): OutboxRecord[] =>
      Array.from({ length: n }, (_, i) => ({
        messageId: outboxMessageId(pid, op, i),
        destination: { kind: "entity", entityType: "Stock", entityId: `${pid}-${i}` },
        manifest: "test.Reserve",
        payload: JSON.stringify({ pid, i }),
      }));
    const append = (
      persistenceId: string,
      expectedRevision: number,
      operationId: string,
      n: number,
      outbox: number,
      fence: ShardLeaseToken | null = live,
    ): AppendEventsRequest => ({
      persistenceId,
      expectedRevision,
      operationId,
      events: [ev(n)],
      fence,
      outbox: messages(persistenceId, operationId, outbox),
    });
    await store.appendEvents(append("dup", 0, "dup-1", 1, 1));
    await store.appendEvents(append("conflict", 0, "c-1", 1, 1));
    await store.appendEvents(append("moved", 0, "m-1", 1, 0));
    await store.appendEvents(append("moved", 1, "m-2", 2, 0));
    // Row 2 of "retained" removed by retention: the batch's gap check cannot vouch for revision 2, so that append
    // is answered (and written, with its message) on the unbatched path.
    await store.appendEvents(append("retained", 0, "r-1", 1, 0));
    await store.appendEvents(append("retained", 1, "r-2", 2, 0));
    await store.saveSnapshot("retained", { sequenceNr: 2, manifest: "S", payload: "{}" }, live);
    assert.deepEqual(await store.deleteEventsTo("retained", 2, live), { deletedEvents: 2, throughSeq: 2 });
    const rowsBefore = Number((await h.raw.query("SELECT count(*) AS n FROM persistence_outbox")).rows[0].n);
    assert.equal(rowsBefore, 2);
    const before = store.groupCommitStats;

    const { gate } = await closeGate(h);
    const requests: [string, AppendEventsRequest][] = [
      ["two messages", append("ok", 0, "ok-1", 1, 2)],
      ["unfenced, one message", append("ok-unfenced", 0, "ou-1", 1, 1, null)],
      ["no message", append("plain", 0, "p-1", 1, 0)],
      ["duplicate", append("dup", 0, "dup-1", 1, 1)],
      ["operation conflict", append("conflict", 0, "c-1", 2, 1)],
      ["concurrent write", append("moved", 1, "m-x", 9, 1)],
      ["stale owner", append("stale", 0, "s-1", 1, 1, stale)],
      ["after retention", append("retained", 2, "r-3", 3, 1)],
    ];
    const pending = requests.map(([, r]) => store.appendEvents(r));
    await eventually(() => store.groupCommitStats.waiting === requests.length, {
      what: "every append to queue behind the gate",
      describe: () => store.groupCommitStats,
    });
    await h.holder.query("SELECT pg_advisory_unlock($1)", [h.gateKey]);
    await gate;
    const settled = await Promise.allSettled(pending);
    assert.deepEqual(Object.fromEntries(requests.map(([name], i) => [name, outcome(settled[i]!)])), {
      "two messages": { revision: 1, duplicate: false },
      "unfenced, one message": { revision: 1, duplicate: false },
      "no message": { revision: 1, duplicate: false },
      duplicate: { revision: 1, duplicate: true },
      "operation conflict": "OperationConflictError",
      "concurrent write": "ConcurrentWriteError",
      "stale owner": "StaleShardOwnerError",
      "after retention": { revision: 3, duplicate: false },
    });
    // Every append, with or without messages, left in the one statement after the gate's.
    const after = store.groupCommitStats;
    assert.equal(after.statements - before.statements, 2);
    assert.equal(after.batchedItems - before.batchedItems, requests.length);
    // The outbox holds exactly the messages of the appends that wrote, in their order, with their operation ids.
    const rows = await h.raw.query(
      "SELECT persistence_id, operation_id, message_id, destination FROM persistence_outbox ORDER BY outbox_offset",
    );
    const expected = [
      ["dup", "dup-1", 0],
      ["conflict", "c-1", 0],
      ["ok", "ok-1", 0],
      ["ok", "ok-1", 1],
      ["ok-unfenced", "ou-1", 0],
      ["retained", "r-3", 0],
    ] as const;
    const sortedTail = (list: unknown[][]) => [...list.slice(0, 2), ...list.slice(2).sort()];
    assert.deepEqual(
      sortedTail(rows.rows.map((r) => [r.persistence_id, r.operation_id, r.message_id])),
      sortedTail(expected.map(([pid, op, i]) => [pid, op, outboxMessageId(pid, op, i)])),
    );
    // Within one append its messages keep their order.
    const ok = rows.rows.filter((r) => r.persistence_id === "ok").map((r) => JSON.parse(r.destination).entityId);
    assert.deepEqual(ok, ["ok-0", "ok-1"]);
  } finally {
    await h.dispose();
  }
});

test("group commit: appends of one persistence id never share a batch; racing writers, exactly one wins each", async () => {
  const h = await heldStore("race");
  try {
    const { store } = h;
    const streams = 16;
    for (let i = 0; i < streams; i++)
      await store.appendEvents({
        persistenceId: `r-${i}`,
        expectedRevision: 0,
        operationId: `seed-${i}`,
        events: [ev(0)],
      });
    const { gate } = await closeGate(h);
    const pending: Promise<unknown>[] = [];
    for (let i = 0; i < streams; i++) {
      for (const writer of ["a", "b"]) {
        pending.push(
          store.appendEvents({
            persistenceId: `r-${i}`,
            expectedRevision: 1,
            operationId: `${writer}-${i}`,
            events: [ev(1)],
          }),
        );
      }
    }
    await eventually(() => store.groupCommitStats.waiting === 2 * streams, { what: "the racing appends to queue" });
    await h.holder.query("SELECT pg_advisory_unlock($1)", [h.gateKey]);
    await gate;
    const settled = await Promise.allSettled(pending);
    for (let i = 0; i < streams; i++) {
      const pair = [settled[2 * i]!, settled[2 * i + 1]!];
      assert.equal(pair.filter((r) => r.status === "fulfilled").length, 1, `stream r-${i}: ${pair.map(outcome)}`);
      const lost = pair.find((r) => r.status === "rejected") as PromiseRejectedResult;
      assert.ok(lost.reason instanceof ConcurrentWriteError, String(lost.reason));
      assert.equal(lost.reason.actualRevision, 2);
      assert.equal(await store.loadRevision(`r-${i}`), 2);
    }
    // The first writer of each stream went in one batch, the second in the next.
    const stats = store.groupCommitStats;
    assert.equal(stats.batches, 2);
    assert.equal(stats.largestBatch, streams);
  } finally {
    await h.dispose();
  }
});

test("group commit: a statement-level failure of a batch does not fail its batch-mates", async () => {
  const h = await heldStore("boom");
  try {
    const { store } = h;
    const { gate } = await closeGate(h);
    const ids = ["a-1", "boom", "c-1", "d-1"];
    const pending = ids.map((persistenceId) =>
      store.appendEvents({ persistenceId, expectedRevision: 0, operationId: `op-${persistenceId}`, events: [ev(1)] }),
    );
    await eventually(() => store.groupCommitStats.waiting === ids.length, { what: "the appends to queue" });
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
    assert.equal(store.groupCommitStats.batchedItems, ids.length);
    assert.equal(await store.loadRevision("boom"), 0);
  } finally {
    await h.dispose();
  }
});

test("group commit: past maxWaiting an append is refused at once (typed, counted, nothing written); a retry succeeds", async () => {
  const h = await heldStore("full", { groupCommit: { maxConcurrentBatches: 1, maxWaiting: 2 } });
  try {
    const { store } = h;
    const { gate } = await closeGate(h);
    const append = (persistenceId: string) =>
      store.appendEvents({ persistenceId, expectedRevision: 0, operationId: `op-${persistenceId}`, events: [ev(1)] });
    const queued = [append("q-1"), append("q-2")];
    await eventually(() => store.groupCommitStats.waiting === 2, { what: "two appends to queue behind the gate" });
    await assert.rejects(append("refused"), PersistenceOverloadedError);
    assert.equal(store.groupCommitStats.overloaded, 1);
    assert.equal(store.groupCommitStats.waiting, 2);
    assert.equal(store.circuitMode, "closed", "an overload is not a database failure");
    await h.holder.query("SELECT pg_advisory_unlock($1)", [h.gateKey]);
    await gate;
    assert.deepEqual(await Promise.all(queued), [
      { revision: 1, duplicate: false },
      { revision: 1, duplicate: false },
    ]);
    assert.equal(await store.loadRevision("refused"), 0, "the refused append wrote nothing");
    assert.deepEqual(await append("refused"), { revision: 1, duplicate: false });
  } finally {
    await h.dispose();
  }
});

test("group commit: pg_terminate_backend during a batch fails it; each append retries and commits once", async () => {
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
      const pending = ids.map((persistenceId) =>
        x.store.appendEvents({
          persistenceId,
          expectedRevision: 0,
          operationId: `op-${persistenceId}`,
          events: [ev(1)],
        }),
      );
      for (const p of pending) p.catch(() => {});
      await eventually(() => x.store.groupCommitStats.waiting === ids.length, { what: "the appends to queue" });
      await x.holder.query("SELECT pg_advisory_unlock($1)", [x.gateKey]);
      await gate;
      await eventually(async () => (await batchPid(x)) !== undefined, {
        what: "the batch to wait in its trigger",
        describe: () => x.store.groupCommitStats,
      });
      assert.equal(x.store.groupCommitStats.batchedItems, ids.length);
      await x.raw.query("SELECT pg_terminate_backend($1)", [await batchPid(x)]);
      return { ids, pending };
    };

    // Without retries: every append of the batch fails with the lost connection, and nothing was committed.
    const failed = await run(lone);
    for (const r of await Promise.allSettled(failed.pending)) {
      assert.equal(r.status, "rejected");
      assert.ok((r as PromiseRejectedResult).reason instanceof PersistenceConnectionError);
    }
    await lone.holder.query("SELECT pg_advisory_unlock($1)", [lone.holdKey]);
    for (const id of failed.ids) assert.equal(await lone.store.loadRevision(id), 0);
    // The next request succeeds.
    assert.deepEqual(
      await lone.store.appendEvents({
        persistenceId: "hold-a",
        expectedRevision: 0,
        operationId: "op-hold-a",
        events: [ev(1)],
      }),
      { revision: 1, duplicate: false },
    );

    // With retries: each append retries on its own (again as a batch) and commits exactly once.
    const retried = await run(h);
    await eventually(() => h.store.resilienceStats.retries >= retried.ids.length, {
      what: "each append to retry after the lost connection",
      describe: () => h.store.resilienceStats,
    });
    await h.holder.query("SELECT pg_advisory_unlock($1)", [h.holdKey]);
    assert.deepEqual(await Promise.all(retried.pending), [
      { revision: 1, duplicate: false },
      { revision: 1, duplicate: false },
      { revision: 1, duplicate: false },
    ]);
    for (const id of retried.ids) assert.equal((await h.store.loadEvents(id)).length, 1);
    // Retried once more with the same id: the original result, marked duplicate.
    assert.deepEqual(
      await h.store.appendEvents({
        persistenceId: "hold-b",
        expectedRevision: 0,
        operationId: "op-hold-b",
        events: [ev(1)],
      }),
      { revision: 1, duplicate: true },
    );
  } finally {
    await lone.dispose();
    await h.dispose();
  }
});

test("group commit: a lease transfer waits for a batched fenced write to commit, then gets epoch + 1", async () => {
  const h = await heldStore("transfer");
  try {
    const { store } = h;
    const key = { clusterName: "c", entityType: "Held", shardId: 1 };
    // Long enough for the batch to lock the row before it runs out, short enough to wait for.
    const old = (await store.acquireShardLease(key, "node-a", 2_000))!;
    await h.holder.query("SELECT pg_advisory_lock($1)", [h.holdKey]);
    const { gate } = await closeGate(h);
    // Only the last row of the batch (rows go in persistence-id order) waits in the trigger: a row's fence check runs
    // just before its insert, so every row has then passed its check and holds the lease row FOR SHARE.
    const ids = ["fenced-1", "fenced-2", "hold-3"];
    let appended = 0;
    const pending = ids.map((persistenceId) =>
      store
        .appendEvents({
          persistenceId,
          expectedRevision: 0,
          operationId: `w-${persistenceId}`,
          events: [ev(1)],
          fence: old,
        })
        .finally(() => {
          appended++;
        }),
    );
    await eventually(() => store.groupCommitStats.waiting === ids.length, { what: "the fenced appends to queue" });
    await h.holder.query("SELECT pg_advisory_unlock($1)", [h.gateKey]);
    await gate;
    // The batch has locked the lease row FOR SHARE (its fence checks ran) and waits in its trigger.
    await eventually(() => h.waitingOnLock(1), { what: "the batch to wait in its trigger" });
    assert.equal(store.groupCommitStats.batchedItems, ids.length);
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
    assert.equal(appended, 0);
    await h.holder.query("SELECT pg_advisory_unlock($1)", [h.holdKey]);
    assert.deepEqual(await Promise.all(pending), [
      { revision: 1, duplicate: false },
      { revision: 1, duplicate: false },
      { revision: 1, duplicate: false },
    ]);
    const next = await transfer;
    assert.equal(next?.owner, "node-b");
    assert.equal(next?.epoch, old.epoch + 1);
    await assert.rejects(
      store.appendEvents({
        persistenceId: "hold-1",
        expectedRevision: 1,
        operationId: "w2",
        events: [ev(2)],
        fence: old,
      }),
      StaleShardOwnerError,
    );
  } finally {
    await h.dispose();
  }
});

test("group commit: switched off, every append is its own statement; bad bounds are a configuration error", async () => {
  const ctx = await freshPostgresStore("gcoff", { groupCommit: false });
  try {
    const results = await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        ctx.store.appendEvents({
          persistenceId: `off-${i}`,
          expectedRevision: 0,
          operationId: `o-${i}`,
          events: [ev(i)],
        }),
      ),
    );
    assert.ok(results.every((r) => r.revision === 1 && !r.duplicate));
    assert.deepEqual(ctx.store.groupCommitStats, {
      statements: 8,
      batches: 0,
      batchedItems: 0,
      largestBatch: 0,
      overloaded: 0,
      waiting: 0,
    });
    await assert.rejects(
      PostgresStore.connect({ connectionUri: ctx.url, schema: ctx.schema, groupCommit: { maxBatchSize: 0 } }),
      PersistenceConfigurationError,
    );
  } finally {
    await ctx.dispose();
  }
});

test("group commit: the batch statement runs on a generic plan, never re-planned per execution", async () => {
  // One connection, so the prepared statement and its plan counters live in the session the test then asks.
  const ctx = await freshPostgresStore("gcplan", { poolSize: 1, groupCommit: { maxConcurrentBatches: 1 } });
  try {
    const before = ctx.store.groupCommitStats;
    // Each round: the first append leaves alone, the three behind it share one batch statement. PostgreSQL's default
    // plan choice (auto) makes five custom plans before it may switch, so eight rounds show which way it went.
    for (let round = 0; round < 8; round++) {
      await Promise.all(
        Array.from({ length: 4 }, (_, w) =>
          ctx.store.appendEvents({
            persistenceId: `plan-${w}`,
            expectedRevision: round,
            operationId: `p-${w}-${round}`,
            events: [ev(round)],
          }),
        ),
      );
    }
    assert.equal(ctx.store.groupCommitStats.batches - before.batches, 8);
    const plans = await ctx.store.pool.query(
      "SELECT generic_plans::int AS generic, custom_plans::int AS custom FROM pg_prepared_statements WHERE name = $1",
      ["movie_append_batch"],
    );
    assert.deepEqual(plans.rows, [{ generic: 8, custom: 0 }]);
  } finally {
    await ctx.dispose();
  }
});
