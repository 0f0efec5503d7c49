// Write latency histograms (Database.writeLatency) and the group commit's batch-size histogram on the real
// PostgreSQL. The entity's system runs on a ManualScheduler and a write gate (an advisory lock in a trigger) holds
// the append in the database while the test moves the clock: the observed duration is exactly the time moved, so a
// histogram that timed something else (or nothing) fails. Saves and deletes of a durable-state entity are counted
// in their own histogram; the batch sizes add up to the writes the group commit sent.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { ActorSystem, ManualScheduler, silentLogger } from "../../src/actor/index.ts";
import { renderMetrics } from "../../src/management/index.ts";
import {
  Database,
  DurableState,
  DurableStateBehavior,
  DurableStateEffect,
  Effect,
  type EntityContext,
  EventSourcedBehavior,
  EventSourcing,
} from "../../src/persistence/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { freshPostgresStore, writeGate } from "./pg-fixture.ts";

abstract class TallyCommand {}
class AddOne extends TallyCommand {
  constructor(readonly op: string) {
    super();
  }
}
class Added {
  constructor(readonly n: number) {}
}
class Done {}
class Tally extends EventSourcedBehavior<TallyCommand, Added, { n: number }> {
  emptyState() {
    return { n: 0 };
  }
  applyEvent(state: { n: number }, event: Added) {
    return { n: state.n + event.n };
  }
  handleCommand(_state: { n: number }, command: TallyCommand, ctx: EntityContext<TallyCommand>) {
    return Effect.persist<Added, { n: number }>(new Added(1), (command as AddOne).op).thenRun(() =>
      ctx.sender?.tell(new Done()),
    );
  }
}
abstract class NoteCommand {}
class SetNote extends NoteCommand {
  constructor(
    readonly text: string | null,
    readonly op: string,
  ) {
    super();
  }
}
class Note extends DurableStateBehavior<NoteCommand, { text: string }> {
  emptyState() {
    return { text: "" };
  }
  handleCommand(_state: { text: string }, command: NoteCommand, ctx: EntityContext<NoteCommand>) {
    const c = command as SetNote;
    const done = () => ctx.sender?.tell(new Done());
    return c.text === null
      ? DurableStateEffect.delete<{ text: string }>(c.op).thenRun(done)
      : DurableStateEffect.persist({ text: c.text }, c.op).thenRun(done);
  }
}

const app = "movie-write-latency";
const pg = await freshPostgresStore("wlat", { applicationName: app });
const clock = new ManualScheduler();
const system = ActorSystem.create("wlat", { logger: silentLogger, scheduler: clock });
before(async () => {
  const database = Database.get(system);
  await database.use(pg.store);
  database.codec.register(Added);
});
after(async () => {
  await system.terminate();
  await pg.dispose();
});

test("an append held in the database for 300 ms of the system clock is observed as 0.3 s", async () => {
  const tallies = EventSourcing.get(system).registerEntity(Tally, TallyCommand, () => new Tally(), { name: "Tally" });
  const ref = EventSourcing.get(system).getEntityRef<TallyCommand>(tallies.id("held"));
  const latency = Database.get(system).writeLatency;
  // A first append recovers the entity and runs at once (no clock moves): 0 s.
  await ref.ask(new AddOne("op-0"), Done, 60_000);
  assert.deepEqual([latency.append.count, latency.append.snapshot().sum], [1, 0]);
  const gate = await writeGate(pg.url, pg.schema, "hold_wlat", [
    { table: "event_journal", event: "INSERT", when: "NEW.persistence_id = 'Tally:held'" },
  ]);
  try {
    await gate.shut();
    const reply = ref.ask(new AddOne("op-1"), Done, 60_000);
    await eventually(() => gate.waiting(app, "%event_journal%", ["advisory"]), {
      what: "the append to wait in its trigger",
      describe: () => ({ observed: latency.append.count }),
    });
    clock.advance(300);
    assert.equal(latency.append.count, 1, "not observed while the write is in flight");
    await gate.open();
    await reply;
  } finally {
    await gate.dispose();
  }
  const s = latency.append.snapshot();
  assert.equal(s.count, 2);
  assert.equal(s.sum, 0.3);
  // 0 s in the first bucket (le 0.001); 0.3 s in le 0.5 (the 8th of 0.001, 0.0025 … 0.25, 0.5).
  assert.equal(s.counts[0], 1);
  assert.equal(s.counts[s.bounds.indexOf(0.5)], 1);
  assert.equal(latency.save.count, 0, "appends are not saves");
  const text = renderMetrics(system, null);
  assert.match(text, /^movie_persistence_append_duration_seconds_bucket\{le="0.25"\} 1$/m);
  assert.match(text, /^movie_persistence_append_duration_seconds_bucket\{le="0.5"\} 2$/m);
  assert.match(text, /^movie_persistence_append_duration_seconds_sum 0.3$/m);
});

test("saves and deletes of a durable-state entity are observed in the save histogram", async () => {
  const notes = DurableState.get(system).registerEntity(Note, NoteCommand, () => new Note(), { name: "Note" });
  const ref = DurableState.get(system).getEntityRef<NoteCommand>(notes.id("n1"));
  const latency = Database.get(system).writeLatency;
  const before = latency.save.count;
  await ref.ask(new SetNote("a", "s-1"), Done, 60_000);
  await ref.ask(new SetNote("b", "s-2"), Done, 60_000);
  await ref.ask(new SetNote(null, "s-3"), Done, 60_000);
  assert.equal(latency.save.count - before, 3);
});

test("the group commit's batch sizes add up to the writes it sent, one observation per statement", async () => {
  const writes = 24;
  await Promise.all(
    Array.from({ length: writes }, (_, i) =>
      pg.store.appendEvents({
        persistenceId: `batch-${i}`,
        expectedRevision: 0,
        operationId: "o",
        events: [{ manifest: "Added", payload: JSON.stringify({ n: 1 }) }],
      }),
    ),
  );
  const sizes = pg.store.groupCommitBatchSize.snapshot();
  const stats = pg.store.groupCommitStats;
  assert.equal(sizes.count, stats.statements, "one observation per statement");
  // Every one-event append goes through the group commit: the two entity appends above and these.
  assert.equal(sizes.sum, writes + 2);
  const states = pg.store.stateGroupCommitBatchSize.snapshot();
  assert.equal(states.sum, 3, "the three durable-state writes");
  const text = renderMetrics(system, null);
  assert.match(
    text,
    new RegExp(`^movie_persistence_group_commit_batch_size_count\\{kind="append"\\} ${sizes.count}$`, "m"),
  );
  assert.match(text, /^movie_persistence_group_commit_batch_size_sum\{kind="state"\} 3$/m);
});
