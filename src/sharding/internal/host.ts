import type { ActorContext, ActorSystem } from "../../actor/index.ts";
import type { ClusterSharding } from "../cluster-sharding.ts";
import type { ShardedEntityType } from "../entity-ref.ts";
import type { ShardingMembership } from "../membership.ts";
import type { MutableShardingStats } from "../stats.ts";
import type { ShardingProvider } from "./provider.ts";

/**
 * What `ClusterSharding` hands the modules built on it (`movie/sharding/persistent`'s provider, the cluster
 * singleton), through {@link shardingHostOf}: the parts it otherwise keeps private. Not public API (not exported from
 * `movie/sharding`, and not a property of `ClusterSharding`, so it is not in its type declarations either); it may
 * change with those modules.
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

// A WeakMap rather than a property: a property, even one marked internal, is part of ClusterSharding's published
// type, and users would reach for it. The entry lives exactly as long as its ClusterSharding.
const hosts = new WeakMap<ClusterSharding, ShardingHost>();

/** Called once by ClusterSharding's constructor. */
export function attachShardingHost(sharding: ClusterSharding, host: ShardingHost): void {
  hosts.set(sharding, host);
}

/**
 * The host of `sharding`.
 * @throws Error when `sharding` was not made by ClusterSharding (a hand-made stand-in): a programming error.
 */
export function shardingHostOf(sharding: ClusterSharding): ShardingHost {
  const host = hosts.get(sharding);
  if (host === undefined) throw new Error("not a ClusterSharding made by ClusterSharding.get(system)");
  return host;
}
