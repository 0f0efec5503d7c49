import assert from "node:assert/strict";
import { UniqueAddress } from "../../actor/index.ts";
import type { Allocations, ShardingMember } from "../allocation/strategy.ts";
import { bootstrapSnapshotWindowMs, reconcileIntervalMs } from "../constants.ts";
import { ClusterShardingConfigurationError } from "../errors.ts";
import type { AllocationPlanner } from "../internal/allocation-planner.ts";

/**
 * The per-entity-type plan each node keeps (docs/protocol.md §6.2): shard → owner, the coordinator that authored it (the
 * "term": there is no separate term number) and a generation that only grows. Pure functions below change it; the
 * shell performs the effects they return.
 */
export interface PlanState {
  readonly allocations: Allocations;
  /** The coordinator that authored the stored plan, or null before any plan is known. */
  readonly author: UniqueAddress | null;
  /** 0 before any plan; every stored plan has a generation above the previous one. */
  readonly generation: number;
  /** Set while this node, newly coordinator, collects snapshots before publishing its first plan. */
  readonly bootstrap: BootstrapState | null;
}

/** A newly elected coordinator's snapshot collection. */
export interface BootstrapState {
  /** The coordinator collecting (a bootstrap for another identity is stale). */
  readonly coordinator: UniqueAddress;
  /** Snapshots are accepted until this monotonic time, ms. */
  readonly deadlineMs: number;
  /** The best plan seen: highest generation. */
  readonly candidate: PlanCandidate | null;
  /**
   * Peers (UniqueAddress text) whose plan snapshot this bootstrap took into account. Once every peer asked has
   * answered with one, nothing more can be learnt by waiting, and the term starts before the deadline.
   */
  readonly answered: ReadonlySet<string>;
}

/** A versioned plan offered during bootstrap. */
export interface PlanCandidate {
  readonly allocations: Allocations;
  readonly generation: number;
}

/** A plan as it travels in PlanUpdate and PlanSnapshot (assignments sorted by shard). */
export interface PlanMessage {
  readonly coordinator: UniqueAddress;
  readonly generation: number;
  readonly allocations: Allocations;
}

/** Effects of a reconcile for the shell to perform. */
export type PlanEffect =
  | { readonly kind: "requestSnapshots"; readonly peers: readonly UniqueAddress[] }
  | { readonly kind: "broadcast" }
  | {
      readonly kind: "startHandoff";
      readonly shardId: number;
      readonly previous: UniqueAddress | null;
      readonly next: UniqueAddress | null;
    }
  | { readonly kind: "scheduleReconcile"; readonly afterMs: number };

/** The empty plan of a type nobody has planned yet. */
export const emptyPlan: PlanState = { allocations: new Map(), author: null, generation: 0, bootstrap: null };

/** Inputs of {@link reconcilePlan}. */
export interface ReconcileContext {
  readonly self: UniqueAddress;
  /** The current coordinator (reconcile does nothing unless it is `self`). */
  readonly coordinator: UniqueAddress | null;
  /** Members placement may use (the shell drops members that have not registered the type). */
  readonly members: readonly ShardingMember[];
  /**
   * Members other than self asked for snapshots during bootstrap (the node core asks every Up, Leaving and Exiting
   * member: a leaving one may hold the newest plan and still own shards); default: the Up ones among `members`.
   */
  readonly snapshotPeers?: readonly UniqueAddress[];
  readonly planner: AllocationPlanner;
  /** Shards with a handoff already running (a move for them is not started again). */
  readonly handoffs: ReadonlySet<number>;
  readonly nowMs: number;
}

/**
 * One coordinator reconcile (docs/protocol.md §6.3): bootstrap a new term (collect snapshots until the deadline, then
 * publish `max(local, candidate) + 1`), then start a handoff for every shard whose owner should change. Ownership
 * itself changes only when a handoff completes.
 */
