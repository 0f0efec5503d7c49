import type { ActorContext, ActorSystem } from "../../actor/index.ts";
import type { ShardedEntityType } from "../entity-ref.ts";
import type { ShardingMembership } from "../membership.ts";
import type { MutableShardingStats } from "../stats.ts";
import type { ShardingProvider } from "./provider.ts";

/**
 * What `ClusterSharding` hands the modules built on it (`movie/sharding/persistent`'s provider, the cluster
 * singleton), as `sharding.host`: the parts it otherwise keeps private. Not public API (not exported from
 * `movie/sharding`); it may change with those modules.
 */
export interface ShardingHost {
  /** The actor system (persistence extensions, scheduler, log, dead letters). */
  readonly system: ActorSystem;
  /** The membership view sharding routes by (the safe-to-own rule, the singleton's activation coordinator). */
  readonly membership: ShardingMembership;
  /** The sharding daemon's context: providers spawn their entity actors under it. */
  readonly entityParent: ActorContext<unknown>;
  /** The counters providers increment (activations, local deliveries, lease counters). */
  readonly stats: MutableShardingStats;
  /** The provider registered under `routingName` (the persistent idempotency check by kind and entity type). */
  provider(routingName: string): ShardingProvider | undefined;
  /**
   * Registers a provider under its routing name (`provider.name`): the path `init` takes for ordinary entities and
   * persistent initializers take with a `routingName` facade over a persistence entity type. Idempotent like `init`:
   * an equal message type and compatible settings keep the existing provider and return its type.
   * @throws ClusterShardingConfigurationError naming the mismatching field
   */
  registerProvider<T>(provider: ShardingProvider): ShardedEntityType<T>;
}
