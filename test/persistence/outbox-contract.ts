// The outbox's conformance suite (memory, SQLite, PostgreSQL): rows written in the write's transaction and only by a
// write that commits (a stale fence, a revision conflict or a duplicate writes none), exclusive claims with a
// visibility timeout, retry after a backoff, parking, completion and the purge of delivered rows.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  type ClaimedOutboxRow,
  ConcurrentWriteError,
  InvalidPersistenceRequestError,
  type OutboxRecord,
  outboxMessageId,
  type PersistenceStore,
  type ShardLeaseKey,
  type ShardLeaseToken,
  StaleShardOwnerError,
} from "../../src/persistence/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import type { StoreFactory } from "./store-contract.ts";

let counter = 0;
const ev = (n: number) => ({ manifest: "test.Event", payload: JSON.stringify({ n }) });
const message = (pid: string, op: string, i: number, to = "Stock"): OutboxRecord => ({
  messageId: outboxMessageId(pid, op, i),
  destination: { kind: "entity", entityType: to, entityId: `sku-${i}` },
  manifest: "json",
  payload: JSON.stringify({ reserve: i }),
});

/** Claims until nothing is left, as owner `owner` (each claim's rows are returned in offset order). */
async function claimAll(store: PersistenceStore, owner: string, limit = 100): Promise<ClaimedOutboxRow[]> {
  const all: ClaimedOutboxRow[] = [];
  for (;;) {
    const rows = await store.claimOutbox({ owner, limit, leaseMs: 60_000 });
    all.push(...rows);
    if (rows.length < limit) return all;
  }
}

/** Marks every claimable row delivered, so a test starts from an empty backlog. */
async function drain(store: PersistenceStore): Promise<void> {
  const rows = await claimAll(store, "drain");
  if (rows.length > 0) await store.completeOutbox(rows.map((r) => r.offset));
}

