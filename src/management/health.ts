/**
 * `GET /health/ready`: the checks a Kubernetes readiness probe needs, each with what is missing. A node is ready when
 * it is Up, membership has converged, and every registered sharding type has a plan from the current coordinator
 * that gives every shard an owner.
 */
import type { ActorSystem } from "../actor/index.ts";
import { clusterOf, shardingOf } from "./views.ts";

/** One check: its name, whether it passed, and what is missing when it did not. */
export interface HealthCheck {
  readonly check: string;
  readonly ok: boolean;
  readonly detail: string;
}

/** The readiness of one node. */
export interface HealthReport {
  readonly ready: boolean;
  readonly checks: readonly HealthCheck[];
}

/** The readiness checks of `system` now. */
export function readiness(system: ActorSystem): HealthReport {
  const checks: HealthCheck[] = [];
  const cluster = clusterOf(system);
  if (cluster === undefined) {
    checks.push({ check: "cluster", ok: false, detail: "cluster membership is not enabled" });
  } else {
    const snapshot = cluster.snapshot();
    checks.push({
      check: "up",
      ok: snapshot.selfStatus === "Up",
      detail: snapshot.selfStatus === "Up" ? "this node is Up" : `this node is ${snapshot.selfStatus}, not Up`,
    });
    checks.push({
      check: "converged",
      ok: snapshot.converged,
      detail: snapshot.converged
        ? "membership has converged"
        : `membership has not converged (${snapshot.unreachable.length} unreachable)`,
    });
  }
  const sharding = shardingOf(system);
  for (const name of sharding?.entityTypeNames ?? []) {
    const view = sharding!.inspect(name);
    const missing = view.shardCount - view.allocations.size;
    const current = view.coordinator !== null && view.planAuthor?.equals(view.coordinator) === true;
    const ok = current && missing === 0;
    checks.push({
      check: `sharding:${name}`,
      ok,
      detail: ok
        ? `all ${view.shardCount} shards have an owner (generation ${view.generation})`
        : view.coordinator === null
          ? "no converged coordinator: routing fails closed"
          : !current
            ? "this node has no plan from the current coordinator yet"
            : `${missing} of ${view.shardCount} shards have no owner`,
    });
  }
  return { ready: checks.every((c) => c.ok), checks };
}
