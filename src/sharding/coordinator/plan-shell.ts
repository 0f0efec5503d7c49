import { UniqueAddress } from "../../actor/index.ts";
import type { ShardingMember } from "../allocation/strategy.ts";
import { planSnapshotGenerationMax, planSyncIntervalMs, reconcileIntervalMs } from "../constants.ts";
import { type EntityTypeState, requireSameSettings } from "../entity-type-state.ts";
import { asError, ClusterShardingConfigurationError } from "../errors.ts";
import type { ShardingClusterSnapshot } from "../membership.ts";
import type { ShardingContext } from "../sharding-context.ts";
import { PlanRequest, PlanSnapshot, PlanSnapshotRequest, PlanUpdate, toAssignments } from "./messages.ts";
import { acceptPlanUpdate, acceptSnapshot, type PlanEffect, reconcilePlan, sameAllocations } from "./plan.ts";

/** Starts the handoff of `shard` from `previous` to `next` that a reconcile decided on (the handoff shell). */
export type HandoffStarter = (
  state: EntityTypeState,
  shard: number,
  previous: UniqueAddress | null,
  next: UniqueAddress | null,
) => void;

/**
 * The shell around the pure plan core (plan.ts, REFERENCE §3.5) for every type on this node: as the coordinator it
 * reconciles, collects snapshots when newly elected and publishes the plan; elsewhere it asks the coordinator for the
 * plan and stores what it accepts. Membership changes and the departure guard are answered from the plans.
 */
export class PlanShell {
  private lastCoordinator: string | null = null;

  constructor(
    private readonly ctx: ShardingContext,
    private readonly startHandoff: HandoffStarter,
  ) {}

  /** True when the plan this node holds of `state` is its own (it published it as the coordinator). */
  isAuthor(state: EntityTypeState): boolean {
    return state.plan.author?.equals(this.ctx.self) === true;
  }

  /** Members placement may use for `state`: those that registered the type with our settings (and self). */
  private placementMembers(state: EntityTypeState, snap: ShardingClusterSnapshot): ShardingMember[] {
    const key = state.provider.settings.key;
    return snap.members.filter(
      (m) => m.uniqueAddress.equals(this.ctx.self) || state.registrations.get(m.uniqueAddress.toString()) === key,
    );
  }

  reconcile(state: EntityTypeState): void {
    if (this.ctx.stopped) return;
    const coordinator = this.ctx.electedCoordinator();
    if (coordinator === null || !coordinator.equals(this.ctx.self)) return;
    const snap = this.ctx.membership.snapshot();
    const peers = snap.members
      .filter((m) => m.status === "Up" && !m.uniqueAddress.equals(this.ctx.self))
      .map((m) => m.uniqueAddress)
      .sort(UniqueAddress.compare);
    let result: ReturnType<typeof reconcilePlan>;
    try {
      result = reconcilePlan(state.plan, {
        self: this.ctx.self,
        coordinator,
        members: this.placementMembers(state, snap),
        snapshotPeers: peers,
        planner: state.planner,
        handoffs: new Set(state.handoffs.keys()),
        nowMs: this.ctx.system.scheduler.now(),
      });
    } catch (error) {
      // A user strategy that throws (a weight function returning 0 for some member) must not end the process from a
      // timer callback: the plan stays as it is (routing continues, or fails closed without one), and the next
      // reconcile or plan sync tries again.
      this.ctx.system.log.error(
        { error: asError(error).message, type: state.provider.name },
        "sharding allocation failed; the plan is unchanged",
      );
      return;
    }
    const [plan, effects] = result;
    if (plan !== state.plan) {
      const authored = plan.generation !== state.plan.generation;
      state.plan = plan;
      if (authored) this.afterPlanStored(state);
    }
    for (const effect of effects) this.performPlanEffect(state, effect);
  }

  /**
   * Reconciles now, unless a bootstrap's next round is already scheduled: that round re-asks the peers itself. Every
   * poll, delivery or PlanRequest (a planless peer's answer to a snapshot request) would otherwise send another
   * snapshot request to every peer, a ping-pong that reached ~15,000 messages a second until the window closed.
   */
  reconcileUnlessBootstrapping(state: EntityTypeState): void {
    if (state.plan.bootstrap !== null && state.reconcileTimer !== null) return;
    this.reconcile(state);
  }

  private performPlanEffect(state: EntityTypeState, effect: PlanEffect): void {
    switch (effect.kind) {
      case "requestSnapshots": {
        const request = new PlanSnapshotRequest(
          state.provider.name,
          state.provider.settings.key,
          this.ctx.self.toString(),
        );
        for (const peer of effect.peers) this.ctx.daemonOf(peer).tell(request, this.ctx.daemon);
        break;
      }
      case "broadcast":
        this.broadcastPlan(state);
        break;
      case "startHandoff":
        this.startHandoff(state, effect.shardId, effect.previous, effect.next);
        break;
      case "scheduleReconcile":
        this.scheduleReconcile(state, effect.afterMs);
        break;
    }
  }

