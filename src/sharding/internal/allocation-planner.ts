import type { UniqueAddress } from "../../actor/index.ts";
import { type RollingUpdate, rollingUpdateOf } from "../allocation/rolling-update.ts";
import {
  type Allocations,
  desiredAllocations,
  eligibleMembers,
  type ShardAllocationStrategy,
  type ShardingMember,
} from "../allocation/strategy.ts";
import type { RebalancePolicy } from "../rebalance/policy.ts";

/** The outcome of one reconciliation: the plan to move towards, and whether more steps are needed. */
export interface ReconcileResult {
  /** The next plan (only the moved shards differ from the current one). */
  readonly allocations: Map<number, UniqueAddress>;
  /** True when some shard still differs from the target and the policy allowed moves this step. */
  readonly pending: boolean;
  /** Shards whose owner changes in this step, ascending. */
  readonly moved: number[];
}

/** Builds initial plans and reconciliation steps from a strategy and a rebalance policy (docs/protocol.md §5.4). Pure. */
export class AllocationPlanner {
  constructor(
    readonly shardCount: number,
    readonly allocation: ShardAllocationStrategy,
    readonly rebalance: RebalancePolicy,
  ) {}

  /**
   * True when the strategy would place a shard on `member` were it the only Up member (the probe `init` runs on its
   * own node): a role filter says no for a frontend, a refused weight throws and counts as no.
   */
  private readonly canHost = (member: ShardingMember): boolean => {
    try {
      const probe: ShardingMember = { ...member, status: "Up" };
      return this.allocation.allocate(0, [probe], new Map()) !== null;
    } catch {
      return false;
    }
  };

  /**
   * The members a shard may be placed on now, sorted by address: Up, accepted by the strategy (its role filter, a
   * valid weight), and during a rolling update only those of the newest version when there are any (the members
   * {@link AllocationPlanner.reconcile} itself moves shards onto). An operator's move (coordinator/shard-move.ts) may
   * only pick one of these.
   */
  hosts(members: readonly ShardingMember[]): ShardingMember[] {
    const up = eligibleMembers(members).filter(this.canHost);
    const roll = rollingUpdateOf(members, this.canHost);
    if (roll === null) return up;
    const newest = up.filter((m) => roll.newest.some((n) => n.uniqueAddress.equals(m.uniqueAddress)));
    return newest.length > 0 ? newest : up;
  }

  /**
   * The desired plan for `members`; shards without an eligible owner are absent. During a rolling update (Up members
   * of two app versions) only the newest version's members are used, unless the strategy finds none of them
   * eligible (a role they lack), so a type never goes unplanned because of a version.
   */
  initial(members: readonly ShardingMember[]): Map<number, UniqueAddress> {
    const roll = rollingUpdateOf(members, this.canHost);
    if (roll !== null) {
      const plan = desiredAllocations(this.allocation, this.shardCount, roll.newest);
      if (plan.size > 0) return plan;
    }
    return desiredAllocations(this.allocation, this.shardCount, members);
  }

  /**
   * One reconciliation step from `current`: forced moves off missing or ineligible owners (unlimited), then the
   * voluntary moves the rebalance policy allows, each to its target owner. During a rolling update see
   * {@link AllocationPlanner.reconcileDuringRollingUpdate}.
   */
  reconcile(current: Allocations, members: readonly ShardingMember[]): ReconcileResult {
    const roll = rollingUpdateOf(members, this.canHost);
    if (roll !== null) return this.reconcileDuringRollingUpdate(current, members, roll);
    const target = desiredAllocations(this.allocation, this.shardCount, members);
    const eligible = new Set(eligibleMembers(members).map((m) => m.uniqueAddress.toString()));
    const next = new Map(current);
    for (let shard = 0; shard < this.shardCount; shard++) {
      const owner = next.get(shard);
      if (owner !== undefined && eligible.has(owner.toString())) continue;
      const wanted = target.get(shard);
      if (wanted === undefined) next.delete(shard);
      else next.set(shard, wanted);
    }
    for (const shard of [...next.keys()]) if (shard < 0 || shard >= this.shardCount) next.delete(shard);
    const voluntary: number[] = [];
    for (const [shard, owner] of next) {
      const wanted = target.get(shard);
      if (wanted !== undefined && !wanted.equals(owner)) voluntary.push(shard);
    }
    voluntary.sort((a, b) => a - b);
    const suggested = this.rebalance.selectShards({ members, allocations: next, targetAllocations: target });
    const allowance = suggested.length;
    const voluntarySet = new Set(voluntary);
    const selected = new Set(suggested.filter((s) => voluntarySet.has(s)));
    for (const shard of voluntary) {
      if (selected.size >= allowance) break;
      selected.add(shard);
    }
    for (const shard of selected) next.set(shard, target.get(shard)!);
    let differs = false;
    for (let shard = 0; shard < this.shardCount && !differs; shard++) {
      const a = next.get(shard);
      const b = target.get(shard);
      differs = a === undefined ? b !== undefined : b === undefined || !a.equals(b);
    }
    const moved: number[] = [];
    for (let shard = 0; shard < this.shardCount; shard++) {
      const a = current.get(shard);
      const b = next.get(shard);
      if (a === undefined ? b !== undefined : b === undefined || !a.equals(b)) moved.push(shard);
    }
    return { allocations: next, pending: differs && allowance > 0, moved };
  }

  /**
   * Reconciliation while two app versions host the type: only forced moves, each shard to the owner the strategy
   * picks among the newest version's members given the shards placed so far (least-loaded fills the emptiest new
   * member), and no voluntary move. A from-scratch target would be wrong here: it is computed over the new members
   * present now, so shards placed while one new member was Up would move again as the next ones arrive. Placed this
   * way, the plan is balanced when the last old member has left and the rebalance that resumes then finds nothing
   * to move (with a balanced strategy and a threshold of at least 1).
   */
  private reconcileDuringRollingUpdate(
    current: Allocations,
    members: readonly ShardingMember[],
    roll: RollingUpdate,
  ): ReconcileResult {
    const eligible = new Set(eligibleMembers(members).map((m) => m.uniqueAddress.toString()));
    const next = new Map<number, UniqueAddress>();
    for (const [shard, owner] of current) if (shard >= 0 && shard < this.shardCount) next.set(shard, owner);
    for (let shard = 0; shard < this.shardCount; shard++) {
      const owner = next.get(shard);
      if (owner !== undefined && eligible.has(owner.toString())) continue;
      next.delete(shard);
      const wanted =
        this.allocation.allocate(shard, roll.newest, next) ?? this.allocation.allocate(shard, members, next);
      if (wanted !== null) next.set(shard, wanted);
    }
    const moved: number[] = [];
    for (let shard = 0; shard < this.shardCount; shard++) {
      const a = current.get(shard);
      const b = next.get(shard);
      if (a === undefined ? b !== undefined : b === undefined || !a.equals(b)) moved.push(shard);
    }
    return { allocations: next, pending: false, moved };
  }
}
