import { OperationId } from "./operation-id.ts";

/**
 * What an event-sourced command handler decided: events to persist in one transaction under one OperationId (or
 * none), whether to stop, and follow-ups that run only after the commit and the state update (reply there).
 */
export class EventEffect<Event, State> {
  private constructor(
    readonly events: readonly Event[],
    readonly operationId: OperationId | null,
    readonly stopAfter: boolean,
    readonly callbacks: readonly ((state: State) => void)[],
  ) {}

  /** @internal */
  static make<E, S>(events: readonly E[], operationId: OperationId | null, stop: boolean): EventEffect<E, S> {
    return new EventEffect<E, S>(events, operationId, stop, []);
  }

  /** Adds a follow-up that receives the new state after a successful write (or at once when nothing is written). */
  thenRun(callback: (state: State) => void): EventEffect<Event, State> {
    return new EventEffect(this.events, this.operationId, this.stopAfter, [...this.callbacks, callback]);
  }

  /** Stops the entity after the write and the follow-ups. */
  thenStop(): EventEffect<Event, State> {
    return new EventEffect(this.events, this.operationId, true, this.callbacks);
  }
}

/** The effect constructors of event-sourced behaviors. */
export const Effect = {
  /**
   * Persist one event.
   * @throws InvalidPersistenceRequestError without an OperationId
   */
  persist<E, S>(event: E, operationId: OperationId | string): EventEffect<E, S> {
    return EventEffect.make([event], OperationId.from(operationId), false);
  },
  /**
   * Persist several events atomically (one transaction).
   * @throws InvalidPersistenceRequestError without an OperationId
   */
  persistAll<E, S>(events: readonly E[], operationId: OperationId | string): EventEffect<E, S> {
    return EventEffect.make([...events], OperationId.from(operationId), false);
  },
  /** Persist nothing. */
  none<E, S>(): EventEffect<E, S> {
    return EventEffect.make<E, S>([], null, false);
  },
  /** Persist nothing and stop the entity. */
  stop<E, S>(): EventEffect<E, S> {
    return EventEffect.make<E, S>([], null, true);
  },
};

/** What a durable-state command handler decided: save a whole new state, delete (tombstone), or nothing. */
export class DurableEffect<State> {
  private constructor(
    readonly kind: "persist" | "delete" | "none",
    readonly state: State | undefined,
    readonly operationId: OperationId | null,
    readonly stopAfter: boolean,
    readonly callbacks: readonly ((state: State) => void)[],
  ) {}

  /** @internal */
  static make<S>(kind: "persist" | "delete" | "none", state: S | undefined, op: OperationId | null, stop: boolean) {
    return new DurableEffect<S>(kind, state, op, stop, []);
  }

  /** Adds a follow-up that receives the new state after a successful write. */
  thenRun(callback: (state: State) => void): DurableEffect<State> {
    return new DurableEffect(this.kind, this.state, this.operationId, this.stopAfter, [...this.callbacks, callback]);
  }

  /** Stops the entity after the write and the follow-ups. */
  thenStop(): DurableEffect<State> {
    return new DurableEffect(this.kind, this.state, this.operationId, true, this.callbacks);
  }
}

/** The effect constructors of durable-state behaviors. */
export const DurableStateEffect = {
  /**
   * Save `state` as the new whole state (revision + 1).
   * @throws InvalidPersistenceRequestError without an OperationId
   */
  persist<S>(state: S, operationId: OperationId | string): DurableEffect<S> {
    return DurableEffect.make("persist", state, OperationId.from(operationId), false);
  },
  /**
   * Delete the state: a tombstone at revision + 1; the entity continues from its empty state.
   * @throws InvalidPersistenceRequestError without an OperationId
   */
  delete<S>(operationId: OperationId | string): DurableEffect<S> {
    return DurableEffect.make<S>("delete", undefined, OperationId.from(operationId), false);
  },
  /** Save nothing. */
  none<S>(): DurableEffect<S> {
    return DurableEffect.make<S>("none", undefined, null, false);
  },
  /** Save nothing and stop. */
  stop<S>(): DurableEffect<S> {
    return DurableEffect.make<S>("none", undefined, null, true);
  },
};
