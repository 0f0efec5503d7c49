// The outbox on every backend (outbox-contract.ts), and the dispatcher over it: retries with backoff until acknowledged,
// parking of poison messages (after the last attempt, or at once when unreadable), handlers by name, and the purge.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import {
  DurableStateEffect,
  deliveryOutcome,
  EventSourcedEffect,
  InvalidPersistenceRequestError,
  MemoryStore,
  type OutboxDelivery,
  OutboxDispatcher,
  outboxBackoffMs,
  outboxMessageId,
  outboxRetryPolicy,
  PersistenceCodec,
  PersistenceConfigurationError,
} from "../../src/persistence/index.ts";
import { SqliteStore } from "../../src/persistence/sqlite/index.ts";
import { outboxContract } from "./outbox-contract.ts";
import { freshPostgresStore } from "./pg-fixture.ts";

const dir = mkdtempSync(join(tmpdir(), "movie-outbox-"));
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

outboxContract("memory", async () => {
  const store = new MemoryStore();
  return { store, dispose: () => store.close() };
});

outboxContract("sqlite", async () => {
  const store = SqliteStore.open({ dbPath: join(dir, "outbox.sqlite3") });
  return { store, dispose: () => store.close() };
});

outboxContract("postgres", async () => {
  const { store, dispose } = await freshPostgresStore("outbox");
  return { store, dispose };
});

test("delivery outcomes: exponential backoff up to the cap, parked at the last attempt or when unreadable", () => {
  const policy = outboxRetryPolicy({ maxAttempts: 5, firstBackoffMs: 100, maxBackoffMs: 500 });
  assert.deepEqual(
    [1, 2, 3, 4, 5, 40].map((a) => outboxBackoffMs(a, policy)),
    [100, 200, 400, 500, 500, 500],
  );
  assert.deepEqual(deliveryOutcome(1, { ok: true }, policy), { kind: "delivered" });
  assert.deepEqual(deliveryOutcome(2, { ok: false, error: "down" }, policy), {
    kind: "retry",
    afterMs: 200,
    error: "down",
  });
  assert.deepEqual(deliveryOutcome(5, { ok: false, error: "down" }, policy), {
    kind: "park",
    error: "gave up after 5 attempts: down",
  });
  assert.deepEqual(deliveryOutcome(1, { ok: false, error: "bad", unreadable: true }, policy), {
    kind: "park",
    error: "bad",
  });
  for (const bad of [{ maxAttempts: 0 }, { firstBackoffMs: -1 }, { firstBackoffMs: 10, maxBackoffMs: 5 }]) {
    assert.throws(() => outboxRetryPolicy(bad), PersistenceConfigurationError);
  }
});

test("thenSend needs a write and a destination; message ids are stable per operation and position", () => {
  assert.throws(() => EventSourcedEffect.none().thenSend("Stock", "s1", {}), InvalidPersistenceRequestError);
  assert.throws(() => DurableStateEffect.stop().thenSendToHandler("mail", {}), InvalidPersistenceRequestError);
  assert.throws(() => EventSourcedEffect.persist({}, "op").thenSend("", "s1", {}), InvalidPersistenceRequestError);
  assert.throws(
    () => DurableStateEffect.persist({}, "op").thenSend("Stock", "x".repeat(257), {}),
    InvalidPersistenceRequestError,
  );
  const effect = EventSourcedEffect.persistAll([], "op")
    .thenSend({ name: "Stock" }, "s1", (id: string) => ({ id }))
    .thenSendToHandler("mail", { to: "a" })
    .thenStop();
  assert.deepEqual(
    effect.outbox.map((m) => [m.destination, m.build === null ? m.message : m.build("m-1")]),
    [
      [{ kind: "entity", entityType: "Stock", entityId: "s1" }, { id: "m-1" }],
      [{ kind: "handler", handler: "mail" }, { to: "a" }],
    ],
  );
  assert.equal(effect.stopAfter, true, "thenStop keeps the messages and stops");
  const id = outboxMessageId("Order:o1", "op", 0);
  assert.match(id, /^ob-[0-9a-f]{32}$/);
  assert.equal(outboxMessageId("Order:o1", "op", 0), id);
  const others = [
    outboxMessageId("Order:o1", "op", 1),
    outboxMessageId("Order:o1", "op2", 0),
    outboxMessageId("Order:o", "1op", 0),
  ];
  assert.ok(
    others.every((other) => other !== id),
    "another position, operation or writer is another id",
  );
  assert.equal(outboxMessageId("x".repeat(10_000), "y".repeat(200), 999).length, 35, "fits an OperationId");
});

