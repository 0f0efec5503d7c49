import type { ActorContext, ActorSystem } from "../../actor/index.ts";
import type { ClusterSharding } from "../cluster-sharding.ts";
import type { ShardingMembership } from "../membership.ts";
import type { ShardingProvider } from "../provider.ts";
import type { MutableShardingStats } from "../stats.ts";

/**
 * The parts of the sharding extension a persistent provider needs and ordinary code does not: the host context
 * entity actors are spawned under, the shared counters, the membership view and the registered types.
 * `ClusterSharding` keeps them private; until it offers a provider-registration hook that hands them over, this one
 * place reads them (the lead reconciles the two branches).
 */
export interface ShardingInternals {
  readonly system: ActorSystem;
  readonly counters: MutableShardingStats;
  readonly membership: ShardingMembership;
  readonly types: ReadonlyMap<string, { readonly provider: ShardingProvider }>;
  requireDaemonContext(): ActorContext<unknown>;
}

/**
 * The internals of `sharding` (see {@link ShardingInternals}).
 * @throws Error when the sharding extension no longer has them (a rename the persistent provider must follow)
 */
export function shardingInternals(sharding: ClusterSharding): ShardingInternals {
  const internals = sharding as unknown as Partial<ShardingInternals>;
  if (
    internals.system === undefined ||
    internals.counters === undefined ||
    internals.membership === undefined ||
    !(internals.types instanceof Map) ||
    typeof internals.requireDaemonContext !== "function"
  ) {
    throw new Error("ClusterSharding internals changed: update src/sharding/persistent/internals.ts");
  }
  return internals as ShardingInternals;
}
