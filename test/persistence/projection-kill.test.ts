// A standalone exactly-once projection (ProjectionRunner, no cluster and no fence) survives kill -9 of its process
// mid-batch: the killed batch's read-model writes roll back with its checkpoint, and a restarted process counts every
// event exactly once (PostgreSQL, real processes). The sharded, fenced case, where another node takes over, is
// test/sharding/persistent/projection-node-kill.test.ts. "Mid-batch" is made certain by a gate on the read model's
// table that holds the write of one chosen event in the second batch.
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { test } from "node:test";
import { OperationId } from "../../src/persistence/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { countsProjection, countsTable } from "../sharding/persistent/fixtures/projection-counts.ts";
import { freshPostgresStore, rawClient, writeGate } from "./pg-fixture.ts";

const childApp = `projkill-${process.pid}`;

function startChild(url: string, schema: string): ChildProcess {
  return spawn(process.execPath, ["--import", "tsx", "test/persistence/projection-child.ts", url, schema, childApp], {
    stdio: ["ignore", "pipe", "inherit"],
  });
}

test("postgres: an exactly-once projection killed with SIGKILL mid-batch resumes and counts every event once", async () => {
  const { store, url, schema, dispose } = await freshPostgresStore("projkill");
  const raw = await rawClient(url, schema);
  const children: ChildProcess[] = [];
  try {
    await raw.query(countsTable);
    const entities = 10;
    const perEntity = 30;
    for (let i = 0; i < perEntity; i++) {
      await Promise.all(
        Array.from({ length: entities }, (_, e) =>
          store.appendEvents({
            persistenceId: `Acct:${e}`,
            expectedRevision: i,
            operationId: OperationId.random(),
            events: [{ manifest: "m", payload: "{}" }],
          }),
        ),
      );
    }
    const latest = await store.latestOffset();
    const checkpoint = async () => (await store.loadProjectionOffset("counts")) ?? 0;
    const feedUpTo = async (offset: number) =>
      Number((await raw.query("SELECT count(*) AS n FROM event_feed WHERE event_offset <= $1", [offset])).rows[0].n);
    const counted = async () => Number((await raw.query("SELECT coalesce(sum(events), 0) AS n FROM counts")).rows[0].n);
    // Acct:0's 8th event comes after 70 others: inside the second batch of 50.
    const gatedOffset = Number(
      (await raw.query("SELECT event_offset FROM event_feed WHERE persistence_id = 'Acct:0' AND sequence_nr = 8"))
        .rows[0].event_offset,
    );
    assert.ok((await feedUpTo(gatedOffset)) > countsProjection.batchSize!, "the gated event is past the first batch");
    const gate = await writeGate(url, schema, "counts_gate", [
      { table: "counts", event: "INSERT", when: "NEW.id = 'Acct:0' AND NEW.last_seq = 8" },
    ]);
    try {
      await gate.shut();
      const first = startChild(url, schema);
      children.push(first);
      await eventually(() => gate.waiting(childApp, "%INSERT INTO counts%", ["advisory"]), {
        what: "the batch held at the gated event",
        timeoutMs: 30_000,
        describe: () => ({ exit: first.exitCode }),
      });
      const atKill = await checkpoint();
      assert.ok(
        atKill > 0 && atKill < gatedOffset,
        `one batch committed, the held one not (${atKill} < ${gatedOffset})`,
      );
      first.kill("SIGKILL");
      await new Promise((resolve) => first.once("exit", resolve));
      await gate.open();
      await eventually(
        async () =>
          (await raw.query("SELECT 1 FROM pg_stat_activity WHERE application_name = $1", [childApp])).rowCount === 0,
        { what: "the killed process's sessions to end" },
      );
      assert.equal(await checkpoint(), atKill, "the killed batch did not move the checkpoint");
      assert.equal(await counted(), await feedUpTo(atKill), "the killed batch's writes rolled back with it");
    } finally {
      await gate.dispose();
    }
    const second = startChild(url, schema);
    children.push(second);
    await eventually(async () => (await checkpoint()) === latest, {
      what: "the restarted projection to catch up",
      timeoutMs: 30_000,
    });
    const rows = (await raw.query("SELECT id, events, last_seq FROM counts ORDER BY id")).rows;
    assert.equal(rows.length, entities);
    for (const row of rows) {
      assert.equal(Number(row.events), perEntity, `${row.id} counted every event once`);
      assert.equal(Number(row.last_seq), perEntity);
    }
  } finally {
    for (const child of children) if (child.exitCode === null) child.kill("SIGKILL");
    await raw.end();
    await dispose();
  }
});
