// Persistent sharded entities on the real PostgreSQL, over the in-process fake cluster (sharding's test fixture).
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { AskTimeoutError, MailboxOverflowError, STOP } from "../../../src/actor/index.ts";
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
} from "../../../src/persistence/index.ts";
import { SqliteStore } from "../../../src/persistence/sqlite/index.ts";
import type { ClusterSharding } from "../../../src/sharding/cluster-sharding.ts";
import { ClusterShardingConfigurationError, ShardMailboxOverflowError } from "../../../src/sharding/errors.ts";
import { shardingHostOf } from "../../../src/sharding/internal/host.ts";
import {
  initDurableState,
  initEventSourced,
  PersistentEntityProvider,
} from "../../../src/sharding/persistent/index.ts";
import { eventually } from "../../fixtures/eventually.ts";
import { freshPostgresStore, rawClient } from "../../persistence/pg-fixture.ts";
import { FakeCluster, type Node } from "../fixtures/fake-cluster.ts";

abstract class TallyCommand {}
class AddPoints extends TallyCommand {
  constructor(
    readonly points: number,
    readonly op: string,
  ) {
    super();
  }
}
class GetTally extends TallyCommand {}
class TallyReply {
  constructor(
    readonly total: number,
    readonly epoch: number,
  ) {}
}
class PointsAdded {
  constructor(readonly points: number) {}
}

class TallyBehavior extends EventSourcedBehavior<TallyCommand, PointsAdded, { total: number }> {
  emptyState() {
    return { total: 0 };
  }
  applyEvent(state: { total: number }, event: PointsAdded) {
    return { total: state.total + event.points };
  }
  handleCommand(state: { total: number }, command: TallyCommand, ctx: EntityContext<TallyCommand>) {
    const reply = (s: { total: number }) => ctx.sender?.tell(new TallyReply(s.total, ctx.fence?.epoch ?? 0));
    if (command instanceof AddPoints) {
      return Effect.persist<PointsAdded, { total: number }>(new PointsAdded(command.points), command.op).thenRun(reply);
    }
    return Effect.none<PointsAdded, { total: number }>().thenRun(() => reply(state));
  }
}

abstract class NoteCommand {}
class SetNote extends NoteCommand {
  constructor(
    readonly text: string,
    readonly op: string,
  ) {
    super();
  }
}
class NoteReply {
  constructor(readonly text: string) {}
}
class NoteBehavior extends DurableStateBehavior<NoteCommand, { text: string }> {
  emptyState() {
    return { text: "" };
  }
  handleCommand(_state: { text: string }, command: NoteCommand, ctx: EntityContext<NoteCommand>) {
    const reply = (s: { text: string }) => ctx.sender?.tell(new NoteReply(s.text));
    if (command instanceof SetNote)
      return DurableStateEffect.persist({ text: command.text }, command.op).thenRun(reply);
    return DurableStateEffect.none<{ text: string }>().thenRun(reply);
  }
}

const cluster = new FakeCluster([AddPoints, GetTally, TallyReply, SetNote, NoteReply]);
const pg = await freshPostgresStore("persistent_sharding");
after(async () => {
  await cluster.shutdown();
  await pg.dispose();
});

async function registerOn(node: Node, store: PersistenceStore) {
  const database = Database.get(node.system);
  await database.use(store);
  database.codec.register(PointsAdded);
  const tallies = EventSourcing.get(node.system).registerEntity(
    TallyBehavior,
    TallyCommand,
    () => new TallyBehavior(),
    {
      name: "Tally",
    },
  );
  const notes = DurableState.get(node.system).registerEntity(NoteBehavior, NoteCommand, () => new NoteBehavior(), {
    name: "Note",
  });
  return { tallies, notes };
}

function providerOf(sharding: ClusterSharding, name: string): PersistentEntityProvider<unknown> {
  const provider = shardingHostOf(sharding).provider(name);
  assert.ok(provider instanceof PersistentEntityProvider);
  return provider;
}

const settings = { shardCount: 4, leaseDuration: 3_000, leaseRenewInterval: 1_000 };

