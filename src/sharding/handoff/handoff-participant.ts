import type { ActorRef, UniqueAddress } from "../../actor/index.ts";
import { type PassivateShard, type PrepareShard, ShardingControlAck } from "../coordinator/messages.ts";
import { type EntityTypeState, requireSameSettings } from "../entity-type-state.ts";
import { asError, ClusterShardingConfigurationError } from "../errors.ts";
import type { ShardingContext } from "../sharding-context.ts";

/**
 * The owner's part of a handoff (REFERENCE §3.8): on PassivateShard from the current coordinator it drains the
 * shard's retry queue and entities, on PrepareShard it prepares the shard as the next owner; the coordinator's
 * handoff shell calls the same two steps directly when the owner is this node.
 */
export class HandoffParticipant {
  constructor(private readonly ctx: ShardingContext) {}

  private checkControl(
    state: EntityTypeState,
    settingsKey: string,
    coordinatorText: string,
    origin: UniqueAddress | null,
  ): UniqueAddress {
    requireSameSettings(state, settingsKey);
    const coordinator = this.ctx.acceptingCoordinator();
    const ok =
      coordinator !== null &&
      coordinatorText === coordinator.toString() &&
      (origin === null ? coordinator.equals(this.ctx.self) : origin.equals(coordinator));
    if (!ok)
      throw new ClusterShardingConfigurationError("Sharding control was not authorized by the current coordinator");
    return coordinator;
  }

  onPassivateShard(message: PassivateShard, sender: ActorRef<unknown> | null, origin: UniqueAddress | null): void {
    const state = this.ctx.requireType(message.entityType);
    this.checkControl(state, message.settingsKey, message.coordinator, origin);
    this.drainLocally(state, message.shardId).then(
      () => sender?.tell(new ShardingControlAck(true)),
      (error: unknown) => sender?.failAsk?.(asError(error)),
    );
  }

  onPrepareShard(message: PrepareShard, sender: ActorRef<unknown> | null, origin: UniqueAddress | null): void {
    const state = this.ctx.requireType(message.entityType);
    const coordinator = this.checkControl(state, message.settingsKey, message.coordinator, origin);
    this.prepareLocally(state, message.shardId, coordinator).then(
      () => sender?.tell(new ShardingControlAck(true)),
      (error: unknown) => sender?.failAsk?.(asError(error)),
    );
  }

  /** Waits for the shard's retry queue to empty, then drains its entities (concurrent drains share one). */
  drainLocally(state: EntityTypeState, shard: number): Promise<void> {
    const running = state.drains.get(shard);
    if (running !== undefined) return running;
    const drain = (async () => {
      while (state.barrier.has(shard) && !this.ctx.stopped) {
        await new Promise<void>((resolve) => this.ctx.system.scheduler.scheduleOnce(1, resolve));
      }
      await state.provider.drainShard(shard);
    })().finally(() => state.drains.delete(shard));
    state.drains.set(shard, drain);
    return drain;
  }

  async prepareLocally(state: EntityTypeState, shard: number, coordinator: UniqueAddress): Promise<void> {
    await state.provider.prepareShard(shard);
    state.prepared.set(shard, coordinator.toString());
  }
}
