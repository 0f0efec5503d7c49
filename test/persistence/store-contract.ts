// The conformance suite every backend runs (memory, SQLite, PostgreSQL): one function over a store factory.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  ConcurrentWriteError,
  InvalidPersistenceRequestError,
  OperationConflictError,
  OperationId,
  type PersistenceStore,
  type ShardLeaseKey,
  type ShardLeaseToken,
  StaleShardOwnerError,
  UnsafeRetentionError,
} from "../../src/persistence/index.ts";
import { eventually } from "../fixtures/eventually.ts";

/** Matches the ConcurrentWriteError of a write that found the stream at `revision`. */
const concurrentAt =
  (revision: number) =>
  (e: unknown): boolean =>
    e instanceof ConcurrentWriteError && e.actualRevision === revision;

/** Makes a fresh, empty store; `dispose` closes it and removes what it created. */
export type StoreFactory = () => Promise<{ store: PersistenceStore; dispose: () => Promise<void> }>;

const ev = (n: number) => ({ manifest: "test.Event", payload: JSON.stringify({ n }) });
let counter = 0;
const pid = (label: string) => `Contract:${label}-${++counter}`;
const leaseKey = (shardId: number): ShardLeaseKey => ({ clusterName: "c", entityType: `T${counter++}`, shardId });

