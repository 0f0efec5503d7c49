// An event-sourced entity whose append the store refuses as overloaded (nothing written): the ask rejects with
// PersistenceOverloadedError, the entity keeps its state without a recovery read and logs nothing per refusal.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ActorSystem } from "../../src/actor/index.ts";
import {
  type AppendEventsRequest,
  Database,
  Effect,
  type EntityContext,
  EventSourcedBehavior,
  EventSourcing,
  MemoryStore,
  PersistenceOverloadedError,
  type StoredEvent,
  type WriteResult,
} from "../../src/persistence/index.ts";
import { CapturingLogger } from "../actor/support.ts";

abstract class Command {}
class Add extends Command {
  constructor(
    readonly n: number,
    readonly op: string,
  ) {
    super();
  }
}
class Total {
  constructor(readonly total: number) {}
}
class Added {
  constructor(readonly n: number) {}
}

class Sum extends EventSourcedBehavior<Command, Added, { total: number }> {
  emptyState() {
    return { total: 0 };
  }
  applyEvent(state: { total: number }, event: Added) {
    return { total: state.total + event.n };
  }
  handleCommand(_state: { total: number }, command: Command, ctx: EntityContext<Command>) {
    const add = command as Add;
    return Effect.persist<Added, { total: number }>(new Added(add.n), add.op).thenRun((s) =>
      ctx.sender?.tell(new Total(s.total)),
    );
  }
}

/** A memory store that refuses the appends the test names, as a full group-commit queue would. */
class RefusingStore extends MemoryStore {
  refuse = new Set<string>();
  loads = 0;
  override async appendEvents(request: AppendEventsRequest): Promise<WriteResult> {
    const op = typeof request.operationId === "string" ? request.operationId : request.operationId.value;
    if (this.refuse.delete(op)) throw new PersistenceOverloadedError("group commit", 1);
    return super.appendEvents(request);
  }
  override async loadEvents(persistenceId: string, afterSeq?: number): Promise<StoredEvent[]> {
    this.loads++;
    return super.loadEvents(persistenceId, afterSeq);
  }
}

test("an overloaded append fails its ask and leaves the entity's state current: no recovery read, no log line", async () => {
  const logger = new CapturingLogger();
  const system = ActorSystem.create("overload", { logger });
  try {
    const store = new RefusingStore();
    const database = Database.get(system);
    await database.use(store);
    database.codec.register(Added);
    const sums = EventSourcing.get(system).registerEntity(Sum, Command, () => new Sum(), { name: "Sum" });
    const ref = EventSourcing.get(system).getEntityRef<Command>(sums.id("s"));
    assert.equal((await ref.ask(new Add(1, "op-1"), Total, 5_000)).total, 1);
    const loads = store.loads;
    store.refuse.add("op-2");
    await assert.rejects(ref.ask(new Add(2, "op-2"), Total, 5_000), PersistenceOverloadedError);
    assert.equal((await ref.ask(new Add(2, "op-2"), Total, 5_000)).total, 3, "the retry with the same id succeeds");
    assert.equal(store.loads, loads, "no recovery read after the refusal");
    assert.deepEqual(
      logger.records.filter((r) => r.level === "warn").map((r) => r.message),
      [],
    );
  } finally {
    await system.terminate();
  }
});
