import {
  AbstractBehavior,
  type ActorContext,
  type ActorRef,
  type ActorSystem,
  type Class,
  type Extension,
  type ExtensionId,
  type Histogram,
  type Logger,
  STOP,
} from "../actor/index.ts";
import type { PersistenceCodec } from "./codec.ts";
import { Database } from "./database.ts";
import type { EventSourcedEffect } from "./effect.ts";
import { EntityRegistry } from "./entity-registry.ts";
import type { EntityId, EntityType } from "./entity-type.ts";
import { ConcurrentWriteError, PersistenceOverloadedError, StaleShardOwnerError } from "./errors.ts";
import type { ShardLeaseToken } from "./lease.ts";
import { outboxRecords } from "./outbox-message.ts";
import type { EventRecord, PersistenceStore } from "./store.ts";
import type { WriteLatency } from "./write-latency.ts";

/** What a persistent entity's handlers see: identity, fence, and the current message's sender. */
export interface EntityContext<Command> {
  readonly entityId: EntityId;
  readonly persistenceId: string;
  /** The shard lease this incarnation writes under, or null when unfenced. */
  readonly fence: ShardLeaseToken | null;
  readonly self: ActorRef<Command>;
  /** The sender of the current command (reply to it in `thenRun`). */
  readonly sender: ActorRef<unknown> | null;
  readonly system: ActorSystem;
  readonly log: Logger;
}

/**
 * An event-sourced entity: state is the fold of `applyEvent` over its events (after the latest snapshot). Commands
 * are handled one at a time after recovery; a persist effect computes the candidate state first and publishes it
 * only after the commit, then runs the effect's follow-ups.
 */
export abstract class EventSourcedBehavior<Command, Event, State> {
  /** The state of an entity with no events. */
  abstract emptyState(): State;
  /** Applies one event; must be deterministic (recovery replays it). */
  abstract applyEvent(state: State, event: Event): State;
  /** Decides the effect of a command on a defensive copy of the state. */
  abstract handleCommand(
    state: State,
    command: Command,
    context: EntityContext<Command>,
  ): EventSourcedEffect<Event, State>;
  /**
   * The tags of an event in the global feed (queries and projections filter by tag); none by default. At most 32
   * non-empty strings of up to 256 characters.
   */
  tagsFor?(event: Event): readonly string[];
  /** Save a snapshot every this many events; null (default) disables snapshots. */
  snapshotEvery: number | null = null;
  /** Runs after recovery, before the first command. */
  onRecoveryCompleted?(state: State, context: EntityContext<Command>): void;
  /** Runs when recovery fails; the entity fails the next command it receives and stops. */
  onRecoveryFailure?(error: Error, context: EntityContext<Command>): void;
  /** Runs when a write fails (StaleShardOwnerError when a newer owner holds the shard); the state is unchanged. */
  onPersistFailure?(error: Error, command: Command, context: EntityContext<Command>): void;
}

/** Shared machinery of event-sourced and durable-state entity actors. */
export abstract class PersistentEntityActor<Command> extends AbstractBehavior<Command> {
  protected revision = 0;
  private recovered = false;
  private failure: Error | null = null;
  private actorContext: ActorContext<Command> | null = null;

  constructor(
    protected readonly entityId: EntityId,
    protected readonly fence: ShardLeaseToken | null,
    protected readonly store: PersistenceStore,
    protected readonly codec: PersistenceCodec,
    private readonly onStopped: () => void,
  ) {
    super();
  }

  protected abstract recover(): Promise<void>;
  protected abstract handle(command: Command, context: EntityContext<Command>): Promise<void>;
  protected abstract recoveryFailed(error: Error, context: EntityContext<Command>): void;

  override async preStart(context: ActorContext<Command>): Promise<void> {
    this.actorContext = context;
    await this.runRecovery(context);
  }

  override postStop(): void {
    this.onStopped();
  }

  async receive(command: Command, context: ActorContext<Command>): Promise<void> {
    this.actorContext = context;
    if (!this.recovered && this.failure === null) await this.runRecovery(context);
    if (this.failure !== null) {
      // Fail the command that found the entity broken, then stop: resolving again re-runs recovery.
      context.sender?.failAsk?.(this.failure);
      context.self.sendSystem(STOP);
      return;
    }
    await this.handle(command, this.entityContext(context));
  }

  /**
   * Runs `write` and observes its seconds, committed or failed, in this system's `histogram` of
   * {@link Database.writeLatency} (the clock is the system scheduler's).
   */
  protected async timed<R>(
    system: ActorSystem,
    pick: (l: WriteLatency) => Histogram,
    write: () => Promise<R>,
  ): Promise<R> {
    const startMs = system.scheduler.now();
    try {
      return await write();
    } finally {
      pick(Database.get(system).writeLatency).observe((system.scheduler.now() - startMs) / 1000);
    }
  }

