// The outbox's conformance suite (memory, SQLite, PostgreSQL): rows written in the write's transaction and only by a
// write that commits (a stale fence, a revision conflict or a duplicate writes none), exclusive claims with a
// visibility timeout, retry after a backoff, parking, completion and the purge of delivered rows.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  type ClaimedOutboxRow,
  ConcurrentWriteError,
  InvalidPersistenceRequestError,
  type OutboxClaimRequest,
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

/** The rows of one claim (`claimOutbox(...).rows`). */
async function claimRows(store: PersistenceStore, request: OutboxClaimRequest): Promise<ClaimedOutboxRow[]> {
  return (await store.claimOutbox(request)).rows;
}

/**
 * Claims until nothing is left, as owner `owner`, under `leases` (default none: rows without a shard only); each
 * claim's rows are returned in offset order.
 */
async function claimAll(
  store: PersistenceStore,
  owner: string,
  limit = 100,
  leases: readonly ShardLeaseToken[] = [],
): Promise<ClaimedOutboxRow[]> {
  const all: ClaimedOutboxRow[] = [];
  for (;;) {
    const rows = await claimRows(store, { owner, limit, leaseMs: 60_000, leases });
    all.push(...rows);
    if (rows.length < limit) return all;
  }
}

/** Marks every claimable row without a shard delivered, so a test starts from an empty backlog. */
async function drain(store: PersistenceStore): Promise<void> {
  const rows = await claimAll(store, "drain");
  if (rows.length > 0) await store.completeOutbox(rows);
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
      assert.deepEqual(await store.completeOutbox(rows), { settled: 2, stale: 0 });
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
      await store.completeOutbox(rows);
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
      // Claimed under the shard's current lease (a claim without it leaves the row alone).
      assert.deepEqual(await claimAll(store, "reader"), []);
      const rows = await claimAll(store, "reader", 100, [current!]);
      assert.deepEqual(
        rows.map((r) => [r.messageId, r.senderShard, r.claimEpoch]),
        [[outboxMessageId(pid, "current", 0), key, current!.epoch]],
      );
      await store.completeOutbox(rows);
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
          const rows = await claimRows(store, { owner, limit: 7, leaseMs: 60_000 });
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
      assert.deepEqual(await claimRows(store, { owner: "late", limit: 10, leaseMs: 1000 }), []);
      await store.completeOutbox([...a, ...b]);
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
      const [retried, poisoned] = await claimRows(store, { owner: "d1", limit: 10, leaseMs: 60_000 });
      assert.ok(retried !== undefined && poisoned !== undefined);
      // Another owner cannot record outcomes of d1's claim.
      assert.deepEqual(
        await store.failOutbox("d2", [{ offset: retried.offset, error: "x", retryAfterMs: 0, park: false }]),
        { settled: 0, stale: 0 },
      );
      assert.deepEqual(
        await store.failOutbox("d1", [
          { offset: retried.offset, error: "receiver down", retryAfterMs: 300, park: false },
          { offset: poisoned.offset, error: "cannot decode", retryAfterMs: 0, park: true },
        ]),
        { settled: 2, stale: 0 },
      );
      // Still backing off right after the failure.
      assert.deepEqual(await claimRows(store, { owner: "d1", limit: 10, leaseMs: 60_000 }), []);
      let again: ClaimedOutboxRow[] = [];
      await eventually(
        async () => (again = await claimRows(store, { owner: "d1", limit: 10, leaseMs: 60_000 })).length > 0,
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
      const revived = await claimRows(store, { owner: "d1", limit: 10, leaseMs: 60_000 });
      assert.deepEqual(
        revived.map((r) => [r.offset, r.attempts]),
        [[poisoned.offset, 1]],
      );
      assert.deepEqual(await store.parkedOutbox(10), []);
      await store.completeOutbox([...again, ...revived]);
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
      const [row] = await claimRows(store, { owner: "dead", limit: 10, leaseMs: 100 });
      assert.ok(row !== undefined);
      assert.deepEqual(await claimRows(store, { owner: "alive", limit: 10, leaseMs: 60_000 }), []);
      let taken: ClaimedOutboxRow[] = [];
      await eventually(
        async () => (taken = await claimRows(store, { owner: "alive", limit: 10, leaseMs: 60_000 })).length > 0,
        {
          what: "the expired claim's row to be claimable",
        },
      );
      assert.deepEqual(
        taken.map((r) => [r.messageId, r.attempts]),
        [[row.messageId, 2]],
      );
      assert.deepEqual(
        await store.failOutbox("dead", [{ offset: row.offset, error: "late", retryAfterMs: 0, park: true }]),
        { settled: 0, stale: 0 },
      );
      assert.deepEqual(await store.completeOutbox([row]), { settled: 1, stale: 0 });
      assert.deepEqual(await store.completeOutbox([row]), { settled: 0, stale: 0 }, "completing twice changes nothing");
    });

    test("claims follow shard ownership: only rows of shards whose current lease the claim presents, and rows without a shard for any claimer that wants them", async () => {
      await drain(store);
      const cluster = `claims-${++counter}`;
      const keyA: ShardLeaseKey = { clusterName: cluster, entityType: "Order", shardId: 1 };
      const keyB: ShardLeaseKey = { clusterName: cluster, entityType: "Order", shardId: 2 };
      const leaseA = (await store.acquireShardLease(keyA, "node-a", 60_000))!;
      const leaseB = (await store.acquireShardLease(keyB, "node-b", 60_000))!;
      const write = async (pid: string, fence: ShardLeaseToken | null) => {
        await store.appendEvents({
          persistenceId: pid,
          expectedRevision: 0,
          operationId: "w",
          events: [ev(1)],
          fence,
          outbox: [message(pid, "w", 0)],
        });
        return outboxMessageId(pid, "w", 0);
      };
      // A durable-state save records its shard too (on PostgreSQL the unbatched write-with-messages statement).
      const saveUnder = async (pid: string, fence: ShardLeaseToken) => {
        await store.saveState({
          persistenceId: pid,
          expectedRevision: 0,
          operationId: "s",
          manifest: "json",
          payload: "{}",
          fence,
          outbox: [message(pid, "s", 0)],
        });
        return outboxMessageId(pid, "s", 0);
      };
      const [onA, onB, unsharded] = [
        await write(`Order:a${counter}`, leaseA),
        await saveUnder(`Cart:b${counter}`, leaseB),
        await write(`Order:u${counter}`, null),
      ];
      // node-a, asking for its shard only: the row written under shard 1, with its shard and claim epoch.
      const a = await store.claimOutbox({
        owner: "da",
        limit: 10,
        leaseMs: 60_000,
        leases: [leaseA],
        unsharded: false,
      });
      assert.deepEqual(
        a.rows.map((r) => [r.messageId, r.senderShard, r.claimEpoch]),
        [[onA, keyA, leaseA.epoch]],
      );
      assert.deepEqual(a.staleLeases, []);
      // Presenting shard 2 as node-a's (node-b holds it) claims nothing and names the lease; node-a's other row is
      // claimed already.
      const forged: ShardLeaseToken = { ...leaseB, owner: "node-a" };
      const wrongEpoch: ShardLeaseToken = { ...leaseB, epoch: leaseB.epoch + 1 };
      const refused = await store.claimOutbox({
        owner: "da",
        limit: 10,
        leaseMs: 60_000,
        leases: [leaseA, forged, wrongEpoch],
        unsharded: false,
      });
      assert.deepEqual(refused, { rows: [], staleLeases: [forged, wrongEpoch] });
      // node-b with its lease, and the rows without a shard (the default).
      const b = await store.claimOutbox({ owner: "db", limit: 10, leaseMs: 60_000, leases: [leaseB] });
      assert.deepEqual(
        b.rows.map((r) => [r.messageId, r.senderShard, r.claimEpoch]),
        [
          [onB, keyB, leaseB.epoch],
          [unsharded, null, null],
        ],
      );
      assert.deepEqual(await store.completeOutbox([...a.rows, ...b.rows]), { settled: 3, stale: 0 });
      await assert.rejects(
        store.claimOutbox({ owner: "d", limit: 1, leaseMs: 1, leases: [{ ...leaseA, epoch: 0 }] }),
        InvalidPersistenceRequestError,
      );
      await assert.rejects(
        store.claimOutbox({ owner: "d", limit: 1, leaseMs: 1, leases: "all" as unknown as ShardLeaseToken[] }),
        InvalidPersistenceRequestError,
      );
      await assert.rejects(
        store.completeOutbox([{ offset: a.rows[0]!.offset, claimEpoch: -1 }]),
        InvalidPersistenceRequestError,
      );
    });

    test("after a handoff the new owner claims the rows at once, and the old owner's claim and settles change nothing", async () => {
      await drain(store);
      const key: ShardLeaseKey = { clusterName: `handoff-${++counter}`, entityType: "Order", shardId: 7 };
      const old = (await store.acquireShardLease(key, "node-a", 300))!;
      const pid = `Order:h${counter}`;
      await store.appendEvents({
        persistenceId: pid,
        expectedRevision: 0,
        operationId: "h",
        events: [ev(1)],
        fence: old,
        outbox: [message(pid, "h", 0), message(pid, "h", 1), message(pid, "h", 2)],
      });
      // node-a claims all three for a minute, then loses the shard: its lease lapses and node-b takes it (epoch + 1).
      const mine = (await store.claimOutbox({ owner: "da", limit: 10, leaseMs: 60_000, leases: [old] })).rows;
      assert.equal(mine.length, 3);
      let current: ShardLeaseToken | null = null;
      await eventually(async () => (current = await store.acquireShardLease(key, "node-b", 60_000)) !== null, {
        what: "node-b takes the lapsed lease",
      });
      assert.equal(current!.epoch, old.epoch + 1);
      // The counts of rows by state (the oldest pending row's age grows on its own meanwhile).
      const byState = async () => {
        const { oldestPendingAgeMs: _age, ...counts } = await store.outboxCounts();
        return counts;
      };
      const countsBefore = await byState();
      // The old owner: its claim is refused, and so is every outcome of what it claimed.
      assert.deepEqual(await store.claimOutbox({ owner: "da", limit: 10, leaseMs: 60_000, leases: [old] }), {
        rows: [],
        staleLeases: [old],
      });
      assert.deepEqual(await store.completeOutbox([mine[0]!]), { settled: 0, stale: 1 });
      assert.deepEqual(
        await store.failOutbox("da", [
          { offset: mine[1]!.offset, claimEpoch: mine[1]!.claimEpoch, error: "late", retryAfterMs: 0, park: true },
          {
            offset: mine[2]!.offset,
            claimEpoch: mine[2]!.claimEpoch,
            error: "late",
            retryAfterMs: 60_000,
            park: false,
          },
        ]),
        { settled: 0, stale: 2 },
      );
      assert.deepEqual(await byState(), countsBefore, "nothing delivered, parked or put back");
      assert.deepEqual(await store.parkedOutbox(10), []);
      // The new owner takes the rows at once, though node-a's claim has most of its minute left.
      const taken = (await store.claimOutbox({ owner: "db", limit: 10, leaseMs: 60_000, leases: [current!] })).rows;
      assert.deepEqual(
        taken.map((r) => [r.offset, r.attempts, r.claimEpoch]),
        mine.map((r) => [r.offset, 2, current!.epoch]),
      );
      // node-a's outcomes stay refused (their epoch is not the rows' claim any more), as does one naming no epoch.
      assert.deepEqual(await store.completeOutbox(mine), { settled: 0, stale: 3 });
      assert.deepEqual(await store.completeOutbox([{ offset: taken[0]!.offset, claimEpoch: null }]), {
        settled: 0,
        stale: 1,
      });
      // A claim under the same epoch does not take what that epoch already claims.
      assert.deepEqual((await store.claimOutbox({ owner: "db2", limit: 10, leaseMs: 1, leases: [current!] })).rows, []);
      // The new owner's outcomes are recorded.
      assert.deepEqual(await store.completeOutbox([taken[0]!]), { settled: 1, stale: 0 });
      assert.deepEqual(
        await store.failOutbox("db", [
          { offset: taken[1]!.offset, claimEpoch: taken[1]!.claimEpoch, error: "down", retryAfterMs: 0, park: false },
          { offset: taken[2]!.offset, claimEpoch: taken[2]!.claimEpoch, error: "poison", retryAfterMs: 0, park: true },
        ]),
        { settled: 2, stale: 0 },
      );
      assert.deepEqual(
        (await store.parkedOutbox(10)).map((r) => r.offset),
        [taken[2]!.offset],
      );
      let again: ClaimedOutboxRow[] = [];
      await eventually(
        async () =>
          (again = (await store.claimOutbox({ owner: "db", limit: 10, leaseMs: 60_000, leases: [current!] })).rows)
            .length > 0,
        { what: "the retried row claimable again" },
      );
      assert.deepEqual(
        again.map((r) => [r.offset, r.attempts]),
        [[taken[1]!.offset, 3]],
      );
      assert.equal(await store.retryParkedOutbox([taken[2]!.offset]), 1);
      const revived = (await store.claimOutbox({ owner: "db", limit: 10, leaseMs: 60_000, leases: [current!] })).rows;
      assert.deepEqual(await store.completeOutbox([...again, ...revived]), { settled: 2, stale: 0 });
      // The lease released: even its holder's settles are refused from then on.
      const next = (await store.appendEvents({
        persistenceId: pid,
        expectedRevision: 1,
        operationId: "h2",
        events: [ev(2)],
        fence: current!,
        outbox: [message(pid, "h2", 0)],
      }))!;
      assert.equal(next.revision, 2);
      const last = (await store.claimOutbox({ owner: "db", limit: 10, leaseMs: 60_000, leases: [current!] })).rows;
      assert.equal(last.length, 1);
      assert.equal(await store.releaseShardLease(current!), true);
      assert.deepEqual(await store.completeOutbox(last), { settled: 0, stale: 1 });
      const third = (await store.acquireShardLease(key, "node-c", 60_000))!;
      const final = (await store.claimOutbox({ owner: "dc", limit: 10, leaseMs: 60_000, leases: [third] })).rows;
      assert.deepEqual(
        final.map((r) => [r.offset, r.claimEpoch]),
        [[last[0]!.offset, third.epoch]],
      );
      assert.deepEqual(await store.completeOutbox(final), { settled: 1, stale: 0 });
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
      const [done] = await claimRows(store, { owner: "d", limit: 1, leaseMs: 60_000 });
      await store.completeOutbox([done!]);
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
      const [failed, done] = (await store.claimOutbox({ owner: "d", limit: 2, leaseMs: 60_000 })).rows;
      assert.ok(failed !== undefined && done !== undefined);
      assert.deepEqual(await delta(), { pending: 3, claimed: 2, retrying: 0, parked: 0, delivered: 0 });
      await store.failOutbox("d", [{ offset: failed.offset, error: "down", retryAfterMs: 0, park: false }]);
      await store.completeOutbox([done]);
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
