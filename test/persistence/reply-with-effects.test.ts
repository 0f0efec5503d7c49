// Reply-with-effects (issue 20): an event-sourced command's reply is recorded in the transaction of its events, and a
// retry of the command with the same OperationId gets that reply back, with no second write, on memory, SQLite and
// the real PostgreSQL. The retry is told apart from a fresh answer: between the first try and its retry another
// command changes the state, so a reply made afresh would differ from the recorded one.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { ActorSystem } from "../../src/actor/index.ts";
import {
  CorruptPersistentRecordError,
  Database,
  type EntityContext,
  EventSourcedBehavior,
  EventSourcedEffect,
  EventSourcing,
  InvalidPersistenceRequestError,
  MemoryStore,
  type PersistenceStore,
} from "../../src/persistence/index.ts";
import { PostgresStore } from "../../src/persistence/postgres/index.ts";
import { SqliteStore } from "../../src/persistence/sqlite/index.ts";
import { freshPostgresStore } from "./pg-fixture.ts";

abstract class AccountCommand {}
class Deposit extends AccountCommand {
  constructor(
    readonly amount: number,
    readonly op: string,
  ) {
    super();
  }
}
class Deposited {
  constructor(readonly amount: number) {}
}
/** The reply: the balance right after this deposit, and the how-many-th deposit it was. */
class Receipt {
  constructor(
    readonly balance: number,
    readonly deposits: number,
  ) {}
}
type Account = { balance: number; deposits: number };

class AccountBehavior extends EventSourcedBehavior<AccountCommand, Deposited, Account> {
  emptyState(): Account {
    return { balance: 0, deposits: 0 };
  }
  applyEvent(state: Account, event: Deposited): Account {
    return { balance: state.balance + event.amount, deposits: state.deposits + 1 };
  }
  handleCommand(_state: Account, command: AccountCommand, ctx: EntityContext<AccountCommand>) {
    const deposit = command as Deposit;
    return EventSourcedEffect.persist<Deposited, Account>(new Deposited(deposit.amount), deposit.op).thenReply(
      ctx.sender,
      (s) => new Receipt(s.balance, s.deposits),
    );
  }
}

const dir = mkdtempSync(join(tmpdir(), "movie-replies-"));
after(() => rmSync(dir, { recursive: true, force: true }));

const backends: [string, () => Promise<{ store: PersistenceStore; dispose: () => Promise<void> }>][] = [
  ["memory", async () => ({ store: new MemoryStore(), dispose: async () => {} })],
  [
    "sqlite",
    async () => {
      const store = SqliteStore.open({ dbPath: join(dir, `r${Math.random()}.sqlite3`) });
      return { store, dispose: () => store.close() };
    },
  ],
  ["postgres", () => freshPostgresStore("reply")],
];

