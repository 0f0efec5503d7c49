// The event feed's conformance suite (memory, SQLite, PostgreSQL): offsets in commit order, filters, tags, live
// streams that resume from a checkpoint, retention of feed rows.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { RealScheduler } from "../../src/actor/index.ts";
import {
  EventFeed,
  type FeedEvent,
  InvalidPersistenceRequestError,
  OperationId,
  type PersistenceStore,
  ProjectionRebuildSupersededError,
} from "../../src/persistence/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import type { StoreFactory } from "./store-contract.ts";

let counter = 0;
const ev = (n: number, tags?: string[]) => ({
  manifest: "test.Event",
  payload: JSON.stringify({ n }),
  ...(tags === undefined ? {} : { tags }),
});

/** Every event of the feed after `after` (optionally filtered), page by page. */
export async function readAll(
  store: PersistenceStore,
  filter: { entityTypes?: string[]; persistenceId?: string; tag?: string } = {},
  afterOffset = 0,
  limit = 7,
): Promise<FeedEvent[]> {
  const all: FeedEvent[] = [];
  let position = afterOffset;
  for (;;) {
    const page = await store.queryEvents({ ...filter, afterOffset: position, limit });
    all.push(...page.events);
    assert.equal(page.nextOffset, page.events[page.events.length - 1]?.offset ?? position);
    position = page.nextOffset;
    if (!page.hasMore) return all;
  }
}

