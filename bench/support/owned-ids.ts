// The node side of the multi-process sharding benchmarks: entity ids chosen so that a given node owns them.
import type { ClusterSharding, ShardedEntityType } from "../../src/sharding/index.ts";

/** Entity ids `${prefix}-i` whose shard the plan `sharding` observes puts on `owner` (a UniqueAddress string). */
export function ownedIds<T>(
  sharding: ClusterSharding,
  type: ShardedEntityType<T>,
  owner: string,
  prefix: string,
  count: number,
): string[] {
  const ids: string[] = [];
  for (let i = 0; ids.length < count; i++) {
    if (i > count * 1_000 + 10_000) throw new Error(`found only ${ids.length} ids owned by ${owner}`);
    const id = `${prefix}-${i}`;
    if (sharding.ownerFor(type, id)?.toString() === owner) ids.push(id);
  }
  return ids;
}
