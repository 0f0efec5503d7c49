import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { ActorSystem, STOP } from "../../src/actor/index.ts";
import {
  CorruptPersistentRecordError,
  Database,
  DurableState,
  DurableStateBehavior,
  DurableStateEffect,
  Effect,
  type EntityContext,
  EventSourcedBehavior,
  EventSourcing,
  MemoryStore,
  OperationConflictError,
  OperationId,
  type PersistenceStore,
  StaleShardOwnerError,
} from "../../src/persistence/index.ts";
import { SqliteStore } from "../../src/persistence/sqlite/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { freshPostgresStore } from "./pg-fixture.ts";

abstract class CounterCommand {}
class Add extends CounterCommand {
  constructor(
    readonly amount: number,
    readonly op: string,
  ) {
    super();
  }
}
class Get extends CounterCommand {}
class CounterValue {
  constructor(readonly total: number) {}
}
class Added {
  constructor(readonly amount: number) {}
}
class CounterState {
  constructor(
    readonly total: number,
    readonly history: number[],
  ) {}
  static fromJSON(json: unknown): CounterState {
    const j = json as { total: number; history: number[] };
    return new CounterState(j.total, j.history);
  }
}

const failures: Error[] = [];
const recoveryFailures: Error[] = [];

class CounterBehavior extends EventSourcedBehavior<CounterCommand, Added, CounterState> {
  override snapshotEvery = 3;
  emptyState(): CounterState {
    return new CounterState(0, []);
  }
  applyEvent(state: CounterState, event: Added): CounterState {
    return new CounterState(state.total + event.amount, [...state.history, event.amount]);
  }
  handleCommand(state: CounterState, command: CounterCommand, ctx: EntityContext<CounterCommand>) {
    const reply = (s: CounterState) => ctx.sender?.tell(new CounterValue(s.total));
    if (command instanceof Add)
      return Effect.persist<Added, CounterState>(new Added(command.amount), command.op).thenRun(reply);
    return Effect.none<Added, CounterState>().thenRun(() => reply(state));
  }
  override onPersistFailure(error: Error): void {
    failures.push(error);
  }
  override onRecoveryFailure(error: Error): void {
    recoveryFailures.push(error);
  }
}

abstract class CartCommand {}
class AddItem extends CartCommand {
  constructor(
    readonly item: string,
    readonly op: string,
  ) {
    super();
  }
}
class ClearCart extends CartCommand {
  constructor(readonly op: string) {
    super();
  }
}
class GetCart extends CartCommand {}
class CartView {
  constructor(readonly items: string[]) {}
}

class CartBehavior extends DurableStateBehavior<CartCommand, { items: string[] }> {
  emptyState() {
    return { items: [] as string[] };
  }
  handleCommand(state: { items: string[] }, command: CartCommand, ctx: EntityContext<CartCommand>) {
    const reply = (s: { items: string[] }) => ctx.sender?.tell(new CartView(s.items));
    if (command instanceof AddItem) {
      return DurableStateEffect.persist({ items: [...state.items, command.item] }, command.op).thenRun(reply);
    }
    if (command instanceof ClearCart) return DurableStateEffect.delete<{ items: string[] }>(command.op).thenRun(reply);
    return DurableStateEffect.none<{ items: string[] }>().thenRun(reply);
  }
}

function setUp(system: ActorSystem, store: PersistenceStore) {
  const database = Database.get(system);
  void database.use(store);
  database.codec.register(Added).register(CounterState);
  const counters = EventSourcing.get(system).registerEntity(
    CounterBehavior,
    CounterCommand,
    () => new CounterBehavior(),
    {
      name: "Counter",
    },
  );
  const carts = DurableState.get(system).registerEntity(CartBehavior, CartCommand, () => new CartBehavior(), {
    name: "Cart",
  });
  return { counters, carts };
}

const dir = mkdtempSync(join(tmpdir(), "movie-entities-"));
after(() => rmSync(dir, { recursive: true, force: true }));