export function outboxContract(backend: string, factory: StoreFactory): void {
  describe(`outbox: ${backend}`, () => {
    let store: PersistenceStore;
    let dispose: () => Promise<void>;
    before(async () => {
      ({ store, dispose } = await factory());
    });
    after(async () => {
      await dispose();
    });

    test("an append writes its messages in its transaction; a duplicate or a conflicting write adds none", async () => {
      await drain(store);
      const pid = `Order:o${++counter}`;
      const outbox = [message(pid, "op1", 0), message(pid, "op1", 1, "Mail")];
      const first = await store.appendEvents({
        persistenceId: pid,
        expectedRevision: 0,
        operationId: "op1",
        events: [ev(1)],
        outbox,
      });
      assert.deepEqual(first, { revision: 1, duplicate: false });
      // The retry of the same operation is a duplicate: its messages were written by the original.
      const retry = await store.appendEvents({
        persistenceId: pid,
        expectedRevision: 0,
        operationId: "op1",
        events: [ev(1)],
        outbox,
      });
      assert.equal(retry.duplicate, true);
      // A write at a stale revision fails and writes no messages.
      await assert.rejects(
        store.appendEvents({
          persistenceId: pid,
          expectedRevision: 0,
          operationId: "op2",
          events: [ev(2)],
          outbox: [message(pid, "op2", 0)],
        }),
        ConcurrentWriteError,
      );
      const rows = await claimAll(store, "reader");
      assert.deepEqual(
        rows.map((r) => [r.messageId, r.persistenceId, r.destination, JSON.parse(r.payload), r.attempts]),
        [
          [outbox[0]!.messageId, pid, outbox[0]!.destination, { reserve: 0 }, 1],
          [outbox[1]!.messageId, pid, { kind: "entity", entityType: "Mail", entityId: "sku-1" }, { reserve: 1 }, 1],
        ],
      );
      assert.ok(rows[0]!.offset < rows[1]!.offset);
      assert.equal(await store.completeOutbox(rows.map((r) => r.offset)), 2);
    });

    test("an empty append and a durable-state save or delete carry messages too", async () => {
      await drain(store);
      const pid = `Order:o${++counter}`;
      await store.appendEvents({
        persistenceId: pid,
        expectedRevision: 0,
        operationId: "only-send",
        events: [],
        outbox: [message(pid, "only-send", 0)],
      });
      const sid = `Cart:c${counter}`;
      await store.saveState({
        persistenceId: sid,
        expectedRevision: 0,
        operationId: "s1",
        manifest: "json",
        payload: "{}",
        outbox: [message(sid, "s1", 0)],
      });
      await store.deleteState({
        persistenceId: sid,
        expectedRevision: 1,
        operationId: "s2",
        outbox: [message(sid, "s2", 0)],
      });
      await assert.rejects(
        store.saveState({
          persistenceId: sid,
          expectedRevision: 0,
          operationId: "s3",
          manifest: "json",
          payload: "{}",
          outbox: [message(sid, "s3", 0)],
        }),
        ConcurrentWriteError,
      );
      const rows = await claimAll(store, "reader");
      assert.deepEqual(
        rows.map((r) => r.messageId),
        [outboxMessageId(pid, "only-send", 0), outboxMessageId(sid, "s1", 0), outboxMessageId(sid, "s2", 0)],
      );
      await store.completeOutbox(rows.map((r) => r.offset));
    });

    test("a write under a stale fence writes neither its events nor its messages", async () => {
      await drain(store);
      const key: ShardLeaseKey = { clusterName: `outbox-${counter}`, entityType: "Order", shardId: ++counter };
      const old = (await store.acquireShardLease(key, "node-a", 100)) as ShardLeaseToken;
      assert.ok(old !== null);
      // The lease expires and moves to node-b (epoch 2): node-a is now a stale owner.
      let current: ShardLeaseToken | null = null;
      await eventually(async () => (current = await store.acquireShardLease(key, "node-b", 60_000)) !== null, {
        what: "node-b takes the expired lease",
      });
      assert.equal(current!.epoch, old.epoch + 1);
      const pid = `Order:fenced${counter}`;
      for (const events of [[ev(1)], [ev(1), ev(2)]]) {
        await assert.rejects(
          store.appendEvents({
            persistenceId: pid,
            expectedRevision: 0,
            operationId: `stale-${events.length}`,
            events,
            fence: old,
            outbox: [message(pid, "stale", events.length)],
          }),
          StaleShardOwnerError,
        );
      }
      await assert.rejects(
        store.saveState({
          persistenceId: `Cart:fenced${counter}`,
          expectedRevision: 0,
          operationId: "stale-state",
          manifest: "json",
          payload: "{}",
          fence: old,
          outbox: [message(pid, "stale-state", 0)],
        }),
        StaleShardOwnerError,
      );
      assert.equal(await store.loadRevision(pid), 0);
      assert.deepEqual(await claimAll(store, "reader"), []);
      // The current owner's write carries its messages.
      await store.appendEvents({
        persistenceId: pid,
        expectedRevision: 0,
        operationId: "current",
        events: [ev(1)],
        fence: current!,
        outbox: [message(pid, "current", 0)],
      });
      const rows = await claimAll(store, "reader");
      assert.deepEqual(
        rows.map((r) => r.messageId),
        [outboxMessageId(pid, "current", 0)],
      );
      await store.completeOutbox(rows.map((r) => r.offset));
    });

    test("malformed outbox records are refused before anything is written", async () => {
      const pid = `Order:bad${++counter}`;
      const bad: unknown[] = [
        "nope",
        [
          {
            messageId: "",
            destination: { kind: "entity", entityType: "S", entityId: "1" },
            manifest: "json",
            payload: "1",
          },
        ],
        [{ messageId: "m", destination: { kind: "entity", entityType: "S" }, manifest: "json", payload: "1" }],
        [{ messageId: "m", destination: { kind: "queue", handler: "x" }, manifest: "json", payload: "1" }],
        [{ messageId: "m", destination: { kind: "handler", handler: "x" }, manifest: "json", payload: 1 }],
        [message(pid, "x", 0), message(pid, "x", 0)],
        Array.from({ length: 1001 }, (_, i) => message(pid, "x", i)),
      ];
      for (const outbox of bad) {
        await assert.rejects(
          store.appendEvents({
            persistenceId: pid,
            expectedRevision: 0,
            operationId: "x",
            events: [ev(1)],
            outbox: outbox as OutboxRecord[],
          }),
          InvalidPersistenceRequestError,
        );
      }
      assert.equal(await store.loadRevision(pid), 0);
    });

    test("two dispatchers claiming at once never share a row and together take every row", async () => {
      await drain(store);
      const pid = `Order:many${++counter}`;
      const total = 60;
      for (let i = 0; i < total; i += 10) {
        await store.appendEvents({
          persistenceId: pid,
          expectedRevision: i / 10,
          operationId: `batch-${i}`,
          events: [ev(i)],
          outbox: Array.from({ length: 10 }, (_, k) => message(pid, `batch-${i}`, k)),
        });
      }
      const take = async (owner: string) => {
        const mine: ClaimedOutboxRow[] = [];
        for (;;) {
          const rows = await store.claimOutbox({ owner, limit: 7, leaseMs: 60_000 });
          if (rows.length === 0) return mine;
          mine.push(...rows);
        }
      };
      const [a, b] = await Promise.all([take("dispatcher-a"), take("dispatcher-b")]);
      const offsetsA = new Set(a.map((r) => r.offset));
      assert.ok(
        b.every((r) => !offsetsA.has(r.offset)),
        "no row claimed by both",
      );
      assert.equal(a.length + b.length, total, `a took ${a.length}, b took ${b.length}`);
      // Claimed rows stay hidden until their claim ends.
      assert.deepEqual(await store.claimOutbox({ owner: "late", limit: 10, leaseMs: 1000 }), []);
      await store.completeOutbox([...a, ...b].map((r) => r.offset));
    });

    test("a failed attempt comes back after its backoff; a parked row never comes back and is listed", async () => {
      await drain(store);
      const pid = `Order:retry${++counter}`;
      await store.appendEvents({
        persistenceId: pid,
        expectedRevision: 0,
        operationId: "r",
        events: [ev(1)],
        outbox: [message(pid, "r", 0), message(pid, "r", 1)],
      });
      const [retried, poisoned] = await store.claimOutbox({ owner: "d1", limit: 10, leaseMs: 60_000 });
      assert.ok(retried !== undefined && poisoned !== undefined);
      // Another owner cannot record outcomes of d1's claim.
      assert.equal(
        await store.failOutbox("d2", [{ offset: retried.offset, error: "x", retryAfterMs: 0, park: false }]),
        0,
      );
      assert.equal(
        await store.failOutbox("d1", [
          { offset: retried.offset, error: "receiver down", retryAfterMs: 300, park: false },
          { offset: poisoned.offset, error: "cannot decode", retryAfterMs: 0, park: true },
        ]),
        2,
      );
      // Still backing off right after the failure.
      assert.deepEqual(await store.claimOutbox({ owner: "d1", limit: 10, leaseMs: 60_000 }), []);
      let again: ClaimedOutboxRow[] = [];
      await eventually(
        async () => (again = await store.claimOutbox({ owner: "d1", limit: 10, leaseMs: 60_000 })).length > 0,
        {
          what: "the retried row to be claimable again",
        },
      );
      assert.deepEqual(
        again.map((r) => [r.offset, r.attempts]),
        [[retried.offset, 2]],
      );
      assert.deepEqual(await store.outboxCounts().then((c) => c.parked), 1);
      const parked = await store.parkedOutbox(10);
      assert.deepEqual(
        parked.map((p) => [p.offset, p.messageId, p.persistenceId, p.attempts, p.lastError]),
        [[poisoned.offset, poisoned.messageId, pid, 1, "cannot decode"]],
      );
      // An operator fixed the cause: the parked row is claimable again, attempts counted afresh.
      assert.equal(await store.retryParkedOutbox([poisoned.offset, retried.offset]), 1, "only the parked row changes");
      assert.equal(await store.retryParkedOutbox([poisoned.offset]), 0, "no longer parked");
      const revived = await store.claimOutbox({ owner: "d1", limit: 10, leaseMs: 60_000 });
      assert.deepEqual(
        revived.map((r) => [r.offset, r.attempts]),
        [[poisoned.offset, 1]],
      );
      assert.deepEqual(await store.parkedOutbox(10), []);
      await store.completeOutbox([retried.offset, poisoned.offset]);
    });

    test("a claim that ends (its dispatcher died) lets another dispatcher take the row; the first can no longer fail it", async () => {
      await drain(store);
      const pid = `Order:expire${++counter}`;
      await store.appendEvents({
        persistenceId: pid,
        expectedRevision: 0,
        operationId: "e",
        events: [ev(1)],
        outbox: [message(pid, "e", 0)],
      });
      const [row] = await store.claimOutbox({ owner: "dead", limit: 10, leaseMs: 100 });
      assert.ok(row !== undefined);
      assert.deepEqual(await store.claimOutbox({ owner: "alive", limit: 10, leaseMs: 60_000 }), []);
      let taken: ClaimedOutboxRow[] = [];
      await eventually(
        async () => (taken = await store.claimOutbox({ owner: "alive", limit: 10, leaseMs: 60_000 })).length > 0,
        {
          what: "the expired claim's row to be claimable",
        },
      );
      assert.deepEqual(
        taken.map((r) => [r.messageId, r.attempts]),
        [[row.messageId, 2]],
      );
      assert.equal(
        await store.failOutbox("dead", [{ offset: row.offset, error: "late", retryAfterMs: 0, park: true }]),
        0,
      );
      assert.equal(await store.completeOutbox([row.offset]), 1);
      assert.equal(await store.completeOutbox([row.offset]), 0, "completing twice changes nothing");
    });

    test("the purge deletes delivered rows older than the retention, and only those", async () => {
      await drain(store);
      await store.purgeOutbox(0);
      const pid = `Order:purge${++counter}`;
      await store.appendEvents({
        persistenceId: pid,
        expectedRevision: 0,
        operationId: "p",
        events: [ev(1)],
        outbox: [message(pid, "p", 0), message(pid, "p", 1)],
      });
      const [done] = await store.claimOutbox({ owner: "d", limit: 1, leaseMs: 60_000 });
      await store.completeOutbox([done!.offset]);
      const counts = async () => {
        const { pending, delivered } = await store.outboxCounts();
        return { pending, delivered };
      };
      assert.deepEqual(await counts(), { pending: 1, delivered: 1 });
      assert.equal(await store.purgeOutbox(3_600_000), 0, "delivered just now: kept for the retention");
      assert.equal(await store.purgeOutbox(0), 1);
      assert.deepEqual(await counts(), { pending: 1, delivered: 0 });
      await assert.rejects(store.purgeOutbox(-1), InvalidPersistenceRequestError);
      await assert.rejects(store.claimOutbox({ owner: "", limit: 1, leaseMs: 1 }), InvalidPersistenceRequestError);
      await assert.rejects(store.claimOutbox({ owner: "d", limit: 0, leaseMs: 1 }), InvalidPersistenceRequestError);
    });

    test("counts split the backlog into claimed and retrying rows and give the oldest pending row's age", async () => {
      await drain(store);
      const base = await store.outboxCounts();
      assert.equal(base.pending, 0, "drained");
      assert.equal(base.oldestPendingAgeMs, null, "no backlog, no age");
      const pid = `Order:counts${++counter}`;
      await store.appendEvents({
        persistenceId: pid,
        expectedRevision: 0,
        operationId: "c",
        events: [ev(1)],
        outbox: [message(pid, "c", 0), message(pid, "c", 1), message(pid, "c", 2)],
      });
      const delta = async () => {
        const c = await store.outboxCounts();
        return {
          pending: c.pending,
          claimed: c.claimed,
          retrying: c.retrying,
          parked: c.parked - base.parked,
          delivered: c.delivered - base.delivered,
        };
      };
      assert.deepEqual(await delta(), { pending: 3, claimed: 0, retrying: 0, parked: 0, delivered: 0 });
      const [failed, done] = await store.claimOutbox({ owner: "d", limit: 2, leaseMs: 60_000 });
      assert.ok(failed !== undefined && done !== undefined);
      assert.deepEqual(await delta(), { pending: 3, claimed: 2, retrying: 0, parked: 0, delivered: 0 });
      await store.failOutbox("d", [{ offset: failed.offset, error: "down", retryAfterMs: 0, park: false }]);
      await store.completeOutbox([done.offset]);
      assert.deepEqual(await delta(), { pending: 2, claimed: 0, retrying: 1, parked: 0, delivered: 1 });
      // SQLite stores the write time in whole seconds: wait until the age says at least one.
      let age: number | null = null;
      await eventually(async () => ((age = (await store.outboxCounts()).oldestPendingAgeMs) ?? 0) >= 1_000, {
        what: "the oldest pending row to be a second old",
        describe: () => age,
      });
      assert.ok(age !== null && age < 60_000, `age ${age}`);
      await drain(store);
      const after = await store.outboxCounts();
      assert.deepEqual([after.pending, after.claimed, after.retrying, after.oldestPendingAgeMs], [0, 0, 0, null]);
    });
  });
}
