// A long exactly-once projection batch and its own shard lease, on the real PostgreSQL (issue 20; docs/protocol.md
// §13.4). The batch's transaction keeps the fence row locked until it commits. With FOR SHARE that lock also blocked
// the owner's renewal (an UPDATE of the row), so a batch longer than the lease's remaining time made the owner's own
// lease lapse. The batch now locks the row FOR KEY SHARE, which a renewal (a non-key UPDATE) does not wait for, and
// every transfer locks the row FOR UPDATE first, which does: these tests hold a batch open with a handler the test
// controls and check both halves.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { RealScheduler } from "../../src/actor/index.ts";
import { ProjectionRunner, type ShardLeaseKey, type ShardLeaseToken } from "../../src/persistence/index.ts";
import type { PostgresStore } from "../../src/persistence/postgres/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { freshPostgresStore } from "./pg-fixture.ts";

let store: PostgresStore;
let dispose: () => Promise<void>;
const clock = new RealScheduler();

before(async () => {
  ({ store, dispose } = await freshPostgresStore("projlease"));
  await store.runProjectionBatch({ name: "ddl", expectedOffset: 0, newOffset: 0 }, async (tx) => {
    await tx.query("CREATE TABLE read_model (event_offset BIGINT PRIMARY KEY, projection TEXT NOT NULL)");
  });
});
after(() => dispose());

/**
 * A gate the handler waits at, opened by the test; `arrived` resolves, with the batch's backend pid, when the handler
 * first waits there.
 */
function gate() {
  let open!: () => void;
  let reached!: (pid: number) => void;
  const opened = new Promise<void>((resolve) => {
    open = resolve;
  });
  const arrived = new Promise<number>((resolve) => {
    reached = resolve;
  });
  return { open, opened, arrived, reached };
}

/** Appends `n` events to a fresh entity; returns the feed's latest offset. */
async function appendEvents(pid: string, n: number): Promise<number> {
  await store.appendEvents({
    persistenceId: pid,
    expectedRevision: 0,
    operationId: `${pid}-op`,
    events: Array.from({ length: n }, () => ({ manifest: "E", payload: "{}" })),
  });
  return store.latestOffset();
}

/** The projection's rows of the read model. */
async function rowsOf(projection: string): Promise<number> {
  const rows = await store.pool.query("SELECT count(*)::int AS n FROM read_model WHERE projection = $1", [projection]);
  return rows.rows[0].n as number;
}

/** A projection over `pid`'s events whose handler waits at `g` on its first event. */
function startHeld(name: string, pid: string, fence: ShardLeaseToken, g: ReturnType<typeof gate>) {
  let first = true;
  return ProjectionRunner.start(
    {
      name,
      mode: "exactly-once",
      source: { persistenceId: pid },
      handler: async (event, tx) => {
        if (first) {
          first = false;
          const backend = await tx.query("SELECT pg_backend_pid() AS pid");
          g.reached(Number(backend[0]!.pid));
          await g.opened;
        }
        await tx.query("INSERT INTO read_model (event_offset, projection) VALUES ($1, $2)", [event.offset, name]);
      },
    },
    store,
    clock,
    { fence, retryBackoffMs: 20 },
  );
}

/** Whether some backend waits for a lock the batch's backend `batchPid` holds. */
async function blockedBy(batchPid: number): Promise<boolean> {
  const rows = await store.pool.query(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
    [batchPid],
  );
  return (rows.rows[0].n as number) > 0;
}

/** The database clock, in epoch milliseconds. */
async function dbNowMs(): Promise<number> {
  return Number((await store.pool.query("SELECT movie_now_ms() AS n")).rows[0].n);
}

