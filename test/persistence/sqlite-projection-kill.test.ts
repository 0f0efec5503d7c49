// The SQLite twin of projection-kill.test.ts: a standalone exactly-once projection (ProjectionRunner, no cluster, no
// fence) killed with SIGKILL mid-batch, in a real child process, on a real SQLite file. The killed batch's read-model
// writes roll back with its checkpoint (the batch is one SQLite transaction), and a restarted process counts every
// event exactly once. "Mid-batch" is made certain by the child's handler, which stops inside the second batch after
// writing a chosen event's row and never returns.
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import Database from "better-sqlite3";
import { OperationId } from "../../src/persistence/index.ts";
import { SqliteStore } from "../../src/persistence/sqlite/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { countsProjection, countsTable } from "../sharding/persistent/fixtures/projection-counts.ts";

function startChild(dbPath: string, gate: string | null): { child: ChildProcess; output: () => string } {
  const child = spawn(
    process.execPath,
    ["--import", "tsx", "test/persistence/sqlite-projection-child.ts", dbPath, ...(gate === null ? [] : [gate])],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  let output = "";
  child.stdout!.on("data", (chunk: Buffer) => {
    output += chunk.toString();
  });
  return { child, output: () => output };
}

test("sqlite: an exactly-once projection killed with SIGKILL mid-batch resumes and counts every event once", async () => {
  const dir = mkdtempSync(join(tmpdir(), "movie-sqlite-projkill-"));
  const dbPath = join(dir, "projkill.sqlite3");
  const store = SqliteStore.open({ dbPath });
  const children: ChildProcess[] = [];
  try {
    await store.runProjectionBatch({ name: "ddl", expectedOffset: 0, newOffset: 0 }, async (tx) => {
      await tx.query(countsTable);
    });
    const entities = 10;
    const perEntity = 30;
    for (let i = 0; i < perEntity; i++) {
      for (let e = 0; e < entities; e++) {
        await store.appendEvents({
          persistenceId: `Acct:${e}`,
          expectedRevision: i,
          operationId: OperationId.random(),
          events: [{ manifest: "m", payload: "{}" }],
        });
      }
    }
    const latest = await store.latestOffset();
    // A reader of its own, as the test's eyes: it sees only what the child committed.
    const raw = new Database(dbPath, { readonly: true });
    const checkpoint = () =>
      (
        raw.prepare("SELECT event_offset FROM projection_checkpoint WHERE projection_name = 'counts'").get() as
          | { event_offset: number }
          | undefined
      )?.event_offset ?? 0;
    const counted = () => (raw.prepare("SELECT coalesce(sum(events), 0) AS n FROM counts").get() as { n: number }).n;
    // Acct:0's 8th event comes after 70 others (the appends interleave the entities): inside the second batch of 50.
    assert.ok(7 * entities + 1 > countsProjection.batchSize!, "the gated event is past the first batch");
    const first = startChild(dbPath, "Acct:0:8");
    children.push(first.child);
    await eventually(() => first.output().includes("held"), {
      what: "the child's batch held at Acct:0's 8th event",
      timeoutMs: 30_000,
      describe: () => ({ output: first.output(), exit: first.child.exitCode }),
    });
    const atKill = checkpoint();
    assert.equal(atKill, countsProjection.batchSize, "the first batch committed, the held one not");
    first.child.kill("SIGKILL");
    await new Promise((resolve) => first.child.once("exit", resolve));
    assert.equal(checkpoint(), atKill, "the killed batch did not move the checkpoint");
    assert.equal(counted(), atKill, "the killed batch's writes rolled back with it");
    const second = startChild(dbPath, null);
    children.push(second.child);
    await eventually(() => checkpoint() === latest, {
      what: "the restarted projection to catch up",
      timeoutMs: 30_000,
      describe: () => ({ checkpoint: checkpoint(), latest, exit: second.child.exitCode }),
    });
    const rows = raw.prepare("SELECT id, events, last_seq FROM counts ORDER BY id").all() as {
      id: string;
      events: number;
      last_seq: number;
    }[];
    assert.equal(rows.length, entities);
    for (const row of rows) {
      assert.equal(row.events, perEntity, `${row.id} counted every event once`);
      assert.equal(row.last_seq, perEntity);
    }
    raw.close();
  } finally {
    for (const child of children) if (child.exitCode === null) child.kill("SIGKILL");
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
