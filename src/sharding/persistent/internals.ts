import type { ActorSystem } from "../../actor/index.ts";
import type { ClusterSharding } from "../cluster-sharding.ts";
import type { ShardingMembership } from "../membership.ts";
import type { ShardingProvider } from "../provider.ts";

/**
 * The parts of the sharding extension a persistent provider needs that `ClusterSharding` keeps private: its actor
 * system, the membership view (for the safe-to-own rule) and the registered types (for the idempotency check by
 * kind and entity type). The host context and counters come from its `entityHost` and `mutableStats`. Until it
 * exposes these three as well, this one place reads them.
 */
export interface ShardingInternals {
  readonly system: ActorSystem;
  readonly membership: ShardingMembership;
  readonly types: ReadonlyMap<string, { readonly provider: ShardingProvider }>;
}

/**
 * The internals of `sharding` (see {@link ShardingInternals}).
 * @throws Error when the sharding extension no longer has them (a rename the persistent provider must follow)
 */
export function shardingInternals(sharding: ClusterSharding): ShardingInternals {
  const internals = sharding as unknown as Partial<ShardingInternals>;
  if (internals.system === undefined || internals.membership === undefined || !(internals.types instanceof Map)) {
    throw new Error("ClusterSharding internals changed: update src/sharding/persistent/internals.ts");
  }
  return internals as ShardingInternals;
}
