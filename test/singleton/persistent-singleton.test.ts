// A persistent (event-sourced) singleton on the real PostgreSQL over the fake cluster: its lease key, and its state
// surviving the owner's graceful leave.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { STOP } from "../../src/actor/index.ts";
import {
  Database,
  DurableState,
  DurableStateBehavior,
  DurableStateEffect,
  Effect,
  type EntityContext,
  EventSourcedBehavior,
  EventSourcing,
  MemoryStore,
  type PersistenceStore,
} from "../../src/persistence/index.ts";
import { SqliteStore } from "../../src/persistence/sqlite/index.ts";
import { ClusterShardingConfigurationError } from "../../src/sharding/errors.ts";
import { ClusterSingleton, ClusterSingletonConfigurationError } from "../../src/singleton/index.ts";
import { initDurableStateSingleton, initEventSourcedSingleton } from "../../src/singleton/persistent/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { freshPostgresStore, rawClient } from "../persistence/pg-fixture.ts";
import { FakeCluster, type Node } from "../sharding/fixtures/fake-cluster.ts";

abstract class LedgerCommand {}
class Record extends LedgerCommand {
  constructor(
    readonly entry: string,
    readonly op: string,
  ) {
    super();
  }
}
class ReadLedger extends LedgerCommand {}
class LedgerView {
  constructor(
    readonly entries: string[],
    readonly epoch: number,
  ) {}
}
class Recorded {
  constructor(readonly entry: string) {}
}

class Ledger extends EventSourcedBehavior<LedgerCommand, Recorded, { entries: string[] }> {
  emptyState() {
    return { entries: [] as string[] };
  }
  applyEvent(state: { entries: string[] }, event: Recorded) {
    return { entries: [...state.entries, event.entry] };
  }
  handleCommand(state: { entries: string[] }, command: LedgerCommand, ctx: EntityContext<LedgerCommand>) {
    const reply = (s: { entries: string[] }) => ctx.sender?.tell(new LedgerView(s.entries, ctx.fence?.epoch ?? 0));
    if (command instanceof Record) {
      return Effect.persist<Recorded, { entries: string[] }>(new Recorded(command.entry), command.op).thenRun(reply);
    }
    return Effect.none<Recorded, { entries: string[] }>().thenRun(() => reply(state));
  }
}

abstract class CounterCommand {}
class Increment extends CounterCommand {
  constructor(readonly op: string) {
    super();
  }
}
class ReadCounter extends CounterCommand {}
class CounterView {
  constructor(
    readonly n: number,
    readonly epoch: number,
  ) {}
}
class Counter extends DurableStateBehavior<CounterCommand, { n: number }> {
  emptyState() {
    return { n: 0 };
  }
  handleCommand(state: { n: number }, command: CounterCommand, ctx: EntityContext<CounterCommand>) {
    const reply = (s: { n: number }) => ctx.sender?.tell(new CounterView(s.n, ctx.fence?.epoch ?? 0));
    if (command instanceof Increment) return DurableStateEffect.persist({ n: state.n + 1 }, command.op).thenRun(reply);
    return DurableStateEffect.none<{ n: number }>().thenRun(reply);
  }
}

const cluster = new FakeCluster([Record, ReadLedger, LedgerView, Increment, ReadCounter, CounterView]);
const pg = await freshPostgresStore("persistent_singleton");
after(async () => {
  await cluster.shutdown();
  await pg.dispose();
});

const options = { entityId: "main", activationInterval: 20, leaseDuration: 2_000, leaseRenewInterval: 500 };

async function start(
  name: string,
  store: PersistenceStore = pg.store,
): Promise<{ node: Node; type: ReturnType<typeof register> }> {
  const node = cluster.addNode(name);
  await Database.get(node.system).use(store);
  Database.get(node.system).codec.register(Recorded);
  return { node, type: register(node) };
}

function register(node: Node) {
  return EventSourcing.get(node.system).registerEntity(Ledger, LedgerCommand, () => new Ledger(), { name: "Ledger" });
}

function registerCounter(node: Node) {
  return DurableState.get(node.system).registerEntity(Counter, CounterCommand, () => new Counter(), {
    name: "Counter",
  });
}