export function reconcilePlan(state: PlanState, ctx: ReconcileContext): [PlanState, PlanEffect[]] {
  if (ctx.coordinator === null || !ctx.coordinator.equals(ctx.self)) return [state, []];
  const effects: PlanEffect[] = [];
  let next = state;
  if (next.author === null || !next.author.equals(ctx.self)) {
    let bootstrap = next.bootstrap?.coordinator.equals(ctx.self) ? next.bootstrap : null;
    if (bootstrap === null) {
      const own = next.generation > 0 ? { allocations: next.allocations, generation: next.generation } : null;
      bootstrap = {
        coordinator: ctx.self,
        deadlineMs: ctx.nowMs + bootstrapSnapshotWindowMs,
        candidate: own,
        answered: new Set(),
      };
    }
    const peers =
      ctx.snapshotPeers ??
      ctx.members
        .filter((m) => m.status === "Up" && !m.uniqueAddress.equals(ctx.self))
        .map((m) => m.uniqueAddress)
        .sort(UniqueAddress.compare);
    if (peers.length > 0 && ctx.nowMs < bootstrap.deadlineMs && !bootstrapAnswered(bootstrap, peers)) {
      return [
        { ...next, bootstrap },
        [
          { kind: "requestSnapshots", peers },
          { kind: "scheduleReconcile", afterMs: reconcileIntervalMs },
        ],
      ];
    }
    const candidate = bootstrap.candidate;
    const allocations = candidate === null ? ctx.planner.initial(ctx.members) : new Map(candidate.allocations);
    const generation = Math.max(next.generation, candidate?.generation ?? 0) + 1;
    next = { allocations, author: ctx.self, generation, bootstrap: null };
    effects.push({ kind: "broadcast" });
    // A fresh initial plan is already the target; a recovered one may need moves, so reconcile it below.
    if (candidate === null) return [next, effects];
  }
  const result = ctx.planner.reconcile(next.allocations, ctx.members);
  let started = 0;
  for (const shardId of result.moved) {
    if (ctx.handoffs.has(shardId)) continue;
    effects.push({
      kind: "startHandoff",
      shardId,
      previous: next.allocations.get(shardId) ?? null,
      next: result.allocations.get(shardId) ?? null,
    });
    started++;
  }
  if (result.pending || started > 0 || ctx.handoffs.size > 0) {
    effects.push({ kind: "scheduleReconcile", afterMs: reconcileIntervalMs });
  }
  return [next, effects];
}

/**
 * True when every peer in `peers` has answered this bootstrap with a plan snapshot. A peer without a plan answers with
 * a PlanRequest instead, which does not count: an older sender's request carries no generation and could hide a
 * plan, so a bootstrap with such a peer still runs to its deadline.
 */
export function bootstrapAnswered(bootstrap: BootstrapState, peers: readonly UniqueAddress[]): boolean {
  return peers.every((p) => bootstrap.answered.has(p.toString()));
}

/** Inputs of {@link acceptSnapshot}. */
export interface SnapshotContext {
  /** The authenticated sender (transport identity, never a payload field). */
  readonly origin: UniqueAddress | null;
  /**
   * True when `origin` is a member the coordinator publishes plans to (Up, Leaving or Exiting in this node's view): a
   * leaving member may still own shards under the newest plan, which a new coordinator must not start without.
   */
  readonly originIsPlanMember: boolean;
  readonly nowMs: number;
}

/**
 * Offers a peer's plan snapshot to a bootstrapping coordinator: accepted only while the bootstrap deadline runs, only
 * from an authenticated member that receives plans (Up, Leaving, Exiting), only with a positive generation; the highest generation wins.
 * @returns the new state and whether the snapshot was taken into account (false means: count a rejection)
 * @throws ClusterShardingConfigurationError for a non-positive generation or two different plans at one generation
 */
export function acceptSnapshot(state: PlanState, snapshot: PlanCandidate, ctx: SnapshotContext): [PlanState, boolean] {
  if (!(Number.isInteger(snapshot.generation) && snapshot.generation > 0)) {
    throw new ClusterShardingConfigurationError("Sharding plan snapshot generation must be positive", "generation");
  }
  const bootstrap = state.bootstrap;
  if (bootstrap === null || ctx.nowMs >= bootstrap.deadlineMs) return [state, false];
  if (ctx.origin === null || !ctx.originIsPlanMember) return [state, false];
  const answered = new Set(bootstrap.answered).add(ctx.origin.toString());
  const best = bootstrap.candidate;
  if (best !== null && snapshot.generation < best.generation) {
    return [{ ...state, bootstrap: { ...bootstrap, answered } }, true];
  }
  if (best !== null && snapshot.generation === best.generation) {
    if (!sameAllocations(best.allocations, snapshot.allocations)) {
      throw new ClusterShardingConfigurationError(
        `Conflicting sharding plan snapshots at generation ${snapshot.generation}`,
        "generation",
      );
    }
    return [{ ...state, bootstrap: { ...bootstrap, answered } }, true];
  }
  const candidate = { allocations: new Map(snapshot.allocations), generation: snapshot.generation };
  return [{ ...state, bootstrap: { ...bootstrap, candidate, answered } }, true];
}