const backends: [
  string,
  () => Promise<{ store: PersistenceStore; second: () => Promise<PersistenceStore>; dispose: () => Promise<void> }>,
][] = [
  [
    "memory",
    async () => {
      const store = new MemoryStore();
      return { store, second: async () => store, dispose: async () => {} };
    },
  ],
  [
    "sqlite",
    async () => {
      const path = join(dir, `e-${Math.random().toString(36).slice(2)}.sqlite3`);
      const store = SqliteStore.open({ dbPath: path });
      const others: PersistenceStore[] = [];
      return {
        store,
        second: async () => {
          const s = SqliteStore.open({ dbPath: path });
          others.push(s);
          return s;
        },
        dispose: async () => {
          await store.close();
          for (const s of others) await s.close();
        },
      };
    },
  ],
  [
    "postgres",
    async () => {
      const ctx = await freshPostgresStore("entities");
      const { PostgresStore } = await import("../../src/persistence/postgres/index.ts");
      const others: PersistenceStore[] = [];
      return {
        store: ctx.store,
        second: async () => {
          const s = await PostgresStore.connect({ connectionUri: ctx.url, schema: ctx.schema });
          others.push(s);
          return s;
        },
        dispose: async () => {
          for (const s of others) await s.close();
          await ctx.dispose();
        },
      };
    },
  ],
];

for (const [name, make] of backends) {
  describe(`persistent entities on ${name}`, () => {
    test("event-sourced entity: persist, snapshot, stop, recover with identical state, duplicates ignored", async () => {
      const { store, dispose } = await make();
      const system = ActorSystem.create("es");
      try {
        const { counters } = setUp(system, store);
        const id = counters.id("c1");
        assert.equal(id.persistenceId, "Counter:c1");
        const es = EventSourcing.get(system);
        let ref = es.getEntityRef<CounterCommand>(id);
        for (let i = 1; i <= 5; i++) {
          const reply = await ref.ask(new Add(i, `op-${i}`), CounterValue, 5000);
          assert.equal(reply.total, (i * (i + 1)) / 2);
        }
        // A retried command with the same OperationId is not applied twice.
        assert.equal((await ref.ask(new Add(5, "op-5"), CounterValue, 5000)).total, 15);
        assert.equal(await store.loadRevision(id.persistenceId), 5);
        assert.equal((await store.loadSnapshot(id.persistenceId))?.sequenceNr, 3);
        ref.sendSystem(STOP);
        await eventually(() => es.getEntityRef(id) !== ref, { what: "the stopped entity to be evicted" });
        ref = es.getEntityRef<CounterCommand>(id);
        assert.equal((await ref.ask(new Get(), CounterValue, 5000)).total, 15);
        assert.equal((await ref.ask(new Add(100, OperationId.random().value), CounterValue, 5000)).total, 115);
        await system.terminate();
        const again = ActorSystem.create("es2");
        try {
          const t = setUp(again, store);
          const recovered = EventSourcing.get(again).getEntityRef<CounterCommand>(t.counters.id("c1"));
          assert.equal((await recovered.ask(new Get(), CounterValue, 5000)).total, 115);
          // Snapshot at 6 (crossed 6 at the 6th event); recovery = snapshot + later events.
          assert.equal((await store.loadSnapshot(id.persistenceId))?.sequenceNr, 6);
        } finally {
          await again.terminate();
        }
      } finally {
        await system.terminate();
        await dispose();
      }
    });

    test("durable-state entity: persist, delete as tombstone, recover identical state", async () => {
      const { store, dispose } = await make();
      const system = ActorSystem.create("ds");
      try {
        const { carts } = setUp(system, store);
        const id = carts.id("k1");
        const ds = DurableState.get(system);
        const ref = ds.getEntityRef<CartCommand>(id);
        assert.deepEqual((await ref.ask(new AddItem("a", "1"), CartView, 5000)).items, ["a"]);
        assert.deepEqual((await ref.ask(new AddItem("b", "2"), CartView, 5000)).items, ["a", "b"]);
        // Reusing an OperationId for a different resulting state is refused and changes nothing.
        await assert.rejects(ref.ask(new AddItem("b", "2"), CartView, 5000), OperationConflictError);
        assert.deepEqual((await ref.ask(new GetCart(), CartView, 5000)).items, ["a", "b"]);
        assert.deepEqual((await ref.ask(new ClearCart("3"), CartView, 5000)).items, []);
        assert.deepEqual(await store.loadState(id.persistenceId), {
          revision: 3,
          manifest: "deleted",
          payload: null,
          deleted: true,
        });
        assert.deepEqual((await ref.ask(new AddItem("c", "4"), CartView, 5000)).items, ["c"]);
        ref.sendSystem(STOP);
        await eventually(() => ds.getEntityRef(id) !== ref, { what: "eviction" });
        assert.deepEqual((await ds.getEntityRef<CartCommand>(id).ask(new GetCart(), CartView, 5000)).items, ["c"]);
        assert.equal((await store.loadState(id.persistenceId))?.revision, 4);
      } finally {
        await system.terminate();
        await dispose();
      }
    });

    test("a paused old owner resuming after a transfer gets StaleShardOwnerError and commits nothing", async () => {
      const { store, second, dispose } = await make();
      const nodeA = ActorSystem.create("node-a");
      const nodeB = ActorSystem.create("node-b");
      try {
        const a = setUp(nodeA, store);
        const storeB = await second();
        const b = setUp(nodeB, storeB);
        const key = { clusterName: "shop", entityType: "Counter", shardId: 5 };
        const tokenA = (await Database.get(nodeA).acquireShardLease(key, "node-a", 200))!;
        const refA = EventSourcing.get(nodeA).getEntityRef<CounterCommand>(a.counters.id("fenced"), tokenA);
        assert.equal((await refA.ask(new Add(1, "a1"), CounterValue, 5000)).total, 1);
        // node-a "pauses": its lease expires and node-b takes the shard at epoch + 1.
        let tokenB = null;
        await eventually(
          async () => (tokenB = await Database.get(nodeB).acquireShardLease(key, "node-b", 30_000)) !== null,
          {
            what: "the old lease to expire",
          },
        );
        assert.equal(tokenB!.epoch, tokenA.epoch + 1);
        const refB = EventSourcing.get(nodeB).getEntityRef<CounterCommand>(b.counters.id("fenced"), tokenB);
        assert.equal((await refB.ask(new Add(10, "b1"), CounterValue, 5000)).total, 11);
        const before = failures.length;
        await assert.rejects(refA.ask(new Add(100, "a2"), CounterValue, 5000), StaleShardOwnerError);
        assert.ok(failures.slice(before).some((e) => e instanceof StaleShardOwnerError));
        assert.equal(await store.loadRevision("Counter:fenced"), 2);
        assert.equal((await refB.ask(new Get(), CounterValue, 5000)).total, 11);
        // The stale incarnation stopped; resolving with the old token again only ever fails.
        await eventually(() => EventSourcing.get(nodeA).getEntityRef(a.counters.id("fenced"), tokenA) !== refA, {
          what: "the stale entity to stop",
        });
      } finally {
        await nodeA.terminate();
        await nodeB.terminate();
        await dispose();
      }
    });
  });
}

