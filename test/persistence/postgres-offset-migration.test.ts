// PostgreSQL migration 16 on databases that earlier schemas wrote: every event keeps its feed offset and tags, an event
// that has no feed row gets a new offset, no offset that migration 9's identity handed out (retention deleted its row
// since, or its transaction rolled back) is handed out again, and a database at any earlier version with events in it
// migrates to offsets on the journal rows in the order it had.
import assert from "node:assert/strict";
import { test } from "node:test";
import type pg from "pg";
import { PostgresStore, postgresMigrations } from "../../src/persistence/postgres/index.ts";
import { readAll } from "./feed-contract.ts";
import { dropSchema, postgresTestUrl, rawClient, uniqueSchema } from "./pg-fixture.ts";

/** A schema as a build at `version` leaves it: migrations 1..version (checksummed, so the ones that build ran). */
async function schemaAt(raw: pg.Client, schema: string, version: number): Promise<void> {
  await raw.query(`CREATE SCHEMA ${schema}`);
  await raw.query(`CREATE TABLE movie_schema_migration (version INTEGER PRIMARY KEY, name TEXT NOT NULL,
    checksum TEXT NOT NULL, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`);
  for (const m of postgresMigrations.slice(0, version)) {
    for (const sql of m.statements) await raw.query(sql);
    await raw.query("INSERT INTO movie_schema_migration (version, name, checksum) VALUES ($1, $2, $3)", [
      m.version,
      m.name,
      m.checksum,
    ]);
  }
}

/** Writes event `seq` of `pid` as every earlier schema accepts it (from 9 on, the feed trigger gives it its row). */
const oldAppend = (raw: pg.Client, pid: string, seq: number) =>
  raw.query("INSERT INTO event_journal (persistence_id, sequence_nr, manifest, payload) VALUES ($1, $2, 'm', $3)", [
    pid,
    seq,
    JSON.stringify({ pid, seq }),
  ]);

const offsetOf = async (raw: pg.Client, pid: string, seq: number) =>
  Number(
    (await raw.query("SELECT event_offset FROM event_feed WHERE persistence_id = $1 AND sequence_nr = $2", [pid, seq]))
      .rows[0].event_offset,
  );

