// The read-only operations views on one node with the in-memory store, through the fetch-style handler: GET
// /projections lists each projection with its status, checkpoint, lag, events/s and last error (and when), and GET
// /outbox the outbox rows by state, the oldest pending row's age and the parked messages with their last error,
// bounded by ?limit; /metrics carries the same figures. Hostile query parameters get typed 400s (the HTTP dictionary
// in http-api.test.ts covers them over a real socket as well).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { ActorSystem, silentLogger } from "../../src/actor/index.ts";
import { createManagementHandler, type ManagementHandler, startManagement } from "../../src/management/index.ts";
import {
  Database,
  OperationId,
  outboxMessageId,
  type PersistenceStore,
  type ProjectionRunner,
  Projections,
} from "../../src/persistence/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { runCliInProcess } from "./fixtures/run-cli.ts";

let system: ActorSystem;
let store: PersistenceStore;
let handler: ManagementHandler;
let failing: ProjectionRunner;
let healthy: ProjectionRunner;
let failNext = true;

const get = async (path: string): Promise<{ status: number; body: Record<string, unknown> }> => {
  const res = await handler.handle(new Request(`http://node.example${path}`));
  const text = await res.text();
  return { status: res.status, body: res.headers.get("content-type")?.includes("json") ? JSON.parse(text) : { text } };
};

before(async () => {
  system = ActorSystem.create("ops-views", { logger: silentLogger });
  store = Database.get(system).store;
  // Three writes, each with two outbox messages.
  for (let i = 0; i < 3; i++) {
    const pid = `Order:o${i}`;
    await store.appendEvents({
      persistenceId: pid,
      expectedRevision: 0,
      operationId: OperationId.random(),
      events: [{ manifest: "Placed", payload: "{}" }],
      outbox: [0, 1].map((k) => ({
        messageId: outboxMessageId(pid, `op${i}`, k),
        destination: { kind: "entity" as const, entityType: "Stock", entityId: `sku-${k}` },
        manifest: "json",
        payload: "{}",
      })),
    });
  }
  // Of the six: two parked (poison), one delivered, one retrying, one claimed now, one pending untouched.
  const { rows } = await store.claimOutbox({ owner: "d", limit: 4, leaseMs: 60_000 });
  await store.failOutbox("d", [
    { offset: rows[0]!.offset, error: "cannot decode the message: Unknown manifest", retryAfterMs: 0, park: true },
    { offset: rows[1]!.offset, error: "no handler Stock", retryAfterMs: 0, park: true },
    { offset: rows[2]!.offset, error: "receiver down", retryAfterMs: 60_000, park: false },
  ]);
  await store.completeOutbox([rows[3]!]);
  await store.claimOutbox({ owner: "d2", limit: 1, leaseMs: 60_000 });

  const projections = Projections.get(system);
  failing = projections.start({
    name: "failing-model",
    mode: "at-least-once",
    pollIntervalMs: 20,
    handler: () => {
      if (failNext) throw new Error("read model offline");
    },
  });
  healthy = projections.start({ name: "orders-model", mode: "at-least-once", pollIntervalMs: 20, handler: () => {} });
  await eventually(() => healthy.stats.checkpoint === 3 && failing.stats.failures > 0, {
    what: "one projection caught up, the other failing",
    describe: () => [healthy.stats, failing.stats],
  });
  handler = createManagementHandler(system);
});
after(async () => {
  handler.close();
  await system.terminate();
});

test("GET /outbox: rows by state, the backlog's age, and the parked messages with their last error", async () => {
  const { status, body } = await get("/outbox");
  assert.equal(status, 200, JSON.stringify(body));
  assert.equal(body.backend, "memory");
  const counts = body.counts as Record<string, unknown>;
  assert.deepEqual(
    { ...counts, oldestPendingAgeMs: typeof counts.oldestPendingAgeMs },
    { pending: 3, claimed: 1, retrying: 1, parked: 2, delivered: 1, oldestPendingAgeMs: "number" },
  );
  assert.equal(body.parkedLimit, 20);
  const parked = body.parked as { messageId: string; persistenceId: string; attempts: number; lastError: string }[];
  assert.deepEqual(
    parked.map((p) => [p.persistenceId, p.attempts, p.lastError]),
    [
      ["Order:o0", 1, "cannot decode the message: Unknown manifest"],
      ["Order:o0", 1, "no handler Stock"],
    ],
  );
  const one = await get("/outbox?limit=1");
  assert.equal((one.body.parked as unknown[]).length, 1, "bounded by the limit");
  const none = await get("/outbox?limit=0");
  assert.deepEqual(none.body.parked, []);
  assert.equal((none.body.counts as { parked: number }).parked, 2, "the count stays whatever the limit");
});

