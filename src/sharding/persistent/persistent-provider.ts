import {
  type ActorContext,
  type ActorRef,
  type BehaviorSource,
  type DeadLetter,
  DRAIN_AND_STOP,
  type Logger,
  type Scheduler,
  STOP,
} from "../../actor/index.ts";
import { EntityTable, type TableEntity } from "../entity-table.ts";
import { ShardHandoffInProgressError, ShardLeaseUnavailableError } from "../errors.ts";
import type { ShardLeaseView } from "../inspection.ts";
import { entitySpawnOptions, requireEntityShard, type ShardingProvider } from "../internal/provider.ts";
import { bindEntity } from "../lease/entity-epoch.ts";
import type { LeaseCounter } from "../lease/lease-book.ts";
import { LeaseKeeper, type LeaseStore } from "../lease/lease-keeper.ts";
import type { ShardLeaseToken } from "../lease/lease-token.ts";
import type { ShardingSettings } from "../settings.ts";
import { ShardBudgets } from "../shard-budgets.ts";
import type { MutableShardingStats } from "../stats.ts";

/** What a provider's entities are: persistent entities of either kind, or a projection (sharded-projection.ts). */
export type PersistentKind = "event-sourced" | "durable-state" | "projection";

/** Everything a {@link PersistentEntityProvider} is built from. */
export interface PersistentProviderOptions<T> {
  /** The routing name (sharding type name and lease key entity type). */
  readonly name: string;
  /** The persistence entity type's name (persistence ids are `<name>:<id>` whatever the routing name). */
  readonly entityTypeName: string;
  readonly kind: PersistentKind;
  readonly messageTypeName: string;
  readonly settings: ShardingSettings;
  /** The entity actor's behavior for an entity id, bound to the lease it writes under. */
  readonly behaviorFor: (entityId: string, fence: ShardLeaseToken) => BehaviorSource<T>;
  readonly host: ActorContext<unknown>;
  readonly scheduler: Scheduler;
  readonly stats: MutableShardingStats;
  readonly leases: LeaseStore;
  readonly clusterName: string;
  /** This node's `UniqueAddress` string (the lease owner). */
  readonly owner: string;
  /** The safe-to-own rule on the live membership view. */
  readonly safeToOwn: () => boolean;
  /** Subscribes to the actor system's dead letters (`system.onDeadLetter`); returns the unsubscribe function. */
  readonly onDeadLetter: (listener: (letter: DeadLetter) => void) => () => void;
  readonly log: Logger;
}

interface PersistentEntity extends TableEntity {
  /** The lease epoch the actor was activated under; every write it makes carries it. */
  readonly epoch: number;
}

/**
 * Hosts the event-sourced or durable-state entity actors of one routing name on one node (docs/protocol.md §11). A
 * delivery needs the shard's lease: without one the shard's retry barrier retries it while the lease is acquired.
 * Each actor is bound to the epoch it was activated under and replaced when the lease's epoch changes, so a write
 * from an older ownership is fenced by the database.
 */
export class PersistentEntityProvider<T> implements ShardingProvider {
  readonly name: string;
  readonly messageTypeName: string;
  readonly settings: ShardingSettings;
  readonly entityTypeName: string;
  readonly kind: PersistentKind;
  /** The shard leases of this provider. */
  readonly keeper: LeaseKeeper;
  private readonly entities = new EntityTable<PersistentEntity>();
  private readonly draining = new Set<number>();
  /** Entity actor path → shard, from activation until its Terminated arrives (dead letters name the path). */
  private readonly shardByPath = new Map<string, number>();
  private readonly unsubscribeDeadLetters: () => void;
  /** Null when `shardMailboxCapacity` is unbounded. */
  private readonly budgets: ShardBudgets | null;
  private stopped: Promise<void> | null = null;