class Reserve {
  constructor(
    readonly sku: string,
    readonly messageId: string,
  ) {}
}

/** A store with one order's messages: `n` reservations to entities and one mail to the "mail" handler. */
async function orderWithMessages(n: number) {
  const store = new MemoryStore();
  const codec = new PersistenceCodec().register(Reserve);
  const pid = "Order:o1";
  const outbox = Array.from({ length: n }, (_, i) => {
    const messageId = outboxMessageId(pid, "place", i);
    return {
      messageId,
      destination: { kind: "entity" as const, entityType: "Stock", entityId: `sku-${i}` },
      ...codec.encode(new Reserve(`sku-${i}`, messageId)),
    };
  });
  outbox.push({
    messageId: outboxMessageId(pid, "place", n),
    destination: { kind: "handler", handler: "mail" } as never,
    ...codec.encode({ to: "buyer@example.com" }),
  });
  await store.appendEvents({
    persistenceId: pid,
    expectedRevision: 0,
    operationId: "place",
    events: [{ manifest: "json", payload: "{}" }],
    outbox,
  });
  return { store, codec };
}

test("the dispatcher retries a failing destination with backoff until it acknowledges, then marks it delivered", async () => {
  const { store, codec } = await orderWithMessages(2);
  const seen: OutboxDelivery[] = [];
  let failuresLeft = 2;
  const mails: unknown[] = [];
  const dispatcher = new OutboxDispatcher({
    store,
    codec,
    owner: "d1",
    retry: { firstBackoffMs: 0, maxBackoffMs: 0, maxAttempts: 5 },
    deliverToEntity: async (delivery) => {
      seen.push(delivery);
      if (delivery.destination.kind === "entity" && delivery.destination.entityId === "sku-1" && failuresLeft-- > 0) {
        throw new Error("stock service restarting");
      }
    },
    handlers: { mail: async (d) => void mails.push(d.message) },
  });
  const rounds = [];
  for (let i = 0; i < 4; i++) rounds.push(await dispatcher.runOnce());
  assert.deepEqual(rounds, [
    { claimed: 3, delivered: 2, retried: 1, parked: 0, stale: 0 },
    { claimed: 1, delivered: 0, retried: 1, parked: 0, stale: 0 },
    { claimed: 1, delivered: 1, retried: 0, parked: 0, stale: 0 },
    { claimed: 0, delivered: 0, retried: 0, parked: 0, stale: 0 },
  ]);
  const toSku1 = seen.filter((d) => d.destination.kind === "entity" && d.destination.entityId === "sku-1");
  assert.deepEqual(
    toSku1.map((d) => [d.attempt, d.messageId]),
    [
      [1, outboxMessageId("Order:o1", "place", 1)],
      [2, outboxMessageId("Order:o1", "place", 1)],
      [3, outboxMessageId("Order:o1", "place", 1)],
    ],
  );
  assert.ok(toSku1[0]!.message instanceof Reserve, "decoded by the codec");
  assert.equal((toSku1[0]!.message as Reserve).messageId, toSku1[0]!.messageId, "the message carries its id");
  assert.deepEqual(mails, [{ to: "buyer@example.com" }]);
  assert.deepEqual(await store.outboxCounts(), {
    pending: 0,
    claimed: 0,
    retrying: 0,
    parked: 0,
    delivered: 3,
    oldestPendingAgeMs: null,
  });
  assert.equal(dispatcher.stats.lastError, "Error: stock service restarting");
});

