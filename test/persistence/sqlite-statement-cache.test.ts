// The prepared-statement cache of the SQLite projection connection: a statement is prepared once per SQL text and
// reused, the cache stays within its capacity, a statement that fails to prepare is not kept, and a cached statement
// still runs after the schema changed under it.
import assert from "node:assert/strict";
import { test } from "node:test";
import Database from "better-sqlite3";
import { StatementCache } from "../../src/persistence/sqlite/statement-cache.ts";

test("a statement is prepared once per text, the cache keeps at most its capacity, and a failed prepare is not kept", () => {
  const db = new Database(":memory:");
  try {
    let prepared = 0;
    const prepare = db.prepare.bind(db);
    db.prepare = ((sql: string) => {
      prepared++;
      return prepare(sql);
    }) as typeof db.prepare;
    const cache = new StatementCache(db, 3);
    db.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)");
    const insert = "INSERT INTO t (id, v) VALUES (?, ?)";
    for (let i = 1; i <= 5; i++) cache.get(insert).run(i, `v${i}`);
    assert.equal(prepared, 1, "prepared once for five runs");
    assert.strictEqual(cache.get(insert), cache.get(insert));
    for (const sql of ["SELECT 1", "SELECT 2", "SELECT 3", "SELECT 4"]) cache.get(sql);
    assert.equal(cache.size, 3, "bounded by its capacity");
    assert.equal(prepared, 5);
    cache.get(insert);
    assert.equal(prepared, 6, "the oldest text was dropped and is prepared again");
    assert.throws(() => cache.get("SELEC nonsense"), /syntax error/);
    assert.equal(cache.size, 3, "a statement that failed to prepare is not kept");
    // A cached statement after the schema changed: SQLite re-prepares it itself.
    const select = "SELECT count(*) AS n FROM t";
    assert.deepEqual(cache.get(select).get(), { n: 5 });
    db.exec("ALTER TABLE t ADD COLUMN w TEXT");
    assert.deepEqual(cache.get(select).get(), { n: 5 });
  } finally {
    db.close();
  }
});
