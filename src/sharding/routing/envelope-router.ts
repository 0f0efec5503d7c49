import type { ActorRef, UniqueAddress } from "../../actor/index.ts";
import { typedOf } from "../codec.ts";
import type { ShardingEnvelope } from "../coordinator/messages.ts";
import type { PlanShell } from "../coordinator/plan-shell.ts";
import { type EntityTypeState, requireSameSettings } from "../entity-type-state.ts";
import { asError, ClusterShardingConfigurationError, NoShardOwnerError } from "../errors.ts";
import type { HandoffShell } from "../handoff/handoff-shell.ts";
import type { ShardingContext } from "../sharding-context.ts";
import type { Delivery } from "./delivery.ts";
import type { OwnerDelivery } from "./owner-delivery.ts";

/**
 * Routes an envelope that reached this node (REFERENCE §3.6): at hop 0 as the coordinator, which checks its term and
 * plan, buffers behind a retry barrier or a running handoff, and dispatches to the shard's owner; at hop 1 it hands
 * the envelope to owner delivery. A payload that came over the wire is decoded here, once.
 */
export class EnvelopeRouter {
  constructor(
    private readonly ctx: ShardingContext,
    private readonly plans: PlanShell,
    private readonly handoffs: HandoffShell,
    private readonly owner: OwnerDelivery,
  ) {}

  /**
   * An envelope at this node: hop 0 means we are asked as coordinator, hop 1 as owner. Never throws. `builtHere`: the
   * caller-side router of this node built it from this node's settings, so its shard id needs no second hash.
   */
  handleEnvelope(
    state: EntityTypeState,
    envelope: ShardingEnvelope,
    sender: ActorRef<unknown> | null,
    origin: UniqueAddress | null,
    builtHere = false,
  ): void {
    const typed = typedOf(envelope);
    let delivery: Delivery = { envelope, sender, typed: typed?.value };
    try {
      requireSameSettings(state, envelope.settingsKey);
      if (envelope.kind === "User" && typed === undefined) {
        let value: unknown;
        try {
          value = this.ctx.codec.decode(envelope.message!);
        } catch (error) {
          this.ctx.counters.malformedEnvelopes.payload++;
          throw error;
        }
        delivery = { envelope, sender, typed: value };
      }
      // Zero-downtime hook 2 (wait/routing-wait.ts): behind held deliveries of the same shard, wait in order.
      if (envelope.hopCount === 0 && this.ctx.wait?.holdBehind(state, delivery, builtHere) === true) return;
      if (envelope.hopCount === 0) this.routeAsCoordinator(state, delivery, builtHere);
      else this.owner.receiveAsOwner(state, delivery, origin);
    } catch (error) {
      this.ctx.reject(delivery, asError(error));
    }
  }

  private routeAsCoordinator(state: EntityTypeState, d: Delivery, builtHere: boolean): void {
    const { envelope } = d;
    if (!builtHere) {
      const settings = state.provider.settings;
      const expected = settings.partitioner.shardFor(envelope.entityType, envelope.entityId, settings.shardCount);
      if (expected !== envelope.shardId) {
        throw new ClusterShardingConfigurationError(
          `Envelope shard ${envelope.shardId} does not match entity shard ${expected}`,
          "shardId",
        );
      }
    }
    const shard = envelope.shardId;
    const coordinator = this.ctx.electedCoordinator();
    if (coordinator === null || !coordinator.equals(this.ctx.self))
      throw new NoShardOwnerError(envelope.entityType, shard);
    if (!this.plans.isAuthor(state)) this.plans.reconcileUnlessBootstrapping(state);
    if (!this.plans.isAuthor(state)) throw new NoShardOwnerError(envelope.entityType, shard);
    if (this.owner.joinBarrier(state, shard, d)) return;
    if (this.handoffs.bufferInHandoff(state, shard, d)) return;
    let owner = state.plan.allocations.get(shard);
    if (owner === undefined) throw new NoShardOwnerError(envelope.entityType, shard);
    if (!this.ctx.isUpMember(owner)) {
      this.plans.reconcile(state);
      if (this.handoffs.bufferInHandoff(state, shard, d)) return;
      owner = state.plan.allocations.get(shard);
      if (owner === undefined || !this.ctx.isUpMember(owner)) {
        throw new NoShardOwnerError(envelope.entityType, shard);
      }
    }
    this.owner.dispatch(state, d, owner);
  }
}
