import type { ActorSystem } from "../actor/index.ts";
import type { ShardingProvider } from "./internal/provider.ts";
import type { ShardingMembership } from "./membership.ts";

/**
 * The key of `ClusterSharding`'s internal accessor. Not exported from `movie/sharding`: only sharding's own
 * persistent module (`src/sharding/persistent`) and the cluster singleton (`src/singleton`) read it, so it is not
 * public API and may change with them.
 */
export const shardingInternalsKey: unique symbol = Symbol("movie.sharding.internals");

/**
 * What those modules need that `ClusterSharding` keeps private: its actor system (persistence extensions, scheduler,
 * log, dead letters), the membership view (the safe-to-own rule, the singleton's activation coordinator) and the
 * provider registered under a routing name (the persistent idempotency check by kind and entity type).
 */
export interface ShardingInternalView {
  readonly system: ActorSystem;
  readonly membership: ShardingMembership;
  provider(routingName: string): ShardingProvider | undefined;
}
