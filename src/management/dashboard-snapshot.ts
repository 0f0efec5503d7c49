/**
 * What the dashboard's event stream sends every interval: members, every type's shard map (compact: an owner table
 * and one owner index per shard), handoffs, leases, the counters rates are computed from, the last operator actions,
 * and the projections and outbox (the same views as GET /projections and GET /outbox, read before each snapshot).
 */
import type { ActorSystem } from "../actor/index.ts";
import type { ShardLeaseView } from "../sharding/index.ts";
import type { OperatorAction, OperatorLog } from "./operator-log.ts";
import { type OutboxView, outboxView } from "./outbox-routes.ts";
import { type ProjectionSliceView, projectionSlices } from "./projection-routes.ts";
import { clusterOf, type MembersView, membersView, shardingOf } from "./views.ts";

/** One type's shard map for the dashboard. */
export interface DashboardType {
  readonly type: string;
  readonly shardCount: number;
  readonly generation: number;
  /** Owner addresses; `shards[i]` indexes this table (-1: no owner). */
  readonly owners: readonly string[];
  readonly shards: readonly number[];
  readonly handoffs: readonly number[];
  readonly localEntities: number;
  readonly leases: readonly ShardLeaseView[] | null;
}

/** One event of the dashboard's stream. */
export interface DashboardSnapshot {
  readonly atEpochMs: number;
  readonly members: MembersView | null;
  readonly types: readonly DashboardType[];
  readonly counters: {
    readonly routes: number;
    readonly localDeliveries: number;
    readonly activations: number;
    readonly forwards: number;
    readonly handoffShards: number;
  } | null;
  readonly actions: readonly OperatorAction[];
  /** Every projection and slice known here (GET /projections' `slices`); empty when none. */
  readonly projections: readonly ProjectionSliceView[];
  /** The outbox (GET /outbox with the five oldest parked messages), or null without persistence or when unreadable. */
  readonly outbox: OutboxView | null;
}

/** The asynchronously read parts of a snapshot. */
export interface DashboardOperations {
  readonly projections: readonly ProjectionSliceView[];
  readonly outbox: OutboxView | null;
}

/** Parked messages the dashboard lists. */
const dashboardParkedMax = 5;

/** Reads the projections and the outbox for a snapshot; a part that cannot be read now is left empty, never thrown. */
export async function dashboardOperations(system: ActorSystem): Promise<DashboardOperations> {
  const [projections, outbox] = await Promise.all([
    projectionSlices(system).catch(() => []),
    outboxView(system, dashboardParkedMax).catch(() => null),
  ]);
  return { projections, outbox };
}

/** The dashboard's view of `system` now. */
export function dashboardSnapshot(
  system: ActorSystem,
  operatorLog: OperatorLog,
  operations: DashboardOperations = { projections: [], outbox: null },
): DashboardSnapshot {
  const sharding = shardingOf(system);
  const types: DashboardType[] = [];
  for (const name of sharding?.entityTypeNames ?? []) {
    const view = sharding!.inspect(name);
    const owners: string[] = [];
    const index = new Map<string, number>();
    const shards: number[] = [];
    for (let shard = 0; shard < view.shardCount; shard++) {
      const owner = view.allocations.get(shard)?.toString();
      if (owner === undefined) {
        shards.push(-1);
        continue;
      }
      let i = index.get(owner);
      if (i === undefined) {
        i = owners.length;
        owners.push(owner);
        index.set(owner, i);
      }
      shards.push(i);
    }
    let local = 0;
    for (const n of view.localEntities.values()) local += n;
    types.push({
      type: name,
      shardCount: view.shardCount,
      generation: view.generation,
      owners,
      shards,
      handoffs: [...view.handoffs],
      localEntities: local,
      leases: view.leases,
    });
  }
  const stats = sharding?.stats;
  const cluster = clusterOf(system);
  return {
    atEpochMs: system.scheduler.wallNow(),
    members: cluster === undefined ? null : membersView(cluster.snapshot()),
    types,
    counters:
      stats === undefined
        ? null
        : {
            routes: stats.routes,
            localDeliveries: stats.localDeliveries,
            activations: stats.activations,
            forwards: stats.forwards,
            handoffShards: stats.handoffShards,
          },
    actions: operatorLog.actions.slice(-10),
    projections: operations.projections,
    outbox: operations.outbox,
  };
}