  scheduleReconcile(state: EntityTypeState, afterMs = reconcileIntervalMs): void {
    if (state.reconcileTimer !== null || this.ctx.stopped) return;
    state.reconcileTimer = this.ctx.system.scheduler.scheduleOnce(afterMs, () => {
      state.reconcileTimer = null;
      this.reconcile(state);
    });
  }

  private planUpdateOf(state: EntityTypeState): PlanUpdate {
    return new PlanUpdate(
      state.provider.name,
      state.provider.settings.key,
      this.ctx.self.toString(),
      state.plan.generation,
      toAssignments(state.plan.allocations),
    );
  }

  broadcastPlan(state: EntityTypeState): void {
    if (!this.isAuthor(state)) {
      throw new ClusterShardingConfigurationError(
        "Only the current coordinator may publish its authoritative sharding plan",
      );
    }
    const update = this.planUpdateOf(state);
    // Leaving and Exiting members get the plan too: the membership leader may be a leaving node, and its departure
    // guard reads its own plan view to learn that no shard is left on it.
    const targets = this.ctx.membership
      .snapshot()
      .members.filter((m) => !m.uniqueAddress.equals(this.ctx.self) && departingOrUp(m.status))
      .map((m) => m.uniqueAddress);
    for (const peer of targets) {
      try {
        this.ctx.daemonOf(peer).tell(update, this.ctx.daemon);
      } catch (error) {
        this.ctx.counters.rejectedEnvelopes++;
        this.ctx.system.log.error(
          { error: asError(error).message, peer: peer.toString(), type: state.provider.name },
          "sharding plan could not be sent",
        );
      }
    }
  }

  /** After any stored plan: keep only locally planned or prepared shards, clear prepared shards now planned here. */
  afterPlanStored(state: EntityTypeState): void {
    const author = state.plan.author?.toString() ?? null;
    const keep = new Set<number>();
    for (const [shard, owner] of state.plan.allocations) {
      if (owner.equals(this.ctx.self)) {
        keep.add(shard);
        state.prepared.delete(shard);
      }
    }
    for (const [shard, by] of state.prepared) if (by === author) keep.add(shard);
    state.provider.retainShards(keep);
  }

  onPlanRequest(request: PlanRequest, origin: UniqueAddress | null): void {
    const state = this.ctx.requireType(request.entityType);
    if (origin === null || request.requester !== origin.toString()) {
      throw new ClusterShardingConfigurationError("Sharding plan request has mismatched sender identity");
    }
    requireSameSettings(state, request.settingsKey);
    const known = state.registrations.get(request.requester);
    state.registrations.set(request.requester, request.settingsKey);
    const coordinator = this.ctx.electedCoordinator();
    if (coordinator === null || !coordinator.equals(this.ctx.self)) return;
    if (!this.isAuthor(state)) this.reconcileUnlessBootstrapping(state);
    // A newly registered member may change placement.
    else if (known === undefined) this.scheduleReconcile(state, 0);
    if (!this.isAuthor(state)) return;
    // The requester's copy of this very plan (same author, same generation) would be ignored as a duplicate.
    const upToDate =
      request.knownGeneration === state.plan.generation && request.knownAuthor === this.ctx.self.toString();
    if (!upToDate) this.ctx.daemonOf(origin).tell(this.planUpdateOf(state), this.ctx.daemon);
  }

  onPlanSnapshotRequest(request: PlanSnapshotRequest, origin: UniqueAddress | null): void {
    const state = this.ctx.requireType(request.entityType);
    if (origin === null || request.coordinator !== origin.toString()) {
      throw new ClusterShardingConfigurationError("Sharding plan snapshot request has mismatched sender identity");
    }
    requireSameSettings(state, request.settingsKey);
    if (state.plan.generation > 0) this.ctx.daemonOf(origin).tell(this.snapshotOf(state), this.ctx.daemon);
    else this.ctx.daemonOf(origin).tell(this.planRequestOf(state), this.ctx.daemon);
  }

  private snapshotOf(state: EntityTypeState): PlanSnapshot {
    return new PlanSnapshot(
      state.provider.name,
      state.provider.settings.key,
      state.plan.author?.toString() ?? this.ctx.self.toString(),
      state.plan.generation,
      toAssignments(state.plan.allocations),
    );
  }

  private planRequestOf(state: EntityTypeState): PlanRequest {
    return new PlanRequest(
      state.provider.name,
      state.provider.settings.key,
      this.ctx.self.toString(),
      state.plan.author?.toString() ?? null,
      state.plan.generation,
    );
  }

