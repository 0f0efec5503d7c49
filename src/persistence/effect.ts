import type { ActorRef } from "../actor/index.ts";
import { InvalidPersistenceRequestError } from "./errors.ts";
import { OperationId } from "./operation-id.ts";
import { checkDestination, entityDestination, type OutboxSend } from "./outbox-message.ts";

/** A message, or a function building it from its outbox message id (see EventSourcedEffect.thenSend). */
export type OutboxMessageOrBuilder<M> = M | ((messageId: string) => M);

const send = (destination: OutboxSend["destination"], message: unknown): OutboxSend =>
  typeof message === "function"
    ? { destination, message: undefined, build: message as (messageId: string) => unknown }
    : { destination, message, build: null };

const sendNeedsWrite = (operationId: OperationId | null): void => {
  if (operationId === null) {
    throw new InvalidPersistenceRequestError(
      "thenSend",
      "an outbox message is written with the effect's events or state, and this effect writes nothing; use persist, persistAll (an empty list records only the operation) or delete",
    );
  }
};

/**
 * A reply recorded with the events (see {@link EventSourcedEffect.thenReply}): made from the new state, sent to `to`
 * after the commit.
 */
export interface RecordedReply<State> {
  readonly to: ActorRef<unknown> | null;
  readonly make: (state: State) => unknown;
}

/**
 * What an event-sourced command handler decided: events to persist in one transaction under one OperationId (or
 * none), whether to stop, and follow-ups that run only after the commit and the state update (reply there). Made by
 * the static constructors, `EventSourcedEffect.persist(event, operationId)` and the others, as a durable-state
 * handler returns `DurableStateEffect.persist(state, operationId)`.
 */
export class EventSourcedEffect<Event, State> {
  private constructor(
    readonly events: readonly Event[],
    readonly operationId: OperationId | null,
    readonly stopAfter: boolean,
    /** Follow-ups added by thenRun, run in order after the write. */
    readonly callbacks: readonly ((state: State) => void)[],
    /** Messages added by thenSend, written to the outbox with the events. */
    readonly outbox: readonly OutboxSend[] = [],
    /** The reply added by thenReply, or null. */
    readonly reply: RecordedReply<State> | null = null,
  ) {}

  /** @internal */
  static make<E, S>(events: readonly E[], operationId: OperationId | null, stop: boolean): EventSourcedEffect<E, S> {
    return new EventSourcedEffect<E, S>(events, operationId, stop, []);
  }

  /**
   * Persist one event.
   * @throws InvalidPersistenceRequestError without an OperationId
   */
  static persist<E, S>(event: E, operationId: OperationId | string): EventSourcedEffect<E, S> {
    return EventSourcedEffect.make([event], OperationId.from(operationId), false);
  }

  /**
   * Persist several events atomically (one transaction).
   * @throws InvalidPersistenceRequestError without an OperationId
   */
  static persistAll<E, S>(events: readonly E[], operationId: OperationId | string): EventSourcedEffect<E, S> {
    return EventSourcedEffect.make([...events], OperationId.from(operationId), false);
  }

  /** Persist nothing. */
  static none<E, S>(): EventSourcedEffect<E, S> {
    return EventSourcedEffect.make<E, S>([], null, false);
  }

  /** Persist nothing and stop the entity. */
  static stop<E, S>(): EventSourcedEffect<E, S> {
    return EventSourcedEffect.make<E, S>([], null, true);
  }

  /** Adds a follow-up that receives the new state after a successful write (or at once when nothing is written). */
  thenRun(callback: (state: State) => void): EventSourcedEffect<Event, State> {
    return new EventSourcedEffect(
      this.events,
      this.operationId,
      this.stopAfter,
      [...this.callbacks, callback],
      this.outbox,
      this.reply,
    );
  }

  /**
   * Replies to `to` (usually `ctx.sender`) after the commit with `make(newState)`, and records that reply in the same
   * transaction as the events (under the same OperationId and fence). A retry of the command with the same
   * OperationId (a client that timed out and asked again, an outbox redelivery) gets the recorded reply back, not a
   * fresh one and not a second write. The reply must be encodable by the database's codec (register its class). It is
   * sent before the thenRun follow-ups; an effect that persists nothing replies at once and records nothing.
   */
  thenReply<Reply>(
    to: ActorRef<unknown> | null | undefined,
    make: (state: State) => Reply,
  ): EventSourcedEffect<Event, State> {
    return new EventSourcedEffect(this.events, this.operationId, this.stopAfter, this.callbacks, this.outbox, {
      to: to ?? null,
      make,
    });
  }

  /** Stops the entity after the write and the follow-ups. */
  thenStop(): EventSourcedEffect<Event, State> {
    return new EventSourcedEffect(this.events, this.operationId, true, this.callbacks, this.outbox, this.reply);
  }

  /**
   * Sends `message` to entity `entityId` of `entityType` through the outbox (docs/outbox.md): it is written in the
   * events' transaction, under their fence, and delivered by an OutboxDispatcher after the commit, at least once.
   * Pass a function to build the message from its outbox message id, and let the receiver persist with that id as
   * its OperationId: a redelivery is then a duplicate in the receiver's own transaction (effectively once).
   * @throws InvalidPersistenceRequestError for an effect that writes nothing, or an empty type or id
   */
  thenSend<M>(
    entityType: string | { readonly name: string },
    entityId: string,
    message: OutboxMessageOrBuilder<M>,
  ): EventSourcedEffect<Event, State> {
    sendNeedsWrite(this.operationId);
    const next = send(entityDestination(entityType, entityId), message);
    return new EventSourcedEffect(
      this.events,
      this.operationId,
      this.stopAfter,
      this.callbacks,
      [...this.outbox, next],
      this.reply,
    );
  }

