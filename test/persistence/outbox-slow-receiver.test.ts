// A delivery that times out while its first copy is still queued at the receiver (issue 20): on the real PostgreSQL,
// the receiver's database is held (a lock on the journal) for longer than several delivery timeouts, with two
// dispatchers taking turns at the row. The test proves: the effect happens once; the duplicate copy is answered with
// the reply recorded for the first (reply-with-effects), not one made afresh; the row is recorded delivered once; and
// the copies do not grow with the timeouts: each dispatcher sends one copy and later attempts wait for it, while the
// backoff between attempts doubles.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ActorSystem } from "../../src/actor/index.ts";
import {
  Database,
  type EntityContext,
  EventSourcedBehavior,
  EventSourcedEffect,
  EventSourcing,
  type OutboxClaimRef,
  OutboxDispatcher,
  type OutboxFailure,
  outboxMessageId,
  type PersistenceStore,
} from "../../src/persistence/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { freshPostgresStore, rawClient } from "./pg-fixture.ts";

/** The message: a deposit under its outbox message id (the receiver's OperationId). */
class Deposit {
  constructor(
    readonly amount: number,
    readonly operationId: string,
  ) {}
}
class Deposited {
  constructor(readonly amount: number) {}
}
/** The receiver's reply: the balance right after this deposit and how many deposits there were. */
class Receipt {
  constructor(
    readonly balance: number,
    readonly deposits: number,
  ) {}
}
type Account = { balance: number; deposits: number };

class AccountBehavior extends EventSourcedBehavior<Deposit, Deposited, Account> {
  emptyState(): Account {
    return { balance: 0, deposits: 0 };
  }
  applyEvent(state: Account, event: Deposited): Account {
    return { balance: state.balance + event.amount, deposits: state.deposits + 1 };
  }
  handleCommand(_state: Account, command: Deposit, ctx: EntityContext<Deposit>) {
    // Reply-with-effects: the receipt is recorded with the event, and a duplicate gets the recorded one back.
    return EventSourcedEffect.persist<Deposited, Account>(new Deposited(command.amount), command.operationId).thenReply(
      ctx.sender,
      (s) => new Receipt(s.balance, s.deposits),
    );
  }
}