export function feedContract(backend: string, factory: StoreFactory): void {
  describe(`event feed: ${backend}`, () => {
    let store: PersistenceStore;
    let dispose: () => Promise<void>;
    let feed: EventFeed;
    before(async () => {
      ({ store, dispose } = await factory());
      feed = new EventFeed(store, new RealScheduler());
    });
    after(async () => {
      await dispose();
    });

    test("every appended event gets an offset above all earlier ones; filters by type, id and tag", async () => {
      const type = `Feed${++counter}`;
      const other = `Other${counter}`;
      const start = await store.latestOffset();
      await store.appendEvents({ persistenceId: `${type}:a`, expectedRevision: 0, operationId: "a1", events: [ev(1)] });
      await store.appendEvents({
        persistenceId: `${other}:b`,
        expectedRevision: 0,
        operationId: "b1",
        events: [ev(2, ["blue"]), ev(3)],
      });
      await store.appendEvents({
        persistenceId: `${type}:a`,
        expectedRevision: 1,
        operationId: "a2",
        events: [ev(4, ["blue", "red", "blue"])],
      });
      // A duplicate adds nothing to the feed.
      await store.appendEvents({ persistenceId: `${type}:a`, expectedRevision: 0, operationId: "a1", events: [ev(1)] });
      const events = await readAll(store, {}, start, 2);
      assert.deepEqual(
        events.map((e) => [e.persistenceId, e.entityType, e.sequenceNr, JSON.parse(e.payload).n, e.tags]),
        [
          [`${type}:a`, type, 1, 1, []],
          [`${other}:b`, other, 1, 2, ["blue"]],
          [`${other}:b`, other, 2, 3, []],
          [`${type}:a`, type, 2, 4, ["blue", "red"]],
        ],
      );
      for (let i = 1; i < events.length; i++) assert.ok(events[i]!.offset > events[i - 1]!.offset);
      assert.equal(await store.latestOffset(), events[3]!.offset);
      assert.deepEqual(
        (await readAll(store, { entityTypes: [type] }, start)).map((e) => e.sequenceNr),
        [1, 2],
      );
      assert.deepEqual(
        (await readAll(store, { entityTypes: [type, other] }, start)).map((e) => e.offset),
        events.map((e) => e.offset),
      );
      assert.deepEqual(
        (await readAll(store, { persistenceId: `${other}:b` }, start)).map((e) => e.sequenceNr),
        [1, 2],
      );
      assert.deepEqual(
        (await readAll(store, { tag: "blue" }, start)).map((e) => JSON.parse(e.payload).n),
        [2, 4],
      );
      assert.deepEqual(
        (await readAll(store, { tag: "red", entityTypes: [other] }, start)).map((e) => e.offset),
        [],
      );
      const page = await feed.query({ afterOffset: events[1]!.offset, limit: 1 });
      assert.deepEqual(
        page.events.map((e) => e.offset),
        [events[2]!.offset],
      );
      assert.equal(page.hasMore, true);
    });

    test("malformed queries and tags are refused with InvalidPersistenceRequestError", async () => {
      const bad: unknown[] = [
        { afterOffset: -1 },
        { afterOffset: 1.5 },
        { afterOffset: "1" },
        { limit: 0 },
        { limit: 1001 },
        { entityTypes: [] },
        { entityTypes: "Orders" },
        { entityTypes: ["a:b"] },
        { entityTypes: [{ toString: () => "x" }] },
        { persistenceId: "" },
        { tag: "" },
        { tag: "x".repeat(300) },
        { tag: { __proto__: null } },
      ];
      for (const query of bad) {
        await assert.rejects(
          () => store.queryEvents(query as never),
          InvalidPersistenceRequestError,
          JSON.stringify(query),
        );
      }
      const id = `Feed${++counter}:bad`;
      for (const tags of [[""], ["x".repeat(300)], [7], "tag", Array.from({ length: 33 }, (_, i) => `t${i}`)]) {
        await assert.rejects(
          () =>
            store.appendEvents({
              persistenceId: id,
              expectedRevision: 0,
              operationId: OperationId.random(),
              events: [{ manifest: "m", payload: "{}", tags: tags as never }],
            }),
          InvalidPersistenceRequestError,
        );
      }
      assert.equal(await store.loadRevision(id), 0);
    });

    test("concurrent writers: offsets are unique and each stream's events appear in sequence order", async () => {
      const type = `Conc${++counter}`;
      const start = await store.latestOffset();
      const writers = 16;
      const perWriter = 12;
      await Promise.all(
        Array.from({ length: writers }, async (_, w) => {
          let revision = 0;
          for (let i = 0; i < perWriter; i++) {
            revision = (
              await store.appendEvents({
                persistenceId: `${type}:${w}`,
                expectedRevision: revision,
                operationId: OperationId.random(),
                events: i % 4 === 3 ? [ev(i), ev(i)] : [ev(i)],
              })
            ).revision;
          }
        }),
      );
      const events = await readAll(store, { entityTypes: [type] }, start, 50);
      assert.equal(events.length, writers * (perWriter + perWriter / 4));
      assert.equal(new Set(events.map((e) => e.offset)).size, events.length);
      const lastSeq = new Map<string, number>();
      for (const e of events) {
        assert.equal(e.sequenceNr, (lastSeq.get(e.persistenceId) ?? 0) + 1, `${e.persistenceId} in order`);
        lastSeq.set(e.persistenceId, e.sequenceNr);
      }
    });

    test("a live stream sees every event exactly once, across a restart from its checkpoint", async () => {
      const type = `Live${++counter}`;
      const start = await store.latestOffset();
      const writers = 6;
      const perWriter = 20;
      const total = writers * perWriter;
      const seen: FeedEvent[] = [];
      // The first consumer stops after 40 events; its checkpoint is the last offset it processed.
      const firstAbort = new AbortController();
      const first = (async () => {
        for await (const e of feed.stream({
          afterOffset: start,
          entityTypes: [type],
          pageSize: 7,
          pollIntervalMs: 20,
          signal: firstAbort.signal,
        })) {
          seen.push(e);
          if (seen.length === 40) break;
        }
      })();
      const writing = Promise.all(
        Array.from({ length: writers }, async (_, w) => {
          for (let i = 0; i < perWriter; i++) {
            await store.appendEvents({
              persistenceId: `${type}:${w}`,
              expectedRevision: i,
              operationId: OperationId.random(),
              events: [ev(i, i % 5 === 0 ? ["five"] : [])],
            });
          }
        }),
      );
      await first;
      const checkpoint = seen[seen.length - 1]!.offset;
      const second = new AbortController();
      const resumed = (async () => {
        for await (const e of feed.stream({
          afterOffset: checkpoint,
          entityTypes: [type],
          pageSize: 5,
          pollIntervalMs: 20,
          signal: second.signal,
        })) {
          seen.push(e);
          if (seen.length === total) break;
        }
      })();
      await writing;
      await eventually(() => seen.length >= total, {
        what: "the resumed stream to see every event",
        describe: () => ({ seen: seen.length, total }),
      });
      await resumed;
      const offsets = seen.map((e) => e.offset);
      assert.equal(new Set(offsets).size, total, "no event twice");
      assert.deepEqual(
        offsets,
        [...offsets].sort((a, b) => a - b),
        "offset order",
      );
      assert.deepEqual(
        offsets,
        (await readAll(store, { entityTypes: [type] }, start, 100)).map((e) => e.offset),
        "exactly the stored events",
      );
    });

    // On PostgreSQL the store's own appends wake its readers directly, and other processes' commits through a LISTEN
    // connection that is reconnected and heartbeated (test/persistence/postgres-feed-wake.test.ts covers the latter).
    test("a stream follows new commits promptly and ends when its signal aborts", async () => {
      const type = `Wake${++counter}`;
      const abort = new AbortController();
      const got: number[] = [];
      // The starting point is read before the first append is sent. Read inside the consumer, it raced that append
      // on another pool connection, and on PostgreSQL about one time in 40 it already included event 0, so the
      // stream started after it and the test waited for an event it had skipped (the "missed wake-up" flake).
      const start = await store.latestOffset();
      const consumer = (async () => {
        for await (const e of feed.stream({
          afterOffset: start,
          entityTypes: [type],
          pollIntervalMs: 60_000,
          signal: abort.signal,
        })) {
          got.push(JSON.parse(e.payload).n);
        }
      })();
      for (let i = 0; i < 3; i++) {
        await store.appendEvents({
          persistenceId: `${type}:x`,
          expectedRevision: i,
          operationId: OperationId.random(),
          events: [ev(i)],
        });
        // With a one-minute poll, only the commit wake-up can deliver it in time.
        await eventually(() => got.length === i + 1, { what: `event ${i}`, describe: () => got });
      }
      abort.abort();
      await consumer;
      assert.deepEqual(got, [0, 1, 2]);
    });

    test("a filtered stream moves past the events its filter skips instead of reading them again", async () => {
      const type = `Skip${++counter}`;
      const start = await store.latestOffset();
      const asked: number[] = [];
      const spy = new Proxy(store, {
        get(target, key) {
          if (key === "queryEvents") {
            return (q: { afterOffset?: number }) => {
              asked.push(q.afterOffset ?? 0);
              return target.queryEvents(q);
            };
          }
          const value = Reflect.get(target, key, target);
          return typeof value === "function" ? value.bind(target) : value;
        },
      });
      const abort = new AbortController();
      const got: FeedEvent[] = [];
      const consumer = (async () => {
        for await (const e of new EventFeed(spy, new RealScheduler()).stream({
          afterOffset: start,
          entityTypes: [type],
          pollIntervalMs: 20,
          signal: abort.signal,
        })) {
          got.push(e);
        }
      })();
      const write = (pid: string, op: string) =>
        store.appendEvents({ persistenceId: pid, expectedRevision: 0, operationId: op, events: [ev(1)] });
      await write(`${type}:wanted`, "s1");
      await eventually(() => got.length === 1, { what: "the matching event", describe: () => ({ got, asked }) });
      await write(`Not${type}:other`, "s2");
      const skipped = (await readAll(store, { persistenceId: `Not${type}:other` }, start))[0]!.offset;
      await eventually(() => asked.some((a) => a >= skipped), {
        what: `a page read after the skipped event's offset ${skipped}`,
        describe: () => ({ asked: asked.slice(-5) }),
      });
      abort.abort();
      await consumer;
      assert.deepEqual(
        got.map((e) => e.persistenceId),
        [`${type}:wanted`],
      );
    });

    test("retention removes the deleted events from the feed", async () => {
      const id = `Ret${++counter}:r`;
      const start = await store.latestOffset();
      await store.appendEvents({
        persistenceId: id,
        expectedRevision: 0,
        operationId: "r1",
        events: [ev(1, ["t"]), ev(2, ["t"]), ev(3)],
      });
      await store.saveSnapshot(id, { sequenceNr: 2, manifest: "s", payload: "{}" });
      await store.deleteEventsTo(id, 2);
      assert.deepEqual(
        (await readAll(store, { persistenceId: id }, start)).map((e) => e.sequenceNr),
        [3],
      );
      assert.deepEqual(await readAll(store, { tag: "t", persistenceId: id }, start), []);
    });

    test("an offset is never handed out twice: retention of the newest events leaves later appends larger ones", async () => {
      const id = `Newest${++counter}:n`;
      const start = await store.latestOffset();
      const append = (revision: number, op: string, n: number) =>
        store.appendEvents({ persistenceId: id, expectedRevision: revision, operationId: op, events: [ev(n)] });
      const offsetOf = async (seq: number) =>
        (await readAll(store, { persistenceId: id }, start)).find((e) => e.sequenceNr === seq)!.offset;
      await append(0, "n1", 1);
      await append(1, "n2", 2);
      let newest = await offsetOf(2);
      // Twice: the second time an earlier deletion's record of the largest offset is itself below the new one.
      for (const seq of [2, 3]) {
        await store.saveSnapshot(id, { sequenceNr: seq, manifest: "s", payload: "{}" });
        await store.deleteEventsTo(id, seq);
        await append(seq, `n${seq + 1}`, seq + 1);
        const next = await offsetOf(seq + 1);
        assert.ok(next > newest, `the event after deleting offset ${newest} got ${next}`);
        newest = next;
      }
      // Nothing but events comes back from an unfiltered read.
      assert.deepEqual(
        (await readAll(store, {}, start)).map((e) => [e.persistenceId, e.sequenceNr]),
        [[id, 4]],
      );
    });

    test("projection control: stored per name, changed field by field, a rebuild request cleared once by the batch that carries it out", async () => {
      const name = `control-${++counter}`;
      assert.deepEqual(await store.loadProjectionControl(name), { paused: false, rebuildFrom: null });
      assert.deepEqual(await store.setProjectionControl(name, { paused: true }), { paused: true, rebuildFrom: null });
      assert.deepEqual(await store.setProjectionControl(name, { rebuildFrom: 3 }), { paused: true, rebuildFrom: 3 });
      assert.deepEqual(await store.loadProjectionControl(name), { paused: true, rebuildFrom: 3 });
      assert.deepEqual(await store.loadProjectionControl(`${name}-other`), { paused: false, rebuildFrom: null });
      for (const bad of [{ paused: "yes" }, { rebuildFrom: -1 }, { rebuildFrom: 1.5 }, { rebuildFrom: "3" }, null]) {
        await assert.rejects(
          () => store.setProjectionControl(name, bad as never),
          InvalidPersistenceRequestError,
          JSON.stringify(bad),
        );
      }
      assert.deepEqual(await store.loadProjectionControl(name), { paused: true, rebuildFrom: 3 }, "nothing changed");
      // A batch carrying out another rebuild than the one asked for commits nothing.
      await assert.rejects(
        () =>
          store.runProjectionBatch({ name, expectedOffset: 0, newOffset: 7, completesRebuildFrom: 4 }, async () => {}),
        ProjectionRebuildSupersededError,
      );
      assert.equal(await store.loadProjectionOffset(name), null, "the superseded batch moved no checkpoint");
      await store.runProjectionBatch(
        { name, expectedOffset: 0, newOffset: 3, completesRebuildFrom: 3 },
        async () => {},
      );
      assert.equal(await store.loadProjectionOffset(name), 3);
      assert.deepEqual(await store.loadProjectionControl(name), { paused: true, rebuildFrom: null }, "request cleared");
      // The same request again finds it gone: a second owner cannot carry it out twice.
      await assert.rejects(
        () =>
          store.runProjectionBatch({ name, expectedOffset: 3, newOffset: 3, completesRebuildFrom: 3 }, async () => {}),
        ProjectionRebuildSupersededError,
      );
      assert.deepEqual(await store.setProjectionControl(name, { paused: false }), { paused: false, rebuildFrom: null });
    });
  });
}
