import type { UniqueAddress } from "../../actor/index.ts";
import { attachTyped } from "../codec.ts";
import { leaseRetryIntervalMs } from "../constants.ts";
import { ShardingControlAck } from "../coordinator/messages.ts";
import type { EntityTypeState } from "../entity-type-state.ts";
import {
  asError,
  ClusterShardingConfigurationError,
  ShardHandoffInProgressError,
  ShardLeaseUnavailableError,
} from "../errors.ts";
import type { AttemptOutcome } from "../retry-barrier.ts";
import type { ShardingContext } from "../sharding-context.ts";
import type { Delivery } from "./delivery.ts";
import { RelayedAskSender } from "./relayed-ask-sender.ts";

/**
 * Gets an accepted delivery to its shard's owner and into the entity (REFERENCE §3.6, §3.9): from the coordinator
 * here or one hop to the owner's daemon; on the owner, only from the current coordinator and for a shard owned or
 * prepared here; a transient admission failure (lease, handoff) queues it in the shard's retry barrier.
 */
export class OwnerDelivery {
  constructor(private readonly ctx: ShardingContext) {}

  /** Sends an accepted delivery to `owner`: locally, or one hop to its daemon. */
  dispatch(state: EntityTypeState, d: Delivery, owner: UniqueAddress): void {
    if (owner.equals(this.ctx.self)) {
      this.deliverOrQueue(state, d);
      return;
    }
    this.ctx.counters.forwards++;
    const forwarded = d.envelope.forwarded(this.ctx.self, d.sender === null);
    if (d.envelope.kind === "User") attachTyped(forwarded, d.typed);
    // The original asker's ref travels as sender, so reply, failure, timeout and cancel all stay between the asker
    // and the owner (two network legs at most), and a three-node hop keeps the caller's actor path.
    try {
      this.ctx.daemonOf(owner).tell(forwarded, d.sender);
    } catch (error) {
      // A send can refuse synchronously (MessageTooLargeError, …); this may run inside a handoff flush, where a throw
      // would leave the rest of the buffer unsent, so the one delivery is rejected instead.
      this.ctx.reject(d, asError(error));
    }
  }

  /**
   * A forwarded envelope (hop 1) at the owner.
   * @throws ClusterShardingConfigurationError unless it comes from the current coordinator for a shard owned or
   * prepared here
   */
  receiveAsOwner(state: EntityTypeState, d: Delivery, origin: UniqueAddress | null): void {
    const { envelope } = d;
    const coordinator = this.ctx.acceptingCoordinator();
    const fromCoordinator =
      coordinator !== null &&
      envelope.hopCount === 1 &&
      envelope.coordinator === coordinator.toString() &&
      (origin === null ? coordinator.equals(this.ctx.self) : origin.equals(coordinator));
    if (!fromCoordinator || !this.authorizedShard(state, envelope.shardId, coordinator)) {
      throw new ClusterShardingConfigurationError("Sharding delivery was not authorized by the current coordinator");
    }
    if (this.joinBarrier(state, envelope.shardId, d)) return;
    this.deliverOrQueue(state, d);
  }

  private authorizedShard(state: EntityTypeState, shard: number, coordinator: UniqueAddress): boolean {
    if (state.prepared.get(shard) === coordinator.toString()) return true;
    return (
      state.plan.author?.equals(coordinator) === true &&
      state.plan.allocations.get(shard)?.equals(this.ctx.self) === true
    );
  }

  /** Delivers locally; a transient admission failure opens the shard's retry barrier. */
  private deliverOrQueue(state: EntityTypeState, d: Delivery): void {
    const outcome = this.deliverLocal(state, d);
    if (outcome === "delivered") return;
    if (typeof outcome === "object") {
      this.ctx.reject(d, outcome.error);
      return;
    }
    const shard = d.envelope.shardId;
    const result = state.barrier.failed(shard, d, d.envelope.deliveryAttempt, outcome, this.ctx.system.scheduler.now());
    this.applyBarrier(state, shard, result);
  }

  private deliverLocal(state: EntityTypeState, d: Delivery): AttemptOutcome {
    const { envelope } = d;
    const provider = state.provider;
    try {
      provider.authorizeShard(envelope.shardId);
      switch (envelope.kind) {
        case "User": {
          const sender = envelope.senderless ? null : d.sender;
          // A relayed ask that fails or times out at the entity is a rejection (REFERENCE §7 "failed relayed asks");
          // the original counts it at the coordinator's relay, but here the asker hears straight from the owner, so
          // the owner is where it can be counted.
          if (sender !== null && envelope.hopCount === 1 && envelope.askTimeoutMs !== null) {
            const relayed = new RelayedAskSender(sender, this.ctx.counters);
            provider.deliver(envelope.shardId, envelope.entityId, d.typed, relayed);
            // Armed only once delivered: a delivery refused into the retry barrier is retried with a new wrapper.
            relayed.armTimeout(this.ctx.system.timeouts, envelope.askTimeoutMs);
          } else provider.deliver(envelope.shardId, envelope.entityId, d.typed, sender);
          break;
        }
        case "Activate": {
          const created = provider.activate(envelope.shardId, envelope.entityId);
          d.sender?.tell(new ShardingControlAck(created));
          break;
        }
        case "Passivate":
          if (provider.passivate(envelope.entityId)) this.ctx.counters.explicitPassivations++;
          break;
      }
      return "delivered";
    } catch (error) {
      if (error instanceof ShardLeaseUnavailableError) return "lease";
      if (error instanceof ShardHandoffInProgressError) return "handoff";
      return { error: asError(error) };
    }
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Retry barrier shell (REFERENCE §3.9): one timer per shard queue, never one per message

  /** Queues `d` behind the shard's open retry barrier, so it stays after earlier deliveries; false when none is open. */
  joinBarrier(state: EntityTypeState, shard: number, d: Delivery): boolean {
    if (!state.barrier.has(shard)) return false;
    const joined = state.barrier.join(shard, d);
    if (!joined.queued && joined.error !== null) this.ctx.reject(d, joined.error);
    return true;
  }

  private applyBarrier(
    state: EntityTypeState,
    shard: number,
    result: { rejected: { item: Delivery; error: Error }[]; leaseRetries: number; next: "tick" | "yield" | "none" },
  ): void {
    this.ctx.counters.leaseRetries += result.leaseRetries;
    for (const r of result.rejected) this.ctx.reject(r.item, r.error);
    if (result.next === "none") return;
    const delay = result.next === "tick" ? leaseRetryIntervalMs : 0;
    state.barrierTimers.get(shard)?.cancel();
    state.barrierTimers.set(
      shard,
      this.ctx.system.scheduler.scheduleOnce(delay, () => {
        state.barrierTimers.delete(shard);
        if (this.ctx.stopped) return;
        const coordinator = this.ctx.acceptingCoordinator();
        const authorized = coordinator !== null && this.authorizedShard(state, shard, coordinator);
        this.applyBarrier(
          state,
          shard,
          state.barrier.drain(shard, this.ctx.system.scheduler.now(), authorized, (d) => this.deliverLocal(state, d)),
        );
      }),
    );
  }
}