  /** @throws ClusterShardingConfigurationError for invalid lease settings */
  constructor(private readonly options: PersistentProviderOptions<T>) {
    this.name = options.name;
    this.messageTypeName = options.messageTypeName;
    this.settings = options.settings;
    this.entityTypeName = options.entityTypeName;
    this.kind = options.kind;
    const stats = options.stats;
    this.keeper = new LeaseKeeper(
      {
        clusterName: options.clusterName,
        entityType: options.name,
        owner: options.owner,
        leaseDurationMs: options.settings.leaseDuration,
        leaseRenewIntervalMs: options.settings.leaseRenewInterval,
      },
      options.leases,
      options.scheduler,
      {
        stopEntities: (shardId) => this.entities.stopWhere((e) => e.shardId === shardId, STOP, true).terminated,
        count: (counter: LeaseCounter, by: number) => {
          stats[counter] += by;
        },
        safeToOwn: options.safeToOwn,
        log: options.log,
      },
      // Renewal rounds: a node's upkeep is a few statements per interval, whatever the number of shards it holds.
      { renewalRounds: true },
    );
    this.unsubscribeDeadLetters = options.onDeadLetter((letter) => this.onDeadLetter(letter));
    const shardCapacity = options.settings.shardMailboxCapacity;
    this.budgets =
      shardCapacity === null ? null : new ShardBudgets(options.name, shardCapacity, options.host, options.stats);
  }

  get entityCount(): number {
    return this.entities.size;
  }

  entitiesByShard(): Map<number, number> {
    return this.entities.countsByShard();
  }

  leases(): ShardLeaseView[] {
    const views: ShardLeaseView[] = [];
    for (const [shardId, lease] of this.keeper.state.shards) {
      const token = lease.phase === "acquiring" ? null : lease.token;
      views.push({
        shardId,
        phase: lease.phase,
        epoch: token?.epoch ?? null,
        leaseUntilEpochMs: token?.leaseUntilEpochMs ?? null,
      });
    }
    return views.sort((a, b) => a.shardId - b.shardId);
  }

  heldLeaseTokens(): ShardLeaseToken[] {
    return this.keeper.heldTokens().filter((t) => !this.draining.has(t.key.shardId));
  }

  /** The epoch a live entity actor writes under, or null when none is active here. */
  entityEpoch(entityId: string): number | null {
    return this.entities.get(entityId)?.epoch ?? null;
  }

  liveShardOf(entityId: string): number | undefined {
    return this.entities.get(entityId)?.shardId;
  }

  authorizeShard(shardId: number): void {
    this.keeper.own(shardId);
  }

  async prepareShard(shardId: number): Promise<void> {
    this.draining.delete(shardId);
    this.keeper.own(shardId);
    await this.keeper.acquire(shardId);
  }

  deliver(shardId: number, entityId: string, message: unknown, sender: ActorRef<unknown> | null, nowMs: number): void {
    // Before an activation (and its lease check): a refused command must not create its entity.
    if (this.budgets !== null) {
      const existing = this.entities.get(entityId)?.ref ?? this.options.host.self;
      this.budgets.admit(shardId, message, sender, existing.path.toString());
    }
    const entity = this.entityFor(shardId, entityId).entity;
    entity.lastActivityMs = nowMs;
    entity.ref.tell(message, sender);
    this.options.stats.localDeliveries++;
  }

  activate(shardId: number, entityId: string, nowMs: number): boolean {
    const { entity, created } = this.entityFor(shardId, entityId);
    entity.lastActivityMs = nowMs;
    return created;
  }

  passivate(entityId: string): boolean {
    const entity = this.entities.get(entityId);
    if (entity === undefined) return false;
    this.entities.stop(entityId, entity);
    return true;
  }

  async drainShard(shardId: number): Promise<void> {
    this.draining.add(shardId);
    // Accepted mailbox work finishes under the old lease first; only then is the lease released.
    await this.entities.stopWhere((e) => e.shardId === shardId, DRAIN_AND_STOP, true).terminated;
    await this.keeper.drain(shardId);
  }

  retainShards(shardIds: ReadonlySet<number>): void {
    // The node core's set already holds the shards whose prepare has not answered yet (TypeState.preparing).
    this.keeper.retain(shardIds);
    this.entities.stopWhere((e) => !shardIds.has(e.shardId));
    for (const shard of [...this.draining]) if (shardIds.has(shard)) this.draining.delete(shard);
  }