for (const [name, open] of backends) {
  describe(`reply-with-effects: ${name}`, () => {
    test("a retried command gets the reply recorded with its events, and nothing is written twice", async () => {
      const { store, dispose } = await open();
      const system = ActorSystem.create(`replies-${name}`);
      try {
        const database = Database.get(system);
        await database.use(store);
        database.codec.register(Deposited).register(Receipt);
        const accounts = EventSourcing.get(system).registerEntity(
          AccountBehavior,
          AccountCommand,
          () => new AccountBehavior(),
          { name: "Account" },
        );
        const ref = EventSourcing.get(system).getEntityRef<AccountCommand>(accounts.id("a"));
        const ask = (command: Deposit) => ref.ask(command, Receipt, 5_000);

        assert.deepEqual(await ask(new Deposit(10, "op-1")), new Receipt(10, 1));
        assert.deepEqual(await ask(new Deposit(5, "op-2")), new Receipt(15, 2));
        // The retry of op-1: its recorded receipt, not one made from today's state (15, 2) nor a second deposit.
        assert.deepEqual(await ask(new Deposit(10, "op-1")), new Receipt(10, 1));
        assert.deepEqual(await ask(new Deposit(1, "op-3")), new Receipt(16, 3));
        assert.deepEqual(
          (await store.loadEvents("Account:a")).map((e) => JSON.parse(e.payload).amount),
          [10, 5, 1],
          "op-1 written once",
        );
      } finally {
        await system.terminate();
        await dispose();
      }
    });

    test("an append with a reply and outbox messages writes both once; its retry returns the reply and adds no row", async () => {
      const { store, dispose } = await open();
      try {
        const event = { manifest: "E", payload: "{}" };
        const reply = { manifest: "R", payload: '{"n":1}' };
        const outbox = [
          {
            messageId: "RO:1/op/0",
            destination: { kind: "entity" as const, entityType: "Stock", entityId: "s1" },
            manifest: "M",
            payload: '{"q":1}',
          },
        ];
        const write = (expectedRevision: number) =>
          store.appendEvents({
            persistenceId: "RO:1",
            expectedRevision,
            operationId: "op",
            events: [event],
            reply,
            outbox,
          });
        assert.equal((await write(0)).duplicate, false);
        const retry = await write(1);
        assert.deepEqual({ duplicate: retry.duplicate, reply: retry.reply }, { duplicate: true, reply });
        const { rows: claimed } = await store.claimOutbox({ owner: "test", limit: 10, leaseMs: 60_000 });
        assert.deepEqual(
          claimed.map((r) => [r.messageId, r.persistenceId, r.payload]),
          [["RO:1/op/0", "RO:1", '{"q":1}']],
          "the message written once, with the events",
        );
      } finally {
        await dispose();
      }
    });

    test("the store returns the recorded reply to a duplicate append only, and validates it", async () => {
      const { store, dispose } = await open();
      try {
        const event = { manifest: "E", payload: "{}" };
        const reply = { manifest: "R", payload: '{"n":1}' };
        const first = await store.appendEvents({
          persistenceId: "R:1",
          expectedRevision: 0,
          operationId: "op",
          events: [event],
          reply,
        });
        assert.equal(first.duplicate, false);
        assert.equal(first.reply ?? null, null, "a first write has no recorded reply to return");
        // A retry (it may carry a different reply: the state it was made from moved on) gets the first one.
        const retry = await store.appendEvents({
          persistenceId: "R:1",
          expectedRevision: 1,
          operationId: "op",
          events: [event],
          reply: { manifest: "R", payload: '{"n":2}' },
        });
        assert.deepEqual(
          { duplicate: retry.duplicate, revision: retry.revision, reply: retry.reply },
          {
            duplicate: true,
            revision: 1,
            reply,
          },
        );
        // An operation appended without a reply has none to return.
        await store.appendEvents({ persistenceId: "R:1", expectedRevision: 1, operationId: "plain", events: [event] });
        const plain = await store.appendEvents({
          persistenceId: "R:1",
          expectedRevision: 2,
          operationId: "plain",
          events: [event],
          reply,
        });
        assert.equal(plain.duplicate, true);
        assert.equal(plain.reply ?? null, null);
        for (const bad of [{ manifest: "", payload: "{}" }, { manifest: "R", payload: 7 }, "R", 3]) {
          await assert.rejects(
            store.appendEvents({
              persistenceId: "R:2",
              expectedRevision: 0,
              operationId: "bad",
              events: [event],
              reply: bad as unknown as { manifest: string; payload: string },
            }),
            InvalidPersistenceRequestError,
            JSON.stringify(bad),
          );
        }
        assert.equal(await store.loadRevision("R:2"), 0, "a refused reply writes nothing");
        if (store instanceof PostgresStore) {
          // A corrupt stored reply is refused with a typed error, not handed to the codec.
          await store.pool.query("UPDATE operation_reply SET manifest = '' WHERE operation_id = 'op'");
          await assert.rejects(
            store.appendEvents({
              persistenceId: "R:1",
              expectedRevision: 3,
              operationId: "op",
              events: [event],
              reply,
            }),
            CorruptPersistentRecordError,
          );
        }
      } finally {
        await dispose();
      }
    });
  });
}
