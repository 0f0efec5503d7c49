// Tags set by an event-sourced behaviour reach the feed: a query and a stream by tag see exactly the tagged events,
// and a behaviour that returns invalid tags fails the write (nothing committed) with InvalidPersistenceRequestError.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ActorSystem } from "../../src/actor/index.ts";
import {
  Database,
  Effect,
  type EntityContext,
  EventSourcedBehavior,
  EventSourcing,
  InvalidPersistenceRequestError,
  OperationId,
} from "../../src/persistence/index.ts";

abstract class Cmd {}
class Put extends Cmd {
  constructor(
    readonly color: string,
    readonly op: string,
  ) {
    super();
  }
}
class Done {}
class Colored {
  constructor(readonly color: string) {}
}

class Tagging extends EventSourcedBehavior<Cmd, Colored, { n: number }> {
  emptyState() {
    return { n: 0 };
  }
  applyEvent(state: { n: number }) {
    return { n: state.n + 1 };
  }
  override tagsFor(event: Colored): readonly string[] {
    // "bad" asks for an invalid (empty) tag.
    return event.color === "bad" ? [""] : [`color:${event.color}`, "all"];
  }
  handleCommand(_state: { n: number }, command: Cmd, ctx: EntityContext<Cmd>) {
    if (command instanceof Put) {
      return Effect.persist<Colored, { n: number }>(new Colored(command.color), command.op).thenRun(() =>
        ctx.sender?.tell(new Done()),
      );
    }
    return Effect.none<Colored, { n: number }>();
  }
}

test("tags from tagsFor reach the feed; queries and streams filter by them; invalid tags fail the write", async () => {
  const system = ActorSystem.create("tags");
  try {
    const database = Database.get(system);
    database.codec.register(Colored);
    const failures: Error[] = [];
    const type = EventSourcing.get(system).registerEntity(Tagging, Cmd, () => {
      const behavior = new Tagging();
      behavior.onPersistFailure = (error) => failures.push(error);
      return behavior;
    });
    const ref = EventSourcing.get(system).getEntityRef<Cmd>(type.id("t1"));
    for (const color of ["red", "blue", "red"]) await ref.ask(new Put(color, OperationId.random().value), Done, 3000);
    const reds = await database.events.query({ tag: "color:red" });
    assert.deepEqual(
      reds.events.map((e) => [e.sequenceNr, e.tags]),
      [
        [1, ["all", "color:red"]],
        [3, ["all", "color:red"]],
      ],
    );
    assert.equal((await database.events.query({ tag: "all", entityTypes: ["Tagging"] })).events.length, 3);
    const streamed: number[] = [];
    for await (const e of database.events.stream({ tag: "color:blue" })) {
      streamed.push(e.sequenceNr);
      break;
    }
    assert.deepEqual(streamed, [2]);
    await assert.rejects(() => ref.ask(new Put("bad", OperationId.random().value), Done, 3000));
    assert.ok(failures[0] instanceof InvalidPersistenceRequestError, String(failures[0]));
    assert.equal(await database.store.loadRevision("Tagging:t1"), 3, "nothing committed");
  } finally {
    await system.terminate();
  }
});
