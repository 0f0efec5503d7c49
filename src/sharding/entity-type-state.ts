import type { Cancellable } from "../actor/index.ts";
import { AllocationPlanner } from "./allocation/planner.ts";
import { emptyPlan, type PlanState } from "./coordinator/plan.ts";
import { ClusterShardingConfigurationError } from "./errors.ts";
import type { HandoffState } from "./handoff/handoff.ts";
import type { ShardingProvider } from "./provider.ts";
import { RetryBarrier } from "./retry-barrier.ts";
import type { Delivery } from "./routing/delivery.ts";

/** A handoff the coordinator drives: the pure core's state and the token that tells its replies apart. */
export interface RunningHandoff {
  state: HandoffState<Delivery>;
  /** Identifies this handoff so that replies of an older one for the same shard are ignored. */
  readonly token: object;
}

/** Everything one node keeps about one sharded type. */
export interface EntityTypeState {
  readonly provider: ShardingProvider;
  readonly planner: AllocationPlanner;
  plan: PlanState;
  readonly barrier: RetryBarrier<Delivery>;
  readonly barrierTimers: Map<number, Cancellable>;
  readonly handoffs: Map<number, RunningHandoff>;
  /** shard → coordinator (UniqueAddress string) that prepared it here. */
  readonly prepared: Map<number, string>;
  /** On the coordinator: member → settings key it registered the type with (via PlanRequest or PlanSnapshot). */
  readonly registrations: Map<string, string>;
  readonly drains: Map<number, Promise<void>>;
  reconcileTimer: Cancellable | null;
  planSyncTimer: Cancellable | null;
  idleTimer: Cancellable | null;
}

/** The state of a type just registered: no plan yet, nothing running. */
export function newEntityTypeState(provider: ShardingProvider): EntityTypeState {
  const settings = provider.settings;
  return {
    provider,
    planner: new AllocationPlanner(settings.shardCount, settings.allocation, settings.rebalance),
    plan: emptyPlan,
    barrier: new RetryBarrier<Delivery>({
      entityType: provider.name,
      windowMs: settings.leaseDuration + settings.leaseRenewInterval,
    }),
    barrierTimers: new Map(),
    handoffs: new Map(),
    prepared: new Map(),
    registrations: new Map(),
    drains: new Map(),
    reconcileTimer: null,
    planSyncTimer: null,
    idleTimer: null,
  };
}

/**
 * Refuses a message that another node built from different settings for this type: its settings key, which every
 * envelope and control message carries, must be this node's.
 * @throws ClusterShardingConfigurationError
 */
export function requireSameSettings(state: EntityTypeState, settingsKey: string): void {
  if (settingsKey !== state.provider.settings.key) {
    throw new ClusterShardingConfigurationError(
      `Entity type ${state.provider.name} received incompatible sharding settings; init it with identical settings on every node`,
      "settingsKey",
    );
  }
}
