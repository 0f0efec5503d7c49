import {
  type AbstractBehavior,
  type ActorRef,
  type ActorSystem,
  type Class,
  type Extension,
  type ExtensionId,
  STOP,
} from "../actor/index.ts";
import type { PersistenceCodec } from "./codec.ts";
import { Database } from "./database.ts";
import type { DurableStateEffect } from "./effect.ts";
import { EntityRegistry } from "./entity-registry.ts";
import type { EntityId, EntityType } from "./entity-type.ts";
import { type BehaviorClass, type EntityContext, PersistentEntityActor } from "./event-sourcing.ts";
import type { ShardLeaseToken } from "./lease.ts";
import { type OutboxRecord, type OutboxSend, outboxRecords } from "./outbox-message.ts";
import type { PersistenceStore } from "./store.ts";

/**
 * A durable-state entity: its whole state is saved at each write (revision + 1), or deleted as a tombstone so that a
 * stale writer cannot silently resurrect older state (docs/protocol.md §13.1).
 */
export abstract class DurableStateBehavior<Command, State> {
  /** The state of an entity never written, or deleted. */
  abstract emptyState(): State;
  /** Decides the effect of a command on a defensive copy of the state. */
  abstract handleCommand(state: State, command: Command, context: EntityContext<Command>): DurableStateEffect<State>;
  /** Runs after recovery, before the first command. */
  onRecoveryCompleted?(state: State, context: EntityContext<Command>): void;
  /** Runs when recovery fails; the entity then stops. */
  onRecoveryFailure?(error: Error, context: EntityContext<Command>): void;
  /** Runs when a write fails; the state is unchanged. */
  onPersistFailure?(error: Error, command: Command, context: EntityContext<Command>): void;
}

class DurableStateEntityActor<C, S> extends PersistentEntityActor<C> {
  private state!: S;

  constructor(
    private readonly behavior: DurableStateBehavior<C, S>,
    entityId: EntityId,
    fence: ShardLeaseToken | null,
    store: PersistenceStore,
    codec: PersistenceCodec,
    onStopped: () => void,
  ) {
    super(entityId, fence, store, codec, onStopped);
  }

  protected async recover(): Promise<void> {
    const pid = this.entityId.persistenceId;
    const record = await this.store.loadState(pid);
    this.revision = record?.revision ?? 0;
    this.state =
      record === null || record.deleted || record.payload === null
        ? this.behavior.emptyState()
        : (this.codec.decode(record.manifest, record.payload, pid, record.revision) as S);
    if (this.context !== null) this.behavior.onRecoveryCompleted?.(this.state, this.entityContext(this.context));
  }

  protected recoveryFailed(error: Error, context: EntityContext<C>): void {
    this.behavior.onRecoveryFailure?.(error, context);
  }

  protected async handle(command: C, context: EntityContext<C>): Promise<void> {
    const effect = this.behavior.handleCommand(this.codec.copy(this.state), command, context);
    if (effect.kind !== "none") {
      const pid = this.entityId.persistenceId;
      try {
        let result: { revision: number; duplicate: boolean };
        let next: S;
        if (effect.kind === "persist") {
          const { manifest, payload } = this.codec.encode(effect.state, "state");
          const request = {
            persistenceId: pid,
            expectedRevision: this.revision,
            operationId: effect.operationId!,
            manifest,
            payload,
            fence: this.fence,
            outbox: this.outboxOf(effect.outbox, effect.operationId!.value),
          };
          result = await this.timed(
            context.system,
            (l) => l.save,
            () => this.store.saveState(request),
          );
          next = effect.state as S;
        } else {
          const request = {
            persistenceId: pid,
            expectedRevision: this.revision,
            operationId: effect.operationId!,
            fence: this.fence,
            outbox: this.outboxOf(effect.outbox, effect.operationId!.value),
          };
          result = await this.timed(
            context.system,
            (l) => l.save,
            () => this.store.deleteState(request),
          );
          next = this.behavior.emptyState();
        }
        if (result.duplicate) await this.recover();
        else {
          this.state = next;
          this.revision = result.revision;
        }
      } catch (error) {
        this.behavior.onPersistFailure?.(error as Error, command, context);
        this.writeFailed(error as Error, context);
        return;
      }
    }
    for (const callback of effect.callbacks) callback(this.state);
    if (effect.stopAfter) context.self.sendSystem(STOP);
  }

  private outboxOf(sends: readonly OutboxSend[], operationId: string): OutboxRecord[] {
    return outboxRecords(this.entityId.persistenceId, operationId, sends, (m) => this.codec.encode(m, "value"));
  }
}

/** Durable-state entities of one actor system: `DurableState.get(system).registerEntity(...)`. */
export class DurableState implements Extension {
  private static readonly id: ExtensionId<DurableState> = {
    key: "movie.persistence.durable-state",
    create: (s) => new DurableState(s),
  };
  private readonly registry: EntityRegistry;

  private constructor(readonly system: ActorSystem) {
    this.registry = new EntityRegistry(system, "ds", "durable-state");
  }

  /** The DurableState extension of `system`. */
  static get(system: ActorSystem): DurableState {
    return system.extension(DurableState.id);
  }

  /** The codec states go through (`Database.get(system).codec`). */
  get codec(): PersistenceCodec {
    return Database.get(this.system).codec;
  }

  /**
   * Registers a durable-state entity type named `options.name` (default the behavior class name).
   * @throws InvalidPersistenceRequestError when the name is taken by another registration
   */
  registerEntity<C, S>(
    behaviorClass: BehaviorClass<DurableStateBehavior<C, S>>,
    commandClass: Class<C>,
    create: (id: EntityId, store: PersistenceStore) => DurableStateBehavior<C, S>,
    options: { name?: string } = {},
  ): EntityType<C> {
    return this.registry.register(
      options.name ?? behaviorClass.name,
      behaviorClass,
      commandClass,
      (id, fence, onStopped) => {
        const database = Database.get(this.system);
        const store = database.store;
        return new DurableStateEntityActor(create(id, store), id, fence, store, database.codec, onStopped);
      },
    );
  }

  /**
   * The entity's actor, optionally bound to a lease epoch (see `EventSourcing.getEntityRef`).
   * @throws InvalidPersistenceRequestError for an unregistered type
   */
  getEntityRef<C>(entityId: EntityId, fence: ShardLeaseToken | null = null): ActorRef<C> {
    return this.registry.refFor<C>(entityId, fence);
  }

  /** Nothing to release: entity actors stop with the system. */
  stop(): void {}

  /** A factory of the entity's actor behavior, for sharding. */
  entityBehavior<C>(entityId: EntityId, fence: ShardLeaseToken | null = null): () => AbstractBehavior<C> {
    return this.registry.behaviorFor<C>(entityId, fence);
  }
}
