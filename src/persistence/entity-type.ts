import type { Class } from "../actor/index.ts";
import { InvalidPersistenceRequestError } from "./errors.ts";

/** One entity of a registered type: its id and its persistence id `"<Type>:<id>"` (docs/protocol.md §13.1). */
export class EntityId {
  constructor(
    readonly entityType: string,
    readonly id: string,
  ) {}

  /** `"<Type>:<id>"`, the key of its journal, snapshot or durable state. */
  get persistenceId(): string {
    return `${this.entityType}:${this.id}`;
  }

  /** The persistence id, `<EntityType>:<id>`. */
  toString(): string {
    return this.persistenceId;
  }
}

/** A registered persistent entity type; `id("x")` names one of its entities. */
export class EntityType<Command> {
  constructor(
    /** The type name (the persistence id prefix, and the default sharding routing name). */
    readonly name: string,
    /** The command class (runtime identity of the entity's messages). */
    readonly commandClass: Class<Command>,
    /** "event-sourced" or "durable-state". */
    readonly kind: "event-sourced" | "durable-state",
  ) {}

  /**
   * The entity with id `entityId`.
   * @throws InvalidPersistenceRequestError for an empty id
   */
  id(entityId: string): EntityId {
    if (typeof entityId !== "string" || entityId.length === 0) {
      throw new InvalidPersistenceRequestError("entityId", "must be a non-empty string");
    }
    return new EntityId(this.name, entityId);
  }
}
