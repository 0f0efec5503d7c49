// The outbox under kill -9 of its dispatcher (PostgreSQL, a real child process): rows the dead dispatcher claimed,
// including those whose receiver already committed but were never marked delivered, come back when the claim ends
// and are delivered again; the receiver recognises the redeliveries by OperationId, so every message takes effect
// exactly once.
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { test } from "node:test";
import { OutboxDispatcher, outboxMessageId, PersistenceCodec } from "../../src/persistence/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { reserveHandler } from "./outbox-receiver.ts";
import { freshPostgresStore, rawClient } from "./pg-fixture.ts";

test("postgres: a dispatcher killed with SIGKILL mid-batch; its rows are redelivered after the claim ends and take effect once", async () => {
  const { store, url, schema, dispose } = await freshPostgresStore("outboxkill");
  const raw = await rawClient(url, schema);
  let child: ChildProcess | null = null;
  try {
    const orders = 30;
    for (let i = 0; i < orders; i++) {
      const pid = `Order:${i}`;
      await store.appendEvents({
        persistenceId: pid,
        expectedRevision: 0,
        operationId: "place",
        events: [{ manifest: "json", payload: "{}" }],
        outbox: [
          {
            messageId: outboxMessageId(pid, "place", 0),
            destination: { kind: "handler", handler: "reserve" },
            manifest: "json",
            payload: JSON.stringify({ sku: `sku-${i}` }),
          },
        ],
      });
    }
    const count = async (sql: string) => Number((await raw.query(sql)).rows[0].n);
    const applied = () =>
      count("SELECT count(DISTINCT persistence_id) AS n FROM event_journal WHERE persistence_id LIKE 'Stock:%'");
    const delivered = () => count("SELECT count(*) AS n FROM persistence_outbox WHERE delivered");
    child = spawn(process.execPath, ["--import", "tsx", "test/persistence/outbox-child.ts", url, schema], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    const started = child;
    // Kill it once a later batch is in flight: some receivers have committed whose rows are not yet delivered.
    let seen = { applied: 0, delivered: 0 };
    await eventually(
      async () => {
        seen = { applied: await applied(), delivered: await delivered() };
        return seen.delivered >= 10 && seen.applied > seen.delivered && seen.applied < orders;
      },
      {
        what: "a batch applied at its receivers but not yet acknowledged",
        timeoutMs: 30_000,
        intervalMs: 2,
        describe: () => seen,
      },
    );
    started.kill("SIGKILL");
    await new Promise((resolve) => started.once("exit", resolve));
    const atKill = { applied: await applied(), delivered: await delivered() };
    assert.ok(atKill.applied > atKill.delivered, `in flight at the kill: ${JSON.stringify(atKill)}`);
    const dispatcher = new OutboxDispatcher({
      store,
      codec: new PersistenceCodec(),
      owner: "successor",
      leaseMs: 1500,
      pollIntervalMs: 20,
      handlers: { reserve: reserveHandler(store, 0) },
    });
    dispatcher.start();
    try {
      await eventually(async () => (await delivered()) === orders, {
        what: "every message delivered after the dead claim ends",
        timeoutMs: 20_000,
        describe: () => dispatcher.stats,
      });
    } finally {
      await dispatcher.stop();
    }
    // Exactly one reservation per message, though some were delivered twice.
    const streams = (
      await raw.query(
        "SELECT persistence_id, count(*)::int AS n FROM event_journal WHERE persistence_id LIKE 'Stock:%' GROUP BY 1",
      )
    ).rows as { persistence_id: string; n: number }[];
    assert.equal(streams.length, orders);
    assert.ok(
      streams.every((s) => s.n === 1),
      JSON.stringify(streams.filter((s) => s.n !== 1)),
    );
    const redelivered = await count("SELECT count(*) AS n FROM persistence_outbox WHERE attempts > 1");
    assert.ok(
      redelivered >= atKill.applied - atKill.delivered,
      `redelivered ${redelivered}, in flight ${JSON.stringify(atKill)}`,
    );
  } finally {
    if (child !== null && child.exitCode === null) child.kill("SIGKILL");
    await raw.end();
    await dispose();
  }
});
