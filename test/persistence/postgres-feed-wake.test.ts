// The PostgreSQL feed wake-up (LISTEN/NOTIFY) across a lost listener connection, on the real server through a TCP
// proxy: a projection whose poll interval is a minute must still catch up within seconds when its store's connections
// (the LISTEN connection among them) are cut, including a commit made while the listener was gone. The writer is a
// second store in the same schema that connects directly, so only the NOTIFY path can wake the reader.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { RealScheduler } from "../../src/actor/index.ts";
import {
  EventFeed,
  InvalidPersistenceRequestError,
  MemoryStore,
  OperationId,
  PersistenceConfigurationError,
  type Projection,
  ProjectionRunner,
} from "../../src/persistence/index.ts";
import { PostgresStore } from "../../src/persistence/postgres/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { startTcpProxy, type TcpProxy } from "../fixtures/tcp-proxy.ts";
import { dropSchema, postgresTestUrl, uniqueSchema } from "./pg-fixture.ts";

// Well below the one-minute poll: only a wake-up (or the poll once after a reconnect) can deliver in time.
const promptMs = 5_000;

describe("postgres feed wake-up", () => {
  let url: string;
  let schema: string;
  let writer: PostgresStore;
  let reader: PostgresStore;
  let proxy: TcpProxy;
  let revision = 0;
  const pid = "Wake:a";

  before(async () => {
    url = await postgresTestUrl();
    schema = uniqueSchema("wake");
    writer = await PostgresStore.connect({ connectionUri: url, schema });
    const target = new URL(url);
    proxy = await startTcpProxy(Number(target.port || 5432), target.hostname);
    const viaProxy = new URL(url);
    viaProxy.hostname = "127.0.0.1";
    viaProxy.port = String(proxy.port);
    // A fast heartbeat, so a half-open LISTEN connection is found within a second (the default is 10 s).
    reader = await PostgresStore.connect({
      connectionUri: viaProxy.toString(),
      schema,
      feedListener: { heartbeatIntervalMs: 200, heartbeatTimeoutMs: 300 },
    });
  });

  after(async () => {
    await reader?.close();
    await writer?.close();
    await proxy?.close();
    if (schema !== undefined) await dropSchema(url, schema);
  });

  const append = () =>
    writer.appendEvents({
      persistenceId: pid,
      expectedRevision: revision++,
      operationId: OperationId.random(),
      events: [{ manifest: "W", payload: JSON.stringify({ n: revision }) }],
    });

  /** A projection of every Wake event on the reader, polling once a minute, and a wait for its n-th event. */
  function follow(name: string) {
    const seen: number[] = [];
    const projection = ProjectionRunner.start(
      {
        name,
        mode: "at-least-once",
        source: { entityTypes: ["Wake"] },
        pollIntervalMs: 60_000,
        handler: (event) => {
          seen.push((JSON.parse(event.payload) as { n: number }).n);
        },
      },
      reader,
      new RealScheduler(),
    );
    const caughtUp = (n: number, what: string) =>
      eventually(() => seen.length >= n, {
        what,
        timeoutMs: promptMs,
        describe: () => ({
          seen,
          stats: projection.stats,
          listener: reader.feedListenerStats,
          proxyOpen: proxy.open(),
          accepted: proxy.accepted(),
        }),
      });
    return { seen, projection, caughtUp };
  }

  test("a projection catches up promptly after its LISTEN connection is dropped, also with a commit made meanwhile", async () => {
    const { seen, projection, caughtUp } = follow("wake-drop");
    try {
      await append();
      await caughtUp(revision, "the first commit, woken by NOTIFY");

      for (let round = 0; round < 3; round++) {
        const accepted = proxy.accepted();
        proxy.dropAll();
        // Committed while the reader has no LISTEN connection: no notification can reach it.
        await append();
        await caughtUp(revision, `round ${round}: the commit made while the listener was down`);
        // Wait for the listener to be back (a new connection through the proxy) before the next commit.
        await eventually(() => proxy.accepted() > accepted, { what: "a reconnect", timeoutMs: promptMs });
        await append();
        await caughtUp(revision, `round ${round}: a commit after the reconnect`);
      }
      assert.deepEqual(
        seen,
        Array.from({ length: revision }, (_, i) => i + 1),
        "every event once, in order",
      );
    } finally {
      await projection.stop();
    }
  });

  // Fails without the heartbeat: a half-open LISTEN connection never errors, so nothing reconnected and the projection
  // waited for its one-minute poll.
  test("a half-open LISTEN connection is found by the heartbeat and replaced; the projection catches up promptly", async () => {
    const { seen, projection, caughtUp } = follow("wake-stall");
    try {
      await caughtUp(revision, "the events so far");
      await eventually(() => reader.feedListenerStats.phase === "listening", { what: "a listening connection" });
      const failuresBefore = reader.feedListenerStats.heartbeatFailures;
      const stalled = proxy.stall((startup) => startup.includes("movie-feed-listener"));
      assert.equal(stalled, 1, "exactly the LISTEN connection is stalled");
      await eventually(() => reader.feedListenerStats.heartbeatFailures > failuresBefore, {
        what: "a failed heartbeat",
        timeoutMs: promptMs,
        describe: () => reader.feedListenerStats,
      });
      // Committed while the replacement connection is being opened, or just after: only its first wake-up (or a
      // notification to it) can deliver it before the one-minute poll.
      await append();
      await caughtUp(revision, "the commit made after the silent connection was found");
      await eventually(() => reader.feedListenerStats.phase === "listening", { what: "the replacement listening" });
      await append();
      await caughtUp(revision, "a commit notified to the replacement connection");
      assert.deepEqual(
        seen,
        Array.from({ length: revision }, (_, i) => i + 1),
      );
    } finally {
      await projection.stop();
    }
  });
});