test("poison messages are parked: after the last attempt, and at once when the message cannot be decoded", async () => {
  const { store } = await orderWithMessages(1);
  // A codec without the Reserve class cannot decode the reservation: parked at once, no delivery attempted.
  const dispatcher = new OutboxDispatcher({
    store,
    codec: new PersistenceCodec(),
    retry: { firstBackoffMs: 0, maxBackoffMs: 0, maxAttempts: 2 },
    deliverToEntity: async () => assert.fail("an undecodable message must not be delivered"),
    handlers: {
      mail: async () => {
        throw new Error("smtp refused");
      },
    },
  });
  assert.deepEqual(await dispatcher.runOnce(), { claimed: 2, delivered: 0, retried: 1, parked: 1, stale: 0 });
  assert.deepEqual(await dispatcher.runOnce(), { claimed: 1, delivered: 0, retried: 0, parked: 1, stale: 0 });
  assert.deepEqual(await dispatcher.runOnce(), { claimed: 0, delivered: 0, retried: 0, parked: 0, stale: 0 });
  const parked = await store.parkedOutbox(10);
  assert.equal(parked.length, 2);
  assert.match(
    parked[0]!.lastError,
    /cannot decode the message: CorruptPersistentRecordError: .*manifest Reserve is not registered/,
  );
  assert.equal(parked[1]!.lastError, "gave up after 2 attempts: Error: smtp refused");
});

test("a handler name from a stored row only matches the dispatcher's own handlers; a slow deliverer times out", async () => {
  const store = new MemoryStore();
  const codec = new PersistenceCodec();
  await store.appendEvents({
    persistenceId: "Order:o2",
    expectedRevision: 0,
    operationId: "x",
    events: [],
    outbox: ["constructor", "slow"].map((handler, i) => ({
      messageId: `m${i}`,
      destination: { kind: "handler", handler },
      ...codec.encode({ i }),
    })),
  });
  const dispatcher = new OutboxDispatcher({
    store,
    codec,
    leaseMs: 1000,
    deliveryTimeoutMs: 50,
    retry: { maxAttempts: 1 },
    handlers: { slow: () => new Promise(() => {}) },
  });
  assert.deepEqual(await dispatcher.runOnce(), { claimed: 2, delivered: 0, retried: 0, parked: 2, stale: 0 });
  assert.deepEqual(
    (await store.parkedOutbox(10)).map((p) => p.lastError),
    [
      'gave up after 1 attempts: this dispatcher has no handlers["constructor"]',
      "gave up after 1 attempts: Error: no acknowledgement within 50 ms",
    ],
  );
  assert.throws(
    () => new OutboxDispatcher({ store, codec, leaseMs: 100, deliveryTimeoutMs: 100 }),
    PersistenceConfigurationError,
  );
});

