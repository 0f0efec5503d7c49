// An exactly-once projection survives kill -9 of its process mid-batch: the killed batch's read-model writes roll
// back with its checkpoint, and the restarted process counts every event exactly once (PostgreSQL, real processes).
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { test } from "node:test";
import { OperationId } from "../../src/persistence/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { freshPostgresStore, rawClient } from "./pg-fixture.ts";

function startChild(url: string, schema: string): ChildProcess {
  return spawn(process.execPath, ["--import", "tsx", "test/persistence/projection-child.ts", url, schema], {
    stdio: ["ignore", "pipe", "inherit"],
  });
}

test("postgres: an exactly-once projection killed with SIGKILL mid-batch resumes and counts every event once", async () => {
  const { store, url, schema, dispose } = await freshPostgresStore("projkill");
  const raw = await rawClient(url, schema);
  const children: ChildProcess[] = [];
  try {
    await raw.query("CREATE TABLE counts (id TEXT PRIMARY KEY, events BIGINT NOT NULL, last_seq BIGINT NOT NULL)");
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
    const first = startChild(url, schema);
    children.push(first);
    // Kill it while a batch is open (its transaction has written rows that are not committed) after at least one commit.
    await eventually(
      async () =>
        (await checkpoint()) > 0 &&
        (
          await raw.query(
            "SELECT 1 FROM pg_stat_activity WHERE application_name = 'movie' AND xact_start IS NOT NULL AND query LIKE '%counts%'",
          )
        ).rowCount! > 0,
      { what: "a batch in flight after a committed one", timeoutMs: 30_000, intervalMs: 2 },
    );
    first.kill("SIGKILL");
    await new Promise((resolve) => first.once("exit", resolve));
    const atKill = await checkpoint();
    assert.ok(atKill < latest, `killed before the end (${atKill} < ${latest})`);
    // The read model holds exactly the events up to the committed checkpoint (after the dead backend rolls back).
    await eventually(
      async () => Number((await raw.query("SELECT coalesce(sum(events), 0) AS n FROM counts")).rows[0].n) === atKill,
      { what: "the killed batch's writes to roll back", describe: () => atKill },
    );
    const second = startChild(url, schema);
    children.push(second);
    await eventually(async () => (await checkpoint()) === latest, {
      what: "the restarted projection to catch up",
      timeoutMs: 60_000,
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