/** What happened to a PlanUpdate. */
export type PlanUpdateOutcome = "stored" | "stale" | "duplicate";

/** Inputs of {@link acceptPlanUpdate}. */
export interface PlanUpdateContext {
  /** This node's current coordinator. */
  readonly coordinator: UniqueAddress | null;
  /** The authenticated sender; null for a message from this node itself. */
  readonly origin: UniqueAddress | null;
  readonly self: UniqueAddress;
  readonly shardCount: number;
}

/**
 * Applies a PlanUpdate (docs/protocol.md §6.4): it must come from the current coordinator's authenticated identity, with a
 * positive generation and valid, distinct shards. A lower generation is stale (ignored, counted), an equal one is a
 * duplicate when identical and a conflict otherwise, a higher one replaces the plan and ends any bootstrap.
 * @throws ClusterShardingConfigurationError for an unauthorized sender, a bad generation or shard, or a conflict
 */
export function acceptPlanUpdate(
  state: PlanState,
  update: PlanMessage,
  ctx: PlanUpdateContext,
): [PlanState, PlanUpdateOutcome] {
  const senderIsCoordinator =
    ctx.coordinator !== null &&
    update.coordinator.equals(ctx.coordinator) &&
    (ctx.origin === null ? ctx.coordinator.equals(ctx.self) : ctx.origin.equals(ctx.coordinator));
  if (!senderIsCoordinator) {
    throw new ClusterShardingConfigurationError("Sharding control was not authorized by the current coordinator");
  }
  if (!(Number.isInteger(update.generation) && update.generation > 0)) {
    throw new ClusterShardingConfigurationError("Sharding plan generation must be positive", "generation");
  }
  for (const shard of update.allocations.keys()) {
    if (!Number.isInteger(shard) || shard < 0 || shard >= ctx.shardCount) {
      throw new ClusterShardingConfigurationError(`Sharding plan has an invalid shard ${shard}`, "assignments");
    }
  }
  if (update.generation < state.generation) return [state, "stale"];
  if (update.generation === state.generation) {
    if (state.author?.equals(update.coordinator) && sameAllocations(state.allocations, update.allocations)) {
      return [state, "duplicate"];
    }
    throw new ClusterShardingConfigurationError(
      `Conflicting sharding plan at generation ${update.generation}`,
      "generation",
    );
  }
  const next: PlanState = {
    allocations: new Map(update.allocations),
    author: update.coordinator,
    generation: update.generation,
    bootstrap: null,
  };
  assert.ok(next.generation > state.generation, "a stored plan's generation only grows");
  return [next, "stored"];
}

/**
 * Records a completed handoff on the coordinator: only `shardId` changes (to `next`, or unallocated), and the
 * generation goes up by one.
 * @throws ClusterShardingConfigurationError "Only the current sharding coordinator may complete a handoff"
 */
export function completeHandoffInPlan(
  state: PlanState,
  shardId: number,
  next: UniqueAddress | null,
  self: UniqueAddress,
  coordinator: UniqueAddress | null,
): PlanState {
  if (coordinator === null || !coordinator.equals(self) || state.author === null || !state.author.equals(self)) {
    throw new ClusterShardingConfigurationError("Only the current sharding coordinator may complete a handoff");
  }
  const allocations = new Map(state.allocations);
  if (next === null) allocations.delete(shardId);
  else allocations.set(shardId, next);
  return { ...state, allocations, generation: state.generation + 1 };
}

/** True when both plans map the same shards to the same owners. */
export function sameAllocations(a: Allocations, b: Allocations): boolean {
  if (a.size !== b.size) return false;
  for (const [shard, owner] of a) if (!b.get(shard)?.equals(owner)) return false;
  return true;
}

/** The shards `self` owns in `state`, ascending. */
export function localShards(state: PlanState, self: UniqueAddress): number[] {
  const shards: number[] = [];
  for (const [shard, owner] of state.allocations) if (owner.equals(self)) shards.push(shard);
  return shards.sort((a, b) => a - b);
}