  suspendOwnership(release: boolean): void {
    // Without release the leases are left to expire: a possibly active partition must not get them early.
    if (release) this.keeper.retain([]);
    else this.keeper.suspend();
    this.entities.stopWhere(() => true);
  }

  passivateIdle(nowMs: number, idleTimeoutMs: number): number {
    return this.entities.stopWhere((e) => nowMs - e.lastActivityMs >= idleTimeoutMs).stopped;
  }

  entityTerminated(ref: ActorRef<unknown>): void {
    // Still the live one means it stopped on its own, which is what a fenced write does on StaleShardOwnerError:
    // check the lease now rather than at the next renewal, so that no new actor starts under an epoch that is gone.
    this.shardByPath.delete(ref.path.toString());
    const entity = this.entities.terminated(ref);
    if (entity !== undefined) this.keeper.verify(entity.shardId);
  }

  /** Stops every entity, then releases every lease; a second call shares the first one's Promise. */
  stopAll(): Promise<void> {
    this.stopped ??= (async () => {
      await this.entities.stopWhere(() => true, STOP, true).terminated;
      await this.keeper.stopAll();
      this.unsubscribeDeadLetters();
    })();
    return this.stopped;
  }

  /**
   * A command that was in one of our entities' mailboxes (or reached it while it stopped) when the entity stopped:
   * a fenced write's StaleShardOwnerError stops it with the rest of its mailbox unprocessed, as does a passivation.
   * None of them ran, so an ask is rejected at once with the barrier's typed error (safe to retry) rather than
   * left to time out; a tell is dropped (at most once) and counted.
   */
  private onDeadLetter(letter: DeadLetter): void {
    // A full mailbox already failed the ask with MailboxOverflowError and counted the letter.
    if (letter.reason === "mailboxOverflow") return;
    const shardId = this.shardByPath.get(letter.recipient);
    if (shardId === undefined) return;
    this.options.stats.rejectedEnvelopes++;
    const sender = letter.sender;
    // Only an ask's reply actor lives under /temp; failing any other sender would send it a stray failure.
    if (sender?.failAsk !== undefined && sender.path.elements[0] === "temp") {
      sender.failAsk(new ShardLeaseUnavailableError(this.name, shardId));
    }
  }

  /**
   * The live actor for `entityId` under the shard's current lease, created (or replaced, when it belongs to another
   * epoch) as needed.
   * @throws ShardHandoffInProgressError while the shard drains; ShardLeaseUnavailableError without a valid lease
   */
  private entityFor(shardId: number, entityId: string): { entity: PersistentEntity; created: boolean } {
    if (this.draining.has(shardId)) throw new ShardHandoffInProgressError(this.name, shardId);
    const token = this.keeper.requireToken(shardId);
    const existing = this.entities.get(entityId);
    const binding = bindEntity(existing?.epoch ?? null, token.epoch);
    if (binding.kind === "reuse" && existing !== undefined) return { entity: existing, created: false };
    if (existing !== undefined) this.entities.stop(entityId, existing);
    return { entity: this.create(shardId, entityId, token), created: true };
  }

  private create(shardId: number, entityId: string, token: ShardLeaseToken): PersistentEntity {
    requireEntityShard(this.name, this.settings, entityId, shardId);
    const name = this.entities.childName(entityId, 180, `@${token.epoch}`);
    const ref = this.options.host.spawn(
      this.options.behaviorFor(entityId, token),
      name,
      entitySpawnOptions(this.settings, this.budgets, shardId),
    ) as ActorRef<unknown>;
    this.options.host.watch(ref);
    this.shardByPath.set(ref.path.toString(), shardId);
    const entity: PersistentEntity = { ref, shardId, epoch: token.epoch, lastActivityMs: this.options.scheduler.now() };
    this.entities.add(entityId, entity);
    this.options.stats.activations++;
    return entity;
  }
}