test("a copy answered after its timeout is recorded delivered at the next attempt; a copy older than leaseMs is sent again", async () => {
  const { store, codec } = await orderWithMessages(2);
  const copies = new Map<string, number>();
  const late: (() => void)[] = [];
  const dispatcher = new OutboxDispatcher({
    store,
    codec,
    leaseMs: 400,
    deliveryTimeoutMs: 20,
    retry: { maxAttempts: 100, firstBackoffMs: 0, maxBackoffMs: 0 },
    handlers: { mail: async () => {} },
    // sku-0 is acknowledged only when the test says so; sku-1 never is.
    deliverToEntity: (d) => {
      const entityId = (d.destination as { entityId: string }).entityId;
      copies.set(entityId, (copies.get(entityId) ?? 0) + 1);
      return entityId === "sku-0" ? new Promise<void>((resolve) => late.push(resolve)) : new Promise<void>(() => {});
    },
  });
  assert.deepEqual(await dispatcher.runOnce(), { claimed: 3, delivered: 1, retried: 2, parked: 0, stale: 0 });
  assert.deepEqual(await dispatcher.runOnce(), { claimed: 2, delivered: 0, retried: 2, parked: 0, stale: 0 });
  assert.deepEqual(
    [...copies],
    [
      ["sku-0", 1],
      ["sku-1", 1],
    ],
    "the second attempt waited for the first copies",
  );
  assert.equal(dispatcher.stats.joined, 2);
  late[0]!(); // sku-0's first copy is acknowledged late
  assert.deepEqual(await dispatcher.runOnce(), { claimed: 2, delivered: 1, retried: 1, parked: 0, stale: 0 });
  assert.equal(copies.get("sku-0"), 1, "delivered on its late acknowledgement, not sent again");
  const { eventually } = await import("../fixtures/eventually.ts");
  // sku-1's copy never settles: once older than leaseMs it is not waited for, and a new one goes out.
  await eventually(
    async () => {
      await dispatcher.runOnce();
      return copies.get("sku-1") === 2;
    },
    {
      what: "a second copy of sku-1 after leaseMs",
      describe: () => ({ copies: [...copies], stats: dispatcher.stats }),
    },
  );
  const { pending, parked, delivered } = await store.outboxCounts();
  assert.deepEqual({ pending, parked, delivered }, { pending: 1, parked: 0, delivered: 2 });
});

test("the running dispatcher delivers new messages and purges delivered ones past the retention", async () => {
  const { store, codec } = await orderWithMessages(3);
  const delivered: string[] = [];
  const dispatcher = new OutboxDispatcher({
    store,
    codec,
    pollIntervalMs: 10,
    purge: { retentionMs: 0, everyMs: 1 },
    deliverToEntity: async (d) => void delivered.push(d.messageId),
    handlers: { mail: async (d) => void delivered.push(d.messageId) },
  });
  dispatcher.start();
  try {
    const { eventually } = await import("../fixtures/eventually.ts");
    await eventually(async () => dispatcher.stats.purged === 4 && (await store.outboxCounts()).delivered === 0, {
      what: "4 messages delivered and purged",
      describe: () => ({ stats: dispatcher.stats, delivered }),
    });
  } finally {
    await dispatcher.stop();
  }
  assert.equal(new Set(delivered).size, 4);
});

test("a commit announced while a batch runs starts the next batch at once, not after pollIntervalMs", async () => {
  const { store, codec } = await orderWithMessages(0);
  const delivered: string[] = [];
  let releaseFirst: () => void = () => {};
  const firstHeld = new Promise<void>((resolve) => {
    releaseFirst = resolve;
  });
  const dispatcher = new OutboxDispatcher({
    store,
    codec,
    // Far longer than the test's deadline: only the commit's wake-up can deliver the second message in time.
    pollIntervalMs: 3_600_000,
    deliverToEntity: async (d) => void delivered.push(d.messageId),
    handlers: {
      mail: async (d) => {
        delivered.push(d.messageId);
        await firstHeld;
      },
    },
  });
  dispatcher.start();
  const { eventually } = await import("../fixtures/eventually.ts");
  try {
    await eventually(() => delivered.length === 1, {
      what: "the first batch in its deliverer",
      describe: () => delivered,
    });
    // Committed while the first batch is still delivering: no pause is waiting for the announcement.
    const messageId = outboxMessageId("Order:o2", "place", 0);
    await store.appendEvents({
      persistenceId: "Order:o2",
      expectedRevision: 0,
      operationId: "place",
      events: [{ manifest: "json", payload: "{}" }],
      outbox: [
        {
          messageId,
          destination: { kind: "entity", entityType: "Stock", entityId: "sku-9" },
          ...codec.encode(new Reserve("sku-9", messageId)),
        },
      ],
    });
    releaseFirst();
    await eventually(() => delivered.includes(messageId), {
      what: "the message committed during the batch delivered without waiting for the poll",
      timeoutMs: 10_000,
      describe: () => ({ delivered, stats: dispatcher.stats }),
    });
  } finally {
    releaseFirst();
    await dispatcher.stop();
  }
});