/** The store as the dispatchers see it, recording every outcome they write. */
function recording(store: PersistenceStore) {
  const failures: { owner: string; failure: OutboxFailure }[] = [];
  const completions: number[][] = [];
  const wrapped = new Proxy(store, {
    get(target, property, receiver) {
      if (property === "failOutbox") {
        return (owner: string, list: readonly OutboxFailure[]) => {
          for (const failure of list) failures.push({ owner, failure });
          return target.failOutbox(owner, list);
        };
      }
      if (property === "completeOutbox") {
        return (rows: readonly OutboxClaimRef[]) => {
          completions.push(rows.map((r) => r.offset));
          return target.completeOutbox(rows);
        };
      }
      const value = Reflect.get(target, property, receiver);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  return { wrapped, failures, completions };
}

test("a receiver held past several delivery timeouts: effect once, the recorded reply for the duplicate, one outcome, one copy per dispatcher", async () => {
  const { store, url, schema, dispose } = await freshPostgresStore("slowrx", {
    // The held append must wait for the lock rather than time out in the store.
    resilience: { operationTimeoutMs: 60_000 },
  });
  const system = ActorSystem.create("slow-receiver");
  const holder = await rawClient(url, schema);
  let held = false;
  try {
    const database = Database.get(system);
    await database.use(store);
    database.codec.register(Deposit).register(Deposited).register(Receipt);
    const accounts = EventSourcing.get(system).registerEntity(AccountBehavior, Deposit, () => new AccountBehavior(), {
      name: "Account",
    });
    const account = EventSourcing.get(system).getEntityRef<Deposit>(accounts.id("a"));
    // Recover the receiver before the hold, so the copies queue behind its held write and not behind its recovery.
    assert.deepEqual(await account.ask(new Deposit(1, "warm-up"), Receipt, 10_000), new Receipt(1, 1));

    // The sender's write with one message to Account a.
    const messageId = outboxMessageId("Order:o1", "place-o1", 0);
    await store.appendEvents({
      persistenceId: "Order:o1",
      expectedRevision: 0,
      operationId: "place-o1",
      events: [{ manifest: "OrderPlaced", payload: "{}" }],
      outbox: [
        {
          messageId,
          destination: { kind: "entity", entityType: "Account", entityId: "a" },
          ...database.codec.encode(new Deposit(10, messageId), "value"),
        },
      ],
    });

    const { wrapped, failures, completions } = recording(store);
    const sent: { owner: string; attempt: number }[] = [];
    const replies: { owner: string; reply: Receipt }[] = [];
    const outstanding = new Map<string, number>();
    let mostOutstanding = 0;
    const dispatcher = (owner: string) =>
      new OutboxDispatcher({
        store: wrapped,
        codec: database.codec,
        owner,
        leaseMs: 10_000,
        deliveryTimeoutMs: 750,
        retry: { maxAttempts: 1000, firstBackoffMs: 50, maxBackoffMs: 30_000 },
        // Each copy is an ask that outlives the dispatcher's timeout, as a copy queued at a held receiver does.
        deliverToEntity: async (delivery) => {
          sent.push({ owner, attempt: delivery.attempt });
          outstanding.set(owner, (outstanding.get(owner) ?? 0) + 1);
          mostOutstanding = Math.max(mostOutstanding, outstanding.get(owner)!);
          try {
            const reply = await account.ask(delivery.message as Deposit, Receipt, 60_000);
            replies.push({ owner, reply });
          } finally {
            outstanding.set(owner, outstanding.get(owner)! - 1);
          }
        },
      });
    const a = dispatcher("dispatcher-a");
    const b = dispatcher("dispatcher-b");
    const state = () => ({ sent, replies, failures, completions, a: a.stats, b: b.stats });
    /** One attempt of `d` at the row (claims until the backoff let it claim). */
    const attemptBy = async (d: OutboxDispatcher) => {
      let result = await d.runOnce();
      await eventually(
        async () => {
          if (result.claimed === 1) return true;
          result = await d.runOnce();
          return result.claimed === 1;
        },
        { what: `${d.owner} claims the row`, describe: state, timeoutMs: 30_000 },
      );
      return result;
    };

    // Hold the receiver's database: its append waits on the journal's lock.
    await holder.query("BEGIN");
    await holder.query("LOCK TABLE event_journal IN EXCLUSIVE MODE");
    held = true;

    // A's copy reaches the receiver, whose write is held: no acknowledgement within the timeout.
    assert.deepEqual(await attemptBy(a), { claimed: 1, delivered: 0, retried: 1, parked: 0, stale: 0 });
    // Another deposit queues behind it, so a reply made afresh for a later copy would differ from the recorded one.
    const other = account.ask(new Deposit(5, "other"), Receipt, 60_000);
    // B takes the row after A's backoff and sends its own copy, queued behind both.
    assert.deepEqual(await attemptBy(b), { claimed: 1, delivered: 0, retried: 1, parked: 0, stale: 0 });
    // More timeouts while the receiver is held: each attempt waits for its dispatcher's copy, sending none.
    for (const d of [a, b, a, b]) {
      assert.deepEqual(await attemptBy(d), { claimed: 1, delivered: 0, retried: 1, parked: 0, stale: 0 });
    }
    assert.deepEqual(
      sent.map((s) => s.owner),
      ["dispatcher-a", "dispatcher-b"],
      `one copy per dispatcher through six timeouts: ${JSON.stringify(state())}`,
    );
    assert.equal(a.stats.joined + b.stats.joined, 4, "four attempts waited for a copy in flight");
    assert.equal(mostOutstanding, 1, "never two unanswered copies from one dispatcher");
    // The backoff doubles with every failed attempt, whichever dispatcher made it.
    assert.deepEqual(
      failures.map((f) => f.failure.retryAfterMs),
      [50, 100, 200, 400, 800, 1600],
    );

    await holder.query("ROLLBACK");
    held = false;
    // The held write commits; the next attempt finds its copy answered and records the delivery.
    await eventually(
      async () => {
        for (const d of [a, b]) await d.runOnce();
        return (await store.outboxCounts()).delivered === 1;
      },
      { what: "the row delivered", describe: state, timeoutMs: 30_000 },
    );
    await eventually(() => replies.length === 2, { what: "both copies answered", describe: state });
    assert.deepEqual(await other, new Receipt(16, 3), "the other deposit ran between the two copies");
    // The duplicate (B's copy, after the other deposit) gets the receipt recorded with the first: (11, 2), not (16, 3).
    assert.deepEqual(
      replies.map((r) => [r.owner, r.reply]),
      [
        ["dispatcher-a", new Receipt(11, 2)],
        ["dispatcher-b", new Receipt(11, 2)],
      ],
    );
    assert.deepEqual(
      (await store.loadEvents("Account:a")).map((e) => JSON.parse(e.payload).amount),
      [1, 10, 5],
      "the deposit applied once",
    );
    assert.equal(a.stats.delivered + b.stats.delivered, 1, "one delivered outcome");
    assert.equal(completions.length, 1, `one completion written: ${JSON.stringify(completions)}`);
    assert.deepEqual(await store.outboxCounts(), {
      pending: 0,
      claimed: 0,
      retrying: 0,
      parked: 0,
      delivered: 1,
      oldestPendingAgeMs: null,
    });
    assert.equal(sent.length, 2, "no copy sent after the release either");
  } finally {
    if (held) await holder.query("ROLLBACK").catch(() => {});
    await holder.end().catch(() => {});
    await system.terminate();
    await dispose();
  }
});
