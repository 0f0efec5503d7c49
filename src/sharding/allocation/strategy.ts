import { UniqueAddress } from "../../actor/index.ts";

/** Membership status as cluster membership reports it (docs/protocol.md §4.1). */
export type ShardingMemberStatus = "Joining" | "Up" | "Leaving" | "Exiting" | "Down" | "Removed";

/** The part of a cluster member that placement looks at; a cluster `Member` satisfies it. */
export interface ShardingMember {
  readonly uniqueAddress: UniqueAddress;
  readonly status: ShardingMemberStatus | string;
  readonly roles: readonly string[] | ReadonlySet<string>;
  /** The application version the member runs; absent when it declares none (older than any version). */
  readonly appVersion?: string | undefined;
}

/** Shard id → owner. */
export type Allocations = ReadonlyMap<number, UniqueAddress>;

/**
 * Chooses the owner of one shard. Must be deterministic and pure: every node computes the same plan from the same
 * member list. A full desired plan calls `allocate` for shards 0..N-1 in order, from an empty map, feeding in the
 * choices so far (docs/protocol.md §5.3), so the target never depends on the current plan.
 */
export interface ShardAllocationStrategy {
  /** Stable identity of this strategy's configuration; part of the settings compatibility key. */
  readonly configurationKey: string;
  /**
   * The owner of `shardId` among `members` given the shards allocated so far, or null when no member is eligible.
   * @throws ClusterShardingConfigurationError when a configured input (a weight) is invalid
   */
  allocate(shardId: number, members: readonly ShardingMember[], current: Allocations): UniqueAddress | null;
  /**
   * Optional fast path: the whole desired plan for shards 0..shardCount-1 from an empty start. It must equal what
   * calling `allocate` shard by shard gives (the tests check this); built-ins implement it to stay O(N·M).
   */
  allocateAll?(shardCount: number, members: readonly ShardingMember[]): Map<number, UniqueAddress>;
}

/** The default eligibility filter: `Up` members, sorted by UniqueAddress, without duplicates. */
export function eligibleMembers(members: readonly ShardingMember[]): ShardingMember[] {
  const up = members.filter((m) => m.status === "Up");
  up.sort((a, b) => UniqueAddress.compare(a.uniqueAddress, b.uniqueAddress));
  return up.filter((m, i) => i === 0 || !m.uniqueAddress.equals(up[i - 1]!.uniqueAddress));
}

/** True when `member` has `role` (roles may come as an array or a set). */
export function hasRole(member: ShardingMember, role: string): boolean {
  const roles = member.roles;
  return Array.isArray(roles) ? roles.includes(role) : (roles as ReadonlySet<string>).has(role);
}

/** Builds the desired plan of `strategy` for `shardCount` shards over `members` (docs/protocol.md §5.3). */
export function desiredAllocations(
  strategy: ShardAllocationStrategy,
  shardCount: number,
  members: readonly ShardingMember[],
): Map<number, UniqueAddress> {
  if (strategy.allocateAll !== undefined) return strategy.allocateAll(shardCount, members);
  return allocateShardByShard(strategy, shardCount, members);
}

/** The reference construction of a desired plan: `allocate` per shard in order from an empty map. */
export function allocateShardByShard(
  strategy: ShardAllocationStrategy,
  shardCount: number,
  members: readonly ShardingMember[],
): Map<number, UniqueAddress> {
  const plan = new Map<number, UniqueAddress>();
  for (let shard = 0; shard < shardCount; shard++) {
    const owner = strategy.allocate(shard, members, plan);
    if (owner !== null) plan.set(shard, owner);
  }
  return plan;
}

/** Counts shards per owner key (UniqueAddress string). */
export function loadsOf(allocations: Allocations): Map<string, number> {
  const loads = new Map<string, number>();
  for (const owner of allocations.values()) {
    const key = owner.toString();
    loads.set(key, (loads.get(key) ?? 0) + 1);
  }
  return loads;
}
