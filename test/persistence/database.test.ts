import assert from "node:assert/strict";
import { test } from "node:test";
import { ActorSystem } from "../../src/actor/index.ts";
import {
  admit,
  backoffMs,
  closedCircuit,
  Database,
  defaultResilience,
  Effect,
  EventSourcedBehavior,
  EventSourcing,
  InvalidPersistenceRequestError,
  OperationId,
  PersistenceConfigurationError,
  record,
  StoreClosedError,
} from "../../src/persistence/index.ts";
import { dropSchema, postgresTestUrl, uniqueSchema } from "./pg-fixture.ts";

test("Database.configure rejects bad settings with typed errors", async () => {
  const system = ActorSystem.create("cfg");
  try {
    const db = Database.get(system);
    assert.equal(db.backendName, "memory");
    await assert.rejects(
      db.configure({ backend: "postgres" }),
      (e: unknown) => e instanceof PersistenceConfigurationError && e.setting === "connectionUri",
    );
    await assert.rejects(
      db.configure({ backend: "postgres", connectionUri: "localhost:5432" }),
      PersistenceConfigurationError,
    );
    await assert.rejects(
      db.configure({ backend: "oracle" as never }),
      (e: unknown) => e instanceof PersistenceConfigurationError && e.setting === "backend",
    );
    await assert.rejects(
      db.configure({ backend: "sqlite", dbPath: "/nonexistent-dir/x/y.sqlite3" }),
      (e: unknown) => e instanceof PersistenceConfigurationError && e.setting === "dbPath",
    );
    assert.equal(db.backendName, "memory");
    await db.configure({ backend: "sqlite", dbPath: ":memory:" });
    assert.equal(db.backendName, "sqlite");
  } finally {
    await system.terminate();
  }
});

test("Database.configure opens PostgreSQL and reports backendName postgres", async () => {
  const url = await postgresTestUrl();
  const schema = uniqueSchema("cfg");
  const system = ActorSystem.create("cfgpg");
  try {
    const db = Database.get(system);
    await db.configure({ backend: "postgres", connectionUri: url, schema });
    assert.equal(db.backendName, "postgres");
    const token = await db.acquireShardLease({ clusterName: "c", entityType: "T", shardId: 0 }, "me", 1000);
    assert.equal(token?.epoch, 1);
    assert.equal(await db.releaseShardLease(token!), true);
  } finally {
    await system.terminate();
    await dropSchema(url, schema);
  }
});

test("after its system stops, the Database refuses to hand out a store instead of opening a fresh in-memory one", async () => {
  const system = ActorSystem.create("stopped-db");
  const db = Database.get(system);
  await db.configure({ backend: "memory" });
  assert.equal(db.backendName, "memory");
  await system.terminate();
  const closed = (e: unknown) =>
    e instanceof StoreClosedError &&
    e.systemStopped &&
    e.backend === "memory" &&
    /create a new ActorSystem/.test(e.message);
  assert.throws(() => db.store, closed);
  assert.throws(() => db.events, closed);
  await assert.rejects(db.configure({ backend: "memory" }), closed);
  await assert.rejects(db.use(db as never), closed);
});

test("OperationId is mandatory and non-empty; random ids are UUIDs", () => {
  assert.match(OperationId.random().value, /^[0-9a-f-]{36}$/);
  assert.throws(() => OperationId.of(""), InvalidPersistenceRequestError);
  assert.throws(() => Effect.persist({}, ""), InvalidPersistenceRequestError);
  assert.throws(() => Effect.persist({}, undefined as never), InvalidPersistenceRequestError);
});

test("entity types: persistence ids, duplicate names refused", () => {
  const system = ActorSystem.create("types");
  class Cmd {}
  class B extends EventSourcedBehavior<Cmd, never, number> {
    emptyState() {
      return 0;
    }
    applyEvent(s: number) {
      return s;
    }
    handleCommand() {
      return Effect.none<never, number>();
    }
  }
  class Other extends B {}
  const es = EventSourcing.get(system);
  const type = es.registerEntity(B, Cmd, () => new B(), { name: "Order" });
  assert.equal(type.id("x").persistenceId, "Order:x");
  assert.equal(
    es.registerEntity(B, Cmd, () => new B(), { name: "Order" }),
    type,
  );
  assert.throws(
    () => es.registerEntity(Other, Cmd, () => new Other(), { name: "Order" }),
    InvalidPersistenceRequestError,
  );
  assert.throws(() => type.id(""), InvalidPersistenceRequestError);
  void system.terminate();
});

test("circuit breaker core: opens at the threshold, fails fast, half-opens after the reset timeout", () => {
  const settings = { failureThreshold: 2, resetTimeoutMs: 100 };
  let s = record(closedCircuit, settings, false, 0);
  assert.equal(s.mode, "closed");
  s = record(s, settings, false, 10);
  assert.equal(s.mode, "open");
  assert.deepEqual(admit(s, settings, 50), { allowed: false, state: s, retryAfterMs: 60 });
  const trial = admit(s, settings, 110);
  assert.equal(trial.allowed, true);
  assert.equal(trial.state.mode, "half-open");
  assert.equal(admit(trial.state, settings, 111).allowed, false);
  assert.equal(record(trial.state, settings, false, 120).mode, "open");
  assert.equal(record(trial.state, settings, true, 120).mode, "closed");
  assert.deepEqual(
    [1, 2, 3, 6, 10].map((a) => backoffMs(defaultResilience, a)),
    [10, 20, 40, 250, 250],
  );
});
