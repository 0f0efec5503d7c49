import { askVia, type UniqueAddress } from "../../actor/index.ts";
import { handoffTimeoutMs } from "../constants.ts";
import { PassivateShard, PrepareShard, ShardingControlAck } from "../coordinator/messages.ts";
import { completeHandoffInPlan } from "../coordinator/plan.ts";
import type { PlanShell } from "../coordinator/plan-shell.ts";
import type { EntityTypeState, RunningHandoff } from "../entity-type-state.ts";
import { asError, NoShardOwnerError, ShardLeaseUnavailableError } from "../errors.ts";
import type { Delivery } from "../routing/delivery.ts";
import type { OwnerDelivery } from "../routing/owner-delivery.ts";
import type { ShardingContext } from "../sharding-context.ts";
import { type HandoffEffect, type HandoffInput, handoffStep, newHandoff } from "./handoff.ts";
import type { HandoffParticipant } from "./handoff-participant.ts";

/**
 * The coordinator's shell around the pure handoff core (handoff.ts, REFERENCE §3.8): starts a shard's handoff,
 * buffers its traffic, asks the old owner to passivate and the new one to prepare (or does it here when that owner
 * is this node), completes the plan and flushes the buffer, and logs each start and end.
 */
export class HandoffShell {
  constructor(
    private readonly ctx: ShardingContext,
    private readonly plans: PlanShell,
    private readonly owner: OwnerDelivery,
    private readonly participant: HandoffParticipant,
  ) {}

  bufferInHandoff(state: EntityTypeState, shard: number, d: Delivery): boolean {
    if (!state.handoffs.has(shard)) return false;
    this.feedHandoff(state, shard, { kind: "buffer", delivery: d });
    return true;
  }

  startHandoff(
    state: EntityTypeState,
    shard: number,
    previous: UniqueAddress | null,
    next: UniqueAddress | null,
  ): void {
    if (state.handoffs.has(shard)) return;
    state.handoffs.set(shard, { state: newHandoff<Delivery>(state.provider.name, shard, previous, next), token: {} });
    // One line per start and end: operators (and tests) can follow how many shards move at once.
    this.ctx.system.log.info(
      { type: state.provider.name, shard, previous: previous?.toString() ?? null, next: next?.toString() ?? null },
      "sharding handoff started",
    );
    this.feedHandoff(state, shard, this.attemptInput(state, previous, next));
  }

  private attemptInput(
    state: EntityTypeState,
    previous: UniqueAddress | null,
    next: UniqueAddress | null,
  ): HandoffInput<Delivery> {
    const snap = this.ctx.membership.snapshot();
    const term = this.handoffTerm(state);
    const prev = previous === null ? undefined : snap.members.find((m) => m.uniqueAddress.equals(previous));
    return {
      kind: "attempt",
      stillCoordinator: term === "current",
      settling: term === "settling",
      nextOwnerUp: next === null || this.ctx.isUpMember(next),
      previousReachable: prev !== undefined && prev.status !== "Down" && prev.status !== "Removed",
    };
  }

  /**
   * Whether this node may drive handoffs: "current" as the elected coordinator and plan author; "settling" when only
   * convergence is missing (no member unreachable, still the lowest Up member and author), as while a leave or a
   * status change spreads by gossip; "lost" otherwise (an unreachable member or another coordinator: fail closed).
   */
  private handoffTerm(state: EntityTypeState): "current" | "settling" | "lost" {
    if (!this.plans.isAuthor(state)) return "lost";
    const elected = this.ctx.electedCoordinator();
    if (elected !== null) return elected.equals(this.ctx.self) ? "current" : "lost";
    const accepting = this.ctx.acceptingCoordinator();
    return accepting?.equals(this.ctx.self) ? "settling" : "lost";
  }

  private feedHandoff(state: EntityTypeState, shard: number, input: HandoffInput<Delivery>): void {
    const running = state.handoffs.get(shard);
    if (running === undefined) {
      if (input.kind === "buffer") this.ctx.reject(input.delivery, new NoShardOwnerError(state.provider.name, shard));
      return;
    }
    const wasAborted = running.state.phase === "aborted";
    const wasSettling = running.state.settlingRounds > 0;
    const [next, effects] = handoffStep(running.state, input);
    running.state = next;
    if (next.settlingRounds > 0 && !wasSettling) {
      this.ctx.system.log.info(
        { shard, type: state.provider.name },
        "sharding handoff waits for membership to re-converge",
      );
    }
    if (next.phase === "aborted" && !wasAborted) {
      // Buffered deliveries were accepted: rejecting them is worth an operator's attention (and tests watch for it).
      // An abort that rejected nothing (the coordinator changed while nobody was sending) is retried by the next
      // reconcile and would only be noise at warn: a cluster's start can abort one per shard.
      const rejected = effects.filter((e) => e.kind === "reject").length;
      const context = { shard, type: state.provider.name, rejected };
      if (rejected > 0) this.ctx.system.log.warn(context, "sharding handoff aborted");
      else this.ctx.system.log.info(context, "sharding handoff aborted");
    }
    for (const effect of effects) this.performHandoffEffect(state, shard, running, effect);
  }