  onPlanSnapshot(snapshot: PlanSnapshot, origin: UniqueAddress | null): void {
    const state = this.ctx.requireType(snapshot.entityType);
    requireSameSettings(state, snapshot.settingsKey);
    if (snapshot.generation > planSnapshotGenerationMax) {
      throw new ClusterShardingConfigurationError(
        `Plan snapshot generation ${snapshot.generation} of ${snapshot.entityType} exceeds ${planSnapshotGenerationMax}; a genuine plan never gets there, so the snapshot is refused`,
        "generation",
      );
    }
    const _snap = this.ctx.membership.snapshot();
    if (origin !== null) state.registrations.set(origin.toString(), snapshot.settingsKey);
    const originIsUpMember = origin !== null && this.ctx.isUpMember(origin);
    if (state.plan.bootstrap !== null) {
      const [next, accepted] = acceptSnapshot(
        state.plan,
        { allocations: snapshot.allocations(), generation: snapshot.generation },
        { origin, originIsUpMember, nowMs: this.ctx.system.scheduler.now() },
      );
      state.plan = next;
      if (!accepted) this.ctx.counters.rejectedEnvelopes++;
      return;
    }
    // Outside bootstrap: a member holding a generation at or above ours missed our bootstrap; publish above it so
    // that it (and everyone) accepts the authoritative plan instead of rejecting it as stale forever.
    const ahead =
      snapshot.generation > state.plan.generation ||
      (snapshot.generation === state.plan.generation &&
        !sameAllocations(snapshot.allocations(), state.plan.allocations));
    if (originIsUpMember && this.isAuthor(state) && ahead) {
      state.plan = { ...state.plan, generation: snapshot.generation + 1 };
      this.broadcastPlan(state);
    }
  }

  onPlanUpdate(update: PlanUpdate, origin: UniqueAddress | null): void {
    const state = this.ctx.requireType(update.entityType);
    requireSameSettings(state, update.settingsKey);
    const coordinator = this.ctx.acceptingCoordinator();
    let outcome: string;
    try {
      [state.plan, outcome] = acceptPlanUpdate(
        state.plan,
        { coordinator: update.author(), generation: update.generation, allocations: update.allocations() },
        { coordinator, origin, self: this.ctx.self, shardCount: state.provider.settings.shardCount },
      );
    } catch (error) {
      if (error instanceof ClusterShardingConfigurationError && error.field === "generation" && origin !== null) {
        this.ctx.daemonOf(origin).tell(this.snapshotOf(state), this.ctx.daemon);
      }
      throw error;
    }
    if (outcome === "stored") this.afterPlanStored(state);
    else if (outcome === "stale") {
      this.ctx.counters.rejectedEnvelopes++;
      if (origin !== null) this.ctx.daemonOf(origin).tell(this.snapshotOf(state), this.ctx.daemon);
    }
  }

  /** Non-coordinators ask the coordinator for the plan now and every 250 ms; the coordinator reconciles. */
  syncPlan(state: EntityTypeState): void {
    if (this.ctx.stopped) return;
    const coordinator = this.ctx.electedCoordinator();
    if (coordinator?.equals(this.ctx.self)) this.reconcileUnlessBootstrapping(state);
    else if (coordinator !== null) this.ctx.daemonOf(coordinator).tell(this.planRequestOf(state), this.ctx.daemon);
    if (state.planSyncTimer === null) {
      state.planSyncTimer = this.ctx.system.scheduler.scheduleOnce(planSyncIntervalMs, () => {
        state.planSyncTimer = null;
        this.syncPlan(state);
      });
    }
  }

  onMembershipChange(): void {
    if (this.ctx.stopped) return;
    const snap = this.ctx.membership.snapshot();
    const coordinator = this.ctx.electedCoordinator();
    const coordinatorText = coordinator?.toString() ?? null;
    const changed = coordinatorText !== this.lastCoordinator;
    this.lastCoordinator = coordinatorText;
    const selfStatus = snap.members.find((m) => m.uniqueAddress.equals(this.ctx.self))?.status;
    for (const state of this.ctx.types.values()) {
      // Forget registrations of members that left for good.
      for (const key of [...state.registrations.keys()]) {
        if (!snap.members.some((m) => m.uniqueAddress.toString() === key)) state.registrations.delete(key);
      }
      if (coordinator === null) {
        // Reachability alone never relocates, but ownership is no longer safe: stop local entities (REFERENCE §3.11).
        if (snap.unreachable.length > 0) state.provider.suspendOwnership(false);
        else if (selfStatus === "Exiting" || selfStatus === "Down" || selfStatus === "Removed") {
          state.provider.suspendOwnership(true);
        }
        continue;
      }
      for (const [shard, by] of [...state.prepared]) if (by !== coordinatorText) state.prepared.delete(shard);
      if (changed) this.afterPlanStored(state);
      this.syncPlan(state);
    }
  }

  departureReady(member: ShardingMember): boolean {
    for (const state of this.ctx.types.values()) {
      for (const owner of state.plan.allocations.values()) if (owner.equals(member.uniqueAddress)) return false;
    }
    return true;
  }
}

function departingOrUp(status: string): boolean {
  return status === "Up" || status === "Leaving" || status === "Exiting";
}