export function storeContract(backend: string, factory: StoreFactory): void {
  describe(`store contract: ${backend}`, () => {
    let store: PersistenceStore;
    let dispose: () => Promise<void>;
    before(async () => {
      ({ store, dispose } = await factory());
    });
    after(async () => {
      await dispose();
    });

    test("appends advance the revision and load returns events in order", async () => {
      const id = pid("append");
      assert.equal(await store.loadRevision(id), 0);
      assert.deepEqual(
        await store.appendEvents({ persistenceId: id, expectedRevision: 0, operationId: "a1", events: [ev(1)] }),
        {
          revision: 1,
          duplicate: false,
        },
      );
      const r2 = await store.appendEvents({
        persistenceId: id,
        expectedRevision: 1,
        operationId: OperationId.random(),
        events: [ev(2), ev(3)],
      });
      assert.deepEqual(r2, { revision: 3, duplicate: false });
      const loaded = await store.loadEvents(id);
      assert.deepEqual(
        loaded.map((e) => [e.sequenceNr, e.manifest, JSON.parse(e.payload).n]),
        [
          [1, "test.Event", 1],
          [2, "test.Event", 2],
          [3, "test.Event", 3],
        ],
      );
      assert.deepEqual(
        (await store.loadEvents(id, 2)).map((e) => e.sequenceNr),
        [3],
      );
      assert.equal(await store.loadRevision(id), 3);
    });

    test("a stale expected revision is a ConcurrentWriteError naming expected and actual", async () => {
      const id = pid("conflict");
      await store.appendEvents({ persistenceId: id, expectedRevision: 0, operationId: "x1", events: [ev(1)] });
      await assert.rejects(
        store.appendEvents({ persistenceId: id, expectedRevision: 0, operationId: "x2", events: [ev(2)] }),
        (e: unknown) => e instanceof ConcurrentWriteError && e.expectedRevision === 0 && e.actualRevision === 1,
      );
      await assert.rejects(
        store.appendEvents({ persistenceId: id, expectedRevision: 5, operationId: "x3", events: [] }),
        ConcurrentWriteError,
      );
      assert.deepEqual(
        await store.appendEvents({ persistenceId: id, expectedRevision: 1, operationId: "x4", events: [] }),
        {
          revision: 1,
          duplicate: false,
        },
      );
      assert.equal((await store.loadEvents(id)).length, 1);
      // The failed op id was not consumed: it can still be used for a real write.
      assert.deepEqual(
        await store.appendEvents({ persistenceId: id, expectedRevision: 1, operationId: "x2", events: [ev(2)] }),
        {
          revision: 2,
          duplicate: false,
        },
      );
    });

    test("the same operation id and content is a duplicate; other content is an OperationConflictError", async () => {
      const id = pid("dup");
      await store.appendEvents({ persistenceId: id, expectedRevision: 0, operationId: "op", events: [ev(1), ev(2)] });
      await store.appendEvents({ persistenceId: id, expectedRevision: 2, operationId: "op2", events: [ev(3)] });
      // A retry arrives with its original (now stale) expected revision: still a duplicate with the original revision.
      assert.deepEqual(
        await store.appendEvents({ persistenceId: id, expectedRevision: 0, operationId: "op", events: [ev(1), ev(2)] }),
        { revision: 2, duplicate: true },
      );
      await assert.rejects(
        store.appendEvents({ persistenceId: id, expectedRevision: 3, operationId: "op", events: [ev(9)] }),
        (e: unknown) => e instanceof OperationConflictError && e.operationId === "op" && e.persistenceId === id,
      );
      assert.equal(await store.loadRevision(id), 3);
      // A retry at a newer expected revision is still recognised by its operation id.
      assert.deepEqual(
        await store.appendEvents({ persistenceId: id, expectedRevision: 3, operationId: "op2", events: [ev(3)] }),
        { revision: 3, duplicate: true },
      );
      // Operation ids of empty appends count too.
      assert.deepEqual(
        await store.appendEvents({ persistenceId: id, expectedRevision: 3, operationId: "e0", events: [] }),
        {
          revision: 3,
          duplicate: false,
        },
      );
      assert.deepEqual(
        await store.appendEvents({ persistenceId: id, expectedRevision: 3, operationId: "e0", events: [] }),
        {
          revision: 3,
          duplicate: true,
        },
      );
      await assert.rejects(
        store.appendEvents({ persistenceId: id, expectedRevision: 3, operationId: "e0", events: [ev(4)] }),
        OperationConflictError,
      );
      assert.equal(await store.loadRevision(id), 3);
    });

    test("a batch that overlaps a newer write, or a writer ahead of the stream, commits nothing", async () => {
      const id = pid("overlap");
      await store.appendEvents({ persistenceId: id, expectedRevision: 0, operationId: "o1", events: [ev(1)] });
      await store.appendEvents({ persistenceId: id, expectedRevision: 1, operationId: "o2", events: [ev(2)] });
      await assert.rejects(
        store.appendEvents({ persistenceId: id, expectedRevision: 1, operationId: "o3", events: [ev(3), ev(4)] }),
        concurrentAt(2),
      );
      await assert.rejects(
        store.appendEvents({ persistenceId: id, expectedRevision: 7, operationId: "o4", events: [ev(5)] }),
        concurrentAt(2),
      );
      // A several-event writer ahead of the stream leaves no hole either (a separate write path on PostgreSQL).
      await assert.rejects(
        store.appendEvents({ persistenceId: id, expectedRevision: 7, operationId: "o5", events: [ev(5), ev(6)] }),
        concurrentAt(2),
      );
      assert.equal(await store.loadRevision(id), 2);
      assert.deepEqual(
        (await store.loadEvents(id)).map((e) => e.sequenceNr),
        [1, 2],
      );
    });

    test("content identity: an operation id retried with other manifests or shifted field boundaries conflicts", async () => {
      const id = pid("fingerprint");
      const retry = (operationId: string, expectedRevision: number, manifest: string, payload: string) =>
        store.appendEvents({ persistenceId: id, expectedRevision, operationId, events: [{ manifest, payload }] });
      assert.deepEqual(await retry("fp1", 0, "ab", "c"), { revision: 1, duplicate: false });
      // Same concatenated text, another split between manifest and payload: other content.
      await assert.rejects(retry("fp1", 1, "a", "bc"), OperationConflictError);
      // Same payload under another manifest: other content.
      await assert.rejects(retry("fp1", 1, "abc", "c"), OperationConflictError);
      assert.deepEqual(await retry("fp1", 1, "ab", "c"), { revision: 1, duplicate: true });
      // Event boundaries count too: one event [x, yz] is not two events split elsewhere.
      await store.appendEvents({
        persistenceId: id,
        expectedRevision: 1,
        operationId: "fp2",
        events: [
          { manifest: "m", payload: "xy" },
          { manifest: "m", payload: "z" },
        ],
      });
      await assert.rejects(
        store.appendEvents({
          persistenceId: id,
          expectedRevision: 3,
          operationId: "fp2",
          events: [
            { manifest: "m", payload: "x" },
            { manifest: "m", payload: "yz" },
          ],
        }),
        OperationConflictError,
      );
      assert.equal(await store.loadRevision(id), 3);

      const sid = pid("state-fingerprint");
      const save = (operationId: string, expectedRevision: number, manifest: string, payload: string) =>
        store.saveState({ persistenceId: sid, expectedRevision, operationId, manifest, payload });
      assert.deepEqual(await save("sf1", 0, "St", "{}"), { revision: 1, duplicate: false });
      await assert.rejects(save("sf1", 1, "Other", "{}"), OperationConflictError);
      await assert.rejects(save("sf1", 1, "S", "t{}"), OperationConflictError);
      // A save whose manifest and payload read like a tombstone's is not a delete.
      assert.deepEqual(await save("sf2", 1, "deleted", "nil"), { revision: 2, duplicate: false });
      await assert.rejects(
        store.deleteState({ persistenceId: sid, expectedRevision: 2, operationId: "sf2" }),
        OperationConflictError,
      );
      assert.deepEqual(await store.loadState(sid), {
        revision: 2,
        manifest: "deleted",
        payload: "nil",
        deleted: false,
      });
    });

    test("retention of every event keeps the revision and the operation ids", async () => {
      const id = pid("retain-all");
      await store.appendEvents({ persistenceId: id, expectedRevision: 0, operationId: "k1", events: [ev(1), ev(2)] });
      await store.appendEvents({ persistenceId: id, expectedRevision: 2, operationId: "k2", events: [] });
      await store.saveSnapshot(id, { sequenceNr: 2, manifest: "S", payload: "{}" });
      assert.deepEqual(await store.deleteEventsTo(id, 2), { deletedEvents: 2, throughSeq: 2 });
      assert.deepEqual(await store.loadEvents(id), []);
      assert.equal(await store.loadRevision(id), 2);
      assert.deepEqual(
        await store.appendEvents({ persistenceId: id, expectedRevision: 0, operationId: "k1", events: [ev(1), ev(2)] }),
        { revision: 2, duplicate: true },
      );
      await assert.rejects(
        store.appendEvents({ persistenceId: id, expectedRevision: 2, operationId: "k1", events: [ev(9)] }),
        OperationConflictError,
      );
      await assert.rejects(
        store.appendEvents({ persistenceId: id, expectedRevision: 1, operationId: "k3", events: [ev(3)] }),
        ConcurrentWriteError,
      );
      assert.deepEqual(
        await store.appendEvents({ persistenceId: id, expectedRevision: 2, operationId: "k3", events: [ev(3)] }),
        { revision: 3, duplicate: false },
      );
      await assert.rejects(
        store.appendEvents({ persistenceId: id, expectedRevision: 2, operationId: "k4", events: [ev(4)] }),
        ConcurrentWriteError,
      );
      // A writer that never saw the stream (expected 0) cannot refill the sequence numbers retention removed.
      await assert.rejects(
        store.appendEvents({ persistenceId: id, expectedRevision: 0, operationId: "k5", events: [ev(1)] }),
        concurrentAt(3),
      );
      await assert.rejects(
        store.appendEvents({ persistenceId: id, expectedRevision: 0, operationId: "k6", events: [ev(1), ev(2)] }),
        concurrentAt(3),
      );
      assert.deepEqual(
        (await store.loadEvents(id)).map((e) => e.sequenceNr),
        [3],
      );
      assert.equal(await store.loadRevision(id), 3);
    });

    test("invalid requests are typed errors", async () => {
      await assert.rejects(
        store.appendEvents({ persistenceId: "", expectedRevision: 0, operationId: "o", events: [] }),
        InvalidPersistenceRequestError,
      );
      await assert.rejects(
        store.appendEvents({ persistenceId: "p", expectedRevision: -1, operationId: "o", events: [] }),
        InvalidPersistenceRequestError,
      );
      await assert.rejects(
        store.appendEvents({ persistenceId: "p", expectedRevision: 0, operationId: "", events: [] }),
        InvalidPersistenceRequestError,
      );
      await assert.rejects(
        store.appendEvents({
          persistenceId: "p",
          expectedRevision: 0,
          operationId: "o",
          events: [{ manifest: "", payload: "{}" }],
        }),
        InvalidPersistenceRequestError,
      );
      await assert.rejects(
        store.acquireShardLease({ clusterName: "", entityType: "T", shardId: 0 }, "o", 10),
        InvalidPersistenceRequestError,
      );
      await assert.rejects(
        store.acquireShardLease({ clusterName: "c", entityType: "", shardId: 0 }, "o", 10),
        InvalidPersistenceRequestError,
      );
      await assert.rejects(
        store.acquireShardLease({ clusterName: "c", entityType: "T", shardId: -1 }, "o", 10),
        InvalidPersistenceRequestError,
      );
      await assert.rejects(
        store.acquireShardLease({ clusterName: "c", entityType: "T", shardId: 0 }, "", 10),
        InvalidPersistenceRequestError,
      );
      await assert.rejects(
        store.acquireShardLease({ clusterName: "c", entityType: "T", shardId: 0 }, "o", 0),
        InvalidPersistenceRequestError,
      );
    });

    test("snapshots upsert only forwards and delete", async () => {
      const id = pid("snap");
      assert.equal(await store.loadSnapshot(id), null);
      assert.equal(await store.saveSnapshot(id, { sequenceNr: 5, manifest: "S", payload: '{"v":5}' }), true);
      assert.equal(await store.saveSnapshot(id, { sequenceNr: 3, manifest: "S", payload: '{"v":3}' }), false);
      assert.deepEqual(await store.loadSnapshot(id), { sequenceNr: 5, manifest: "S", payload: '{"v":5}' });
      assert.equal(await store.saveSnapshot(id, { sequenceNr: 5, manifest: "S", payload: '{"v":55}' }), true);
      assert.equal(await store.saveSnapshot(id, { sequenceNr: 8, manifest: "S2", payload: '{"v":8}' }), true);
      assert.deepEqual(await store.loadSnapshot(id), { sequenceNr: 8, manifest: "S2", payload: '{"v":8}' });
      assert.equal(await store.deleteSnapshot(id), true);
      assert.equal(await store.deleteSnapshot(id), false);
      assert.equal(await store.loadSnapshot(id), null);
    });

    test("retention needs a snapshot at or past the sequence and keeps revision and op ids", async () => {
      const id = pid("retention");
      await store.appendEvents({
        persistenceId: id,
        expectedRevision: 0,
        operationId: "r1",
        events: [ev(1), ev(2), ev(3), ev(4)],
      });
      await assert.rejects(
        store.deleteEventsTo(id, 2),
        (e: unknown) => e instanceof UnsafeRetentionError && e.snapshotSequenceNr === null,
      );
      await store.saveSnapshot(id, { sequenceNr: 2, manifest: "S", payload: "{}" });
      await assert.rejects(
        store.deleteEventsTo(id, 3),
        (e: unknown) => e instanceof UnsafeRetentionError && e.snapshotSequenceNr === 2,
      );
      assert.deepEqual(await store.deleteEventsTo(id, 2), { deletedEvents: 2, throughSeq: 2 });
      assert.deepEqual(
        (await store.loadEvents(id)).map((e) => e.sequenceNr),
        [3, 4],
      );
      assert.equal(await store.loadRevision(id), 4);
      assert.deepEqual(
        await store.appendEvents({
          persistenceId: id,
          expectedRevision: 0,
          operationId: "r1",
          events: [ev(1), ev(2), ev(3), ev(4)],
        }),
        { revision: 4, duplicate: true },
      );
      assert.deepEqual(
        await store.appendEvents({ persistenceId: id, expectedRevision: 4, operationId: "r2", events: [ev(5)] }),
        { revision: 5, duplicate: false },
      );
    });

    test("durable state: revisions, duplicates, conflicts and tombstones", async () => {
      const id = pid("state");
      assert.equal(await store.loadState(id), null);
      assert.deepEqual(
        await store.saveState({
          persistenceId: id,
          expectedRevision: 0,
          operationId: "s1",
          manifest: "St",
          payload: '{"a":1}',
        }),
        { revision: 1, duplicate: false },
      );
      assert.deepEqual(
        await store.saveState({
          persistenceId: id,
          expectedRevision: 0,
          operationId: "s1",
          manifest: "St",
          payload: '{"a":1}',
        }),
        { revision: 1, duplicate: true },
      );
      await assert.rejects(
        store.saveState({
          persistenceId: id,
          expectedRevision: 1,
          operationId: "s1",
          manifest: "St",
          payload: '{"a":2}',
        }),
        OperationConflictError,
      );
      await assert.rejects(
        store.saveState({
          persistenceId: id,
          expectedRevision: 0,
          operationId: "s2",
          manifest: "St",
          payload: '{"a":2}',
        }),
        concurrentAt(1),
      );
      assert.deepEqual(await store.loadState(id), { revision: 1, manifest: "St", payload: '{"a":1}', deleted: false });
      assert.deepEqual(await store.deleteState({ persistenceId: id, expectedRevision: 1, operationId: "d1" }), {
        revision: 2,
        duplicate: false,
      });
      assert.deepEqual(await store.loadState(id), { revision: 2, manifest: "deleted", payload: null, deleted: true });
      // A stale writer that last saw revision 1 cannot resurrect the old state.
      await assert.rejects(
        store.saveState({
          persistenceId: id,
          expectedRevision: 1,
          operationId: "s3",
          manifest: "St",
          payload: '{"a":1}',
        }),
        ConcurrentWriteError,
      );
      assert.deepEqual(await store.deleteState({ persistenceId: id, expectedRevision: 1, operationId: "d1" }), {
        revision: 2,
        duplicate: true,
      });
      assert.deepEqual(
        await store.saveState({
          persistenceId: id,
          expectedRevision: 2,
          operationId: "s4",
          manifest: "St",
          payload: '{"a":3}',
        }),
        { revision: 3, duplicate: false },
      );
      assert.deepEqual(await store.loadState(id), { revision: 3, manifest: "St", payload: '{"a":3}', deleted: false });
    });

    test("leases: create at epoch 1, renew in place, refuse others, release then transfer at epoch + 1", async () => {
      const key = leaseKey(7);
      const a = await store.acquireShardLease(key, "node-a", 30_000);
      assert.ok(a !== null);
      assert.equal(a.epoch, 1);
      assert.equal(a.owner, "node-a");
      assert.deepEqual(a.key, key);
      assert.ok(a.leaseUntilEpochMs > 0);
      assert.equal(await store.acquireShardLease(key, "node-b", 30_000), null);
      const again = await store.acquireShardLease(key, "node-a", 60_000);
      assert.equal(again?.epoch, 1);
      assert.ok(again!.leaseUntilEpochMs >= a.leaseUntilEpochMs);
      const renewed = await store.renewShardLease(a, 30_000);
      assert.equal(renewed?.epoch, 1);
      assert.equal(await store.renewShardLease({ ...a, owner: "node-b" }, 30_000), null);
      assert.equal(await store.renewShardLease({ ...a, epoch: 2 }, 30_000), null);
      assert.equal(await store.releaseShardLease({ ...a, epoch: 2 }), false);
      assert.equal(await store.releaseShardLease(a), true);
      assert.equal(await store.renewShardLease(a, 30_000), null);
      const same = await store.acquireShardLease(key, "node-a", 30_000);
      assert.equal(same?.epoch, 2);
      await store.releaseShardLease(same!);
      const b = await store.acquireShardLease(key, "node-b", 30_000);
      assert.equal(b?.epoch, 3);
      assert.equal(b?.owner, "node-b");
    });

    test("batch lease calls: each row gets a lone call's answer, in order (issue 23)", async () => {
      const type = `Batch${counter++}`;
      const key = (shardId: number): ShardLeaseKey => ({ clusterName: "c", entityType: type, shardId });
      // Rows before the batch: 1 ours, 2 another owner's, 3 released by another owner, 4 ours but released.
      const ours = (await store.acquireShardLease(key(1), "node-a", 30_000))!;
      await store.acquireShardLease(key(2), "node-b", 30_000);
      await store.releaseShardLease((await store.acquireShardLease(key(3), "node-b", 30_000))!);
      const gone = (await store.acquireShardLease(key(4), "node-a", 30_000))!;
      await store.releaseShardLease(gone);
      const acquired = await store.acquireShardLeases([key(0), key(1), key(2), key(3)], "node-a", 30_000);
      assert.deepEqual(
        acquired.map((t) => (t === null ? null : [t.key.shardId, t.owner, t.epoch])),
        [[0, "node-a", 1], [1, "node-a", 1], null, [3, "node-a", 2]],
        "new at epoch 1, ours in place, another owner's refused, a released one transferred at epoch + 1",
      );
      assert.ok(acquired[1]!.leaseUntilEpochMs >= ours.leaseUntilEpochMs);
      assert.deepEqual(acquired[0]!.key, key(0));
      const renewed = await store.renewShardLeases(
        [acquired[3]!, { ...acquired[0]!, owner: "node-b" }, acquired[0]!, { ...acquired[1]!, epoch: 2 }, gone],
        60_000,
      );
      assert.deepEqual(
        renewed.map((t) => (t === null ? null : [t.key.shardId, t.owner, t.epoch])),
        [[3, "node-a", 2], null, [0, "node-a", 1], null, null],
        "renewed when owner, epoch and expiry hold; null for another owner, another epoch, a released lease",
      );
      assert.ok(renewed[0]!.leaseUntilEpochMs >= acquired[3]!.leaseUntilEpochMs);
      // The rows that failed are untouched: node-b still holds 2, and 4 stays released (another owner takes it).
      assert.equal(await store.acquireShardLease(key(2), "node-a", 30_000), null);
      assert.equal((await store.acquireShardLease(key(4), "node-c", 30_000))?.epoch, 2);
      assert.deepEqual(await store.renewShardLeases([], 30_000), []);
      assert.deepEqual(await store.acquireShardLeases([], "node-a", 30_000), []);
      await assert.rejects(store.renewShardLeases([{ ...ours, epoch: 0 }], 30_000), InvalidPersistenceRequestError);
      await assert.rejects(store.acquireShardLeases([key(9)], "", 30_000), InvalidPersistenceRequestError);
    });

    test("an expired lease cannot be renewed and transfers with epoch + 1", async () => {
      const key = leaseKey(1);
      const a = await store.acquireShardLease(key, "node-a", 40);
      assert.equal(a?.epoch, 1);
      let b: ShardLeaseToken | null = null;
      await eventually(async () => (b = await store.acquireShardLease(key, "node-b", 30_000)) !== null, {
        what: "the short lease to expire and transfer",
      });
      assert.equal(b!.epoch, 2);
      assert.equal(await store.renewShardLease(a!, 30_000), null);
      assert.equal(await store.acquireShardLease(key, "node-a", 30_000), null);
    });

    test("fenced mutations commit with the current lease", async () => {
      const key = leaseKey(2);
      const fence = (await store.acquireShardLease(key, "node-a", 30_000))!;
      const id = pid("fenced");
      await store.appendEvents({
        persistenceId: id,
        expectedRevision: 0,
        operationId: "f1",
        events: [ev(1), ev(2)],
        fence,
      });
      assert.equal(await store.saveSnapshot(id, { sequenceNr: 2, manifest: "S", payload: "{}" }, fence), true);
      assert.deepEqual(await store.deleteEventsTo(id, 1, fence), { deletedEvents: 1, throughSeq: 1 });
      assert.equal(await store.deleteSnapshot(id, fence), true);
      await store.saveState({
        persistenceId: id,
        expectedRevision: 0,
        operationId: "fs",
        manifest: "St",
        payload: "{}",
        fence,
      });
      await store.deleteState({ persistenceId: id, expectedRevision: 1, operationId: "fd", fence });
      assert.equal((await store.loadState(id))?.revision, 2);
    });

    async function assertEveryFencedMutationRejected(fence: ShardLeaseToken, id: string): Promise<void> {
      // The message names the lease and says what to do next.
      const stale = (e: unknown) =>
        e instanceof StaleShardOwnerError &&
        e.epoch === fence.epoch &&
        e.owner === fence.owner &&
        e.message.includes(`at epoch ${fence.epoch}: `) &&
        e.message.includes("send the command again through sharding");
      // The op id "seed" was used before: even its exact retry must not get a duplicate answer.
      await assert.rejects(
        store.appendEvents({ persistenceId: id, expectedRevision: 0, operationId: "seed", events: [ev(1)], fence }),
        stale,
      );
      // Nor the exact retry of an empty append (its operation id is kept apart from the journal rows).
      await assert.rejects(
        store.appendEvents({ persistenceId: id, expectedRevision: 1, operationId: "seed-empty", events: [], fence }),
        stale,
      );
      await assert.rejects(
        store.appendEvents({ persistenceId: id, expectedRevision: 1, operationId: "new", events: [ev(2)], fence }),
        stale,
      );
      await assert.rejects(store.saveSnapshot(id, { sequenceNr: 1, manifest: "S", payload: '{"x":1}' }, fence), stale);
      await assert.rejects(store.deleteSnapshot(id, fence), stale);
      await assert.rejects(store.deleteEventsTo(id, 1, fence), stale);
      await assert.rejects(
        store.saveState({
          persistenceId: id,
          expectedRevision: 1,
          operationId: "st2",
          manifest: "St",
          payload: "{}",
          fence,
        }),
        stale,
      );
      await assert.rejects(
        store.deleteState({ persistenceId: id, expectedRevision: 1, operationId: "del", fence }),
        stale,
      );
      // Nothing committed.
      assert.equal(await store.loadRevision(id), 1);
      assert.equal((await store.loadEvents(id)).length, 1);
      assert.equal((await store.loadSnapshot(id))?.payload, '{"x":0}');
      assert.deepEqual(await store.loadState(id), { revision: 1, manifest: "St", payload: '{"s":1}', deleted: false });
    }

    async function seed(fence: ShardLeaseToken, id: string): Promise<void> {
      await store.appendEvents({ persistenceId: id, expectedRevision: 0, operationId: "seed", events: [ev(1)], fence });
      await store.appendEvents({
        persistenceId: id,
        expectedRevision: 1,
        operationId: "seed-empty",
        events: [],
        fence,
      });
      await store.saveSnapshot(id, { sequenceNr: 1, manifest: "S", payload: '{"x":0}' }, fence);
      await store.saveState({
        persistenceId: id,
        expectedRevision: 0,
        operationId: "st1",
        manifest: "St",
        payload: '{"s":1}',
        fence,
      });
    }

    test("every fenced mutation is rejected at a stale epoch and commits nothing", async () => {
      const key = leaseKey(3);
      const old = (await store.acquireShardLease(key, "node-a", 30_000))!;
      const id = pid("stale-epoch");
      await seed(old, id);
      await store.releaseShardLease(old);
      const current = (await store.acquireShardLease(key, "node-a", 30_000))!;
      assert.equal(current.epoch, old.epoch + 1);
      await assertEveryFencedMutationRejected(old, id);
      await assertEveryFencedMutationRejected({ ...current, owner: "node-x" }, id);
    });

    test("every fenced mutation is rejected at an expired lease and commits nothing", async () => {
      const key = leaseKey(4);
      const holder = (await store.acquireShardLease(key, "node-a", 30_000))!;
      const id = pid("expired");
      await seed(holder, id);
      // Re-acquire in place with a short duration; the row keeps owner and epoch but expires.
      const short = (await store.acquireShardLease(key, "node-a", 60))!;
      assert.equal(short.epoch, holder.epoch);
      await eventually(
        async () => {
          try {
            await store.deleteSnapshot(pid("probe"), short);
            return false;
          } catch (error) {
            return error instanceof StaleShardOwnerError;
          }
        },
        { what: "the lease to expire on the database clock" },
      );
      await assertEveryFencedMutationRejected(short, id);
    });
  });
}
