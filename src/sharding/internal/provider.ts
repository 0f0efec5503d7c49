import type { ActorContext, ActorRef, BehaviorSource, Scheduler, SpawnOptions } from "../../actor/index.ts";
import { DRAIN_AND_STOP, STOP } from "../../actor/index.ts";
import { EntityTable, type TableEntity } from "../entity-table.ts";
import { ClusterShardingConfigurationError, ShardHandoffInProgressError } from "../errors.ts";
import type { ShardLeaseView } from "../inspection.ts";
import type { ShardLeaseToken } from "../lease/lease-token.ts";
import type { ShardingSettings } from "../settings.ts";
import { ShardBudgets } from "../shard-budgets.ts";
import type { MutableShardingStats } from "../stats.ts";

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
  /** Live local entities per shard (shards without any are absent); read-only inspection. */
  entitiesByShard(): Map<number, number>;
  /** The shard leases this node keeps (persistent providers), or null for ordinary entities; read-only inspection. */
  leases(): readonly ShardLeaseView[] | null;
  /**
   * The tokens of the shard leases held here and valid now, the ones a delivery may write under (persistent
   * providers; absent or empty for ordinary entities).
   */
  heldLeaseTokens?(): ShardLeaseToken[];
  /**
   * The shard of entity `entityId` when it lives on this node (its shard was checked against its id when a delivery
   * created it), else undefined.
   */
  liveShardOf(entityId: string): number | undefined;
  /** Marks `shardId` as owned here before a delivery (persistent providers take the lease). */
  authorizeShard(shardId: number): void;
  /** Prepares `shardId` as the next owner of a handoff; may reject (lease unavailable). */
  prepareShard(shardId: number): Promise<void>;
  /**
   * Delivers `message` to the entity, creating it on first use; `nowMs` (the scheduler's clock, read once per sharding
   * step by the node shell) is the entity's last activity, for idle passivation.
   * @throws ShardHandoffInProgressError while the shard drains; ShardLeaseUnavailableError (persistent) without lease
   */
  deliver(shardId: number, entityId: string, message: unknown, sender: ActorRef<unknown> | null, nowMs: number): void;
  /** Creates the entity if absent (last activity `nowMs`); true when this call created it. */
  activate(shardId: number, entityId: string, nowMs: number): boolean;
  /** Stops the entity (STOP) if it lives; true when one did. */
  passivate(entityId: string): boolean;
  /** Drains `shardId`: refuse new activations, DRAIN_AND_STOP its entities, resolve when all terminated. */
  drainShard(shardId: number): Promise<void>;
  /**
   * Stops (STOP) every entity of a shard outside `shardIds`: the shards planned here, prepared here for the plan's
   * author, or whose prepare has not answered yet (a persistent provider also releases the other shards' leases).
   */
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

type Entity = TableEntity;

/** The provider of ordinary entities: actors spawned under the sharding daemon, one per entity id. */
export class EntityProvider<T> implements ShardingProvider {
  private readonly entities = new EntityTable<Entity>();
  private readonly draining = new Set<number>();
  /** Null when `shardMailboxCapacity` is unbounded: a delivery then pays one comparison for the feature. */
  private readonly budgets: ShardBudgets | null;

  constructor(
    readonly name: string,
    readonly messageTypeName: string,
    readonly settings: ShardingSettings,
    private readonly factory: (entityId: string) => BehaviorSource<T>,
    private readonly host: ActorContext<unknown>,
    private readonly scheduler: Scheduler,
    private readonly stats: MutableShardingStats,
  ) {
    const shardCapacity = settings.shardMailboxCapacity;
    this.budgets = shardCapacity === null ? null : new ShardBudgets(name, shardCapacity, host, stats);
  }

  get entityCount(): number {
    return this.entities.size;
  }

  entitiesByShard(): Map<number, number> {
    return this.entities.countsByShard();
  }

  leases(): null {
    return null;
  }

  liveShardOf(entityId: string): number | undefined {
    return this.entities.get(entityId)?.shardId;
  }

  authorizeShard(): void {}

  async prepareShard(shardId: number): Promise<void> {
    this.draining.delete(shardId);
  }

