import type { UniqueAddress } from "../../actor/index.ts";
import { loadsOf, type ShardingMember } from "../allocation/strategy.ts";
import type { AllocationPlanner } from "../internal/allocation-planner.ts";
import type { PlanState } from "./plan.ts";

/**
 * An operator's request to move one shard (the management endpoint's `POST /sharding/types/:type/shards/:shard/
 * rebalance`, `movie rebalance`), decided here, purely, from the coordinator's plan. The move itself is an ordinary
 * handoff driven by the coordinator (docs/protocol.md §9): nothing else may change a shard's owner, so a node that
 * is not the coordinator refuses and names the one that is.
 */

/** Why a shard move was refused; each is a stable code the management endpoint answers with. */
export type ShardMoveRefusal =
  /** This node does not drive handoffs for the type now (not the converged coordinator and plan author). */
  | "NotCoordinator"
  /** Sharding stopped on this node. */
  | "ShardingStopped"
  | "ShardOutOfRange"
  /** The plan has no owner for the shard (no eligible member, or the coordinator is still bootstrapping). */
  | "ShardNotAllocated"
  /** The shard is in a handoff already. */
  | "HandoffInProgress"
  /** The named target owns the shard already. */
  | "AlreadyOwner"
  /** The named target is not a member the shard may be placed on (Up, registered, accepted by the strategy). */
  | "IneligibleTarget"
  /** No member other than the owner may host the shard. */
  | "NoOtherHost"
  /** The type's rebalance policy would move the shard again at its next step: the move would be undone. */
  | "WouldBeUndone";

/** What came of a shard move request. */
export type ShardMoveDecision =
  | {
      readonly kind: "moving";
      readonly shard: number;
      readonly from: UniqueAddress;
      readonly to: UniqueAddress;
      /**
       * Other shards the rebalance policy would move once this move is done, as the plan stands now (empty when the
       * move leaves the plan balanced for the policy).
       */
      readonly followUpMoves: readonly number[];
    }
  | {
      readonly kind: "refused";
      readonly shard: number;
      readonly reason: ShardMoveRefusal;
      readonly message: string;
      /** The coordinator this node follows (where to send the request instead), or null when none is converged. */
      readonly coordinator: UniqueAddress | null;
    };

/** What {@link decideShardMove} reads besides the plan. */
export interface ShardMoveContext {
  /** The elected coordinator this node follows, or null. */
  readonly coordinator: UniqueAddress | null;
  /** True when this node drives handoffs now: the converged coordinator and the plan's author. */
  readonly drivesHandoffs: boolean;
  /** The members placement may use (those that registered the type with the same settings). */
  readonly members: readonly ShardingMember[];
  readonly planner: AllocationPlanner;
  /** Shards with a handoff running. */
  readonly handoffs: ReadonlySet<number>;
}

/**
 * Decides whether `shard` may move now, and where: to `to` when named (an eligible member other than the owner),
 * else to the least-loaded eligible member other than the owner (the lowest address on a tie). A move the type's
 * rebalance policy would undo at its next step is refused (with `RateLimitedRebalance` and a balanced strategy:
 * one that leaves the owners' shard counts further apart than the threshold; with `NoRebalance` no move is undone).
 */
export function decideShardMove(
  plan: PlanState,
  shard: number,
  to: UniqueAddress | null,
  ctx: ShardMoveContext,
): ShardMoveDecision {
  const refuse = (reason: ShardMoveRefusal, message: string): ShardMoveDecision => ({
    kind: "refused",
    shard,
    reason,
    message,
    coordinator: ctx.coordinator,
  });
  if (!ctx.drivesHandoffs) {
    return refuse(
      "NotCoordinator",
      ctx.coordinator === null
        ? "only the coordinator moves shards, and membership has no converged coordinator now; retry later"
        : `only the coordinator moves shards; send the request to the coordinator ${ctx.coordinator.toString()}`,
    );
  }
  const shardCount = ctx.planner.shardCount;
  if (!Number.isSafeInteger(shard) || shard < 0 || shard >= shardCount) {
    return refuse("ShardOutOfRange", `shard must be a whole number from 0 to ${shardCount - 1}`);
  }
  if (ctx.handoffs.has(shard)) return refuse("HandoffInProgress", `shard ${shard} is in a handoff already`);
  const from = plan.allocations.get(shard);
  if (from === undefined) return refuse("ShardNotAllocated", `shard ${shard} has no owner in the plan`);
  const hosts = ctx.planner.hosts(ctx.members);
  let target: UniqueAddress;
  if (to !== null) {
    if (to.equals(from)) return refuse("AlreadyOwner", `${to.toString()} owns shard ${shard} already`);
    if (!hosts.some((m) => m.uniqueAddress.equals(to))) {
      return refuse(
        "IneligibleTarget",
        `${to.toString()} cannot host the shard: it must be Up, have registered the type with the same settings, be accepted by the allocation strategy (roles), and during a rolling update run the newest version`,
      );
    }
    target = to;
  } else {
    const loads = loadsOf(plan.allocations);
    let best: UniqueAddress | null = null;
    for (const m of hosts) {
      if (m.uniqueAddress.equals(from)) continue;
      const load = loads.get(m.uniqueAddress.toString()) ?? 0;
      if (best === null || load < (loads.get(best.toString()) ?? 0)) best = m.uniqueAddress;
    }
    if (best === null) return refuse("NoOtherHost", `no member other than the owner can host shard ${shard}`);
    target = best;
  }
  const after = new Map(plan.allocations);
  after.set(shard, target);
  const next = ctx.planner.reconcile(after, ctx.members);
  if (next.moved.includes(shard)) {
    return refuse(
      "WouldBeUndone",
      `the type's rebalance policy would move shard ${shard} away from ${target.toString()} again at once (the shard counts per owner would be out of balance); name another target, or use NoRebalance for manual placement`,
    );
  }
  return {
    kind: "moving",
    shard,
    from,
    to: target,
    followUpMoves: next.moved.filter((s) => !ctx.handoffs.has(s)),
  };
}