describe("feed poll interval", () => {
  test("streams and projections accept 1..60,000 ms and refuse anything else with a typed error", async () => {
    const store = new MemoryStore();
    const feed = new EventFeed(store, new RealScheduler());
    for (const bad of [0, -1, 60_001, 1.5, Number.NaN, "500" as unknown as number]) {
      await assert.rejects(
        feed.stream({ pollIntervalMs: bad }).next(),
        (e: unknown) => e instanceof InvalidPersistenceRequestError && /pollIntervalMs/.test(e.message),
        `stream pollIntervalMs ${String(bad)}`,
      );
      const definition = { name: "p", mode: "at-least-once", handler: () => {}, pollIntervalMs: bad } as Projection;
      assert.throws(
        () => ProjectionRunner.start(definition, store, new RealScheduler()),
        (e: unknown) => e instanceof InvalidPersistenceRequestError && /pollIntervalMs/.test(e.message),
        `projection pollIntervalMs ${String(bad)}`,
      );
    }
    // The bounds themselves are accepted.
    for (const good of [1, 60_000]) {
      const abort = new AbortController();
      const it = feed.stream({ pollIntervalMs: good, signal: abort.signal });
      const first = it.next();
      abort.abort();
      assert.deepEqual(await first, { value: undefined, done: true });
      const runner = ProjectionRunner.start(
        { name: `p${good}`, mode: "at-least-once", handler: () => {}, pollIntervalMs: good },
        store,
        new RealScheduler(),
      );
      await runner.stop();
    }
  });

  test("PostgreSQL listener settings are validated", async () => {
    for (const feedListener of [
      { heartbeatIntervalMs: 0 },
      { connectTimeoutMs: 1.5 },
      { minBackoffMs: 9, maxBackoffMs: 8 },
    ]) {
      await assert.rejects(
        PostgresStore.connect({ connectionUri: "postgres://nobody@127.0.0.1:1/none", feedListener }),
        PersistenceConfigurationError,
        JSON.stringify(feedListener),
      );
    }
  });
});