test("the owner renews its lease while its own long batch is open, past the lease's original end, and the batch commits", async () => {
  const key: ShardLeaseKey = { clusterName: "projlease", entityType: "projection-renew", shardId: 0 };
  const token = (await store.acquireShardLease(key, "node-a", 1_500))!;
  const latest = await appendEvents("Renew:1", 3);
  const g = gate();
  const runner = startHeld("renew", "Renew:1", token, g);
  try {
    await g.arrived;
    // The batch's transaction is open and holds its fence row; renew as a lease keeper would, until the lease's
    // first end has passed on the database clock. Each renewal must complete while the batch is still open.
    let renewed = token;
    let renewals = 0;
    while ((await dbNowMs()) <= token.leaseUntilEpochMs + 200) {
      const renewal = store.renewShardLease(renewed, 1_500);
      let outcome: ShardLeaseToken | null | "pending" = "pending";
      renewal.then(
        (t) => {
          outcome = t;
        },
        () => {},
      );
      await eventually(() => outcome !== "pending", {
        what: "a renewal answered while the batch holds its fence row",
        describe: () => ({ renewals, leaseUntil: renewed.leaseUntilEpochMs }),
        timeoutMs: 5_000,
      });
      assert.notEqual(outcome, null, `renewal ${renewals + 1} kept the lease`);
      renewed = (await renewal)!;
      renewals++;
      await new Promise((resolve) => setTimeout(resolve, 100)); // the keeper's renewal interval, not a synchronisation
    }
    assert.equal(renewed.epoch, token.epoch, "renewed in place");
    g.open();
    await runner.caughtUpTo(latest);
    assert.equal(runner.status, "running", `the batch committed: ${JSON.stringify(runner.stats)}`);
    assert.equal(await rowsOf("renew"), 3);
    assert.equal(await store.loadProjectionOffset("renew"), latest);
    assert.notEqual(await store.renewShardLease(renewed, 1_500), null, "the lease is still the owner's afterwards");
  } finally {
    g.open();
    await runner.stop();
  }
});

for (const how of ["acquireShardLease", "acquireShardLeases"] as const) {
  test(`a transfer (${how}) waits for the open batch of the old epoch, which commits before the new epoch begins`, async () => {
    const key: ShardLeaseKey = { clusterName: "projlease", entityType: `projection-${how}`, shardId: 0 };
    const token = (await store.acquireShardLease(key, "node-a", 60_000))!;
    const pid = `Transfer:${how}`;
    const latest = await appendEvents(pid, 3);
    const g = gate();
    const runner = startHeld(how, pid, token, g);
    let acquired: ShardLeaseToken | null | undefined;
    try {
      const batchPid = await g.arrived;
      // A renewal while the batch is open (its lock must survive a non-key update), to 1 ms: the lease expires.
      const renewed = (await store.renewShardLease(token, 1))!;
      assert.notEqual(renewed, null);
      await eventually(async () => (await dbNowMs()) > renewed.leaseUntilEpochMs, { what: "the lease expired" });
      const other: ShardLeaseKey = { clusterName: "projlease", entityType: `projection-${how}`, shardId: 1 };
      const transfer =
        how === "acquireShardLease"
          ? store.acquireShardLease(key, "node-b", 60_000)
          : store.acquireShardLeases([key, other], "node-b", 60_000).then((tokens) => tokens[0]!);
      transfer.then(
        (t) => {
          acquired = t;
        },
        () => {},
      );
      await eventually(() => blockedBy(batchPid), {
        what: "node-b's acquire waiting for the batch's lock on the fence row",
        describe: () => ({ acquired }),
      });
      assert.equal(acquired, undefined, "no new epoch while a write of the old one is in flight");
      g.open();
      await runner.caughtUpTo(latest);
      assert.equal(await rowsOf(how), 3, "the old epoch's batch committed whole, before the new epoch");
      assert.equal(await store.loadProjectionOffset(how), latest);
      await eventually(() => acquired !== undefined, { what: "node-b's acquire answered", describe: () => acquired });
      const taken = acquired as ShardLeaseToken | null | undefined; // set by the transfer's callback
      assert.equal(taken?.owner, "node-b");
      assert.equal(taken?.epoch, token.epoch + 1);
      // The old owner's next batch is fenced out and commits nothing.
      await store.appendEvents({
        persistenceId: pid,
        expectedRevision: 3,
        operationId: `${pid}-op2`,
        events: [{ manifest: "E", payload: "{}" }],
      });
      await eventually(() => runner.status === "stale", {
        what: "the old epoch's instance fenced out",
        describe: () => runner.stats,
      });
      assert.equal(await rowsOf(how), 3, "nothing committed under the stale epoch");
      assert.equal(await store.loadProjectionOffset(how), latest);
    } finally {
      g.open();
      await runner.stop();
    }
  });
}