  deliver(shardId: number, entityId: string, message: unknown, sender: ActorRef<unknown> | null, nowMs: number): void {
    const existing = this.entities.get(entityId);
    // Before an activation: a refused message must not create its entity.
    if (this.budgets !== null) {
      this.budgets.admit(shardId, message, sender, existing?.ref.path.toString() ?? this.host.self.path.toString());
    }
    const entity = existing ?? this.create(shardId, entityId);
    entity.lastActivityMs = nowMs;
    entity.ref.tell(message, sender);
    this.stats.localDeliveries++;
  }

  activate(shardId: number, entityId: string, nowMs: number): boolean {
    const existing = this.entities.get(entityId);
    if (existing !== undefined) {
      existing.lastActivityMs = nowMs;
      return false;
    }
    this.create(shardId, entityId);
    return true;
  }

  passivate(entityId: string): boolean {
    const entity = this.entities.get(entityId);
    if (entity === undefined) return false;
    this.entities.stop(entityId, entity);
    return true;
  }

  async drainShard(shardId: number): Promise<void> {
    this.draining.add(shardId);
    await this.entities.stopWhere((e) => e.shardId === shardId, DRAIN_AND_STOP, true).terminated;
  }

  retainShards(shardIds: ReadonlySet<number>): void {
    this.entities.stopWhere((e) => !shardIds.has(e.shardId));
    for (const shard of [...this.draining]) if (shardIds.has(shard)) this.draining.delete(shard);
  }

  suspendOwnership(): void {
    this.entities.stopWhere(() => true);
  }

  passivateIdle(nowMs: number, idleTimeoutMs: number): number {
    return this.entities.stopWhere((e) => nowMs - e.lastActivityMs >= idleTimeoutMs).stopped;
  }

  entityTerminated(ref: ActorRef<unknown>): void {
    this.entities.terminated(ref);
  }

  async stopAll(): Promise<void> {
    await this.entities.stopWhere(() => true, STOP, true).terminated;
  }

  private create(shardId: number, entityId: string): Entity {
    if (this.draining.has(shardId)) throw new ShardHandoffInProgressError(this.name, shardId);
    requireEntityShard(this.name, this.settings, entityId, shardId);
    const source = this.factory(entityId);
    const ref = this.host.spawn(
      source,
      this.entities.childName(entityId, 200),
      entitySpawnOptions(this.settings, this.budgets, shardId),
    ) as ActorRef<unknown>;
    this.host.watch(ref);
    const entity: Entity = { ref, shardId, lastActivityMs: this.scheduler.now() };
    this.entities.add(entityId, entity);
    this.stats.activations++;
    return entity;
  }
}

/** An entity actor's spawn options: the per-entity capacity and the shard's budget, each when set. */
export function entitySpawnOptions(
  settings: ShardingSettings,
  budgets: ShardBudgets | null,
  shardId: number,
): SpawnOptions | undefined {
  const capacity = settings.entityMailboxCapacity;
  if (budgets === null) return capacity === null ? undefined : { mailboxCapacity: capacity };
  const budget = budgets.of(shardId);
  return capacity === null ? { mailboxBudget: budget } : { mailboxCapacity: capacity, mailboxBudget: budget };
}

/**
 * Refuses to create entity `entityId` under a shard its id does not hash to. Every delivery's shard is checked
 * against its id before it reaches a provider but one: an envelope the coordinator forwarded (hop 1), whose check
 * the coordinator made. Checked again here, where an entity is created (rare), a live entity's shard always is its
 * id's, which an owner's direct delivery relies on (`ShardingProvider.liveShardOf`) whatever a coordinator sent.
 * @throws ClusterShardingConfigurationError
 */
export function requireEntityShard(type: string, settings: ShardingSettings, entityId: string, shardId: number): void {
  const expected = settings.partitioner.shardFor(type, entityId, settings.shardCount);
  if (expected !== shardId) {
    throw new ClusterShardingConfigurationError(
      `Entity ${entityId} of ${type} belongs to shard ${expected}, not shard ${shardId}: not created`,
      "shardId",
    );
  }
}