test("SQLite and memory backends are rejected by both initializers, even on one node", async () => {
  const dir = mkdtempSync(join(tmpdir(), "movie-persistent-"));
  try {
    for (const [label, store] of [
      ["memory", new MemoryStore()],
      ["sqlite", SqliteStore.open({ dbPath: join(dir, "x.sqlite3") })],
    ] as const) {
      const node = cluster.addNode(`reject-${label}`);
      const { tallies, notes } = await registerOn(node, store);
      for (const init of [
        () => initEventSourced(node.sharding, tallies),
        () => initDurableState(node.sharding, notes),
      ]) {
        assert.throws(
          init,
          (e: unknown) =>
            e instanceof ClusterShardingConfigurationError &&
            e.field === "backend" &&
            /clustered persistent entities require the PostgreSQL backend/.test(e.message),
          label,
        );
      }
      node.setStatus("Removed");
      await store.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  cluster.emit();
});

const node = cluster.addNode("keeper");
const { tallies, notes } = await registerOn(node, pg.store);
const sharding = node.sharding;

test("an event-sourced type is sharded under a lease: commands persist, passivation recovers the same state", async () => {
  const type = initEventSourced(sharding, tallies, settings);
  assert.equal(type.name, "Tally");
  await eventually(() => sharding.allocations(type).size === 4, { what: "a plan" });
  const tally = sharding.entityRefFor(type, "t-1");
  const first = await tally.ask(new AddPoints(5, "op-1"), TallyReply, 5_000);
  assert.deepEqual(first, new TallyReply(5, 1));
  assert.equal((await tally.ask(new AddPoints(2, "op-2"), TallyReply, 5_000)).total, 7);
  assert.equal(sharding.stats.leaseAcquisitions, 1);
  const provider = providerOf(sharding, "Tally");
  assert.equal(provider.entityEpoch("t-1"), 1);

  tally.sendSystem(STOP);
  await eventually(() => provider.entityEpoch("t-1") === null, { what: "passivation" });
  const recovered = await tally.ask(new GetTally(), TallyReply, 5_000);
  assert.deepEqual(recovered, new TallyReply(7, 1), "recovered from the journal, same lease");
  const retried = await tally.ask(new AddPoints(2, "op-2"), TallyReply, 5_000);
  assert.equal(retried.total, 7, "a retried OperationId has its effect once");
});

test("a timed-out persistent ask retried with the same OperationId has the command's effect exactly once", async () => {
  const ref = sharding.entityRefFor<TallyCommand>("Tally", "t-timeout");
  assert.equal((await ref.ask(new AddPoints(1, "op-to-0"), TallyReply, 5_000)).total, 1);
  // Another session holds the journal, so the next append waits on the lock: its ask times out at the caller while
  // the write is still in flight, and the caller cannot tell whether it will commit.
  const blocker = await rawClient(pg.url, pg.schema);
  try {
    await blocker.query("BEGIN");
    await blocker.query("LOCK TABLE event_journal IN EXCLUSIVE MODE");
    await assert.rejects(ref.ask(new AddPoints(10, "op-to-1"), TallyReply, 200), AskTimeoutError);
    // The retry queues behind the first attempt in the entity's mailbox; then the lock goes and both run.
    const retry = ref.ask(new AddPoints(10, "op-to-1"), TallyReply, 10_000);
    await blocker.query("COMMIT");
    assert.equal((await retry).total, 11, "the retry sees the first attempt's effect, not a second one");
  } finally {
    await blocker.query("ROLLBACK").catch(() => undefined);
    await blocker.end();
  }
  assert.equal((await ref.ask(new AddPoints(10, "op-to-1"), TallyReply, 5_000)).total, 11, "so does a later retry");
  assert.deepEqual((await ref.ask(new GetTally(), TallyReply, 5_000)).total, 11);
  const client = await rawClient(pg.url, pg.schema);
  try {
    const journal = await client.query(
      "SELECT payload FROM event_journal WHERE persistence_id = 'Tally:t-timeout' ORDER BY sequence_nr",
    );
    assert.deepEqual(
      journal.rows.map((r) => JSON.parse(r.payload).points),
      [1, 10],
      "one event for op-to-1 however often it was sent",
    );
  } finally {
    await client.end();
  }
});

test("init is idempotent with the same settings; a different lease setting or kind is refused by field", () => {
  assert.equal(initEventSourced(sharding, tallies, settings).name, "Tally");
  assert.equal(sharding.initEventSourced(tallies, settings).name, "Tally", "the method and the alias are one init");
  assert.throws(
    () => initEventSourced(sharding, tallies, { ...settings, leaseDuration: 4_000 }),
    (e: unknown) => e instanceof ClusterShardingConfigurationError && e.field === "leaseDuration",
  );
  assert.throws(
    () => initEventSourced(sharding, tallies, { ...settings, routingName: "" }),
    (e: unknown) => e instanceof ClusterShardingConfigurationError && e.field === "routingName",
  );
  assert.throws(
    () => initDurableState(sharding, tallies),
    (e: unknown) => e instanceof ClusterShardingConfigurationError && e.field === "entityType",
  );
});

test("a routingName facade beside the default one shares the persisted data but has its own leases", async () => {
  const other = initEventSourced(sharding, tallies, { ...settings, routingName: "Tally-audit" });
  assert.equal(other.name, "Tally-audit");
  await eventually(() => sharding.allocations(other).size === 4, { what: "a plan for the facade" });
  const viaFacade = await sharding.entityRefFor(other, "t-1").ask(new GetTally(), TallyReply, 5_000);
  assert.equal(viaFacade.total, 7, "same persistence id Tally:t-1");
  const client = await rawClient(pg.url, pg.schema);
  try {
    const rows = await client.query("SELECT entity_type FROM shard_lease ORDER BY entity_type");
    assert.deepEqual([...new Set(rows.rows.map((r) => r.entity_type))], ["Tally", "Tally-audit"]);
  } finally {
    await client.end();
  }
});

test("a durable-state type is sharded the same way", async () => {
  const type = initDurableState(sharding, notes, settings);
  await eventually(() => sharding.allocations(type).size === 4, { what: "a plan" });
  const note = sharding.entityRefFor(type, "n-1");
  assert.equal((await note.ask(new SetNote("hello", "op-n1"), NoteReply, 5_000)).text, "hello");
});

test("a lease lost in the database stops the entity; the next delivery re-acquires at epoch + 1 and recovers", async () => {
  const provider = providerOf(sharding, "Tally");
  const shard = sharding.shardOf("Tally", "t-1");
  const client = await rawClient(pg.url, pg.schema);
  try {
    await client.query(
      "UPDATE shard_lease SET lease_until_epoch_ms = 0 WHERE entity_type = 'Tally' AND shard_id = $1",
      [shard],
    );
  } finally {
    await client.end();
  }
  const losses = sharding.stats.leaseLosses;
  // The next renewal (every leaseRenewInterval) notices; the deadline is eventually's default, not a timing claim.
  await eventually(() => sharding.stats.leaseLosses > losses, { what: "the renewal to notice" });
  await eventually(() => provider.entityEpoch("t-1") === null, { what: "the entity to stop" });
  const reply = await sharding.entityRefFor("Tally", "t-1").ask(new AddPoints(1, "op-3"), TallyReply, 5_000);
  assert.deepEqual(reply, new TallyReply(8, 2));
  assert.equal(provider.entityEpoch("t-1"), 2);
});

test("an unreachable member: leases are dropped without release, entities stop, losses are counted", async () => {
  const provider = providerOf(sharding, "Tally");
  await sharding.entityRefFor("Tally", "t-2").ask(new AddPoints(1, "op-t2"), TallyReply, 5_000);
  // A joining peer: it can become unreachable, but it is neither eligible nor coordinator, so nothing moves.
  const peer = cluster.addNode("peer", { status: "Joining" });
  const losses = sharding.stats.leaseLosses;
  node.setUnreachable(peer);
  await eventually(() => provider.entityCount === 0, { what: "entities to stop" });
  assert.ok(sharding.stats.leaseLosses > losses, "suspension counts the dropped leases");
  const client = await rawClient(pg.url, pg.schema);
  try {
    // A release sets lease_until_epoch_ms to 0; a lease left to expire keeps the time its last renewal gave it
    // (which may already have passed on a slow machine: what matters is that nobody cut it short).
    const rows = await client.query(
      "SELECT owner, epoch, lease_until_epoch_ms > 0 AS unreleased FROM shard_lease WHERE entity_type = 'Tally' ORDER BY shard_id",
    );
    assert.ok(rows.rows.length > 0);
    assert.ok(
      rows.rows.every((r) => r.owner === node.address.toString() && r.unreleased === true),
      `not released: they expire on their own (${JSON.stringify(rows.rows)})`,
    );
    // Left alone, they run out: nothing renews them (the counter stands still) and nobody released them early.
    const renewals = sharding.stats.leaseRenewals;
    await eventually(
      async () => {
        const now = await client.query(
          "SELECT bool_or(lease_until_epoch_ms > movie_now_ms()) AS any_live FROM shard_lease WHERE entity_type = 'Tally'",
        );
        return now.rows[0].any_live === false;
      },
      { what: "the leases to expire", timeoutMs: settings.leaseDuration * 3 },
    );
    assert.equal(sharding.stats.leaseRenewals, renewals, "no renewal while a member is unreachable");
    const expired = await client.query(
      "SELECT owner, epoch FROM shard_lease WHERE entity_type = 'Tally' ORDER BY shard_id",
    );
    assert.deepEqual(
      expired.rows.map((r) => [r.owner, Number(r.epoch)]),
      rows.rows.map((r) => [r.owner, Number(r.epoch)]),
      "expired as they were: same owner, same epoch",
    );
  } finally {
    await client.end();
  }
  assert.equal(provider.keeper.state.shards.size, 0);
});

test("a write under a superseded epoch (a paused owner resuming) commits nothing and fails the caller", async () => {
  // A fresh owner view: the unreachable peer from the previous test is gone again.
  for (const entry of cluster.entries()) entry.unreachable.clear();
  cluster.emit();
  const provider = providerOf(sharding, "Tally");
  const ref = sharding.entityRefFor("Tally", "t-9");
  await eventually(
    async () => {
      try {
        return (await ref.ask(new AddPoints(4, "op-t9-1"), TallyReply, 2_000)).total === 4;
      } catch {
        return false;
      }
    },
    { what: "ownership to come back" },
  );
  const epoch = provider.entityEpoch("t-9")!;
  const shard = sharding.shardOf("Tally", "t-9");
  const client = await rawClient(pg.url, pg.schema);
  try {
    // Another node took the shard over while this one was paused: the row moved on to the next epoch.
    await client.query(
      `UPDATE shard_lease SET owner = 'movie.tcp://other@127.0.0.1:1#x', epoch = epoch + 1,
         lease_until_epoch_ms = movie_now_ms() + 60000 WHERE entity_type = 'Tally' AND shard_id = $1`,
      [shard],
    );
    await assert.rejects(ref.ask(new AddPoints(100, "op-t9-2"), TallyReply, 5_000), { name: "StaleShardOwnerError" });
    const journal = await client.query(
      "SELECT count(*)::int AS n FROM event_journal WHERE persistence_id = 'Tally:t-9'",
    );
    assert.equal(journal.rows[0].n, 1, "only the write made under the current epoch");
  } finally {
    await client.end();
  }
  assert.notEqual(provider.entityEpoch("t-9"), epoch + 1, "nothing here ever runs under the other node's epoch");
  await eventually(() => provider.keeper.state.shards.get(shard) === undefined, {
    what: "the next renewal to find the lease gone",
  });
});

test("entityMailboxCapacity bounds persistent entities: past it an ask rejects MailboxOverflowError, queued ones persist", async () => {
  for (const entry of cluster.entries()) entry.unreachable.clear();
  cluster.emit();
  const bounded = initEventSourced(sharding, tallies, {
    ...settings,
    routingName: "Tally-bounded",
    entityMailboxCapacity: 2,
  });
  await eventually(() => sharding.allocations(bounded).size === 4, { what: "a plan for the bounded facade" });
  const ref = sharding.entityRefFor(bounded, "b-1");
  await eventually(
    async () => {
      try {
        return (await ref.ask(new GetTally(), TallyReply, 2_000)).total === 0;
      } catch {
        return false;
      }
    },
    { what: "the entity to start under its lease" },
  );
  const blocker = await rawClient(pg.url, pg.schema);
  try {
    await blocker.query("BEGIN");
    await blocker.query("LOCK TABLE event_journal IN EXCLUSIVE MODE");
    const sent = pg.store.groupCommitStats.statements;
    // The entity is inside its first command (its append waits on the lock) while the next ones queue.
    const first = ref.ask(new AddPoints(1, "b-op-1"), TallyReply, 10_000);
    await eventually(() => pg.store.groupCommitStats.statements > sent, { what: "the first append to be sent" });
    const queued = [
      ref.ask(new AddPoints(1, "b-op-2"), TallyReply, 10_000),
      ref.ask(new GetTally(), TallyReply, 10_000),
    ];
    const overflows = node.system.mailboxOverflowCount;
    const rejected = sharding.stats.rejectedEnvelopes;
    await assert.rejects(ref.ask(new AddPoints(1, "b-op-3"), TallyReply, 5_000), MailboxOverflowError);
    assert.equal(node.system.mailboxOverflowCount, overflows + 1);
    assert.equal(sharding.stats.rejectedEnvelopes, rejected, "an overflow is not also a lease-barrier rejection");
    await blocker.query("COMMIT");
    assert.equal((await first).total, 1);
    assert.deepEqual(
      (await Promise.all(queued)).map((r) => r.total),
      [2, 2],
    );
  } finally {
    await blocker.query("ROLLBACK").catch(() => undefined);
    await blocker.end();
  }
});

test("shardMailboxCapacity bounds a persistent shard: past it a command to another entity of the shard is refused, typed", async () => {
  for (const entry of cluster.entries()) entry.unreachable.clear();
  cluster.emit();
  const bounded = initEventSourced(sharding, tallies, {
    ...settings,
    routingName: "Tally-shard-bounded",
    shardMailboxCapacity: 2,
  });
  await eventually(() => sharding.allocations(bounded).size === 4, { what: "a plan for the shard-bounded facade" });
  const shard = sharding.shardOf(bounded, "sb-0");
  const other = Array.from({ length: 100 }, (_, i) => `sb-${i + 1}`).find(
    (id) => sharding.shardOf(bounded, id) === shard,
  )!;
  const ref = sharding.entityRefFor(bounded, "sb-0");
  await eventually(
    async () => {
      try {
        return (await ref.ask(new GetTally(), TallyReply, 2_000)).total === 0;
      } catch {
        return false;
      }
    },
    { what: "the entity to start under its lease" },
  );
  const blocker = await rawClient(pg.url, pg.schema);
  try {
    await blocker.query("BEGIN");
    await blocker.query("LOCK TABLE event_journal IN EXCLUSIVE MODE");
    const sent = pg.store.groupCommitStats.statements;
    const first = ref.ask(new AddPoints(1, "sb-op-1"), TallyReply, 10_000);
    await eventually(() => pg.store.groupCommitStats.statements > sent, { what: "the first append to be sent" });
    const queued = [
      ref.ask(new AddPoints(1, "sb-op-2"), TallyReply, 10_000),
      ref.ask(new GetTally(), TallyReply, 10_000),
    ];
    const activations = sharding.stats.activations;
    const rejected = sharding.stats.rejectedEnvelopes;
    await assert.rejects(sharding.entityRefFor(bounded, other).ask(new GetTally(), TallyReply, 5_000), (e: unknown) => {
      assert.ok(e instanceof ShardMailboxOverflowError, String(e));
      assert.equal(e.entityType, "Tally-shard-bounded");
      assert.equal(e.shardId, shard);
      return true;
    });
    assert.equal(sharding.stats.shardMailboxOverflows, 1);
    assert.equal(sharding.stats.rejectedEnvelopes, rejected + 1, "one rejection, not also a lease-barrier one");
    assert.equal(sharding.stats.activations, activations, "the refused command activated nothing");
    await blocker.query("COMMIT");
    assert.equal((await first).total, 1);
    assert.deepEqual(
      (await Promise.all(queued)).map((r) => r.total),
      [2, 2],
    );
    assert.equal((await sharding.entityRefFor(bounded, other).ask(new GetTally(), TallyReply, 5_000)).total, 0);
  } finally {
    await blocker.query("ROLLBACK").catch(() => undefined);
    await blocker.end();
  }
});
