import type { ActorContext, ActorRef, BehaviorSource, Scheduler } from "../actor/index.ts";
import { DRAIN_AND_STOP, STOP } from "../actor/index.ts";
import { ShardHandoffInProgressError } from "./errors.ts";
import type { ShardingSettings } from "./settings.ts";
import type { MutableShardingStats } from "./stats.ts";

/**
 * Hosts the local entity actors of one sharded type. Ordinary entities need nothing beyond activation and
 * passivation; a persistent provider (later issue) also takes a shard lease in `authorizeShard`/`prepareShard`,
 * releases it in `drainShard`/`retainShards`, and throws ShardLeaseUnavailableError from `deliver` while it has none,
 * which sends the delivery to the retry barrier.
 */
export interface ShardingProvider {
  /** The routing name (the sharded type's name). */
  readonly name: string;
  /** Name of the message class given to `init` (compared by the idempotency check). */
  readonly messageTypeName: string;
  readonly settings: ShardingSettings;
  /** Live local entities. */
  readonly entityCount: number;
  /** Marks `shardId` as owned here before a delivery (persistent providers take the lease). */
  authorizeShard(shardId: number): void;
  /** Prepares `shardId` as the next owner of a handoff; may reject (lease unavailable). */
  prepareShard(shardId: number): Promise<void>;
  /**
   * Delivers `message` to the entity, creating it on first use.
   * @throws ShardHandoffInProgressError while the shard drains; ShardLeaseUnavailableError (persistent) without lease
   */
  deliver(shardId: number, entityId: string, message: unknown, sender: ActorRef<unknown> | null): void;
  /** Creates the entity if absent; true when this call created it. */
  activate(shardId: number, entityId: string): boolean;
  /** Stops the entity (STOP) if it lives; true when one did. */
  passivate(entityId: string): boolean;
  /** Drains `shardId`: refuse new activations, DRAIN_AND_STOP its entities, resolve when all terminated. */
  drainShard(shardId: number): Promise<void>;
  /** Stops (STOP) every entity of a shard outside `shardIds`. */
  retainShards(shardIds: ReadonlySet<number>): void;
  /** Stops every entity (ownership is no longer safe, or the node leaves); `release` frees persistent leases. */
  suspendOwnership(release: boolean): void;
  /** Stops entities idle for at least `idleTimeoutMs`; returns how many. */
  passivateIdle(nowMs: number, idleTimeoutMs: number): number;
  /** Called when a watched entity actor terminated. */
  entityTerminated(ref: ActorRef<unknown>): void;
  /** Stops everything (extension stop). */
  stopAll(): Promise<void>;
}

interface Entity {
  readonly ref: ActorRef<unknown>;
  readonly shardId: number;
  lastActivityMs: number;
}

/** The provider of ordinary entities: actors spawned under the sharding daemon, one per entity id. */
export class EntityProvider<T> implements ShardingProvider {
  private readonly entities = new Map<string, Entity>();
  private readonly byRef = new Map<string, string>();
  private readonly draining = new Set<number>();
  private readonly terminationWaiters = new Map<string, (() => void)[]>();
  private counter = 0;

  constructor(
    readonly name: string,
    readonly messageTypeName: string,
    readonly settings: ShardingSettings,
    private readonly factory: (entityId: string) => BehaviorSource<T>,
    private readonly host: ActorContext<unknown>,
    private readonly scheduler: Scheduler,
    private readonly stats: MutableShardingStats,
  ) {}

  get entityCount(): number {
    return this.entities.size;
  }

  authorizeShard(): void {}

  async prepareShard(shardId: number): Promise<void> {
    this.draining.delete(shardId);
  }

  deliver(shardId: number, entityId: string, message: unknown, sender: ActorRef<unknown> | null): void {
    const entity = this.entities.get(entityId) ?? this.create(shardId, entityId);
    entity.lastActivityMs = this.scheduler.now();
    entity.ref.tell(message, sender);
    this.stats.localDeliveries++;
  }

  activate(shardId: number, entityId: string): boolean {
    const existing = this.entities.get(entityId);
    if (existing !== undefined) {
      existing.lastActivityMs = this.scheduler.now();
      return false;
    }
    this.create(shardId, entityId);
    return true;
  }

  passivate(entityId: string): boolean {
    const entity = this.entities.get(entityId);
    if (entity === undefined) return false;
    this.forget(entityId, entity);
    entity.ref.sendSystem(STOP);
    return true;
  }

  async drainShard(shardId: number): Promise<void> {
    this.draining.add(shardId);
    const waits: Promise<void>[] = [];
    for (const [id, entity] of [...this.entities]) {
      if (entity.shardId !== shardId) continue;
      this.entities.delete(id);
      waits.push(this.terminationOf(entity.ref));
      entity.ref.sendSystem(DRAIN_AND_STOP);
    }
    await Promise.all(waits);
  }

  retainShards(shardIds: ReadonlySet<number>): void {
    for (const [id, entity] of [...this.entities]) {
      if (shardIds.has(entity.shardId)) continue;
      this.forget(id, entity);
      entity.ref.sendSystem(STOP);
    }
    for (const shard of [...this.draining]) if (shardIds.has(shard)) this.draining.delete(shard);
  }

  suspendOwnership(): void {
    for (const [id, entity] of [...this.entities]) {
      this.forget(id, entity);
      entity.ref.sendSystem(STOP);
    }
  }

  passivateIdle(nowMs: number, idleTimeoutMs: number): number {
    let stopped = 0;
    for (const [id, entity] of [...this.entities]) {
      if (nowMs - entity.lastActivityMs < idleTimeoutMs) continue;
      this.forget(id, entity);
      entity.ref.sendSystem(STOP);
      stopped++;
    }
    return stopped;
  }

  entityTerminated(ref: ActorRef<unknown>): void {
    const key = ref.path.toString();
    const id = this.byRef.get(key);
    this.byRef.delete(key);
    // A restarted or replaced entity keeps its id with a new ref: only drop the mapping that is still this ref.
    if (id !== undefined && this.entities.get(id)?.ref === ref) this.entities.delete(id);
    const waiters = this.terminationWaiters.get(key);
    this.terminationWaiters.delete(key);
    for (const w of waiters ?? []) w();
  }

  async stopAll(): Promise<void> {
    const waits = [...this.entities.values()].map((e) => this.terminationOf(e.ref));
    this.suspendOwnership();
    await Promise.all(waits);
  }

  private create(shardId: number, entityId: string): Entity {
    if (this.draining.has(shardId)) throw new ShardHandoffInProgressError(this.name, shardId);
    const name = `${(this.counter++).toString(36)}-${encodeURIComponent(entityId).slice(0, 200)}`;
    const source = this.factory(entityId);
    const ref = this.host.spawn(source, name) as ActorRef<unknown>;
    this.host.watch(ref);
    const entity: Entity = { ref, shardId, lastActivityMs: this.scheduler.now() };
    this.entities.set(entityId, entity);
    this.byRef.set(ref.path.toString(), entityId);
    this.stats.activations++;
    return entity;
  }

  private forget(entityId: string, entity: Entity): void {
    if (this.entities.get(entityId) === entity) this.entities.delete(entityId);
  }

  private terminationOf(ref: ActorRef<unknown>): Promise<void> {
    const key = ref.path.toString();
    if (!this.byRef.has(key)) return Promise.resolve();
    return new Promise((resolve) => {
      const list = this.terminationWaiters.get(key) ?? [];
      list.push(resolve);
      this.terminationWaiters.set(key, list);
    });
  }
}
