// The soak's entity types, shared by every soak node: an event-sourced list that appends client-chosen values (each
// append under its own OperationId, and each sending one outbox message to the tally of its key), the event-sourced
// tally that receives those messages (effectively once: it persists under the message id), a durable-state counter
// that remembers which operations it applied, and an ordinary (non-persistent) mailbox that reports every numbered
// tell and ask it receives.
import { AbstractBehavior, type ActorContext } from "../../src/actor/index.ts";
import {
  DurableStateBehavior,
  DurableStateEffect,
  Effect,
  type EntityContext,
  type EventEffect,
  EventSourcedBehavior,
} from "../../src/persistence/index.ts";
import { MessageRegistry } from "../../src/remote/index.ts";

// ---- the event-sourced list ----

/** The list entity's message type. */
export abstract class ListCommand {}

/** Appends `value` under OperationId `op`; answered with {@link AppendAck} once the event is committed. */
export class Append extends ListCommand {
  constructor(
    readonly value: string,
    readonly op: string,
  ) {
    super();
  }
}

/** Reads the whole list; answered with {@link ListReply}. */
export class ReadList extends ListCommand {}

/** The append of `value` is committed (a retry recognised by its OperationId is acknowledged again, not re-applied). */
export class AppendAck {
  constructor(readonly value: string) {}
}

/** The list's values in commit order. */
export class ListReply {
  constructor(readonly values: string[]) {}
}

/** The list's only event. */
export class Appended {
  constructor(readonly value: string) {}
}

interface ListState {
  values: string[];
}

export class ListBehavior extends EventSourcedBehavior<ListCommand, Appended, ListState> {
  emptyState(): ListState {
    return { values: [] };
  }

  applyEvent(state: ListState, event: Appended): ListState {
    return { values: [...state.values, event.value] };
  }

  handleCommand(
    _state: ListState,
    command: ListCommand,
    context: EntityContext<ListCommand>,
  ): EventEffect<Appended, ListState> {
    if (command instanceof Append) {
      // No check against the state: a retry goes to the store, whose OperationId check must recognise it (that is
      // what the soak tests).
      // The outbox message rides on the append's transaction and fence; the tally must take it in exactly once.
      return Effect.persist<Appended, ListState>(new Appended(command.value), command.op)
        .thenSend(soakTallyType, context.entityId.id, (messageId) => new Tally(command.value, messageId))
        .thenRun(() => context.sender?.tell(new AppendAck(command.value)));
    }
    return Effect.none<Appended, ListState>().thenRun((s) => context.sender?.tell(new ListReply([...s.values])));
  }
}

// ---- the event-sourced tally: the outbox's receiver ----

/** The tally's entity type name: one tally per list key. */
export const soakTallyType = "SoakTally";

/** An appended list value, delivered through the outbox; `messageId` is its outbox message id. */
export class Tally {
  constructor(
    readonly value: string,
    readonly messageId: string,
  ) {}
}

/** The tally took `value` in (or recognised it as a redelivery); what acknowledges an outbox delivery. */
export class TallyAck {
  constructor(readonly value: string) {}
}

/** The tally's only event: made from the message alone, so a redelivery under its id is a recognised duplicate. */
export class Tallied {
  constructor(readonly value: string) {}
}

export class TallyBehavior extends EventSourcedBehavior<Tally, Tallied, { tallied: number }> {
  emptyState() {
    return { tallied: 0 };
  }

  applyEvent(state: { tallied: number }): { tallied: number } {
    return { tallied: state.tallied + 1 };
  }

  handleCommand(_state: { tallied: number }, command: Tally, context: EntityContext<Tally>) {
    return Effect.persist<Tallied, { tallied: number }>(new Tallied(command.value), command.messageId).thenRun(() =>
      context.sender?.tell(new TallyAck(command.value)),
    );
  }
}

// ---- the durable-state counter ----

/** The counter entity's message type. */
export abstract class CounterCommand {}

