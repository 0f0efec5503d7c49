import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { after, before, describe, test } from "node:test";
import {
  CircuitOpenError,
  ConcurrentWriteError,
  CorruptPersistentRecordError,
  MigrationChecksumMismatchError,
  PersistenceConfigurationError,
  PersistenceConnectionError,
  PersistenceTimeoutError,
  type ShardLeaseToken,
  StaleShardOwnerError,
  UnsupportedSchemaVersionError,
} from "../../src/persistence/index.ts";
import {
  PostgresStore,
  postgresMigrationSql,
  postgresMigrations,
  validatePostgresUri,
} from "../../src/persistence/postgres/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { dropSchema, freshPostgresStore, postgresTestUrl, rawClient, uniqueSchema, writeGate } from "./pg-fixture.ts";

const ev = (n: number) => ({ manifest: "test.Event", payload: JSON.stringify({ n }) });

test("postgres: connection URI validation gives typed configuration errors", async () => {
  assert.throws(() => validatePostgresUri(""), PersistenceConfigurationError);
  assert.throws(() => validatePostgresUri("not a url"), PersistenceConfigurationError);
  assert.throws(() => validatePostgresUri("mysql://u@h/db"), /postgres:\/\/ or postgresql:\/\//);
  assert.equal(validatePostgresUri("postgresql://u@h:5432/db"), "postgresql://u@h:5432/db");
  await assert.rejects(PostgresStore.connect({ connectionUri: "http://x" }), PersistenceConfigurationError);
  await assert.rejects(
    PostgresStore.connect({ connectionUri: "postgres://u@h/db", schema: "Bad-Name" }),
    PersistenceConfigurationError,
  );
});

test("postgres: migration SQL can be printed", () => {
  const sql = postgresMigrationSql();
  for (const name of ["core-persistence-schema", "cluster-shard-fencing-schema", "shard_lease", "pg_advisory_lock"]) {
    assert.ok(sql.includes(name), name);
  }
});

describe("postgres-only behaviour", () => {
  let ctx: Awaited<ReturnType<typeof freshPostgresStore>>;
  before(async () => {
    ctx = await freshPostgresStore("pgonly", {
      applicationName: "movie-pgonly",
      resilience: { operationTimeoutMs: 60_000 },
    });
  });
  after(async () => {
    await ctx.dispose();
  });

  test("two concurrent writers at one revision: exactly one wins", async () => {
    for (let i = 0; i < 10; i++) {
      const pid = `race-${i}`;
      await ctx.store.appendEvents({
        persistenceId: pid,
        expectedRevision: 0,
        operationId: `seed-${i}`,
        events: [ev(0)],
      });
      const results = await Promise.allSettled([
        ctx.store.appendEvents({ persistenceId: pid, expectedRevision: 1, operationId: `a-${i}`, events: [ev(1)] }),
        ctx.store.appendEvents({ persistenceId: pid, expectedRevision: 1, operationId: `b-${i}`, events: [ev(2)] }),
      ]);
      assert.equal(results.filter((r) => r.status === "fulfilled").length, 1);
      const lost = results.find((r) => r.status === "rejected") as PromiseRejectedResult;
      assert.ok(lost.reason instanceof ConcurrentWriteError, String(lost.reason));
      assert.equal(lost.reason.actualRevision, 2);
      assert.equal(await ctx.store.loadRevision(pid), 2);
      assert.equal((await ctx.store.loadEvents(pid)).length, 2);
    }
    // New streams race on the stream-row insert instead.
    const results = await Promise.allSettled([
      ctx.store.appendEvents({ persistenceId: "race-new", expectedRevision: 0, operationId: "a", events: [ev(1)] }),
      ctx.store.appendEvents({ persistenceId: "race-new", expectedRevision: 0, operationId: "b", events: [ev(2)] }),
    ]);
    assert.equal(results.filter((r) => r.status === "fulfilled").length, 1);
  });

  test("a fenced write is serialised before a lease transfer, which then gets epoch + 1", async () => {
    const gate = await writeGate(ctx.url, ctx.schema, "hold_write", [
      { table: "event_journal", event: "INSERT", when: "NEW.persistence_id = 'held'" },
    ]);
    const { raw } = gate;
    try {
      await gate.shut();
      const key = { clusterName: "c", entityType: "Held", shardId: 1 };
      const old = (await ctx.store.acquireShardLease(key, "node-a", 300))!;
      let appended = false;
      const append = ctx.store
        .appendEvents({ persistenceId: "held", expectedRevision: 0, operationId: "w", events: [ev(1)], fence: old })
        .finally(() => {
          appended = true;
        });
      const waiting = (pattern: string, event: string) => gate.waiting("movie-pgonly", pattern, [event]);
      await eventually(() => waiting("INSERT INTO event_journal%", "advisory"), {
        what: "the write to block in its trigger",
        describe: () => ({ appended }),
      });
      await eventually(
        async () =>
          (
            await raw.query(
              "SELECT lease_until_epoch_ms <= movie_now_ms() AS expired FROM shard_lease WHERE entity_type = 'Held'",
            )
          ).rows[0].expired === true,
        { what: "the lease to expire on the database clock" },
      );
      let transferred = false;
      const transfer = ctx.store.acquireShardLease(key, "node-b", 30_000).finally(() => {
        transferred = true;
      });
      await eventually(() => waiting("%INSERT INTO shard_lease%", "transactionid"), {
        what: "the transfer to wait on the fenced write's row lock",
      });
      assert.equal(transferred, false);
      assert.equal(appended, false);
      await gate.open();
      assert.deepEqual(await append, { revision: 1, duplicate: false });
      const next = await transfer;
      assert.equal(next?.owner, "node-b");
      assert.equal(next?.epoch, old.epoch + 1);
      await assert.rejects(
        ctx.store.appendEvents({
          persistenceId: "held",
          expectedRevision: 1,
          operationId: "w2",
          events: [ev(2)],
          fence: old,
        }),
        StaleShardOwnerError,
      );
    } finally {
      await gate.dispose();
    }
  });

  test("fenced several-event appends, state saves and snapshot saves also hold off a lease transfer", async () => {
    // These go through the PL/pgSQL write functions, not the one-event INSERT the test above holds.
    const kinds: [string, string, string, (fence: ShardLeaseToken) => Promise<unknown>][] = [
      [
        "event_journal",
        "held-multi",
        "SELECT movie_append_events%",
        (fence) =>
          ctx.store.appendEvents({
            persistenceId: "held-multi",
            expectedRevision: 0,
            operationId: "hm",
            events: [ev(1), ev(2)],
            fence,
          }),
      ],
      [
        "durable_state",
        "held-state",
        "SELECT movie_write_state%",
        (fence) =>
          ctx.store.saveState({
            persistenceId: "held-state",
            expectedRevision: 0,
            operationId: "hs",
            manifest: "St",
            payload: "{}",
            fence,
          }),
      ],
      [
        "snapshot_store",
        "held-snap",
        "%movie_save_snapshot%",
        (fence) => ctx.store.saveSnapshot("held-snap", { sequenceNr: 1, manifest: "S", payload: "{}" }, fence),
      ],
    ];
    const gate = await writeGate(
      ctx.url,
      ctx.schema,
      "hold_fenced",
      kinds.map(([table]) => ({ table, event: "INSERT" as const, when: "NEW.persistence_id LIKE 'held-%'" })),
    );
    const { raw } = gate;
    const waiting = (pattern: string, events: string[]) => gate.waiting("movie-pgonly", pattern, events);
    try {
      for (const [table, persistenceId, pattern, write] of kinds) {
        await gate.shut();
        const key = { clusterName: "c", entityType: "HeldFn", shardId: kinds.findIndex(([t]) => t === table) };
        const old = (await ctx.store.acquireShardLease(key, "node-a", 250))!;
        const written = write(old);
        written.catch(() => {});
        await eventually(() => waiting(pattern, ["advisory"]), { what: `the ${table} write to block in its trigger` });
        await eventually(
          async () =>
            (
              await raw.query(
                "SELECT lease_until_epoch_ms <= movie_now_ms() AS expired FROM shard_lease WHERE entity_type = 'HeldFn' AND shard_id = $1",
                [key.shardId],
              )
            ).rows[0].expired === true,
          { what: "the lease to expire on the database clock" },
        );
        let transferred = false;
        const transfer = ctx.store.acquireShardLease(key, "node-b", 30_000).finally(() => {
          transferred = true;
        });
        await eventually(
          async () => transferred || (await waiting("%INSERT INTO shard_lease%", ["transactionid", "tuple"])),
          {
            what: "the transfer to finish or wait on the fenced write's row lock",
          },
        );
        assert.equal(transferred, false, `a transfer must wait for the in-flight fenced ${table} write`);
        await gate.open();
        await written;
        const next = await transfer;
        assert.equal(next?.owner, "node-b");
        assert.equal(next?.epoch, old.epoch + 1);
        await assert.rejects(write(old), StaleShardOwnerError, `${persistenceId}: the old epoch is fenced off`);
      }
    } finally {
      await gate.dispose();
    }
  });

  test("a fenced write that waits behind a lease release re-reads the row and commits nothing", async () => {
    const gate = await writeGate(ctx.url, ctx.schema, "hold_release", [
      { table: "shard_lease", event: "UPDATE", when: "NEW.entity_type = 'Release'" },
    ]);
    try {
      const key = { clusterName: "c", entityType: "Release", shardId: 1 };
      const token = (await ctx.store.acquireShardLease(key, "node-a", 30_000))!;
      await ctx.store.appendEvents({
        persistenceId: "moving",
        expectedRevision: 0,
        operationId: "m1",
        events: [ev(1)],
        fence: token,
      });
      const waiting = (pattern: string, events: string[]) => gate.waiting("movie-pgonly", pattern, events);
      await gate.shut();
      // The release holds the lease row (its UPDATE waits in the trigger); the committed row still says "valid".
      const release = ctx.store.releaseShardLease(token);
      await eventually(() => waiting("%UPDATE shard_lease%", ["advisory"]), { what: "the release to hold the row" });
      const write = ctx.store.appendEvents({
        persistenceId: "moving",
        expectedRevision: 1,
        operationId: "m2",
        events: [ev(2)],
        fence: token,
      });
      write.catch(() => {});
      await eventually(() => waiting("INSERT INTO event_journal%", ["transactionid", "tuple"]), {
        what: "the fenced write to wait on the lease row",
      });
      await gate.open();
      assert.equal(await release, true);
      await assert.rejects(write, StaleShardOwnerError);
      assert.equal(await ctx.store.loadRevision("moving"), 1);
    } finally {
      await gate.dispose();
    }
  });

  test("a several-event append that loses a race is checked against its fence before it learns the outcome", async () => {
    // The fence passes when the append starts; another writer then commits the same operation id with other content;
    // the lease expires; only then does the append hit the unique index. Its follow-up lookup must answer "stale
    // owner" (the fence first), never the operation's outcome (here a conflict). The other writer is a transaction
    // of this test's: its journal rows take the feed lock (migration 16: the offset column's default), so the fenced
    // append, past its fence, waits for that lock just before it inserts, and goes on when the other one commits.
    const raw = await rawClient(ctx.url, ctx.schema);
    const probe = await rawClient(ctx.url, ctx.schema);
    try {
      const key = { clusterName: "c", entityType: "Resolve", shardId: 1 };
      const token = (await ctx.store.acquireShardLease(key, "node-a", 3_000))!;
      await raw.query("BEGIN");
      await raw.query(
        `INSERT INTO event_journal (persistence_id, sequence_nr, manifest, payload, operation_id, fingerprint,
            operation_revision)
          VALUES ('resolving', 1, 'test.Event', $1, 'r1', 'another-fingerprint', 2),
            ('resolving', 2, 'test.Event', $2, NULL, NULL, NULL)`,
        [JSON.stringify({ n: 201 }), JSON.stringify({ n: 202 })],
      );
      const fenced = ctx.store.appendEvents({
        persistenceId: "resolving",
        expectedRevision: 0,
        operationId: "r1",
        events: [ev(101), ev(102)],
        fence: token,
      });
      fenced.catch(() => {});
      let seen: unknown[] = [];
      await eventually(
        async () => {
          seen = (
            await probe.query(
              "SELECT wait_event, query FROM pg_stat_activity WHERE application_name = 'movie-pgonly' AND state = 'active'",
            )
          ).rows;
          return seen.some(
            (r) =>
              (r as { wait_event: string | null }).wait_event === "advisory" &&
              (r as { query: string }).query.startsWith("SELECT movie_append_events"),
          );
        },
        {
          what: "the fenced append to pass its fence and wait for the feed lock before inserting",
          describe: () => seen,
        },
      );
      await eventually(
        async () =>
          (
            await probe.query(
              "SELECT count(*)::int AS n FROM shard_lease WHERE entity_type = 'Resolve' AND lease_until_epoch_ms <= movie_now_ms()",
            )
          ).rows[0].n === 1,
        { what: "the fenced append's lease to expire" },
      );
      await raw.query("COMMIT");
      await assert.rejects(fenced, StaleShardOwnerError);
      assert.deepEqual(
        (await ctx.store.loadEvents("resolving")).map((e) => e.payload),
        [JSON.stringify({ n: 201 }), JSON.stringify({ n: 202 })],
        "only the other writer's events",
      );
    } finally {
      await raw.end();
      await probe.end();
    }
  });

  test("a corrupt stored row is a typed error naming persistence id and sequence", async () => {
    await ctx.store.appendEvents({
      persistenceId: "corrupt",
      expectedRevision: 0,
      operationId: "c",
      events: [ev(1), ev(2)],
    });
    const raw = await rawClient(ctx.url, ctx.schema);
    await raw.query("UPDATE event_journal SET manifest = '' WHERE persistence_id = 'corrupt' AND sequence_nr = 2");
    await raw.end();
    await assert.rejects(
      ctx.store.loadEvents("corrupt"),
      (e: unknown) => e instanceof CorruptPersistentRecordError && e.persistenceId === "corrupt" && e.sequenceNr === 2,
    );
  });
});

describe("postgres faults", () => {
  test("pg_terminate_backend during an operation fails it; the next request succeeds; retries hide it", async () => {
    const ctx = await freshPostgresStore("term", { applicationName: "movie-term", resilience: { maxRetries: 0 } });
    const retrying = await PostgresStore.connect({
      connectionUri: ctx.url,
      schema: ctx.schema,
      applicationName: "movie-term-retry",
    });
    const raw = await rawClient(ctx.url, ctx.schema);
    try {
      const blockedPid = async (app: string) =>
        (
          await raw.query("SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'", [
            app,
          ])
        ).rows[0]?.pid as number | undefined;
      await raw.query("BEGIN; LOCK TABLE event_journal IN ACCESS EXCLUSIVE MODE");
      const pending = ctx.store.loadRevision("t");
      pending.catch(() => {});
      await eventually(async () => (await blockedPid("movie-term")) !== undefined, { what: "the read to block" });
      await raw.query("SELECT pg_terminate_backend($1)", [await blockedPid("movie-term")]);
      await assert.rejects(pending, PersistenceConnectionError);

      const append = retrying.appendEvents({
        persistenceId: "t",
        expectedRevision: 0,
        operationId: "t1",
        events: [ev(1)],
      });
      await eventually(async () => (await blockedPid("movie-term-retry")) !== undefined, {
        what: "the append to block",
      });
      await raw.query("SELECT pg_terminate_backend($1)", [await blockedPid("movie-term-retry")]);
      await eventually(async () => retrying.resilienceStats.retries >= 1, {
        what: "a retry after the lost connection",
      });
      await raw.query("ROLLBACK");
      assert.deepEqual(await append, { revision: 1, duplicate: false });
      assert.equal(await ctx.store.loadRevision("t"), 1);
      // The retried append is idempotent: the same id again is a duplicate.
      assert.deepEqual(
        await retrying.appendEvents({ persistenceId: "t", expectedRevision: 0, operationId: "t1", events: [ev(1)] }),
        { revision: 1, duplicate: true },
      );
    } finally {
      await raw.query("ROLLBACK").catch(() => {});
      await raw.end();
      await retrying.close();
      await ctx.dispose();
    }
  });

  test("an operation timeout, then the circuit breaker opens, fails fast and closes again", async () => {
    const ctx = await freshPostgresStore("breaker", {
      poolSize: 4,
      resilience: { operationTimeoutMs: 100, failureThreshold: 2, resetTimeoutMs: 200, maxRetries: 0 },
    });
    const raw = await rawClient(ctx.url, ctx.schema);
    try {
      await raw.query("BEGIN; LOCK TABLE event_journal IN ACCESS EXCLUSIVE MODE");
      await assert.rejects(ctx.store.loadRevision("b"), PersistenceTimeoutError);
      await assert.rejects(ctx.store.loadRevision("b"), PersistenceTimeoutError);
      assert.equal(ctx.store.circuitMode, "open");
      await assert.rejects(ctx.store.loadRevision("b"), CircuitOpenError);
      await raw.query("ROLLBACK");
      await eventually(
        async () => {
          try {
            return (await ctx.store.loadRevision("b")) === 0;
          } catch {
            return false;
          }
        },
        { what: "the breaker to half-open and close" },
      );
      assert.equal(ctx.store.circuitMode, "closed");
      assert.ok(ctx.store.resilienceStats.circuitRejections >= 1);
    } finally {
      await raw.query("ROLLBACK").catch(() => {});
      await raw.end();
      await ctx.dispose();
    }
  });

  test("two OS processes migrating at once: both succeed, the history has each version once", async () => {
    const url = await postgresTestUrl();
    const schema = uniqueSchema("mig");
    try {
      const run = () =>
        new Promise<string>((resolve, reject) => {
          const child = spawn(process.execPath, ["--import", "tsx", "test/persistence/migrate-child.ts", url, schema], {
            stdio: ["ignore", "pipe", "pipe"],
          });
          let out = "";
          child.stdout.on("data", (d) => (out += d));
          child.stderr.on("data", (d) => (out += d));
          child.on("exit", (code) => (code === 0 ? resolve(out) : reject(new Error(`child exited ${code}: ${out}`))));
        });
      const outputs = await Promise.all([run(), run()]);
      assert.deepEqual(
        outputs.map((o) => o.trim()),
        ["migrated", "migrated"],
      );
      const raw = await rawClient(url, schema);
      const rows = (await raw.query("SELECT version FROM movie_schema_migration ORDER BY version")).rows;
      assert.deepEqual(
        rows.map((r) => r.version),
        postgresMigrations.map((m) => m.version),
      );
      // Migration 6 dropped the function the client stopped calling.
      const resolve = await raw.query(
        "SELECT count(*)::int AS n FROM pg_proc WHERE proname = 'movie_append_one_resolve' AND pronamespace = $1::regnamespace",
        [schema],
      );
      assert.equal(resolve.rows[0].n, 0);
      const future = postgresMigrations.length + 1;
      await raw.query("INSERT INTO movie_schema_migration (version, name, checksum) VALUES ($1, 'future', 'x')", [
        future,
      ]);
      await assert.rejects(PostgresStore.connect({ connectionUri: url, schema }), UnsupportedSchemaVersionError);
      await raw.query("DELETE FROM movie_schema_migration WHERE version = $1", [future]);
      await raw.query("UPDATE movie_schema_migration SET checksum = 'edited' WHERE version = 3");
      await assert.rejects(PostgresStore.connect({ connectionUri: url, schema }), MigrationChecksumMismatchError);
      await raw.end();
    } finally {
      await dropSchema(url, schema);
    }
  });
});

// The CI soak lost a node at its pg-terminate fault: the server's FATAL reached a pool client while it was lent out
// with no query running, and pg-pool keeps no listener on a lent client, so the 'error' was unhandled and ended the
// process. Every client of the store's pool keeps a listener for its whole life; a real termination of every backend
// of the pool, while clients are lent out, idle and querying, leaves the process running and the store usable.
test("postgres: a connection terminated while lent out, or while querying, does not end the process", async () => {
  const { store, dispose } = await freshPostgresStore("lent");
  const admin = await rawClient(await postgresTestUrl(), "public");
  try {
    await store.latestOffset();
    const lent = await store.pool.connect();
    const lentPid = (await lent.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid;
    const tag = `lent_${process.pid}_${Date.now()}`;
    const running = store.pool.query(`SELECT pg_sleep(5) AS ${tag}`).catch((e: unknown) => e);
    const runningPids = async () =>
      (
        await admin.query<{ pid: number }>(
          "SELECT pid FROM pg_stat_activity WHERE query LIKE $1 AND pid <> pg_backend_pid()",
          [`%AS ${tag}%`],
        )
      ).rows.map((r) => r.pid);
    await eventually(async () => (await runningPids()).length === 1, { what: "the query running" });
    // Only this store's two backends: other test files share the database.
    const ended = new Promise<void>((resolve) => lent.once("end", () => resolve()));
    await admin.query("SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid", [
      [lentPid, ...(await runningPids())],
    ]);
    // The server's FATAL reaches the lent client with no query running: an 'error' that nothing but the store's own
    // listener hears (without it the process ended here), then the connection ends.
    await ended;
    assert.ok((await running) instanceof Error, "the query that was running gets the error");
    lent.release(new Error("terminated"));
    await eventually(
      async () =>
        (await store.latestOffset().then(
          () => true,
          () => false,
        )) === true,
      {
        what: "the store answers on new connections",
      },
    );
  } finally {
    await admin.end();
    await dispose();
  }
});
