import type { AbstractBehavior, ActorRef, ActorSystem, Class } from "../actor/index.ts";
import { describe } from "../actor/untrusted.ts";
import { type EntityId, EntityType } from "./entity-type.ts";
import { InvalidPersistenceRequestError } from "./errors.ts";
import type { ShardLeaseToken } from "./lease.ts";

interface Registration<C> {
  readonly type: EntityType<C>;
  readonly behaviorClass: unknown;
  readonly makeActor: (id: EntityId, fence: ShardLeaseToken | null, onStopped: () => void) => AbstractBehavior<C>;
}

/**
 * Entity types of one kind and their live entity actors. An actor is keyed by entity and fence epoch, so a different
 * fence token resolves a different actor (docs/protocol.md §13.1); stopped entities are evicted, and resolving again creates
 * a fresh, recovering actor.
 */
export class EntityRegistry {
  private readonly types = new Map<string, Registration<unknown>>();
  private readonly live = new Map<string, ActorRef<unknown>>();
  // Actor names get a generation suffix: a stopping incarnation may still hold its name while a new one starts.
  private generation = 0;

  constructor(
    private readonly system: ActorSystem,
    private readonly prefix: string,
    private readonly kind: "event-sourced" | "durable-state",
  ) {}

  register<C>(
    name: string,
    behaviorClass: unknown,
    commandClass: Class<C>,
    makeActor: Registration<C>["makeActor"],
  ): EntityType<C> {
    if (typeof name !== "string" || name.length === 0 || name.includes(":")) {
      throw new InvalidPersistenceRequestError("entity type name", `${describe(name)} must be non-empty without ":"`);
    }
    const existing = this.types.get(name);
    if (existing !== undefined) {
      if (existing.behaviorClass === behaviorClass && existing.type.commandClass === commandClass) {
        return existing.type as EntityType<C>;
      }
      throw new InvalidPersistenceRequestError("entity type name", `"${name}" is already registered differently`);
    }
    const type = new EntityType<C>(name, commandClass, this.kind);
    this.types.set(name, { type, behaviorClass, makeActor } as Registration<unknown>);
    return type;
  }

  /** The registered type called `name`, or undefined. */
  typeNamed(name: string): EntityType<unknown> | undefined {
    return this.types.get(name)?.type;
  }

  /** A factory of the entity's actor behavior, for callers (sharding) that spawn entity actors themselves. */
  behaviorFor<C>(
    id: EntityId,
    fence: ShardLeaseToken | null,
    onStopped: () => void = () => {},
  ): () => AbstractBehavior<C> {
    const registration = this.registration(id);
    return () => registration.makeActor(id, fence, onStopped) as AbstractBehavior<C>;
  }

  /** The live actor for (entity, fence epoch), spawned under /system on first use. */
  refFor<C>(id: EntityId, fence: ShardLeaseToken | null): ActorRef<C> {
    const key = actorName(this.prefix, id, fence);
    const existing = this.live.get(key);
    if (existing !== undefined) return existing as ActorRef<C>;
    const ref = this.system.spawnSystemActor(
      this.behaviorFor<C>(id, fence, () => {
        if (this.live.get(key) === ref) this.live.delete(key);
      }),
      `${key}~${(this.generation++).toString(36)}`,
    );
    this.live.set(key, ref as ActorRef<unknown>);
    return ref;
  }

  private registration(id: EntityId): Registration<unknown> {
    const registration = this.types.get(id.entityType);
    if (registration === undefined) {
      throw new InvalidPersistenceRequestError(
        "entityType",
        `"${id.entityType}" is not registered; call registerEntity first`,
      );
    }
    return registration;
  }
}

function actorName(prefix: string, id: EntityId, fence: ShardLeaseToken | null): string {
  const base = `${prefix}-${encodeURIComponent(id.entityType)}-${encodeURIComponent(id.id)}`;
  return fence === null ? base : `${base}@${fence.epoch}-${encodeURIComponent(fence.owner)}`;
}