  /** After a failed write the in-memory state may be behind; it recovers again before the next command. */
  protected writeFailed(error: Error, context: EntityContext<Command>): void {
    context.sender?.failAsk?.(error);
    if (error instanceof StaleShardOwnerError) {
      // A newer owner holds the shard: this incarnation must never write again.
      context.self.sendSystem(STOP);
      return;
    }
    // Refused before it was sent (the store's queue is full): nothing was written, so the state is current. No
    // recovery read and no log line per refusal, which would add load and noise while the database is behind.
    if (error instanceof PersistenceOverloadedError) return;
    if (!(error instanceof ConcurrentWriteError))
      context.log.warn({ error, persistenceId: this.entityId.persistenceId }, "persist failed");
    this.recovered = false;
  }

  protected entityContext(context: ActorContext<Command>): EntityContext<Command> {
    return {
      entityId: this.entityId,
      persistenceId: this.entityId.persistenceId,
      fence: this.fence,
      self: context.self,
      sender: context.sender,
      system: context.system,
      log: context.log,
    };
  }

  private async runRecovery(context: ActorContext<Command>): Promise<void> {
    try {
      await this.recover();
      this.recovered = true;
    } catch (error) {
      this.failure = error as Error;
      context.log.warn({ error, persistenceId: this.entityId.persistenceId }, "entity recovery failed");
      this.recoveryFailed(error as Error, this.entityContext(context));
    }
  }

  /** @internal The actor context of the current or last message. */
  protected get context(): ActorContext<Command> | null {
    return this.actorContext;
  }
}

class EventSourcedEntityActor<C, E, S> extends PersistentEntityActor<C> {
  private state!: S;

  constructor(
    private readonly behavior: EventSourcedBehavior<C, E, S>,
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
    const snapshot = await this.store.loadSnapshot(pid);
    let state =
      snapshot === null
        ? this.behavior.emptyState()
        : (this.codec.decode(snapshot.manifest, snapshot.payload, pid, snapshot.sequenceNr) as S);
    let last = snapshot?.sequenceNr ?? 0;
    for (const event of await this.store.loadEvents(pid, last)) {
      state = this.behavior.applyEvent(
        state,
        this.codec.decode(event.manifest, event.payload, pid, event.sequenceNr) as E,
      );
      last = event.sequenceNr;
    }
    this.state = state;
    this.revision = Math.max(last, await this.store.loadRevision(pid));
    if (this.context !== null) this.behavior.onRecoveryCompleted?.(state, this.entityContext(this.context));
  }

  protected recoveryFailed(error: Error, context: EntityContext<C>): void {
    this.behavior.onRecoveryFailure?.(error, context);
  }

  protected async handle(command: C, context: EntityContext<C>): Promise<void> {
    const effect = this.behavior.handleCommand(this.codec.copy(this.state), command, context);
    if (effect.events.length > 0 || effect.outbox.length > 0) {
      const pid = this.entityId.persistenceId;
      let candidate = this.state;
      for (const event of effect.events) candidate = this.behavior.applyEvent(candidate, event);
      const before = this.revision;
      // The reply is made from the state the events lead to and recorded with them.
      let reply: unknown;
      let encodedReply: { manifest: string; payload: string } | null = null;
      try {
        if (effect.reply !== null) {
          reply = effect.reply.make(this.codec.copy(candidate));
          encodedReply = this.codec.encode(reply, "value");
        }
        const operationId = effect.operationId!.value;
        const request = {
          persistenceId: pid,
          expectedRevision: before,
          operationId,
          events: effect.events.map((e) => this.encodeEvent(e)),
          fence: this.fence,
          outbox: outboxRecords(pid, operationId, effect.outbox, (m) => this.codec.encode(m, "value")),
          reply: encodedReply,
        };
        const result = await this.timed(
          context.system,
          (l) => l.append,
          () => this.store.appendEvents(request),
        );
        if (result.duplicate && effect.reply !== null) {
          // A retried operation answers what it answered the first time (when that append recorded a reply).
          const recorded = result.reply ?? null;
          reply =
            recorded === null
              ? undefined
              : this.codec.decode(recorded.manifest, recorded.payload, pid, result.revision);
        }
        if (result.duplicate) {
          // A recognised retry: the events are already in the journal, perhaps folded in already. Catch up from it.
          for (const event of await this.store.loadEvents(pid, before)) {
            this.state = this.behavior.applyEvent(
              this.state,
              this.codec.decode(event.manifest, event.payload, pid, event.sequenceNr) as E,
            );
            this.revision = event.sequenceNr;
          }
          // Recorded by an append without thenReply: answer from the caught-up state.
          if (effect.reply !== null && reply === undefined) reply = effect.reply.make(this.codec.copy(this.state));
        } else {
          this.state = candidate;
          this.revision = result.revision;
        }
      } catch (error) {
        this.behavior.onPersistFailure?.(error as Error, command, context);
        this.writeFailed(error as Error, context);
        return;
      }
      await this.maybeSnapshot(before, context);
      if (effect.reply !== null) effect.reply.to?.tell(reply);
    } else if (effect.reply !== null) {
      effect.reply.to?.tell(effect.reply.make(this.codec.copy(this.state)));
    }
    for (const callback of effect.callbacks) callback(this.state);
    if (effect.stopAfter) context.self.sendSystem(STOP);
  }