test("both persistent singleton initializers need PostgreSQL (memory and SQLite refused) and valid settings", async () => {
  const dir = mkdtempSync(join(tmpdir(), "movie-singleton-"));
  try {
    for (const [label, store] of [
      ["memory", new MemoryStore()],
      ["sqlite", SqliteStore.open({ dbPath: join(dir, "x.sqlite3") })],
    ] as const) {
      const { node, type } = await start(`ps-${label}`, store);
      const counters = registerCounter(node);
      const singletons = ClusterSingleton.get(node.system);
      for (const init of [
        () => initEventSourcedSingleton(singletons, "ledger", type, options), // the deprecated aliases
        () => initDurableStateSingleton(singletons, "counter", counters, options),
        () => singletons.initEventSourced("ledger", type, options), // the methods
        () => singletons.initDurableState("counter", counters, options),
      ]) {
        assert.throws(
          init,
          (e: unknown) =>
            e instanceof ClusterShardingConfigurationError &&
            /clustered persistent entities require the PostgreSQL backend/.test(e.message),
          label,
        );
      }
      assert.throws(
        () => initEventSourcedSingleton(singletons, "ledger2", type, { ...options, entityId: "" }),
        ClusterSingletonConfigurationError,
      );
      node.setStatus("Removed");
      await store.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  cluster.emit();
});

test("a durable-state singleton persists under its lease and recovers its state after STOP", async () => {
  const { node } = await start("ps-ds");
  const ref = ClusterSingleton.get(node.system).initDurableState("counter", registerCounter(node), options);
  await eventually(() => ClusterSingleton.get(node.system).stats.activations === 1, { what: "eager activation" });
  assert.deepEqual(await ref.ask(new Increment("inc-1"), CounterView, 5_000), new CounterView(1, 1));
  assert.deepEqual(await ref.ask(new Increment("inc-2"), CounterView, 5_000), new CounterView(2, 1));
  ref.sendSystem(STOP);
  await eventually(() => ClusterSingleton.get(node.system).stats.reactivations >= 1, { what: "re-creation" });
  assert.deepEqual(await ref.ask(new ReadCounter(), CounterView, 5_000), new CounterView(2, 1), "recovered");
  assert.deepEqual(await ref.ask(new Increment("inc-3"), CounterView, 5_000), new CounterView(3, 1));
  const client = await rawClient(pg.url, pg.schema);
  try {
    const rows = await client.query("SELECT entity_type, shard_id FROM shard_lease WHERE entity_type LIKE '%counter'");
    assert.deepEqual(
      rows.rows.map((r) => [r.entity_type, Number(r.shard_id)]),
      [["movie.singleton.counter", 0]],
    );
  } finally {
    await client.end();
  }
  // Out of the way of the next test's nodes.
  node.setStatus("Removed");
  cluster.emit();
});

test("it is activated eagerly under the lease (cluster, movie.singleton.<name>, 0) and keeps its state across a leave", async () => {
  const a = await start("ps-a");
  const b = await start("ps-b");
  const refA = ClusterSingleton.get(a.node.system).initEventSourced("ledger", a.type, options);
  const refB = ClusterSingleton.get(b.node.system).initEventSourced("ledger", b.type, options);
  assert.equal(ClusterSingleton.get(a.node.system).initEventSourced("ledger", a.type, options), refA);
  assert.equal(
    initEventSourcedSingleton(ClusterSingleton.get(a.node.system), "ledger", a.type, options),
    refA,
    "alias",
  );
  await eventually(() => ClusterSingleton.get(a.node.system).stats.activations === 1, { what: "eager activation" });
  const first = await refB.ask(new Record("opened", "op-1"), LedgerView, 5_000);
  assert.deepEqual(first, new LedgerView(["opened"], 1));
  const client = await rawClient(pg.url, pg.schema);
  try {
    const rows = await client.query(
      "SELECT entity_type, shard_id, owner, epoch FROM shard_lease WHERE entity_type LIKE '%ledger'",
    );
    assert.deepEqual(
      rows.rows.map((r) => [r.entity_type, Number(r.shard_id), r.owner, Number(r.epoch)]),
      [["movie.singleton.ledger", 0, a.node.address.toString(), 1]],
    );
  } finally {
    await client.end();
  }
  a.node.setStatus("Leaving");
  await eventually(() => refB.owner()?.equals(b.node.address) === true, { what: "the move", timeoutMs: 10_000 });
  const after = await refB.ask(new ReadLedger(), LedgerView, 5_000);
  assert.deepEqual(after, new LedgerView(["opened"], 2), "recovered on b from the journal, at the next epoch");
});