test("recovery of a corrupt event fails with a typed error naming persistence id and sequence", async () => {
  const store = new MemoryStore();
  const system = ActorSystem.create("corrupt");
  try {
    const { counters } = setUp(system, store);
    await store.appendEvents({
      persistenceId: "Counter:bad",
      expectedRevision: 0,
      operationId: "x",
      events: [
        { manifest: "Added", payload: '{"amount":1}' },
        { manifest: "Added", payload: "{not json" },
      ],
    });
    const before = recoveryFailures.length;
    await assert.rejects(
      EventSourcing.get(system).getEntityRef<CounterCommand>(counters.id("bad")).ask(new Get(), CounterValue, 5000),
      (e: unknown) =>
        e instanceof CorruptPersistentRecordError && e.persistenceId === "Counter:bad" && e.sequenceNr === 2,
    );
    assert.equal(recoveryFailures.length, before + 1);
  } finally {
    await system.terminate();
  }
});

test("an upcaster maps an old event manifest forward during recovery", async () => {
  const store = new MemoryStore();
  const system = ActorSystem.create("upcast");
  try {
    const { counters } = setUp(system, store);
    Database.get(system).codec.registerUpcaster("CounterIncremented.v0", (json) => ({
      manifest: "Added",
      json: { amount: (json as { by: number }).by },
    }));
    await store.appendEvents({
      persistenceId: "Counter:old",
      expectedRevision: 0,
      operationId: "x",
      events: [{ manifest: "CounterIncremented.v0", payload: '{"by":7}' }],
    });
    const ref = EventSourcing.get(system).getEntityRef<CounterCommand>(counters.id("old"));
    assert.equal((await ref.ask(new Get(), CounterValue, 5000)).total, 7);
  } finally {
    await system.terminate();
  }
});