  private encodeEvent(event: E): EventRecord {
    const record = this.codec.encode(event, "event");
    const tags = this.behavior.tagsFor?.(event);
    if (tags === undefined || tags.length === 0) return record;
    return { manifest: record.manifest, payload: record.payload, tags };
  }

  private async maybeSnapshot(before: number, context: EntityContext<C>): Promise<void> {
    const every = this.behavior.snapshotEvery;
    if (every === null || every <= 0 || Math.floor(this.revision / every) === Math.floor(before / every)) return;
    const { manifest, payload } = this.codec.encode(this.state, "snapshot");
    try {
      await this.store.saveSnapshot(
        this.entityId.persistenceId,
        { sequenceNr: this.revision, manifest, payload },
        this.fence,
      );
    } catch (error) {
      // The events are committed; a missing snapshot only makes the next recovery longer.
      context.log.warn({ error, persistenceId: this.entityId.persistenceId }, "snapshot failed");
    }
  }
}

/** A behavior class, for registration (any constructor signature). */
export type BehaviorClass<B> = abstract new (...args: never) => B;

/**
 * Event-sourced entities of one actor system: `EventSourcing.get(system).registerEntity(...)`, then
 * `getEntityRef(type.id("x"), fence?)`.
 */
export class EventSourcing implements Extension {
  private static readonly id: ExtensionId<EventSourcing> = {
    key: "movie.persistence.event-sourcing",
    create: (s) => new EventSourcing(s),
  };
  private readonly registry: EntityRegistry;

  private constructor(readonly system: ActorSystem) {
    this.registry = new EntityRegistry(system, "es", "event-sourced");
  }

  /** The EventSourcing extension of `system`. */
  static get(system: ActorSystem): EventSourcing {
    return system.extension(EventSourcing.id);
  }

  /** The codec events and snapshots go through (shared with DurableState: `Database.get(system).codec`). */
  get codec(): PersistenceCodec {
    return Database.get(this.system).codec;
  }

  /**
   * Registers an entity type named `options.name` (default the behavior class name); its persistence ids are
   * `"<name>:<id>"`. `create(id, store)` makes a fresh behavior per incarnation.
   * @throws InvalidPersistenceRequestError when the name is taken by another registration
   */
  registerEntity<C, E, S>(
    behaviorClass: BehaviorClass<EventSourcedBehavior<C, E, S>>,
    commandClass: Class<C>,
    create: (id: EntityId, store: PersistenceStore) => EventSourcedBehavior<C, E, S>,
    options: { name?: string } = {},
  ): EntityType<C> {
    return this.registry.register(
      options.name ?? behaviorClass.name,
      behaviorClass,
      commandClass,
      (id, fence, onStopped) => {
        const database = Database.get(this.system);
        const store = database.store;
        return new EventSourcedEntityActor(create(id, store), id, fence, store, database.codec, onStopped);
      },
    );
  }

  /**
   * The entity's actor (spawned on first use, recovering before its first command). A fence binds every write of that
   * actor to the lease epoch; a different fence gives a different actor.
   * @throws InvalidPersistenceRequestError for an unregistered type
   */
  getEntityRef<C>(entityId: EntityId, fence: ShardLeaseToken | null = null): ActorRef<C> {
    return this.registry.refFor<C>(entityId, fence);
  }

  /** Nothing to release: entity actors stop with the system. */
  stop(): void {}

  /** A factory of the entity's actor behavior, for sharding, which spawns entity actors under its own shards. */
  entityBehavior<C>(entityId: EntityId, fence: ShardLeaseToken | null = null): () => AbstractBehavior<C> {
    return this.registry.behaviorFor<C>(entityId, fence);
  }
}