  /**
   * Sends `message` to the dispatcher's handler named `handler` (an external system: mail, a queue) through the
   * outbox, as {@link thenSend} does to an entity.
   * @throws InvalidPersistenceRequestError for an effect that writes nothing, or an empty name
   */
  thenSendToHandler<M>(handler: string, message: OutboxMessageOrBuilder<M>): EventSourcedEffect<Event, State> {
    sendNeedsWrite(this.operationId);
    const next = send(checkDestination("destination", { kind: "handler", handler }), message);
    return new EventSourcedEffect(
      this.events,
      this.operationId,
      this.stopAfter,
      this.callbacks,
      [...this.outbox, next],
      this.reply,
    );
  }
}

/**
 * What a durable-state command handler decided: save a whole new state, delete (tombstone), or nothing. Made by the
 * static constructors, `DurableStateEffect.persist(state, operationId)` and the others.
 */
export class DurableStateEffect<State> {
  private constructor(
    readonly kind: "persist" | "delete" | "none",
    readonly state: State | undefined,
    readonly operationId: OperationId | null,
    readonly stopAfter: boolean,
    /** Follow-ups added by thenRun, run in order after the write. */
    readonly callbacks: readonly ((state: State) => void)[],
    /** Messages added by thenSend, written to the outbox with the state. */
    readonly outbox: readonly OutboxSend[] = [],
  ) {}

  /** @internal */
  static make<S>(kind: "persist" | "delete" | "none", state: S | undefined, op: OperationId | null, stop: boolean) {
    return new DurableStateEffect<S>(kind, state, op, stop, []);
  }

  /**
   * Save `state` as the new whole state (revision + 1).
   * @throws InvalidPersistenceRequestError without an OperationId
   */
  static persist<S>(state: S, operationId: OperationId | string): DurableStateEffect<S> {
    return DurableStateEffect.make("persist", state, OperationId.from(operationId), false);
  }

  /**
   * Delete the state: a tombstone at revision + 1; the entity continues from its empty state.
   * @throws InvalidPersistenceRequestError without an OperationId
   */
  static delete<S>(operationId: OperationId | string): DurableStateEffect<S> {
    return DurableStateEffect.make<S>("delete", undefined, OperationId.from(operationId), false);
  }

  /** Save nothing. */
  static none<S>(): DurableStateEffect<S> {
    return DurableStateEffect.make<S>("none", undefined, null, false);
  }

  /** Save nothing and stop. */
  static stop<S>(): DurableStateEffect<S> {
    return DurableStateEffect.make<S>("none", undefined, null, true);
  }

  /** Adds a follow-up that receives the new state after a successful write. */
  thenRun(callback: (state: State) => void): DurableStateEffect<State> {
    return new DurableStateEffect(
      this.kind,
      this.state,
      this.operationId,
      this.stopAfter,
      [...this.callbacks, callback],
      this.outbox,
    );
  }

  /** Stops the entity after the write and the follow-ups. */
  thenStop(): DurableStateEffect<State> {
    return new DurableStateEffect(this.kind, this.state, this.operationId, true, this.callbacks, this.outbox);
  }

  /**
   * Sends `message` to entity `entityId` of `entityType` through the outbox, written in the state's transaction (see
   * EventSourcedEffect.thenSend).
   * @throws InvalidPersistenceRequestError for an effect that writes nothing, or an empty type or id
   */
  thenSend<M>(
    entityType: string | { readonly name: string },
    entityId: string,
    message: OutboxMessageOrBuilder<M>,
  ): DurableStateEffect<State> {
    sendNeedsWrite(this.operationId);
    const next = send(entityDestination(entityType, entityId), message);
    return new DurableStateEffect(this.kind, this.state, this.operationId, this.stopAfter, this.callbacks, [
      ...this.outbox,
      next,
    ]);
  }

  /**
   * Sends `message` to the dispatcher's handler named `handler` through the outbox (see
   * EventSourcedEffect.thenSendToHandler).
   * @throws InvalidPersistenceRequestError for an effect that writes nothing, or an empty name
   */
  thenSendToHandler<M>(handler: string, message: OutboxMessageOrBuilder<M>): DurableStateEffect<State> {
    sendNeedsWrite(this.operationId);
    const next = send(checkDestination("destination", { kind: "handler", handler }), message);
    return new DurableStateEffect(this.kind, this.state, this.operationId, this.stopAfter, this.callbacks, [
      ...this.outbox,
      next,
    ]);
  }
}

/**
 * The event-sourced effect constructors under their old name.
 * @deprecated Use {@link EventSourcedEffect} (`EventSourcedEffect.persist(...)`); this alias stays for one release.
 */
export const Effect: Pick<typeof EventSourcedEffect, "persist" | "persistAll" | "none" | "stop"> = EventSourcedEffect;

/**
 * The old name of {@link EventSourcedEffect}.
 * @deprecated Use `EventSourcedEffect<Event, State>`; this alias stays for one release.
 */
export type EventEffect<Event, State> = EventSourcedEffect<Event, State>;

/**
 * The old name of {@link DurableStateEffect}.
 * @deprecated Use `DurableStateEffect<State>`; this alias stays for one release.
 */
export type DurableEffect<State> = DurableStateEffect<State>;