test("GET /projections: each projection's status, checkpoint, lag, events/s and last error with its time", async () => {
  const { status, body } = await get("/projections");
  assert.equal(status, 200, JSON.stringify(body));
  const slices = body.slices as Record<string, unknown>[];
  const byName = new Map(slices.map((s) => [s.projection, s]));
  const ok = byName.get("orders-model")!;
  assert.deepEqual(
    [ok.slice, ok.sharded, ok.local, ok.status, ok.checkpoint, ok.latestOffset, ok.lag, ok.lastError],
    [null, false, true, "running", 3, 3, 0, null],
  );
  assert.equal(typeof ok.eventsPerSecond, "number");
  const bad = byName.get("failing-model")!;
  assert.deepEqual(
    [bad.status, bad.checkpoint, bad.lag, bad.lastError],
    ["failed", 0, 3, "Error: read model offline"],
    JSON.stringify(bad),
  );
  assert.ok(typeof bad.lastErrorAtEpochMs === "number" && Math.abs(bad.lastErrorAtEpochMs - Date.now()) < 60_000);
  const single = await get("/projections/failing-model");
  assert.equal(single.status, 200);
  assert.deepEqual(
    (single.body.slices as { projection: string }[]).map((s) => s.projection),
    ["failing-model"],
  );
  // Paused here: the view says so.
  healthy.pause();
  const paused = ((await get("/projections")).body.slices as Record<string, unknown>[]).find(
    (s) => s.projection === "orders-model",
  )!;
  assert.deepEqual([paused.status, paused.paused], ["paused", true]);
  healthy.resume();
});

test("GET /stats carries the outbox counts (parked included) beside every layer's counters", async () => {
  const { status, body } = await get("/stats");
  assert.equal(status, 200);
  const outbox = body.outbox as Record<string, unknown>;
  assert.deepEqual([outbox.parked, outbox.claimed, outbox.retrying], [2, 1, 1]);
  const persistence = body.persistence as { projections: { name: string }[] };
  assert.deepEqual(persistence.projections.map((p) => p.name).sort(), ["failing-model", "orders-model"]);
});

test("a database that cannot answer makes the views 503 StoreUnavailable and leaves the outbox out of /stats", async () => {
  const closed = ActorSystem.create("closed-store", { logger: silentLogger });
  try {
    Projections.get(closed).start({ name: "p", mode: "at-least-once", pollIntervalMs: 20, handler: () => {} });
    await Database.get(closed).store.close();
    const broken = createManagementHandler(closed);
    const ask = async (path: string) => {
      const res = await broken.handle(new Request(`http://node.example${path}`));
      return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    };
    for (const path of ["/outbox", "/projections", "/projections/p"]) {
      const answer = await ask(path);
      assert.deepEqual([answer.status, answer.body.error], [503, "StoreUnavailable"], path);
    }
    const stats = await ask("/stats");
    assert.deepEqual([stats.status, stats.body.outbox], [200, null]);
  } finally {
    await closed.terminate();
  }
});

test("GET /metrics carries the projection and outbox figures", async () => {
  const { status, body } = await get("/metrics");
  assert.equal(status, 200);
  const text = String(body.text);
  assert.match(text, /^movie_projection_lag_events\{projection="failing-model"\} 3$/m);
  assert.match(text, /^movie_projection_consecutive_failures\{projection="failing-model"\} [1-9]\d*$/m);
  assert.match(text, /^movie_projection_last_error_timestamp_seconds\{projection="failing-model"\} \d/m);
  assert.match(text, /^movie_projection_checkpoint_offset\{projection="orders-model"\} 3$/m);
  assert.match(text, /^movie_projection_events_per_second\{projection="orders-model"\} /m);
  assert.match(text, /^movie_outbox_messages\{state="parked"\} 2$/m);
  assert.match(text, /^movie_outbox_messages\{state="claimed"\} 1$/m);
  assert.match(text, /^movie_outbox_messages\{state="retrying"\} 1$/m);
  assert.match(text, /^movie_outbox_oldest_pending_age_seconds \d/m);
});

test("once the failing projection's cause is fixed it runs again and the view says so", async () => {
  failNext = false;
  await eventually(async () => failing.stats.checkpoint === 3, { what: "caught up", describe: () => failing.stats });
  const view = ((await get("/projections")).body.slices as Record<string, unknown>[]).find(
    (s) => s.projection === "failing-model",
  )!;
  assert.deepEqual([view.status, view.lag], ["running", 0]);
  assert.equal(view.lastError, "Error: read model offline", "the last error stays for the operator");
});