/** Adds one under OperationId `op`; answered with {@link CounterAck}. */
export class Increment extends CounterCommand {
  constructor(readonly op: string) {
    super();
  }
}

/** Reads the counter; answered with {@link CounterReply}. */
export class ReadCounter extends CounterCommand {
  constructor(readonly withOps: boolean) {
    super();
  }
}

/** Increment `op` is committed; `count` is the counter after it. */
export class CounterAck {
  constructor(
    readonly op: string,
    readonly count: number,
  ) {}
}

/** The counter, and (when asked) the operations it applied in order. */
export class CounterReply {
  constructor(
    readonly count: number,
    readonly ops: string[],
  ) {}
}

/** The whole saved state: the count and the operation ids applied, so that a retry is recognised in the state too. */
export interface CounterState {
  count: number;
  ops: string[];
}

export class CounterBehavior extends DurableStateBehavior<CounterCommand, CounterState> {
  emptyState(): CounterState {
    return { count: 0, ops: [] };
  }

  handleCommand(state: CounterState, command: CounterCommand, context: EntityContext<CounterCommand>) {
    if (command instanceof Increment) {
      const ack = (s: CounterState) => context.sender?.tell(new CounterAck(command.op, s.count));
      // A durable-state write fingerprints the whole new state, so a retry after other increments would conflict with
      // its first attempt: the state's list of applied operations recognises it first.
      if (state.ops.includes(command.op)) return DurableStateEffect.none<CounterState>().thenRun(ack);
      const next = { count: state.count + 1, ops: [...state.ops, command.op] };
      return DurableStateEffect.persist(next, command.op).thenRun(ack);
    }
    const withOps = command instanceof ReadCounter && command.withOps;
    return DurableStateEffect.none<CounterState>().thenRun((s) =>
      context.sender?.tell(new CounterReply(s.count, withOps ? [...s.ops] : [])),
    );
  }
}

// ---- the ordinary mailbox ----

/** The mailbox entity's message type. */
export abstract class MailboxMessage {}

/** A numbered tell from client process `from`. */
export class Note extends MailboxMessage {
  constructor(
    readonly from: string,
    readonly n: number,
  ) {
    super();
  }
}

/** A numbered ask from client process `from`; answered with {@link Pong}. */
export class Ping extends MailboxMessage {
  constructor(
    readonly from: string,
    readonly n: number,
  ) {
    super();
  }
}

/** The answer to Ping `n`. */
export class Pong {
  constructor(readonly n: number) {}
}

/** What the mailbox reports of each message it receives (the node writes it to its delivery log). */
export interface Delivery {
  readonly entity: string;
  readonly from: string;
  readonly n: number;
  readonly kind: "tell" | "ask";
}

/** An ordinary entity: no state beyond the actor; every delivery is reported, asks are answered. */
export class MailboxBehavior extends AbstractBehavior<MailboxMessage> {
  constructor(
    private readonly entity: string,
    private readonly report: (delivery: Delivery) => void,
  ) {
    super();
  }

  receive(message: MailboxMessage, context: ActorContext<MailboxMessage>): void {
    if (message instanceof Note) {
      this.report({ entity: this.entity, from: message.from, n: message.n, kind: "tell" });
    } else if (message instanceof Ping) {
      this.report({ entity: this.entity, from: message.from, n: message.n, kind: "ask" });
      context.sender?.tell(new Pong(message.n));
    }
  }
}

for (const [type, name] of [
  [Append, "soak.Append"],
  [ReadList, "soak.ReadList"],
  [AppendAck, "soak.AppendAck"],
  [ListReply, "soak.ListReply"],
  [Increment, "soak.Increment"],
  [ReadCounter, "soak.ReadCounter"],
  [CounterAck, "soak.CounterAck"],
  [CounterReply, "soak.CounterReply"],
  [Note, "soak.Note"],
  [Ping, "soak.Ping"],
  [Pong, "soak.Pong"],
  [Tally, "soak.Tally"],
  [TallyAck, "soak.TallyAck"],
] as const) {
  MessageRegistry.register(type, { name });
}