test("postgres migration 16: offsets and tags kept, a feed-less event numbered on, no handed-out offset reused", async () => {
  const url = await postgresTestUrl();
  const schema = uniqueSchema("v16");
  const raw = await rawClient(url, schema);
  try {
    await schemaAt(raw, schema, 15);
    await oldAppend(raw, "Order:a", 1);
    await oldAppend(raw, "Order:a", 2);
    await oldAppend(raw, "Stock:b", 1);
    await oldAppend(raw, "Order:c", 1);
    const [a1, a2, b1, c1] = [
      await offsetOf(raw, "Order:a", 1),
      await offsetOf(raw, "Order:a", 2),
      await offsetOf(raw, "Stock:b", 1),
      await offsetOf(raw, "Order:c", 1),
    ];
    assert.deepEqual([a1, a2, b1, c1], [1, 2, 3, 4]);
    await raw.query("INSERT INTO event_tag (tag, event_offset) VALUES ('big', $1), ('red', $1), ('red', $2)", [a2, b1]);
    // Retention removed the largest offset (4) with its row; a rolled-back append took offset 5.
    await raw.query("DELETE FROM event_journal WHERE persistence_id = 'Order:c'");
    await raw.query("DELETE FROM event_feed WHERE persistence_id = 'Order:c'");
    await raw.query("BEGIN");
    await oldAppend(raw, "Order:rolled-back", 1);
    await raw.query("ROLLBACK");
    // An event written while the trigger was dropped by hand has no feed row.
    await raw.query("ALTER TABLE event_journal DISABLE TRIGGER movie_event_feed");
    await oldAppend(raw, "Order:feedless", 1);
    await raw.query("ALTER TABLE event_journal ENABLE TRIGGER movie_event_feed");

    const store = await PostgresStore.connect({ connectionUri: url, schema, poolSize: 2 });
    try {
      const events = await readAll(store, {});
      assert.deepEqual(
        events.map((e) => [e.offset, e.persistenceId, e.sequenceNr, e.entityType, e.tags]),
        [
          [1, "Order:a", 1, "Order", []],
          [2, "Order:a", 2, "Order", ["big", "red"]],
          [3, "Stock:b", 1, "Stock", ["red"]],
          [6, "Order:feedless", 1, "Order", []],
        ],
        "kept offsets and tags; the feed-less event after the identity's high-water mark (5)",
      );
      assert.deepEqual(JSON.parse(events[1]!.payload), { pid: "Order:a", seq: 2 });
      assert.equal(await store.latestOffset(), 6);
      assert.deepEqual(
        (await readAll(store, { tag: "red" })).map((e) => e.offset),
        [2, 3],
      );
      assert.deepEqual(
        (await readAll(store, { entityTypes: ["Stock"] })).map((e) => e.offset),
        [3],
      );
      // New appends number on above every offset handed out, on every path, with their tags.
      await store.appendEvents({ persistenceId: "Order:new", expectedRevision: 0, operationId: "n1", events: [ev()] });
      await store.appendEvents({
        persistenceId: "Order:new",
        expectedRevision: 1,
        operationId: "n2",
        events: [ev(["red"]), ev()],
      });
      const after = await store.queryEvents({ afterOffset: 6 });
      assert.deepEqual(
        after.events.map((e) => [e.offset, e.sequenceNr, e.tags]),
        [
          [7, 1, []],
          [8, 2, ["red"]],
          [9, 3, []],
        ],
      );
      // Retention removes the rows' tags with them; the view keeps answering SQL written against event_feed.
      await store.saveSnapshot("Order:a", { sequenceNr: 2, manifest: "s", payload: "{}" });
      assert.deepEqual(await store.deleteEventsTo("Order:a", 2), { deletedEvents: 2, throughSeq: 2 });
      assert.deepEqual(
        (await raw.query("SELECT tag, event_offset FROM event_tag ORDER BY event_offset, tag")).rows.map((r) => [
          r.tag,
          Number(r.event_offset),
        ]),
        [
          ["red", 3],
          ["red", 8],
        ],
      );
      assert.deepEqual(
        (await raw.query("SELECT event_offset, entity_type FROM event_feed ORDER BY event_offset")).rows.map((r) => [
          Number(r.event_offset),
          r.entity_type,
        ]),
        [
          [3, "Stock"],
          [6, "Order"],
          [7, "Order"],
          [8, "Order"],
          [9, "Order"],
        ],
      );
      // This schema's journal only: other tests' schemas in the same database may be at any version.
      const trigger = await raw.query(
        `SELECT 1 FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE t.tgname = 'movie_event_feed' AND n.nspname = $1`,
        [schema],
      );
      assert.equal(trigger.rows.length, 0, "the feed trigger is gone");
    } finally {
      await store.close();
    }
  } finally {
    await raw.end();
    await dropSchema(url, schema);
  }
});

test("postgres: a database at every earlier version, with events, migrates to offsets on the journal rows in their order", async () => {
  const url = await postgresTestUrl();
  for (let version = 1; version < postgresMigrations.length; version++) {
    const schema = uniqueSchema(`v${version}to16`);
    const raw = await rawClient(url, schema);
    try {
      await schemaAt(raw, schema, version);
      // Separate transactions: from 9 on the trigger numbers them in this order; before 9 migration 9 numbers them
      // by commit time.
      await oldAppend(raw, "Cart:1", 1);
      await oldAppend(raw, "Cart:0", 1);
      await oldAppend(raw, "Cart:1", 2);
      const store = await PostgresStore.connect({ connectionUri: url, schema, poolSize: 1 });
      try {
        await store.appendEvents({ persistenceId: "Cart:0", expectedRevision: 1, operationId: "x", events: [ev()] });
        assert.deepEqual(
          (await readAll(store, { entityTypes: ["Cart"] })).map((e) => [e.offset, e.persistenceId, e.sequenceNr]),
          [
            [1, "Cart:1", 1],
            [2, "Cart:0", 1],
            [3, "Cart:1", 2],
            [4, "Cart:0", 2],
          ],
          `from version ${version}`,
        );
      } finally {
        await store.close();
      }
    } finally {
      await raw.end();
      await dropSchema(url, schema);
    }
  }
});

function ev(tags: string[] = []) {
  return { manifest: "m", payload: "{}", ...(tags.length > 0 ? { tags } : {}) };
}