/** [path, expected status, expected error code]. */
const hostile: [string, number, string][] = [
  ["/outbox?limit=-1", 400, "InvalidLimit"],
  ["/outbox?limit=1001", 400, "InvalidLimit"],
  ["/outbox?limit=1e3", 400, "InvalidLimit"],
  ["/outbox?limit=01", 400, "InvalidLimit"],
  ["/outbox?limit=", 400, "InvalidLimit"],
  ["/outbox?limit=0x10", 400, "InvalidLimit"],
  ["/outbox?limit=%20", 400, "InvalidLimit"],
  ["/outbox?limit=%E0%A4%A", 400, "InvalidLimit"],
  [`/outbox?limit=${"9".repeat(400)}`, 400, "InvalidLimit"],
  ["/outbox?limit=1&limit=2", 400, "InvalidLimit"],
  ["/outbox?offset=3", 400, "UnknownParameter"],
  ["/outbox?__proto__=1", 400, "UnknownParameter"],
  ["/outbox/parked", 404, "NotFound"],
  ["/projections?x=1", 400, "UnknownParameter"],
  ["/projections/orders-model?limit=1", 400, "UnknownParameter"],
  [`/projections/${"p".repeat(300)}`, 400, "InvalidProjectionName"],
  ["/projections/__proto__", 404, "UnknownProjection"],
];

for (const [path, status, code] of hostile) {
  test(`hostile read refused: ${path.slice(0, 60)} → ${status} ${code}`, async () => {
    const answer = await get(path);
    assert.deepEqual([answer.status, answer.body.error], [status, code], JSON.stringify(answer.body).slice(0, 300));
    assert.equal(typeof answer.body.message, "string");
  });
}

test("a write method on the outbox view is refused, and a node without persistence says so", async () => {
  const post = await handler.handle(new Request("http://node.example/outbox", { method: "POST" }));
  assert.equal(post.status, 405);
  const bare = ActorSystem.create("bare", { logger: silentLogger });
  try {
    const res = await createManagementHandler(bare).handle(new Request("http://node.example/outbox"));
    assert.equal(res.status, 409);
    assert.equal(((await res.json()) as { error: string }).error, "PersistenceNotEnabled");
    const metrics = await createManagementHandler(bare).handle(new Request("http://node.example/metrics"));
    assert.doesNotMatch(await metrics.text(), /movie_outbox_/);
  } finally {
    await bare.terminate();
  }
});

test("movie outbox and movie projections print the same figures; --json for scripts; bad input exits 2, a refusal 1", async () => {
  const server = await startManagement(system, { port: 0 });
  const bare = ActorSystem.create("bare-cli", { logger: silentLogger });
  const bareServer = await startManagement(bare, { port: 0 });
  try {
    const url = server.url;
    const outbox = await runCliInProcess(["outbox", "--url", url]);
    assert.equal(outbox.code, 0, outbox.stderr);
    const lines = outbox.stdout.split("\n");
    assert.match(
      lines[0]!,
      /^outbox \(memory\): 3 pending \(1 claimed, 1 retrying\), 2 parked, 1 delivered; oldest pending \d+\.\d s$/,
    );
    assert.match(outbox.stdout, /^PARKED +MESSAGE +SENDER +ATTEMPTS +LAST ERROR$/m);
    assert.match(outbox.stdout, /Order:o0 +1 +cannot decode the message: Unknown manifest$/m);
    assert.match(outbox.stdout, /Order:o0 +1 +no handler Stock$/m);
    const limited = await runCliInProcess(["outbox", "--url", url, "--limit", "1"]);
    assert.match(limited.stdout, /^\(1 more parked; --limit shows more\)$/m);
    const json = await runCliInProcess(["outbox", "--url", url, "--json", "--limit", "0"]);
    assert.equal(json.code, 0);
    const parsed = JSON.parse(json.stdout) as { counts: { parked: number }; parked: unknown[] };
    assert.deepEqual([parsed.counts.parked, parsed.parked], [2, []]);

    const projections = await runCliInProcess(["projections", "--url", url]);
    assert.equal(projections.code, 0, projections.stderr);
    assert.match(
      projections.stdout,
      /^PROJECTION +SLICE +OWNER +STATUS +CHECKPOINT +LAG +EVENTS\/S +REBUILD FROM +LAST ERROR$/m,
    );
    assert.match(projections.stdout, /^orders-model +- +none +running +3 +0 +\d+\.\d +- +-$/m);
    assert.match(
      projections.stdout,
      /^failing-model +- +none +(running +3 +0|failed +0 +3) +\d+\.\d +- +Error: read model offline \(20\d\d-/m,
    );

    for (const bad of ["-1", "1001", "1e3", "x", ""]) {
      const run = await runCliInProcess(["outbox", "--url", url, `--limit=${bad}`]);
      assert.equal(run.code, 2, `--limit ${bad}: ${run.stderr}`);
      assert.match(run.stderr, /--limit must be a whole number from 0 to 1000/);
    }
    const refused = await runCliInProcess(["outbox", "--url", bareServer.url]);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /GET \/outbox → 409 PersistenceNotEnabled/);
    const none = await runCliInProcess(["projections", "--url", bareServer.url]);
    assert.deepEqual([none.code, none.stdout], [0, "no projection runs or was initialised on this node\n"]);
  } finally {
    await server.close();
    await bareServer.close();
    await bare.terminate();
  }
});
