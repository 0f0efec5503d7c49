// A projection batch whose connection is lost while the batch holds it (a database restart, a terminated backend)
// fails and rolls back; the process goes on (pg emits 'error' on a checked-out client, which no pool listener handles:
// the soak's projection workload found a node that died of it), and the next batch runs on a new connection.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { freshPostgresStore, rawClient } from "./pg-fixture.ts";

const pg = await freshPostgresStore("projection_conn_loss");
after(() => pg.dispose());

test("postgres: a projection batch whose backend is terminated mid-batch fails, commits nothing, and the next batch runs", async () => {
  const raw = await rawClient(pg.url, pg.schema);
  try {
    await raw.query("CREATE TABLE seen (n INT PRIMARY KEY)");
    await assert.rejects(
      pg.store.runProjectionBatch({ name: "lossy", expectedOffset: 0, newOffset: 5 }, async (tx) => {
        await tx.query("INSERT INTO seen (n) VALUES (1)");
        const [row] = await tx.query("SELECT pg_backend_pid() AS pid");
        await raw.query("SELECT pg_terminate_backend($1)", [row!.pid]);
        // The connection is gone: this statement fails (and pg emits 'error' on the client as it learns so).
        await tx.query("SELECT 1");
      }),
      /terminat|Connection/i,
    );
    assert.equal(await pg.store.loadProjectionOffset("lossy"), null, "no checkpoint committed");
    assert.deepEqual((await raw.query("SELECT n FROM seen")).rows, [], "no write of the batch committed");
    await pg.store.runProjectionBatch({ name: "lossy", expectedOffset: 0, newOffset: 5 }, async (tx) => {
      await tx.query("INSERT INTO seen (n) VALUES (2)");
    });
    assert.equal(await pg.store.loadProjectionOffset("lossy"), 5);
    assert.deepEqual((await raw.query("SELECT n FROM seen")).rows, [{ n: 2 }]);
  } finally {
    await raw.end();
  }
});
