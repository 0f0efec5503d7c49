import { compareStrings, type UniqueAddress } from "../../actor/index.ts";
import { ClusterShardingConfigurationError } from "../errors.ts";
import { type Allocations, hasRole, type ShardAllocationStrategy, type ShardingMember } from "./strategy.ts";

/**
 * Decorates another strategy: only members with every required role are passed to it, so entity actors stay off
 * frontend or seed-only nodes. With no qualifying member a shard is unallocated (routes to it fail closed).
 */
export class RoleAwareAllocation implements ShardAllocationStrategy {
  readonly configurationKey: string;
  /** The required roles, de-duplicated and sorted. */
  readonly roles: readonly string[];

  /**
   * @throws ClusterShardingConfigurationError when `roles` is empty or contains an empty role
   */
  constructor(
    readonly delegate: ShardAllocationStrategy,
    roles: readonly string[],
  ) {
    if (!Array.isArray(roles) || roles.length === 0 || roles.some((r) => typeof r !== "string" || r.length === 0)) {
      throw new ClusterShardingConfigurationError(
        "required allocation roles must not be empty; pass at least one non-empty role name",
        "allocation.roles",
      );
    }
    this.roles = [...new Set(roles)].sort(compareStrings);
    this.configurationKey = `RoleAwareAllocation:${delegate.configurationKey}:${this.roles.join(":")}`;
  }

  allocate(shardId: number, members: readonly ShardingMember[], current: Allocations): UniqueAddress | null {
    return this.delegate.allocate(shardId, this.qualifying(members), current);
  }

  allocateAll(shardCount: number, members: readonly ShardingMember[]): Map<number, UniqueAddress> {
    const qualifying = this.qualifying(members);
    if (this.delegate.allocateAll !== undefined) return this.delegate.allocateAll(shardCount, qualifying);
    const plan = new Map<number, UniqueAddress>();
    for (let shard = 0; shard < shardCount; shard++) {
      const owner = this.delegate.allocate(shard, qualifying, plan);
      if (owner !== null) plan.set(shard, owner);
    }
    return plan;
  }

  /** The members that have every required role. */
  qualifying(members: readonly ShardingMember[]): ShardingMember[] {
    return members.filter((m) => this.roles.every((r) => hasRole(m, r)));
  }
}