  private performHandoffEffect(
    state: EntityTypeState,
    shard: number,
    running: RunningHandoff,
    effect: HandoffEffect<Delivery>,
  ): void {
    const current = () => state.handoffs.get(shard) === running;
    const reply = (input: HandoffInput<Delivery>) => {
      if (!current() || this.ctx.stopped) return;
      try {
        this.feedHandoff(state, shard, input);
      } catch (error) {
        // Runs in a Promise callback: a throw here would be an unhandled rejection that ends the process.
        this.ctx.system.log.error({ error: asError(error).message, shard, type: name }, "sharding handoff step threw");
      }
    };
    const name = state.provider.name;
    const key = state.provider.settings.key;
    switch (effect.kind) {
      case "passivate": {
        const message = new PassivateShard(name, key, shard, this.ctx.self.toString(), effect.next?.toString() ?? null);
        this.controlAsk(effect.owner, message, () => this.participant.drainLocally(state, shard)).then(
          () => reply({ kind: "passivated" }),
          (error: unknown) => reply({ kind: "failed", error: asError(error) }),
        );
        break;
      }
      case "prepare": {
        const message = new PrepareShard(name, key, shard, this.ctx.self.toString());
        this.controlAsk(effect.owner, message, () => this.participant.prepareLocally(state, shard, this.ctx.self)).then(
          () => reply({ kind: "prepared" }),
          (error: unknown) => reply({ kind: "failed", error: asError(error) }),
        );
        break;
      }
      case "complete": {
        if (this.handoffTerm(state) === "settling") {
          // Buffered deliveries were accepted in this term: wait for gossip instead of rejecting them.
          this.feedHandoff(state, shard, { kind: "settling" });
          return;
        }
        try {
          const coordinator = this.ctx.electedCoordinator();
          state.plan = completeHandoffInPlan(state.plan, shard, effect.next, this.ctx.self, coordinator);
          this.plans.afterPlanStored(state);
        } catch (error) {
          this.feedHandoff(state, shard, { kind: "abort" });
          this.ctx.system.log.warn({ error: asError(error).message, shard, type: name }, "handoff could not complete");
          return;
        }
        this.feedHandoff(state, shard, { kind: "completed" });
        break;
      }
      case "dispatch":
        this.owner.dispatch(state, effect.delivery, effect.owner);
        break;
      case "reject":
        this.ctx.reject(effect.delivery, effect.error);
        break;
      case "scheduleAttempt":
        this.ctx.system.scheduler.scheduleOnce(effect.afterMs, () => {
          if (!current() || this.ctx.stopped) return;
          this.feedHandoff(state, shard, this.attemptInput(state, running.state.previous, running.state.next));
        });
        break;
      case "scheduleRetryComplete":
        this.ctx.system.scheduler.scheduleOnce(effect.afterMs, () => {
          if (!current() || this.ctx.stopped) return;
          this.feedHandoff(state, shard, { kind: "retryComplete" });
        });
        break;
      case "scheduleReconcile":
        this.plans.scheduleReconcile(state, effect.afterMs);
        break;
      case "failedAttempt":
        if (isLeaseUnavailable(effect.error)) this.ctx.counters.leaseRetries++;
        this.ctx.system.log.warn(
          { error: effect.error.message, shard, type: name },
          "sharding handoff step failed; retrying",
        );
        break;
      case "finished":
        if (current()) state.handoffs.delete(shard);
        this.ctx.system.log.info({ type: name, shard, outcome: effect.outcome }, "sharding handoff finished");
        if (effect.outcome === "done") {
          this.ctx.counters.handoffShards++;
          this.ctx.counters.rebalanceMoves++;
          if (this.plans.isAuthor(state)) this.plans.broadcastPlan(state);
        }
        break;
    }
  }

  /** A PassivateShard/PrepareShard ask: to another node's daemon, or run locally when that node is us. */
  private controlAsk(node: UniqueAddress, message: object, local: () => Promise<void>): Promise<unknown> {
    if (node.equals(this.ctx.self)) return local();
    return askVia(this.ctx.system, this.ctx.daemonOf(node), message, ShardingControlAck, handoffTimeoutMs);
  }
}

function isLeaseUnavailable(error: Error): boolean {
  return (
    error instanceof ShardLeaseUnavailableError ||
    (error as { remoteClass?: string }).remoteClass === "ShardLeaseUnavailableError"
  );
}
