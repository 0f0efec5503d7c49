import assert from "node:assert/strict";
import { type ActorRef, Histogram, latencyBucketsSeconds, UniqueAddress } from "../../actor/index.ts";
import type { ShardingMember } from "../allocation/strategy.ts";
import {
  coordinatorFlushGraceMs,
  coordinatorFlushRetryMs,
  directProbeRetryMs,
  handoffTimeoutMs,
  idleSweepHalvingFloorMs,
  leaseRetryIntervalMs,
  planSnapshotGenerationMax,
  planSyncIntervalMs,
  reconcileIntervalMs,
} from "../constants.ts";
import {
  acceptPlanUpdate,
  acceptSnapshot,
  bootstrapAnswered,
  completeHandoffInPlan,
  emptyPlan,
  type PlanEffect,
  type PlanState,
  reconcilePlan,
  sameAllocations,
} from "../coordinator/plan.ts";
import { decideShardMove, type ShardMoveDecision } from "../coordinator/shard-move.ts";
import {
  asError,
  ClusterShardingConfigurationError,
  DirectDeliveryRefusedError,
  NoShardOwnerError,
  ShardLeaseUnavailableError,
} from "../errors.ts";
import {
  type HandoffEffect,
  type HandoffInput,
  type HandoffState,
  handoffStep,
  newHandoff,
} from "../handoff/handoff.ts";
import { AllocationPlanner } from "../internal/allocation-planner.ts";
import { shareTyped } from "../internal/codec.ts";
import {
  CancelPreparations,
  CoordinatorFlush,
  CoordinatorFlushed,
  DirectEnvelope,
  DirectGrant,
  DirectMarker,
  DirectProbe,
  DirectRefused,
  HandoffAnnounce,
  PassivateShard,
  PlanRequest,
  PlanSnapshot,
  PlanSnapshotRequest,
  PlanUpdate,
  PrepareShard,
  type ShardingEnvelope,
  toAssignments,
} from "../internal/messages.ts";
import { type AttemptOutcome, type BarrierResult, RetryBarrier } from "../internal/retry-barrier.ts";
import type { ShardingClusterSnapshot } from "../membership.ts";
import type { ShardingSettings } from "../settings.ts";
import { type MutableShardingStats, zeroStats } from "../stats.ts";
import { type DirectRoute, type DrainGate, MarkerBook } from "./direct-route.ts";
import { HeldDeliveries, type HeldDelivery } from "./held-deliveries.ts";
import { emptyView, type MembershipView, viewOf } from "./view.ts";

/** Statuses of the members a coordinator publishes plans to and takes plan snapshots from (docs/protocol.md §6.3). */
const planMemberStatuses: ReadonlySet<string> = new Set(["Up", "Leaving", "Exiting"]);

/**
 * The sharding protocol of one node (docs/protocol.md §6–§10) as one state machine: `step(state, input, nowMs)` returns
 * the state and the effects for the shell (node-shell.ts) to perform. It decides everything: where a caller's
 * envelope goes, what the coordinator does with it (plan check, retry barrier, handoff buffer, dispatch), whether an
 * owner accepts a forwarded envelope, every plan message, the handoffs this node drives as coordinator and its part in
 * the ones another drives, idle passivation and the per-shard retry barrier. It performs no I/O and reads no clock; the
 * same code runs in production (through the shell) and in the seeded simulator (test/sim/), which feeds it inputs and
 * performs its effects on a simulated network.
 *
 * The state is owned by the core and updated in place (a routed message must not copy maps); `step` returns it so
 * callers never keep a stale reference. Assertions state the invariants where they hold, so a broken rule stops the
 * simulator at the step that broke it: a node's plan generation only grows; a shard is delivered to here only when
 * this node owns it in the plan of the coordinator it follows or was prepared for it by that coordinator; a handoff's
 * buffer is either flushed in order or rejected, never dropped.
 */

/** One accepted routed message: the envelope (its typed value rides along when it never left the process). */
export interface Delivery {
  readonly envelope: ShardingEnvelope;
  /** The caller's ref: replies, and failures of an ask, go there. */
  readonly sender: ActorRef<unknown> | null;
  /**
   * The node a hop-0 envelope came from (its transport identity); null or absent for this node's own callers. A
   * former coordinator relays a caller's envelopes by it when that caller's flush marker arrives (§8.7).
   */
  readonly origin?: UniqueAddress | null;
}

/**
 * This node's callers' flush of a coordinator change (docs/protocol.md §8.7): the marker went to `via`, the coordinator
 * they last sent envelopes to, for relay to `target`; their deliveries wait until `target` answers with `token`.
 */
export interface CoordinatorFlushState {
  readonly token: number;
  readonly via: UniqueAddress;
  readonly target: UniqueAddress;
  /** When the first marker of this change went out (resends keep it): bounds the wait once `via` left the view. */
  readonly sinceMs: number;
}

/** Who waits for a local drain or prepare of a shard: a remote coordinator's ask, or a handoff this node drives. */
export type ShardWaiter =
  | { readonly kind: "ask"; readonly replyTo: ActorRef<unknown> | null }
  | { readonly kind: "handoff"; readonly token: number };

/** A handoff this node drives as coordinator, and the token that tells its replies apart from an older one's. */
export interface RunningHandoff {
  state: HandoffState<Delivery>;
  readonly token: number;
  /** When it started (the step's clock), for the handoff duration histogram. */
  readonly startedAtMs: number;
}

/** Everything one node keeps about one sharded type. */
export interface TypeState {
  readonly name: string;
  readonly settings: ShardingSettings;
  readonly planner: AllocationPlanner;
  plan: PlanState;
  readonly barrier: RetryBarrier<Delivery>;
  /** shard → id of the barrier tick armed for it (a tick with another id is stale). */
  readonly barrierTicks: Map<number, number>;
  readonly handoffs: Map<number, RunningHandoff>;
  /** Seconds from the start of each handoff this node drove to its completion (aborted ones are not counted). */
  readonly handoffDuration: Histogram;
  /** shard → coordinator (UniqueAddress string) that prepared it here. */
  readonly prepared: Map<number, string>;
  /**
   * shard → prepares asked of the provider whose outcome has not come back yet. Kept by every stored plan: a plan
   * stored between the provider acquiring the lease and the core learning of it must not release that fresh lease
   * (the next plan would acquire it again, one ownership transfer costing two epochs).
   */
  readonly preparing: Map<number, number>;
  /**
   * On the coordinator: member (UniqueAddress text, this node for its own) → shard → when a preparation it holds was
   * first seen not stood by (docs/protocol.md §9.3). Only what its last plan request listed is kept (bounded by the
   * shard count per member); cancelled once stale for half the type's lease duration.
   */
  readonly staleSince: Map<string, Map<number, number>>;
  /** On the coordinator: member → settings key it registered the type with (via PlanRequest or PlanSnapshot). */
  readonly registrations: Map<string, string>;
  /** shard → who waits for its local drain (the drain is running while the entry exists). */
  readonly drains: Map<number, ShardWaiter[]>;
  /** Shards whose provider drain was started (the rest wait for the retry barrier to empty first). */
  readonly drainsStarted: Set<number>;
  /**
   * Shards whose drain ran here since the provider was last told which shards it keeps (`retainShards`): the provider
   * refuses them (a handoff in progress) until then. A handoff that aborts after draining this node leaves the shard
   * here in the plan, and no new plan comes to say so: the first delivery for it re-owns it (docs/protocol.md §9.4).
   */
  readonly drainedHere: Set<number>;
  reconcileArmed: boolean;
  planSyncArmed: boolean;
  /** This node's callers' deliveries waiting for a coordinator to route through (docs/protocol.md §8.6). */
  readonly heldLocal: HeldDeliveries<Delivery>;
  /** Hop-0 envelopes from other nodes' callers that reached this node while it could not route them as coordinator. */
  readonly heldForwarded: HeldDeliveries<Delivery>;
  /**
   * Direct routing, owner side: direct envelopes that reached this node while it had no accepting coordinator to
   * check them against (a member unreachable, the view not converged), per shard in arrival order; checked and
   * delivered or refused in that order once it has one (docs/protocol.md §8.8). Never refused for that want alone: a
   * refusal sends the caller to the coordinator, and a later direct envelope of the same grant accepted after the view
   * re-converged would overtake what the caller sent through the coordinator meanwhile.
   */
  readonly heldDirect: HeldDeliveries<Delivery>;
  /** The armed held-deliveries sweep: its id (a sweep with another id is stale) and when it fires; null when none. */
  heldSweep: { readonly id: number; readonly atMs: number } | null;
  /** The coordinator this node's callers last sent envelopes to (this node included); null before the first. */
  via: UniqueAddress | null;
  /** The flush of a coordinator change this node's callers wait for, or null (docs/protocol.md §8.7). */
  flush: CoordinatorFlushState | null;
  /**
   * Flush markers of other nodes' callers (caller UniqueAddress text → its newest marker) that reached this node while
   * it still drove handoffs as coordinator (its term current or settling): relayed once its term is lost (§8.7).
   */
  readonly pendingMarkers: Map<string, CoordinatorFlush>;
  /** Direct routing, caller side (docs/protocol.md §8.8): shard → its route when not the plain coordinator route. */
  readonly routes: Map<number, DirectRoute>;
  /** Direct routing, owner side: shard → the plan generation in which this node's current ownership of it began. */
  readonly ownedSince: Map<number, number>;
  /**
   * Direct routing, owner side: the plan author (UniqueAddress text) under whom `ownedSince` was counted. A grant
   * belongs to one coordinator's term: when the author changes, every ownership counts as begun anew (§8.8).
   */
  ownedUnder: string | null;
  /** Direct routing, owner side: shards whose drain started in their current ownership (direct deliveries refused). */
  readonly directClosed: Set<number>;
  /** Direct routing, owner side: shard → the markers its asked drain waits for. */
  readonly drainGates: Map<number, DrainGate>;
  /** Direct routing, owner side: the markers of announced handoffs that arrived. */
  readonly markers: MarkerBook;
}

/**
 * Deliberate protocol bugs, for the simulator's proof that it catches them (never set outside tests): accept a plan
 * update without its generation check; report a passivation done before the old owner drained; accept forwarded
 * traffic without checking that it comes from the coordinator; route through a new coordinator without the flush.
 */
export interface PlantedBugs {
  readonly skipPlanGenerationCheck?: boolean;
  readonly flushBeforeDrained?: boolean;
  readonly acceptForwardFromAnyone?: boolean;
  /** Route through a new coordinator at once, without the flush of what went to the old one (§8.7). */
  readonly skipCoordinatorFlush?: boolean;
  /** Direct routing: a caller goes direct from its plan alone, without the owner's grant (no order at the switch). */
  readonly directWithoutGrant?: boolean;
  /**
   * Direct routing: an owner with no accepting coordinator refuses a direct envelope (and sends its caller to the
   * coordinator) instead of holding it: the refusal is not monotone (§8.8), a later one of the same grant is accepted.
   */
  readonly refuseDirectWithoutCoordinator?: boolean;
  /**
   * Direct routing: a burst past the held bound while a probe is out opens the shard to a new probe before its
   * waiting deliveries go through the coordinator, so the first of them probes and the rest wait behind the probe
   * while the burst's newest delivery goes ahead of them (§8.8 "Caller").
   */
  readonly probeBeforeBurstFlush?: boolean;
}

/** The whole node. */
export interface NodeState {
  readonly self: UniqueAddress;
  view: MembershipView;
  /** The elected coordinator of the last membership change handled (UniqueAddress text). */
  lastCoordinator: string | null;
  /** This node's own status in the last view that listed it. */
  lastSelfStatus: string | undefined;
  readonly types: Map<string, TypeState>;
  /** Set by `stop` (or when this node was downed); every later input does nothing. */
  stopped: boolean;
  nextToken: number;
  /**
   * Counts the changes to this state that can change a shortcut's answer: every step, and every shortcut that changes
   * what a later answer reads. An answer computed at one version holds for as long as the version is the same, so the
   * shell may keep it (node/shortcut-memo.ts) instead of asking again for every message.
   */
  version: number;
  readonly counters: MutableShardingStats;
  readonly bugs: PlantedBugs;
}

/** A timer the core asked for; it comes back as a `timer` input. */
export type NodeTimer =
  | { readonly kind: "reconcile"; readonly type: string }
  | { readonly kind: "planSync"; readonly type: string }
  | { readonly kind: "handoffAttempt"; readonly type: string; readonly shard: number; readonly token: number }
  | { readonly kind: "handoffRetryComplete"; readonly type: string; readonly shard: number; readonly token: number }
  | { readonly kind: "barrierTick"; readonly type: string; readonly shard: number; readonly id: number }
  | { readonly kind: "idleSweep"; readonly type: string }
  | { readonly kind: "heldSweep"; readonly type: string; readonly id: number }
  /** A flush marker (or its answer) may have been lost: send it again if flush `token` is still waited for. */
  | { readonly kind: "flushRetry"; readonly type: string; readonly token: number }
  /** A direct-route probe got no answer: the shard's held deliveries go through the coordinator (§8.8). */
  | { readonly kind: "probeExpired"; readonly type: string; readonly shard: number; readonly token: number }
  /** An announced handoff still drains its old owner: announce again, a member's copy or its marker may be lost. */
  | { readonly kind: "announceRetry"; readonly type: string; readonly shard: number; readonly token: number }
  /** The grace of a preparation an aborted handoff left on `node` (UniqueAddress text) ended: cancel it if unused. */
  | { readonly kind: "preparationGrace"; readonly type: string; readonly shard: number; readonly node: string }
  /** A drain still waiting for markers of handoff `token` gives up: its waiters fail, the coordinator tries again. */
  | { readonly kind: "drainGateExpired"; readonly type: string; readonly shard: number; readonly token: number };

/** A control message other nodes send to this node's daemon. */
export type ControlMessage =
  | PlanRequest
  | PlanSnapshotRequest
  | PlanSnapshot
  | PlanUpdate
  | PassivateShard
  | PrepareShard
  | CoordinatorFlush
  | CoordinatorFlushed
  | CancelPreparations
  | DirectProbe
  | DirectGrant
  | DirectRefused
  | HandoffAnnounce
  | DirectMarker;

/** What the core reacts to. */
export type NodeInput =
  /** A new membership view (only the view: the reaction to a change is `membershipChanged`). */
  | { readonly kind: "view"; readonly snapshot: ShardingClusterSnapshot }
  | { readonly kind: "membershipChanged"; readonly snapshot: ShardingClusterSnapshot }
  | { readonly kind: "register"; readonly name: string; readonly settings: ShardingSettings }
  /** Ask for the plan now (non-coordinators) or reconcile (the coordinator). */
  | { readonly kind: "syncPlan"; readonly type: string }
  /** A local caller's envelope (hop 0, built here from this node's settings). */
  | { readonly kind: "route"; readonly delivery: Delivery; readonly countsRemoteRoute: boolean }
  /** An envelope that reached this node's daemon; `origin` is the authenticated sender, null from this node. */
  | { readonly kind: "envelope"; readonly delivery: Delivery; readonly origin: UniqueAddress | null }
  | {
      readonly kind: "control";
      readonly message: ControlMessage;
      readonly replyTo: ActorRef<unknown> | null;
      readonly origin: UniqueAddress | null;
    }
  /** The outcomes of a `deliver` effect, in order (shorter than its deliveries when it stopped at a transient one). */
  | {
      readonly kind: "delivered";
      readonly type: string;
      readonly shard: number;
      readonly retry: boolean;
      readonly deliveries: readonly Delivery[];
      readonly outcomes: readonly AttemptOutcome[];
    }
  | { readonly kind: "sendFailed"; readonly delivery: Delivery; readonly error: Error }
  | {
      readonly kind: "controlSendFailed";
      readonly type: string;
      readonly peer: UniqueAddress;
      readonly error: Error;
    }
  | { readonly kind: "drained"; readonly type: string; readonly shard: number; readonly error: Error | null }
  | {
      readonly kind: "prepared";
      readonly type: string;
      readonly shard: number;
      readonly coordinator: string;
      readonly waiter: ShardWaiter;
      readonly error: Error | null;
    }
  /** A remote owner answered (or failed) a PassivateShard or PrepareShard ask of a handoff this node drives. */
  | {
      readonly kind: "handoffReply";
      readonly type: string;
      readonly shard: number;
      readonly token: number;
      readonly step: "passivated" | "prepared";
      readonly error: Error | null;
    }
  | { readonly kind: "idleSwept"; readonly type: string; readonly passivated: number; readonly error: Error | null }
  | { readonly kind: "timer"; readonly timer: NodeTimer }
  /**
   * An operator asks to move one shard (to `to`, or wherever the decision picks); always answered with one
   * `shardMoveDecided` effect, and on this node's plan only the coordinator starts the handoff.
   */
  | { readonly kind: "moveShard"; readonly type: string; readonly shard: number; readonly to: UniqueAddress | null }
  | { readonly kind: "stop" };

export type LogLevel = "debug" | "info" | "warn" | "error";

/** What the shell performs. */
export type NodeEffect =
  /** Sends an envelope one hop on (to a coordinator or an owner) with the caller's ref as sender. */
  | {
      readonly kind: "forward";
      readonly to: UniqueAddress;
      readonly envelope: ShardingEnvelope;
      readonly delivery: Delivery;
    }
  /** Sends a control message from this node's daemon. */
  | { readonly kind: "send"; readonly to: UniqueAddress; readonly message: ControlMessage; readonly type: string }
  /** Asks a remote owner (PassivateShard / PrepareShard); the answer comes back as `handoffReply`. */
  | {
      readonly kind: "ask";
      readonly to: UniqueAddress;
      readonly message: PassivateShard | PrepareShard;
      readonly type: string;
      readonly shard: number;
      readonly token: number;
      readonly step: "passivated" | "prepared";
    }
  /**
   * Hands deliveries to the local provider in order (authorize the shard, decode the payload once, deliver, activate or
   * passivate), stopping at the first transient failure; the outcomes come back as `delivered`, for a fresh batch
   * (`retry` false) only when one of them was not delivered (the core has nothing to do when all were).
   */
  | {
      readonly kind: "deliver";
      readonly type: string;
      readonly shard: number;
      readonly retry: boolean;
      readonly deliveries: Delivery[];
    }
  /** An accepted delivery failed (already counted): an ask fails with `error`, a tell is dropped. */
  | { readonly kind: "reject"; readonly delivery: Delivery; readonly error: Error }
  /** The local caller's own call fails at once (already counted): `tell` throws, `ask` rejects. */
  | { readonly kind: "refuse"; readonly delivery: Delivery; readonly error: Error }
  /** A control message was refused (already counted): fail its ask, log once per sender and error. */
  | {
      readonly kind: "refused";
      readonly error: Error;
      readonly replyTo: ActorRef<unknown> | null;
      readonly origin: UniqueAddress | null;
    }
  | { readonly kind: "ack"; readonly replyTo: ActorRef<unknown> | null; readonly error: Error | null }
  | { readonly kind: "drainShard"; readonly type: string; readonly shard: number }
  | {
      readonly kind: "prepareShard";
      readonly type: string;
      readonly shard: number;
      readonly coordinator: string;
      readonly waiter: ShardWaiter;
    }
  | { readonly kind: "retainShards"; readonly type: string; readonly shards: ReadonlySet<number> }
  | { readonly kind: "suspendOwnership"; readonly type: string; readonly release: boolean }
  | { readonly kind: "passivateIdle"; readonly type: string; readonly idleTimeoutMs: number }
  | { readonly kind: "schedule"; readonly afterMs: number; readonly timer: NodeTimer }
  | {
      readonly kind: "log";
      readonly level: LogLevel;
      readonly fields: Record<string, unknown>;
      readonly message: string;
    }
  /** This node was downed: the shell stops sharding (every local entity) and serves no more. */
  | { readonly kind: "stopSharding" }
  /** The answer to a `moveShard` input, for the operator who asked. */
  | { readonly kind: "shardMoveDecided"; readonly decision: ShardMoveDecision };

/** A node that has seen no membership yet. */
export function newNodeState(
  self: UniqueAddress,
  counters: MutableShardingStats = zeroStats(),
  bugs: PlantedBugs = {},
): NodeState {
  return {
    self,
    view: emptyView(self),
    lastCoordinator: null,
    lastSelfStatus: undefined,
    types: new Map(),
    stopped: false,
    nextToken: 1,
    version: 0,
    counters,
    bugs,
  };
}

/** Advances the node by one input. */
export function step(state: NodeState, input: NodeInput, nowMs: number): [NodeState, NodeEffect[]] {
  state.version++;
  const core = new Step(state, nowMs);
  core.handle(input);
  return [state, core.effects];
}

/**
 * The type whose local provider a local caller's delivery goes to when routing it now (a `route` step) would hand it
 * to this node's own provider and do nothing else, or null. Pure: it changes nothing. It holds exactly when every
 * branch the step takes is the plain one (docs/protocol.md §8.1): not stopped; nothing held, no flush marker pending
 * and no coordinator change to flush for any type (the step's `flushHeld` before and after the input has nothing to
 * do); the type registered; this node the routing and elected coordinator, author of the plan, its callers not
 * flushing (they last routed through this node, or through none); no retry barrier and no handoff for the shard, nor a
 * drain of it here since the provider was last told what it keeps; and
 * the plan placing the shard on this node, Up. Everything else (a remote owner, a hold, a reconcile) takes the step.
 * The node simulator checks at every caller's route that the step, when this says yes, yields exactly that delivery.
 */
export function localDeliveryType(state: NodeState, d: Delivery): TypeState | null {
  if (state.stopped) return null;
  const view = state.view;
  const routing = view.routing;
  const self = state.self;
  // This node routing first: a member's caller (most callers of a cluster) is answered no at once.
  if (routing === null || !routing.equals(self) || !heldPassIdle(state, routing)) return null;
  const envelope = d.envelope;
  const t = state.types.get(envelope.entityType);
  if (t === undefined || t.flush !== null) return null;
  if (view.elected?.equals(self) !== true || t.plan.author?.equals(self) !== true) return null;
  const shard = envelope.shardId;
  if (t.barrier.has(shard) || t.handoffs.has(shard) || t.drainedHere.has(shard)) return null;
  const owner = t.plan.allocations.get(shard);
  if (owner === undefined || !owner.equals(self) || !view.up.has(self.toString())) return null;
  return t;
}

/**
 * Whether the step's held-delivery pass (`flushHeld`, run before and after every input) has nothing to do: no type
 * holds a delivery or a flush marker, and none has a coordinator change to flush. Every shortcut below requires it.
 */
function heldPassIdle(state: NodeState, routing: UniqueAddress | null): boolean {
  for (const t of state.types.values()) {
    if (t.heldLocal.size > 0 || t.heldForwarded.size > 0 || t.heldDirect.size > 0 || t.pendingMarkers.size > 0) {
      return false;
    }
    if (routing !== null && t.flush === null && t.via !== null && !t.via.equals(routing)) return false;
  }
  return true;
}

/**
 * The type whose provider an envelope from another node goes to when its `envelope` step would hand it to this node's
 * own provider and do nothing else, or null. Pure. It holds exactly when the owner's plain branch is taken
 * (docs/protocol.md §8.2): not stopped; the held-delivery pass idle; a forwarded envelope (hop 1, not a direct one)
 * from the accepting coordinator, naming it; the type registered with the same settings; the shard authorized here
 * by that coordinator (prepared by it, or its plan placing the shard on this node); no retry barrier for the shard, nor
 * a drain of it here since the provider was last told what it keeps.
 * The node shell takes it for the owner's side of a routed message; the node simulator checks every answer against
 * the full step.
 */
export function ownerDeliveryType(state: NodeState, d: Delivery, origin: UniqueAddress | null): TypeState | null {
  if (state.stopped || state.bugs.acceptForwardFromAnyone === true) return null;
  const envelope = d.envelope;
  // A direct envelope has hop count 2 (DirectEnvelope's constructor), so it never passes.
  if (envelope.hopCount !== 1) return null;
  const coordinator = state.view.accepting;
  if (coordinator === null || origin === null || !origin.equals(coordinator)) return null;
  if (envelope.coordinator !== coordinator.toString()) return null;
  const t = state.types.get(envelope.entityType);
  if (t === undefined || envelope.settingsKey !== t.settings.key) return null;
  const shard = envelope.shardId;
  if (t.barrier.has(shard) || t.drainedHere.has(shard)) return null;
  const authorized =
    t.prepared.get(shard) === coordinator.toString() ||
    (t.plan.author?.equals(coordinator) === true && t.plan.allocations.get(shard)?.equals(state.self) === true);
  if (!authorized || !heldPassIdle(state, state.view.routing)) return null;
  return t;
}

/**
 * The type whose provider a direct envelope (docs/protocol.md §8.8) goes to when its `envelope` step would hand it to
 * this node's own provider and do nothing else, or null. Pure. It holds exactly when the owner accepts it at once: not
 * stopped; the held-delivery pass idle (so no direct delivery of the shard is held either); the type registered with
 * the same settings and direct routing; the shard the one its entity id hashes to; an accepting coordinator that
 * the envelope names and that authored this node's plan, which places the shard here; the generation the envelope
 * names within this node's current ownership of the shard; no drain of the shard begun (nor finished since the
 * provider was last told what it keeps); no retry barrier for it. The origin does not matter: whoever sent it, the
 * owner checks the grant, not the sender (§8.8). The node shell takes it for the owner's side of a direct message;
 * the node simulator checks every answer against the full step.
 */
export function directDeliveryType(state: NodeState, d: Delivery): TypeState | null {
  if (state.stopped) return null;
  const envelope = d.envelope;
  if (!(envelope instanceof DirectEnvelope)) return null;
  const t = state.types.get(envelope.entityType);
  if (t === undefined || envelope.settingsKey !== t.settings.key) return null;
  const shard = envelope.shardId;
  if (directRefusal(state, t, envelope) !== null || t.barrier.has(shard) || t.drainedHere.has(shard)) return null;
  if (!heldPassIdle(state, state.view.routing)) return null;
  const settings = t.settings;
  if (settings.partitioner.shardFor(envelope.entityType, envelope.entityId, settings.shardCount) !== shard) return null;
  return t;
}

/**
 * Why an owner refuses a direct envelope (docs/protocol.md §8.8), or null to accept it: its coordinator must be the
 * accepting coordinator and the author of the stored plan, which gives the shard to this node; the generation it names
 * lies between the start of this node's current ownership and the plan's generation; no drain of the shard started
 * since. The step's check, and the shell's shortcut's (directDeliveryType).
 */
function directRefusal(state: NodeState, t: TypeState, envelope: DirectEnvelope): string | null {
  return directRefusalOf(state, t, envelope.shardId, envelope.generation, envelope.coordinatorUid);
}

/** {@link directRefusal} of a direct envelope to `shard` naming `generation` and the coordinator `coordinatorUid`. */
function directRefusalOf(
  state: NodeState,
  t: TypeState,
  shard: number,
  generation: number,
  coordinatorUid: string,
): string | null {
  if (t.settings.routing !== "direct") return "routing";
  const accepting = state.view.accepting;
  if (accepting === null || coordinatorUid !== accepting.uid || !t.plan.author?.equals(accepting)) {
    return "coordinator";
  }
  if (t.plan.allocations.get(shard)?.equals(state.self) !== true) return "owner";
  const since = t.ownedSince.get(shard);
  if (since === undefined || generation < since || generation > t.plan.generation) {
    return "generation";
  }
  if (t.directClosed.has(shard)) return "draining";
  return null;
}

/**
 * Where the coordinator's `envelope` step would send a caller's envelope from another node when it does only that,
 * or null. Pure. It holds exactly when the coordinator's plain branch is taken (docs/protocol.md §8.1): not stopped;
 * the held-delivery pass idle; a caller's envelope (hop 0, relayed by no one, not a direct one) from another node;
 * the type registered with the same settings; the shard the one its entity id hashes to; this node the elected
 * coordinator and author of its plan; no retry barrier and no handoff for the shard; the plan placing the shard on an
 * Up member. That member is this node (the step delivers here) or another (the step forwards one hop:
 * {@link forwardEffect}). The node shell takes it for the coordinator's side of a routed message; the node simulator
 * checks every answer against the full step.
 */
export function coordinatorRouteOwner(
  state: NodeState,
  d: Delivery,
  origin: UniqueAddress | null,
): { readonly t: TypeState; readonly owner: UniqueAddress } | null {
  if (state.stopped || origin === null) return null;
  const envelope = d.envelope;
  // A direct envelope has hop count 2, so it never passes.
  if (envelope.hopCount !== 0 || envelope.coordinator !== null) return null;
  const t = state.types.get(envelope.entityType);
  if (t === undefined || envelope.settingsKey !== t.settings.key) return null;
  const self = state.self;
  const view = state.view;
  if (view.elected?.equals(self) !== true || t.plan.author?.equals(self) !== true) return null;
  const shard = envelope.shardId;
  if (t.barrier.has(shard) || t.handoffs.has(shard)) return null;
  const owner = t.plan.allocations.get(shard);
  if (owner === undefined || !view.up.has(owner.toString()) || !heldPassIdle(state, view.routing)) return null;
  if (t.drainedHere.has(shard) && owner.equals(self)) return null;
  const settings = t.settings;
  if (settings.partitioner.shardFor(envelope.entityType, envelope.entityId, settings.shardCount) !== shard) return null;
  return { t, owner };
}

/** The coordinator's one hop of `d` to `owner` (another node), counted: the `forward` effect its step emits. */
export function forwardEffect(
  state: NodeState,
  d: Delivery,
  owner: UniqueAddress,
): Extract<NodeEffect, { kind: "forward" }> {
  state.counters.forwards++;
  const forwarded = d.envelope.forwarded(state.self, d.sender === null);
  shareTyped(d.envelope, forwarded);
  // The original asker's ref travels as sender, so reply, failure, timeout and cancel all stay between the asker and
  // the owner (two network legs at most), and a three-node hop keeps the caller's actor path.
  return { kind: "forward", to: owner, envelope: forwarded, delivery: d };
}

/**
 * Where a local caller's delivery goes when its `route` step would only send it on, or null. Pure. It holds exactly
 * when the step's plain branch for a member's caller is taken (docs/protocol.md §8.1, §8.8): not stopped; the
 * held-delivery pass idle; the type registered, its callers not flushing; another node the routing coordinator.
 * With coordinator routing the delivery goes to that coordinator as it is. With direct routing only a valid grant
 * answers (given under that coordinator, the author of this node's plan, which still places the shard on the granting
 * owner, another node): the delivery goes straight to the owner; anything else (no grant, a probe out, a grant to
 * drop) takes the step. The node shell applies it with {@link routeToTarget}; the node simulator checks every answer
 * against the full step.
 */
export function callerRouteTarget(state: NodeState, d: Delivery): CallerRouteTarget | null {
  return callerRouteOf(state, d.envelope.entityType, d.envelope.shardId);
}

/** Where {@link callerRouteTarget} sends a member's caller's message: see there. */
export interface CallerRouteTarget {
  readonly t: TypeState;
  readonly coordinator: UniqueAddress;
  readonly direct: Extract<DirectRoute, { readonly phase: "direct" }> | null;
}

/**
 * {@link callerRouteTarget} of a delivery of `entityType` to `shard`: its answer depends on nothing else of the
 * delivery, so a caller may ask before it builds the envelope (and the shell may keep the answer while
 * {@link NodeState.version} stays the same: node/shortcut-memo.ts).
 */
export function callerRouteOf(state: NodeState, entityType: string, shard: number): CallerRouteTarget | null {
  if (state.stopped) return null;
  const coordinator = state.view.routing;
  if (coordinator === null || coordinator.equals(state.self) || !heldPassIdle(state, coordinator)) return null;
  const t = state.types.get(entityType);
  if (t === undefined || t.flush !== null) return null;
  if (t.settings.routing !== "direct") return { t, coordinator, direct: null };
  const route = t.routes.get(shard);
  if (route?.phase !== "direct" || route.owner.equals(state.self)) return null;
  const valid =
    route.coordinator.equals(coordinator) &&
    t.plan.author?.equals(coordinator) === true &&
    t.plan.allocations.get(shard)?.equals(route.owner) === true;
  return valid ? { t, coordinator, direct: route } : null;
}

/**
 * A member's caller whose own node owns the shard under its own grant (direct routing, docs/protocol.md §8.8): the
 * direct delivery its `route` step would hand to this node's provider, when that step would do only that, or null.
 * Pure (it builds the direct envelope, which it returns). It holds exactly when {@link callerRouteTarget}'s conditions
 * hold but for the grant's owner, which is this node, and this node's state would accept the direct envelope at once
 * ({@link callerOwnDirectOf}). The node shell applies it with {@link routedDirect}; the node simulator checks every
 * answer against the full step.
 */
export function callerOwnDirect(
  state: NodeState,
  d: Delivery,
): { readonly t: TypeState; readonly coordinator: UniqueAddress; readonly delivery: Delivery } | null {
  const own = callerOwnDirectOf(state, d.envelope.entityType, d.envelope.shardId);
  if (own === null) return null;
  // The envelope is a local caller's own (CallerRouter takes its shard and settings key from the type), which the
  // route step trusts as it is: the owner's checks that depend on the envelope are not made for it.
  const envelope = DirectEnvelope.of(d.envelope, own.route.coordinator, own.route.generation);
  const delivery: Delivery = { envelope, sender: d.sender };
  shareTyped(d.envelope, envelope);
  return { t: own.t, coordinator: own.coordinator, delivery };
}

/** Where {@link callerOwnDirectOf} answers: this node's own grant for a shard, under the routing coordinator. */
export interface CallerOwnDirect {
  readonly t: TypeState;
  readonly coordinator: UniqueAddress;
  readonly route: Extract<DirectRoute, { readonly phase: "direct" }>;
}

/**
 * Whether a local caller's delivery of `entityType` to `shard` is one {@link callerOwnDirect} answers, asked before the
 * envelope is built: the owner's checks of {@link directDeliveryType} that depend on the state (the grant's
 * coordinator and generation, no drain, no barrier, the held-delivery pass idle). The shell keeps the answer while
 * {@link NodeState.version} stays the same (node/shortcut-memo.ts).
 */
export function callerOwnDirectOf(state: NodeState, entityType: string, shard: number): CallerOwnDirect | null {
  if (state.stopped) return null;
  const coordinator = state.view.routing;
  if (coordinator === null || coordinator.equals(state.self)) return null;
  const t = state.types.get(entityType);
  if (t === undefined || t.flush !== null) return null;
  // A route exists only with direct routing. That it was granted under the routing coordinator, whose plan places the
  // shard here, is the owner's own check (the routing coordinator, when there is one, is the accepting one).
  const route = t.routes.get(shard);
  if (route?.phase !== "direct" || !route.owner.equals(state.self)) return null;
  if (directRefusalOf(state, t, shard, route.generation, route.coordinator.uid) !== null) return null;
  if (t.barrier.has(shard) || t.drainedHere.has(shard) || !heldPassIdle(state, state.view.routing)) return null;
  return { t, coordinator, route };
}

/**
 * The `route` step of a delivery {@link callerRouteTarget} answered, without the step: its state change (this node's
 * callers route through that coordinator), its count and its one `forward` effect, which the caller performs.
 */
export function routeToTarget(
  state: NodeState,
  target: CallerRouteTarget,
  d: Delivery,
  countsRemoteRoute: boolean,
): Extract<NodeEffect, { kind: "forward" }> {
  const { t, coordinator, direct } = target;
  if (direct === null) {
    routeVia(state, t, coordinator);
    if (countsRemoteRoute) state.counters.remoteRoutes++;
    return { kind: "forward", to: coordinator, envelope: d.envelope, delivery: d };
  }
  routedDirect(state, target);
  const envelope = DirectEnvelope.of(d.envelope, direct.coordinator, direct.generation);
  shareTyped(d.envelope, envelope);
  return { kind: "forward", to: direct.owner, envelope, delivery: { envelope, sender: d.sender } };
}

/**
 * The `route` step of a delivery a direct route was answered for, without the step: its state change (this node's
 * callers route through that coordinator) and its count. For {@link callerRouteOf}'s direct route (another node owns
 * the shard), besides the direct envelope the step's one `forward` effect carries ({@link routeToTarget}); for
 * {@link callerOwnDirect} (this node's own grant), besides the delivery to `t`'s provider its `deliver` effect makes.
 */
export function routedDirect(
  state: NodeState,
  target: { readonly t: TypeState; readonly coordinator: UniqueAddress },
): void {
  routeVia(state, target.t, target.coordinator);
  state.counters.directRoutes++;
}

/**
 * The `route` step of a delivery {@link localDeliveryType} found for `t`, without the step: its one state change (the
 * coordinator this node's callers last routed through is this node). The caller then delivers to `t`'s provider as a
 * `deliver` effect of that step would, and reports a delivery that was not delivered as that effect's `delivered`
 * input. The node shell takes it for a local caller's message, where a step's allocations and clock read cost as
 * much as the routing decision itself.
 */
export function routeLocally(state: NodeState, t: TypeState): void {
  routeVia(state, t, state.view.routing);
}

/**
 * Records that `t`'s callers routed through `coordinator`, the shortcuts' one state change. Only a change counts as
 * one ({@link NodeState.version}): a stream of messages through one coordinator sets the same value again and again.
 */
export function routeVia(state: NodeState, t: TypeState, coordinator: UniqueAddress | null): void {
  if (t.via === coordinator) return;
  t.via = coordinator;
  state.version++;
}

/**
 * The departure guard: a member may leave once every type on this node holds a plan and none places a shard on it
 * (this node itself, once no plan it holds does), or once no other member could take its shards (none Joining or Up). Without the second rule the last sharding node of a cluster stayed
 * Leaving forever: its plan keeps every shard on it because allocation has nowhere else to put them, so its
 * departure waited for a handoff that cannot happen. Its entities stop with it (persistent ones release their leases
 * on shutdown) and are activated again on demand once a member hosts the type.
 */
export function departureReady(state: NodeState, member: ShardingMember): boolean {
  const successor = state.view.snapshot.members.some(
    (m) => (m.status === "Up" || m.status === "Joining") && !m.uniqueAddress.equals(member.uniqueAddress),
  );
  if (!successor) return true;
  for (const t of state.types.values()) {
    // No plan yet (a leader that joined moments ago, or a new coordinator still collecting snapshots) says nothing
    // about who owns shards: "no shard on the member" would be read from an empty plan. Such a leader moved a paused
    // Leaving owner on to Exiting and Removed while the cluster's plan still gave it a shard; the next coordinator
    // handed that shard on without a drain, and the owner, resumed, still hosted its entities (node simulator, churn
    // seed 3009: one shard live on two nodes). This node itself may go, unless prepared for a shard: without a plan
    // it hosts no entity of its own.
    if (t.plan.generation === 0 && (!member.uniqueAddress.equals(state.self) || t.prepared.size > 0)) return false;
    for (const owner of t.plan.allocations.values()) if (owner.equals(member.uniqueAddress)) return false;
  }
  return true;
}

/**
 * Refuses a message that another node built from different settings for this type.
 * @throws ClusterShardingConfigurationError
 */
export function requireSameSettings(t: TypeState, settingsKey: string): void {
  if (settingsKey !== t.settings.key) {
    throw new ClusterShardingConfigurationError(
      `Entity type ${t.name} received incompatible sharding settings; init it with identical settings on every node`,
      "settingsKey",
    );
  }
}

/** @throws ClusterShardingConfigurationError when no type `name` is registered on this node */
export function requireType(state: NodeState, name: string): TypeState {
  const t = state.types.get(name);
  if (t === undefined) {
    throw new ClusterShardingConfigurationError(
      `Entity type ${name} is not registered on this node; call sharding.init("${name}", …) first`,
    );
  }
  return t;
}

/** One step: the state, the clock of this input and the effects collected so far. */
class Step {
  readonly effects: NodeEffect[] = [];
  private readonly self: UniqueAddress;
  private readonly counters: MutableShardingStats;

  constructor(
    private readonly s: NodeState,
    private readonly nowMs: number,
  ) {
    this.self = s.self;
    this.counters = s.counters;
  }

  handle(input: NodeInput): void {
    if (input.kind === "view") {
      if (input.snapshot !== this.s.view.snapshot) this.s.view = viewOf(input.snapshot);
      return;
    }
    if (this.s.stopped) {
      // Late replies and timers after stop do nothing; a delivery still gets its answer.
      if (input.kind === "route") this.refuse(input.delivery, NoShardOwnerError.noCoordinator());
      if (input.kind === "moveShard") {
        this.effects.push({
          kind: "shardMoveDecided",
          decision: {
            kind: "refused",
            shard: input.shard,
            reason: "ShardingStopped",
            message: "sharding stopped on this node",
            coordinator: null,
          },
        });
      }
      return;
    }
    // Held deliveries go before anything newer (the view may have changed since the last step), and again after
    // the input, which may have restored the authority (a membership change, a stored plan, a reconcile).
    this.flushHeld();
    this.handleInput(input);
    if (!this.s.stopped) this.flushHeld();
  }

  private handleInput(input: Exclude<NodeInput, { kind: "view" }>): void {
    switch (input.kind) {
      case "membershipChanged":
        if (input.snapshot !== this.s.view.snapshot) this.s.view = viewOf(input.snapshot);
        this.onMembershipChanged();
        return;
      case "register":
        this.register(input.name, input.settings);
        return;
      case "syncPlan":
        this.syncPlan(requireType(this.s, input.type));
        return;
      case "route":
        this.route(input.delivery, input.countsRemoteRoute);
        return;
      case "envelope":
        this.onEnvelope(input.delivery, input.origin);
        return;
      case "control":
        this.onControl(input.message, input.replyTo, input.origin);
        return;
      case "delivered":
        this.onDelivered(input);
        return;
      case "sendFailed":
        this.reject(input.delivery, input.error);
        return;
      case "controlSendFailed":
        this.counters.rejectedEnvelopes++;
        this.log(
          "error",
          { error: input.error.message, peer: input.peer.toString(), type: input.type },
          "sharding control message could not be sent",
        );
        return;
      case "drained":
        this.onDrained(input.type, input.shard, input.error);
        return;
      case "prepared":
        this.onPrepared(input);
        return;
      case "handoffReply": {
        const t = this.s.types.get(input.type);
        if (t === undefined) return;
        const handoffInput: HandoffInput<Delivery> =
          input.error !== null ? { kind: "failed", error: input.error } : { kind: input.step };
        this.replyToHandoff(t, input.shard, input.token, handoffInput);
        return;
      }
      case "idleSwept":
        this.onIdleSwept(input.type, input.passivated, input.error);
        return;
      case "timer":
        this.onTimer(input.timer);
        return;
      case "moveShard":
        this.moveShard(input.type, input.shard, input.to);
        return;
      case "stop":
        this.stop();
        return;
    }
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Small helpers

  private log(level: LogLevel, fields: Record<string, unknown>, message: string): void {
    this.effects.push({ kind: "log", level, fields, message });
  }

  private schedule(afterMs: number, timer: NodeTimer): void {
    this.effects.push({ kind: "schedule", afterMs, timer });
  }

  private send(t: TypeState, to: UniqueAddress, message: ControlMessage): void {
    this.effects.push({ kind: "send", to, message, type: t.name });
  }

  /** Rejects an accepted delivery: counted, and an ask fails with `error`. */
  private reject(d: Delivery, error: Error): void {
    this.counters.rejectedEnvelopes++;
    this.effects.push({ kind: "reject", delivery: d, error });
  }

  private refuse(d: Delivery, error: Error): void {
    this.counters.rejectedEnvelopes++;
    this.effects.push({ kind: "refuse", delivery: d, error });
  }

  private isUp(node: UniqueAddress): boolean {
    return this.s.view.up.has(node.toString());
  }

  /** Whether `node` is a member in a status a plan and a handoff count (Up, Leaving, Exiting). */
  private isPlanMember(node: UniqueAddress): boolean {
    return this.s.view.snapshot.members.some((m) => m.uniqueAddress.equals(node) && planMemberStatuses.has(m.status));
  }

  private isAuthor(t: TypeState): boolean {
    return t.plan.author?.equals(this.self) === true;
  }

  /** Replaces the plan: the generation never goes down (docs/protocol.md §6.2). */
  private storePlan(t: TypeState, plan: PlanState): void {
    assert.ok(
      plan.generation >= t.plan.generation || this.s.bugs.skipPlanGenerationCheck === true,
      `the plan generation of ${t.name} only grows (${t.plan.generation} -> ${plan.generation})`,
    );
    t.plan = plan;
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Registration, membership, plan sync

  private register(name: string, settings: ShardingSettings): void {
    if (this.s.types.has(name)) return;
    const t: TypeState = {
      name,
      settings,
      planner: new AllocationPlanner(settings.shardCount, settings.allocation, settings.rebalance),
      plan: emptyPlan,
      barrier: new RetryBarrier<Delivery>({
        entityType: name,
        windowMs: settings.leaseDuration + settings.leaseRenewInterval,
      }),
      barrierTicks: new Map(),
      handoffs: new Map(),
      handoffDuration: new Histogram(latencyBucketsSeconds),
      prepared: new Map(),
      staleSince: new Map(),
      preparing: new Map(),
      registrations: new Map(),
      drains: new Map(),
      drainsStarted: new Set(),
      drainedHere: new Set(),
      reconcileArmed: false,
      planSyncArmed: false,
      heldLocal: new HeldDeliveries<Delivery>(settings.heldDeliveriesPerShard),
      heldForwarded: new HeldDeliveries<Delivery>(settings.heldDeliveriesPerShard),
      heldDirect: new HeldDeliveries<Delivery>(settings.heldDeliveriesPerShard),
      heldSweep: null,
      via: null,
      flush: null,
      pendingMarkers: new Map(),
      routes: new Map(),
      ownedSince: new Map(),
      ownedUnder: null,
      directClosed: new Set(),
      drainGates: new Map(),
      markers: new MarkerBook(),
    };
    this.s.types.set(name, t);
    this.syncPlan(t);
    if (settings.idleTimeout !== null) this.scheduleIdleSweep(t, settings.idleTimeout);
  }

  private onMembershipChanged(): void {
    const snap = this.s.view.snapshot;
    const status = snap.members.find((m) => m.uniqueAddress.equals(this.self))?.status;
    const was = this.s.lastSelfStatus;
    if (status !== undefined) this.s.lastSelfStatus = status;
    // Down, or gone (Removed) without having left gracefully: the cluster has put this node out, so nothing here may
    // keep serving. Its entities stop now, whatever the plan still says, and sharding stops with them.
    const graceful = was === "Leaving" || was === "Exiting";
    if (status === "Down" || (status === undefined && was !== undefined && !graceful)) {
      this.log(
        "warn",
        { node: this.self.toString(), status: status ?? "Removed" },
        "this node was downed: sharding stops every local entity and no longer serves",
      );
      this.effects.push({ kind: "stopSharding" });
      return;
    }
    const coordinator = this.s.view.elected;
    const coordinatorText = coordinator?.toString() ?? null;
    const changed = coordinatorText !== this.s.lastCoordinator;
    this.s.lastCoordinator = coordinatorText;
    for (const t of this.s.types.values()) {
      // Forget registrations of members that left for good.
      for (const key of [...t.registrations.keys()]) {
        if (!snap.members.some((m) => m.uniqueAddress.toString() === key)) t.registrations.delete(key);
      }
      // Stale preparations are remembered for members still listed. Not cleared with a change of coordinator: an abort
      // is often that change (the completion found the plan authored elsewhere), and a node elected again has not stood
      // by the preparation since (members forget preparations of any other coordinator).
      for (const key of [...t.staleSince.keys()]) {
        if (!snap.members.some((m) => m.uniqueAddress.toString() === key)) t.staleSince.delete(key);
      }
      if (coordinator === null) {
        // Reachability alone never relocates, but ownership is no longer safe: stop local entities (docs/protocol.md §11.4).
        if (snap.unreachable.length > 0) this.effects.push({ kind: "suspendOwnership", type: t.name, release: false });
        else if (status === "Exiting" || status === "Down" || status === "Removed") {
          this.effects.push({ kind: "suspendOwnership", type: t.name, release: true });
        }
        continue;
      }
      for (const [shard, by] of [...t.prepared]) if (by !== coordinatorText) t.prepared.delete(shard);
      if (!coordinator.equals(this.self)) {
        this.rejectHeldRelays(t);
        this.relayOwnIfDeparting(t);
      }
      this.abortHandoffsToDepartedOwners(t);
      if (changed) this.afterPlanStored(t);
      this.syncPlan(t);
    }
    // A drain waiting for markers needs none from a member that is now Down or gone, nor any for a coordinator that
    // is no longer the accepting one (§8.8).
    for (const t of this.s.types.values()) for (const shard of t.drainGates.keys()) this.startDrainIfWaiting(t, shard);
  }

  /**
   * A handoff whose next owner was downed or removed can never complete: waiting for its outstanding passivate or
   * prepare reply would last until the ask timeout (2 s), and even a failed step waited for one more attempt
   * (100 ms), buffering the shard's traffic all along, to reject it at the abort, probes sent after healing
   * included. It aborts in this step: what it buffered before is rejected, traffic from now on routes by the plan,
   * which still names the previous owner, and the next reconcile places the shard again (the node simulator found
   * it: seeds 689 and 2137 of the default histories, and about 2 % of the histories with operator shard moves).
   */
  private abortHandoffsToDepartedOwners(t: TypeState): void {
    for (const [shard, running] of [...t.handoffs]) {
      const { next, phase } = running.state;
      if (next === null || (phase !== "passivating" && phase !== "preparing" && phase !== "waiting")) continue;
      const member = this.s.view.snapshot.members.find((m) => m.uniqueAddress.equals(next));
      if (member !== undefined && member.status !== "Down" && member.status !== "Removed") continue;
      this.feedHandoff(t, shard, { kind: "abort" });
    }
  }

  /** Non-coordinators ask the coordinator for the plan now and every 250 ms; the coordinator reconciles. */
  private syncPlan(t: TypeState): void {
    const coordinator = this.s.view.elected;
    if (coordinator?.equals(this.self)) {
      this.reconcileUnlessBootstrapping(t);
      this.dropOwnStalePreparations(t);
    } else if (coordinator !== null) this.send(t, coordinator, this.planRequestOf(t));
    if (!t.planSyncArmed) {
      t.planSyncArmed = true;
      this.schedule(planSyncIntervalMs, { kind: "planSync", type: t.name });
    }
  }

  /** Members placement may use: those that registered the type with our settings (and self). */
  private placementMembers(t: TypeState): ShardingMember[] {
    const key = t.settings.key;
    return this.s.view.snapshot.members.filter(
      (m) => m.uniqueAddress.equals(this.self) || t.registrations.get(m.uniqueAddress.toString()) === key,
    );
  }

  /**
   * The members a bootstrapping coordinator asks for plan snapshots. A leaving member is asked too: it may hold the
   * newest plan and still own shards, and a term started without it placed them afresh while it held them, and never
   * took its snapshot (node simulator, seed 6963).
   */
  private snapshotPeers(): UniqueAddress[] {
    return this.s.view.snapshot.members
      .filter((m) => planMemberStatuses.has(m.status) && !m.uniqueAddress.equals(this.self))
      .map((m) => m.uniqueAddress)
      .sort(UniqueAddress.compare);
  }

  private reconcile(t: TypeState): void {
    const coordinator = this.s.view.elected;
    if (coordinator === null || !coordinator.equals(this.self)) return;
    const peers = this.snapshotPeers();
    let result: [PlanState, PlanEffect[]];
    try {
      result = reconcilePlan(t.plan, {
        self: this.self,
        coordinator,
        members: this.placementMembers(t),
        snapshotPeers: peers,
        planner: t.planner,
        handoffs: new Set(t.handoffs.keys()),
        nowMs: this.nowMs,
      });
    } catch (error) {
      // A user strategy that throws (a weight function returning 0 for some member) leaves the plan as it is
      // (routing continues, or fails closed without one); the next reconcile or plan sync tries again.
      this.log(
        "error",
        { error: asError(error).message, type: t.name },
        "sharding allocation failed; the plan is unchanged",
      );
      return;
    }
    const [plan, effects] = result;
    if (plan !== t.plan) {
      const authored = plan.generation !== t.plan.generation;
      this.storePlan(t, plan);
      if (authored) this.afterPlanStored(t);
    }
    for (const effect of effects) {
      switch (effect.kind) {
        case "requestSnapshots": {
          const request = new PlanSnapshotRequest(t.name, t.settings.key, this.self.toString());
          for (const peer of effect.peers) this.send(t, peer, request);
          break;
        }
        case "broadcast":
          this.broadcastPlan(t);
          break;
        case "startHandoff":
          this.startHandoff(t, effect.shardId, effect.previous, effect.next);
          break;
        case "scheduleReconcile":
          this.scheduleReconcile(t, effect.afterMs);
          break;
      }
    }
  }

  /**
   * Reconciles now, unless a bootstrap's next round is already scheduled: that round re-asks the peers itself (every
   * poll or delivery would otherwise send another snapshot request to every peer, ~15,000 messages a second).
   */
  private reconcileUnlessBootstrapping(t: TypeState): void {
    if (t.plan.bootstrap !== null && t.reconcileArmed) return;
    this.reconcile(t);
  }

  private scheduleReconcile(t: TypeState, afterMs = reconcileIntervalMs): void {
    if (t.reconcileArmed) return;
    t.reconcileArmed = true;
    this.schedule(afterMs, { kind: "reconcile", type: t.name });
  }

  private planUpdateOf(t: TypeState): PlanUpdate {
    return new PlanUpdate(
      t.name,
      t.settings.key,
      this.self.toString(),
      t.plan.generation,
      toAssignments(t.plan.allocations),
    );
  }

  private snapshotOf(t: TypeState): PlanSnapshot {
    return new PlanSnapshot(
      t.name,
      t.settings.key,
      t.plan.author?.toString() ?? this.self.toString(),
      t.plan.generation,
      toAssignments(t.plan.allocations),
    );
  }

  /** This node's plan request to the elected coordinator: its plan, and the shards that coordinator prepared here. */
  private planRequestOf(t: TypeState): PlanRequest {
    const coordinator = this.s.view.elected?.toString();
    const prepared: number[] = [];
    for (const [shard, by] of t.prepared) if (by === coordinator) prepared.push(shard);
    return new PlanRequest(
      t.name,
      t.settings.key,
      this.self.toString(),
      t.plan.author?.toString() ?? null,
      t.plan.generation,
      prepared.sort((x, y) => x - y),
    );
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Preparations a coordinator no longer stands by (docs/protocol.md §9.3)

  /**
   * Whether this coordinator still hands `shard` to `node`: a handoff of it to `node` is running, or its plan already
   * places it there (the plan update may not have reached `node` yet; the stored plan clears the preparation there).
   * A handoff aborted after its prepare leaves a preparation it does not stand by: the prepared node would keep the
   * shard's lease renewed while the plan's owner is fenced out of it (node simulator, operator-move seeds 754, 2490).
   */
  private standsBy(t: TypeState, shard: number, node: UniqueAddress): boolean {
    if (t.handoffs.get(shard)?.state.next?.equals(node) === true) return true;
    return t.plan.allocations.get(shard)?.equals(node) === true;
  }

  /**
   * Of the preparations `node` holds (`listed`), those this coordinator has not stood by for half a lease duration,
   * timed from the handoff's abort, or else from the first request that listed it. A
   * grace, not at once: an aborted handoff is usually started again (the next reconcile, 100 ms later) to the same
   * node, whose preparation, and lease, then serve again; cancelling in between released that lease and took it
   * again, one ownership transfer costing two epochs (graceful-shutdown.test.ts, seen once on a loaded host). Half a
   * lease: what a stale preparation costs the plan's owner stays within what a lease expiry would (5 s by default).
   */
  private stalePreparations(t: TypeState, node: UniqueAddress, listed: readonly number[]): number[] {
    const key = node.toString();
    const before = t.staleSince.get(key);
    const since = new Map<number, number>();
    const stale: number[] = [];
    for (const shard of listed) {
      if (this.standsBy(t, shard, node)) continue;
      const first = before?.get(shard) ?? this.nowMs;
      since.set(shard, first);
      if (this.nowMs - first >= t.settings.leaseDuration / 2) stale.push(shard);
    }
    if (since.size === 0) t.staleSince.delete(key);
    else t.staleSince.set(key, since);
    return stale;
  }

  /** Starts the grace of `node`'s preparation of `shard` now (an aborted handoff), unless it already runs. */
  private notStoodBySince(t: TypeState, node: UniqueAddress, shard: number): void {
    const key = node.toString();
    const since = t.staleSince.get(key) ?? new Map<number, number>();
    if (!since.has(shard)) since.set(shard, this.nowMs);
    t.staleSince.set(key, since);
  }

  /** The coordinator's own preparations (a local prepare) of handoffs no longer running: forgotten at plan sync. */
  private dropOwnStalePreparations(t: TypeState): void {
    if (!this.isAuthor(t)) return;
    const self = this.self.toString();
    const mine = [...t.prepared].filter(([, by]) => by === self).map(([shard]) => shard);
    const stale = this.stalePreparations(t, this.self, mine);
    if (stale.length === 0) return;
    for (const shard of stale) t.prepared.delete(shard);
    this.log("info", { type: t.name, shards: stale }, "sharding forgot preparations of handoffs that no longer run");
    this.afterPlanStored(t);
  }

  /**
   * The grace of a preparation an aborted handoff left on `node` ended: unless this coordinator stands by it again,
   * the preparation is cancelled now, not at the node's next plan request. The prepared node keeps the shard's lease
   * renewed until then, and the plan's owner, fenced out meanwhile, has only its retry barrier's window (a lease and
   * a renewal) to take the lease once it is released: waiting for the next request (every 250 ms) overran that window
   * and its deliveries were rejected (node simulator, operator-move seed 2490, coordinator routing).
   */
  private onPreparationGrace(t: TypeState, shard: number, node: string): void {
    if (this.s.view.elected?.equals(this.self) !== true || !this.isAuthor(t)) return;
    const target = UniqueAddress.parse(node);
    if (this.standsBy(t, shard, target)) return;
    if (target.equals(this.self)) {
      this.dropOwnStalePreparations(t);
      return;
    }
    // The clock restarted (stood by again since, then another abort): that abort's own timer decides.
    const stale = t.staleSince.get(node);
    const since = stale?.get(shard);
    if (since !== undefined && this.nowMs - since < t.settings.leaseDuration / 2) return;
    // Harmless when the node holds no such preparation (it never prepared, or forgot it): it ignores the cancel.
    stale?.delete(shard);
    if (stale?.size === 0) t.staleSince.delete(node);
    this.send(t, target, new CancelPreparations(t.name, t.settings.key, this.self.toString(), [shard]));
  }

  private onCancelPreparations(t: TypeState, message: CancelPreparations, origin: UniqueAddress | null): void {
    const coordinator = this.checkControl(t, message.settingsKey, message.coordinator, origin).toString();
    const forgotten: number[] = [];
    for (const shard of message.shardIds) {
      // A shard the plan places here stays retained whatever its preparation: forgetting that is harmless.
      if (t.prepared.get(shard) !== coordinator) continue;
      t.prepared.delete(shard);
      forgotten.push(shard);
    }
    if (forgotten.length === 0) return;
    this.log(
      "info",
      { type: t.name, shards: forgotten },
      "sharding forgot preparations its coordinator no longer stands by",
    );
    this.afterPlanStored(t);
  }

  private broadcastPlan(t: TypeState): void {
    assert.ok(this.isAuthor(t), "only the current coordinator publishes its authoritative plan");
    const update = this.planUpdateOf(t);
    // Leaving and Exiting members get the plan too: the membership leader may be a leaving node, and its departure
    // guard reads its own plan view to learn that no shard is left on it.
    for (const m of this.s.view.snapshot.members) {
      if (m.uniqueAddress.equals(this.self)) continue;
      if (m.status === "Up" || m.status === "Leaving" || m.status === "Exiting") this.send(t, m.uniqueAddress, update);
    }
  }

  /** After any stored plan: keep only locally planned or prepared shards, clear prepared shards now planned here. */
  private afterPlanStored(t: TypeState): void {
    for (const [shard, owner] of t.plan.allocations) if (owner.equals(this.self)) t.prepared.delete(shard);
    this.retain(t);
    if (t.settings.routing === "direct") this.trackOwnership(t);
  }

  /** Tells the provider which shards it keeps: the plan's here, this plan author's preparations, pending prepares. */
  private retain(t: TypeState): void {
    const author = t.plan.author?.toString() ?? null;
    const keep = new Set<number>();
    for (const [shard, owner] of t.plan.allocations) if (owner.equals(this.self)) keep.add(shard);
    for (const [shard, by] of t.prepared) if (by === author) keep.add(shard);
    for (const shard of t.preparing.keys()) keep.add(shard);
    t.drainedHere.clear();
    this.effects.push({ kind: "retainShards", type: t.name, shards: keep });
  }

  /**
   * A delivery for `shard` goes to the provider, authorized (the plan places the shard here, or it is prepared here),
   * after this node drained it and with no drain started since: the handoff that drained it ended without moving it
   * (aborted after the drain), so the provider is told it keeps the shard again, before the delivery. Without it the
   * provider refused the shard until the next plan, which may never come: the retry barrier rejected every delivery
   * (node simulator, operator-move seed 2490, coordinator routing). A drain asked again but not started (it waits for
   * the retry queue or for markers) does not stand in the way: what is delivered before it starts is delivered.
   */
  private reownDrained(t: TypeState, shard: number): void {
    if (!t.drainedHere.has(shard) || t.drainsStarted.has(shard)) return;
    this.retain(t);
  }

  /**
   * The generation in which this node's current ownership of each shard began: a direct delivery naming an older one
   * was granted in an earlier ownership and is refused (§8.8). A shard no longer owned forgets both marks.
   */
  private trackOwnership(t: TypeState): void {
    const author = t.plan.author?.toString() ?? null;
    if (author !== t.ownedUnder) {
      // A new coordinator term: a grant of an earlier term (even of the same coordinator, elected again after another
      // one coordinated) must not count, or a direct delivery still in flight from it would be accepted behind what
      // the other coordinator forwarded meanwhile (a reorder; test/sharding/rules/node-direct-attacks.test.ts).
      t.ownedSince.clear();
      t.ownedUnder = author;
      // The caller side alike: a grant of the earlier term would be refused by its owner now, so it is dropped (the
      // next delivery probes again) rather than spent on a refusal (the node simulator's churn seed 76 in direct mode).
      for (const [shard, route] of [...t.routes]) {
        if (route.phase === "direct") t.routes.delete(shard);
        else if (route.phase === "probing") this.coolRoute(t, shard);
      }
    }
    for (const [shard, owner] of t.plan.allocations) {
      if (owner.equals(this.self) && !t.ownedSince.has(shard)) t.ownedSince.set(shard, t.plan.generation);
    }
    for (const shard of [...t.ownedSince.keys()]) {
      if (t.plan.allocations.get(shard)?.equals(this.self) !== true) {
        t.ownedSince.delete(shard);
        t.directClosed.delete(shard);
      }
    }
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Control messages (docs/protocol.md §6.2, §9)

  private onControl(message: ControlMessage, replyTo: ActorRef<unknown> | null, origin: UniqueAddress | null): void {
    try {
      const t = requireType(this.s, message.entityType);
      if (message instanceof PlanUpdate) this.onPlanUpdate(t, message, origin);
      else if (message instanceof PlanRequest) this.onPlanRequest(t, message, origin);
      else if (message instanceof PlanSnapshotRequest) this.onPlanSnapshotRequest(t, message, origin);
      else if (message instanceof PlanSnapshot) this.onPlanSnapshot(t, message, origin);
      else if (message instanceof CoordinatorFlush) this.onFlushMarker(t, message, origin);
      else if (message instanceof CoordinatorFlushed) this.onFlushed(t, message, origin);
      else if (message instanceof CancelPreparations) this.onCancelPreparations(t, message, origin);
      else if (message instanceof DirectProbe) this.onDirectProbe(t, message, origin);
      else if (message instanceof DirectGrant) this.onDirectGrant(t, message, origin);
      else if (message instanceof DirectRefused) this.onDirectRefused(t, message, origin);
      else if (message instanceof HandoffAnnounce) this.onHandoffAnnounce(t, message, origin);
      else if (message instanceof DirectMarker) this.onDirectMarker(t, message, origin);
      else if (message instanceof PassivateShard) {
        this.checkControl(t, message.settingsKey, message.coordinator, origin);
        const gate: DrainGate | null =
          message.handoffToken === null
            ? null
            : {
                coordinator: message.coordinator,
                token: message.handoffToken,
                waitFor: message.waitFor,
                sinceMs: this.nowMs,
              };
        this.drainLocally(t, message.shardId, { kind: "ask", replyTo }, gate);
      } else {
        const coordinator = this.checkControl(t, message.settingsKey, message.coordinator, origin);
        this.askPrepare(t, message.shardId);
        this.effects.push({
          kind: "prepareShard",
          type: t.name,
          shard: message.shardId,
          coordinator: coordinator.toString(),
          waiter: { kind: "ask", replyTo },
        });
      }
    } catch (error) {
      this.counters.rejectedEnvelopes++;
      const expectsReply = message instanceof PassivateShard || message instanceof PrepareShard;
      this.effects.push({ kind: "refused", error: asError(error), replyTo: expectsReply ? replyTo : null, origin });
    }
  }

  /** @throws ClusterShardingConfigurationError unless the message comes from the coordinator this node follows */
  private checkControl(
    t: TypeState,
    settingsKey: string,
    coordinatorText: string,
    origin: UniqueAddress | null,
  ): UniqueAddress {
    requireSameSettings(t, settingsKey);
    const coordinator = this.s.view.accepting;
    const ok =
      coordinator !== null &&
      coordinatorText === coordinator.toString() &&
      (origin === null ? coordinator.equals(this.self) : origin.equals(coordinator));
    if (!ok)
      throw new ClusterShardingConfigurationError("Sharding control was not authorized by the current coordinator");
    return coordinator;
  }

  private onPlanRequest(t: TypeState, request: PlanRequest, origin: UniqueAddress | null): void {
    if (origin === null || request.requester !== origin.toString()) {
      throw new ClusterShardingConfigurationError("Sharding plan request has mismatched sender identity");
    }
    requireSameSettings(t, request.settingsKey);
    const known = t.registrations.get(request.requester);
    t.registrations.set(request.requester, request.settingsKey);
    const coordinator = this.s.view.elected;
    if (coordinator === null || !coordinator.equals(this.self)) return;
    if (!this.isAuthor(t)) this.reconcileUnlessBootstrapping(t);
    // A newly registered member may change placement.
    else if (known === undefined) this.scheduleReconcile(t, 0);
    if (!this.isAuthor(t)) return;
    // The requester's copy of this very plan (same author, same generation) would be ignored as a duplicate.
    const upToDate = request.knownGeneration === t.plan.generation && request.knownAuthor === this.self.toString();
    if (!upToDate) this.send(t, origin, this.planUpdateOf(t));
    // Behind the plan on the same link: a cancel never overtakes the plan that places a shard on the requester.
    const stale = this.stalePreparations(t, origin, request.prepared);
    if (stale.length > 0)
      this.send(t, origin, new CancelPreparations(t.name, t.settings.key, this.self.toString(), stale));
  }

  private onPlanSnapshotRequest(t: TypeState, request: PlanSnapshotRequest, origin: UniqueAddress | null): void {
    if (origin === null || request.coordinator !== origin.toString()) {
      throw new ClusterShardingConfigurationError("Sharding plan snapshot request has mismatched sender identity");
    }
    requireSameSettings(t, request.settingsKey);
    if (t.plan.generation > 0) this.send(t, origin, this.snapshotOf(t));
    else this.send(t, origin, this.planRequestOf(t));
  }

  private onPlanSnapshot(t: TypeState, snapshot: PlanSnapshot, origin: UniqueAddress | null): void {
    requireSameSettings(t, snapshot.settingsKey);
    if (snapshot.generation > planSnapshotGenerationMax) {
      throw new ClusterShardingConfigurationError(
        `Plan snapshot generation ${snapshot.generation} of ${snapshot.entityType} exceeds ${planSnapshotGenerationMax}; a genuine plan never gets there, so the snapshot is refused`,
        "generation",
      );
    }
    if (origin !== null) t.registrations.set(origin.toString(), snapshot.settingsKey);
    const originIsPlanMember = origin !== null && this.isPlanMember(origin);
    if (t.plan.bootstrap !== null) {
      const [next, accepted] = acceptSnapshot(
        t.plan,
        { allocations: snapshot.allocations(), generation: snapshot.generation },
        { origin, originIsPlanMember, nowMs: this.nowMs },
      );
      this.storePlan(t, next);
      if (!accepted) this.counters.rejectedEnvelopes++;
      // The last peer's answer starts the term now: waiting out the deadline would only hold every caller longer.
      else if (next.bootstrap !== null && bootstrapAnswered(next.bootstrap, this.snapshotPeers())) this.reconcile(t);
      return;
    }
    // Outside bootstrap: a member holding a generation at or above ours missed our bootstrap; publish above it so that
    // it (and everyone) accepts the authoritative plan instead of rejecting it as stale forever.
    const ahead =
      snapshot.generation > t.plan.generation ||
      (snapshot.generation === t.plan.generation && !sameAllocations(snapshot.allocations(), t.plan.allocations));
    if (originIsPlanMember && this.isAuthor(t) && ahead) {
      this.storePlan(t, { ...t.plan, generation: snapshot.generation + 1 });
      this.broadcastPlan(t);
    }
  }

  private onPlanUpdate(t: TypeState, update: PlanUpdate, origin: UniqueAddress | null): void {
    requireSameSettings(t, update.settingsKey);
    const coordinator = this.s.view.accepting;
    const message = { coordinator: update.author(), generation: update.generation, allocations: update.allocations() };
    let outcome: string;
    try {
      const context = { coordinator, origin, self: this.self, shardCount: t.settings.shardCount };
      let next: PlanState;
      if (this.s.bugs.skipPlanGenerationCheck === true) {
        // Planted bug: only the sender is checked; any generation replaces the plan.
        acceptPlanUpdate(emptyPlan, message, context);
        next = {
          allocations: new Map(message.allocations),
          author: message.coordinator,
          generation: message.generation,
          bootstrap: null,
        };
        outcome = "stored";
      } else [next, outcome] = acceptPlanUpdate(t.plan, message, context);
      this.storePlan(t, next);
    } catch (error) {
      if (error instanceof ClusterShardingConfigurationError && error.field === "generation" && origin !== null) {
        this.send(t, origin, this.snapshotOf(t));
      }
      throw error;
    }
    if (outcome === "stored") this.afterPlanStored(t);
    else if (outcome === "stale") {
      this.counters.rejectedEnvelopes++;
      if (origin !== null) this.send(t, origin, this.snapshotOf(t));
    }
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Routing (docs/protocol.md §8): caller → coordinator → owner

  private route(d: Delivery, countsRemoteRoute: boolean): void {
    const t = this.s.types.get(d.envelope.entityType);
    if (t === undefined) {
      this.refuse(d, NoShardOwnerError.noCoordinator());
      return;
    }
    this.routeLocal(t, d, countsRemoteRoute, null);
  }

  /**
   * A local caller's delivery: to the coordinator, or (without one to route through) held until there is one.
   * `held` is the entry of a delivery that already waited (its deadline stands); null for a fresh call.
   */
  private routeLocal(t: TypeState, d: Delivery, countsRemoteRoute: boolean, held: HeldDelivery<Delivery> | null): void {
    const coordinator = this.s.view.routing;
    if (coordinator === null && this.departing()) {
      // This node left (or was put out): it routes through no coordinator again, so waiting cannot help.
      if (held !== null) this.reject(d, NoShardOwnerError.noCoordinator());
      else this.refuse(d, NoShardOwnerError.noCoordinator());
      return;
    }
    if (
      coordinator === null ||
      this.flushing(t, coordinator) ||
      (coordinator.equals(this.self) && !this.authorReady(t))
    ) {
      this.hold(t, t.heldLocal, d, null, countsRemoteRoute, held);
      return;
    }
    const shard = d.envelope.shardId;
    let probeAgain = false;
    if (this.awaitingGrant(t, shard, coordinator)) {
      if (held !== null || t.heldLocal.countOf(shard) < t.settings.heldDeliveriesPerShard) {
        this.hold(t, t.heldLocal, d, null, countsRemoteRoute, held);
        return;
      }
      // A burst larger than the held bound while the probe is out: the caller is not refused for want of a grant.
      // The probe is given up and the shard's waiting deliveries go through the coordinator, in order, then this one
      // (the bench found it: a synchronous flood of tells refused with NoShardOwnerError). The route cools while they
      // go, so none of them probes; a new probe then follows this one at once (below), as after a first delivery: a
      // burst that goes on waits behind it again, and the route opens once the burst pauses long enough for the
      // answer. Cooling for `directProbeRetryMs` instead kept a caller whose bursts outgrow the bound (a loop of
      // tells) on the coordinator route for good: the bound was met again before every next probe was answered.
      if (this.s.bugs.probeBeforeBurstFlush === true) t.routes.delete(shard);
      else this.coolRoute(t, shard);
      for (const h of t.heldLocal.take((x) => x.delivery.envelope.shardId === shard)) {
        this.routeLocal(t, h.delivery, h.countsRemoteRoute, h);
      }
      probeAgain = true;
    }
    t.via = coordinator;
    if (!coordinator.equals(this.self)) {
      if (t.settings.routing === "direct" && this.routeDirect(t, d, coordinator)) return;
      if (countsRemoteRoute) this.counters.remoteRoutes++;
      this.effects.push({ kind: "forward", to: coordinator, envelope: d.envelope, delivery: d });
      if (t.settings.routing === "direct") {
        const again = probeAgain && t.routes.get(shard)?.phase === "cooling";
        if (again) t.routes.delete(shard);
        this.probeFor(t, shard, coordinator);
        if (again && t.routes.get(shard)?.phase === "probing") this.counters.directBurstProbes++;
      }
      return;
    }
    try {
      this.routeAsCoordinator(t, d, null);
    } catch (error) {
      this.reject(d, asError(error));
    }
  }

  /**
   * A hop-0 envelope another node's caller sent here as to the coordinator: routed when this node is the plan
   * author of a converged view; held while the authority is being re-established here (not converged, a member
   * unreachable, or this node elected but still collecting snapshots), since the caller's later messages come here
   * too and queue behind it; rejected when this node's converged view elects another coordinator. No owner is
   * guessed: only a converged coordinator's plan routes.
   */
  private routeForwarded(t: TypeState, d: Delivery, origin: UniqueAddress | null, held: HeldDelivery<Delivery> | null) {
    const elected = this.s.view.elected;
    const shard = d.envelope.shardId;
    if (elected !== null && !elected.equals(this.self)) {
      // This node stepped down while the envelope was in flight. Sending it on at once could reorder it: the caller
      // may already be sending its later messages to the new coordinator directly. It waits here instead for the
      // caller's flush marker, which comes behind it on the same connection, and is relayed with it in order
      // (docs/protocol.md §8.7). An envelope another node already relayed is not relayed again: it fails closed.
      if (d.envelope.coordinator !== null || !t.settings.awaitCoordinator) {
        this.reject(d, new NoShardOwnerError(t.name, shard));
        return;
      }
      this.hold(t, t.heldForwarded, d, origin, false, held);
      return;
    }
    if (elected === null || !this.authorReady(t)) {
      this.hold(t, t.heldForwarded, d, origin, false, held);
      return;
    }
    this.routeAsCoordinator(t, d, origin);
  }

  /** Whether this node's own status is past Up (Leaving, Exiting, Down): it never routes again. */
  private departing(): boolean {
    const status =
      this.s.view.snapshot.members.find((m) => m.uniqueAddress.equals(this.self))?.status ?? this.s.lastSelfStatus;
    return status !== undefined && status !== "Joining" && status !== "Up";
  }

  /** Whether this node, as the elected coordinator, has an authoritative plan (reconciling once if it has none). */
  private authorReady(t: TypeState): boolean {
    if (!this.isAuthor(t)) this.reconcileUnlessBootstrapping(t);
    return this.isAuthor(t);
  }

  /** The error a delivery that cannot wait (or waited too long) fails with: an unreachable member is named. */
  private waitError(t: TypeState, shard: number): NoShardOwnerError {
    const unreachable = this.s.view.snapshot.unreachable;
    if (unreachable.length > 0) return NoShardOwnerError.unreachable(unreachable[0]!.toString());
    if (this.s.view.elected === null || this.s.view.routing === null) return NoShardOwnerError.noCoordinator();
    return new NoShardOwnerError(t.name, shard);
  }

  /**
   * Holds `d` behind the shard's earlier held deliveries (docs/protocol.md §8.6), or fails it: at once when this
   * type does not await a coordinator or the shard's held queue is full. A local caller's own call fails (`refuse`);
   * an envelope from another node is rejected (its ask fails).
   */
  private hold(
    t: TypeState,
    queue: HeldDeliveries<Delivery>,
    d: Delivery,
    origin: UniqueAddress | null,
    countsRemoteRoute: boolean,
    held: HeldDelivery<Delivery> | null,
  ): void {
    const shard = d.envelope.shardId;
    const local = queue === t.heldLocal;
    if (held !== null) {
      // Taken out by a flush that could not route it after all: back in its place with its deadline.
      const kept = queue.hold(shard, held);
      assert.ok(kept, "a held delivery put back fits: the flush took it from this very queue");
      return;
    }
    if (!t.settings.awaitCoordinator) {
      const error = this.waitError(t, shard);
      if (local) this.refuse(d, error);
      else this.reject(d, error);
      return;
    }
    const deadlineMs = this.heldDeadline(t, d);
    if (!queue.hold(shard, { delivery: d, deadlineMs, origin, countsRemoteRoute })) {
      this.counters.heldRefused++;
      const error = this.waitError(t, shard);
      if (local) this.refuse(d, error);
      else this.reject(d, error);
      return;
    }
    this.counters.heldDeliveries++;
    this.armHeldSweep(t, deadlineMs);
  }

  /** When a delivery held now must be rejected: after `heldDeliveryTimeout`, sooner for an ask with a shorter timeout. */
  private heldDeadline(t: TypeState, d: Delivery): number {
    const askTimeoutMs = d.envelope.askTimeoutMs;
    const waitMs =
      askTimeoutMs === null ? t.settings.heldDeliveryTimeout : Math.min(askTimeoutMs, t.settings.heldDeliveryTimeout);
    return this.nowMs + waitMs;
  }

  /**
   * The buffer of a handoff that ended because this node lost its term, held in front of the shard's later arrivals
   * instead of rejected: each delivery waits for its caller's flush marker to be relayed to the new coordinator
   * (§8.7), or for this node's own term to come back. What does not fit the shard's bound fails as before.
   */
  private holdHandoffBuffer(t: TypeState, shard: number, buffer: readonly Delivery[]): void {
    const entries = buffer.map((d) => ({
      delivery: d,
      deadlineMs: this.heldDeadline(t, d),
      origin: d.origin ?? null,
      countsRemoteRoute: false,
    }));
    const refused = t.heldForwarded.holdFront(shard, entries);
    for (const h of refused) {
      this.counters.heldRefused++;
      this.reject(h.delivery, new NoShardOwnerError(t.name, shard));
    }
    const kept = entries.length - refused.length;
    this.counters.heldDeliveries += kept;
    if (kept > 0) this.armHeldSweep(t, Math.min(...entries.map((e) => e.deadlineMs)));
    this.relayOwnIfDeparting(t);
  }

  /** Arms the type's one sweep timer for `deadlineMs` unless one fires earlier (one timer per type, not per message). */
  private armHeldSweep(t: TypeState, deadlineMs: number): void {
    if (t.heldSweep !== null && t.heldSweep.atMs <= deadlineMs) return;
    const id = this.s.nextToken++;
    t.heldSweep = { id, atMs: deadlineMs };
    this.schedule(Math.max(0, deadlineMs - this.nowMs), { kind: "heldSweep", type: t.name, id });
  }

  /** Rejects the held deliveries past their deadline and arms the sweep for the next one. */
  private onHeldSweep(t: TypeState, id: number): void {
    if (t.heldSweep?.id !== id) return;
    t.heldSweep = null;
    const expiredDirect = t.heldDirect.expire(this.nowMs);
    const expired = [...t.heldLocal.expire(this.nowMs), ...t.heldForwarded.expire(this.nowMs), ...expiredDirect];
    let error: NoShardOwnerError | null = null;
    for (const h of expired) {
      this.counters.heldExpired++;
      error = this.waitError(t, h.delivery.envelope.shardId);
      this.reject(h.delivery, error);
    }
    if (error !== null) {
      this.log(
        "warn",
        {
          type: t.name,
          expired: expired.length,
          error: error.message,
        },
        "sharding deliveries waited for a coordinator past their deadline and were rejected",
      );
    }
    const next = [t.heldLocal.nextDeadlineMs(), t.heldForwarded.nextDeadlineMs(), t.heldDirect.nextDeadlineMs()].filter(
      (x) => x !== null,
    );
    if (next.length > 0) this.armHeldSweep(t, Math.min(...next));
    // A drain that waited for them (they came before their senders' markers) may start now.
    for (const shard of new Set(expiredDirect.map((h) => h.delivery.envelope.shardId))) {
      this.startDrainIfWaiting(t, shard);
    }
  }

  /** Routes every held delivery, in order, as soon as there is an authority to route it (docs/protocol.md §8.6). */
  private flushHeld(): void {
    const routing = this.s.view.routing;
    for (const t of this.s.types.values()) {
      // Nothing held, no marker pending and no coordinator change to flush (every routed message while the cluster is
      // stable; this runs twice per step): each guard below is false, and the pass makes no call.
      if (t.pendingMarkers.size > 0 && this.handoffTerm(t) === "lost") {
        const markers = [...t.pendingMarkers.values()];
        t.pendingMarkers.clear();
        for (const marker of markers) {
          this.relayFlush(t, marker, UniqueAddress.parse(marker.caller), UniqueAddress.parse(marker.target));
        }
      }
      if (t.heldDirect.size > 0 && this.s.view.accepting !== null) this.releaseHeldDirect(t);
      // A coordinator change starts the flush at once, not at this node's next call: its callers may all be waiting
      // for replies to asks that the old coordinator holds for this very flush (seen in zero-downtime.test.ts on a
      // loaded host: twelve asks held there until their deadline, no new call to start the flush). This includes the
      // flush through itself that this node's own callers' deliveries held in the forwarded queue (a lost term's
      // handoff buffer, origin null) wait for.
      if (routing !== null && t.flush === null && t.via !== null && !t.via.equals(routing)) this.flushing(t, routing);
      // Other nodes' envelopes first: among them are this node's own callers' earlier envelopes, relayed back here
      // by the coordinator they went to (§8.7), which must go before the same callers' later held ones.
      if (t.heldForwarded.size > 0) {
        // Held while this node's view elects another coordinator, they wait for their callers' flush markers (§8.7).
        const elected = this.s.view.elected;
        if (elected?.equals(this.self) === true && this.authorReady(t)) {
          for (const h of t.heldForwarded.takeAll()) {
            try {
              this.routeForwarded(t, h.delivery, h.origin, h);
            } catch (error) {
              this.reject(h.delivery, asError(error));
            }
          }
        }
      }
      if (t.heldLocal.size > 0) {
        const coordinator = this.s.view.routing;
        if (coordinator === null && this.departing()) {
          // This node left (or was put out) while they waited: it never routes again, so they fail now rather than
          // at their deadline, as a new call would (§8.6). Seen over TCP with a leaving node's own callers: their
          // asks timed out instead of failing with NoShardOwnerError.
          for (const h of t.heldLocal.takeAll()) this.routeLocal(t, h.delivery, h.countsRemoteRoute, h);
        } else if (
          coordinator !== null &&
          !this.flushing(t, coordinator) &&
          (!coordinator.equals(this.self) || this.authorReady(t))
        ) {
          // A shard whose probe is still out keeps its deliveries in place (routeLocal would hold each again): taking
          // and holding them on every step cost each step the whole queue, up to the held bound per shard, and a
          // burst of tells became quadratic (seen over TCP: a 20,000-tell burst stalled the caller past the failure
          // detector's pause, so the coordinator marked it unreachable and refused its tells).
          const ready = t.heldLocal.takeShards((shard) => !this.awaitingGrant(t, shard, coordinator));
          for (const h of ready) this.routeLocal(t, h.delivery, h.countsRemoteRoute, h);
        }
      }
    }
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Coordinator changes (docs/protocol.md §8.7): the flush marker

  /**
   * Whether this node's callers must wait before routing through `coordinator`: while the flush of an earlier change
   * is unanswered, and when `coordinator` is not the one they last sent envelopes to (a flush starts: envelopes still
   * in flight to that one must reach the new coordinator first). The wait ends at once when the node they last sent
   * to is gone (Down or removed): what it still held is lost with it, as any message to a crashed node is.
   */
  private flushing(t: TypeState, coordinator: UniqueAddress): boolean {
    const via = t.via;
    if (this.s.bugs.skipCoordinatorFlush === true) {
      // Planted bug: callers go to the new coordinator while their envelopes to the old one are still in flight.
      t.flush = null;
      return false;
    }
    if (t.flush === null && (via === null || via === coordinator || via.equals(coordinator))) return false;
    const status = via === null ? "Down" : this.statusOf(via);
    // Down: what it held is lost. Removed (a graceful leave may skip this node's view of Leaving and Exiting, and the
    // process may still run a moment): its answer is waited for a bounded time, then it counts as gone too.
    const graceOver = t.flush !== null && this.nowMs - t.flush.sinceMs >= coordinatorFlushGraceMs;
    if (via === null || status === "Down" || (status === "Removed" && graceOver)) {
      if (t.flush !== null) {
        this.log(
          "warn",
          { type: t.name, via: via?.toString() ?? null, status, target: coordinator.toString() },
          "sharding flush of a coordinator change ended without an answer: what the old coordinator held is lost",
        );
      }
      t.flush = null;
      t.via = null;
      return false;
    }
    if (t.flush === null || !t.flush.target.equals(coordinator)) this.startFlush(t, via, coordinator, this.nowMs);
    return true;
  }

  /** `node`'s status in this node's view: "Removed" when it is no longer listed. */
  private statusOf(node: UniqueAddress): string {
    if (node.equals(this.self)) return "Up";
    return this.s.view.snapshot.members.find((m) => m.uniqueAddress.equals(node))?.status ?? "Removed";
  }

  /** Sends the marker of a new flush (a new token: answers to an older one are stale) to `via`, and arms its resend. */
  private startFlush(t: TypeState, via: UniqueAddress, target: UniqueAddress, sinceMs: number): void {
    const token = this.s.nextToken++;
    this.log(
      "info",
      { type: t.name, via: via.toString(), target: target.toString() },
      "sharding coordinator changed: callers wait for the flush of what went to the old one",
    );
    const flush = { token, via, target, sinceMs };
    t.flush = flush;
    this.sendMarker(t, flush);
  }

  /** Sends (or sends again) the marker of `flush` to its `via`, and arms the resend. */
  private sendMarker(t: TypeState, flush: CoordinatorFlushState): void {
    this.schedule(coordinatorFlushRetryMs, { kind: "flushRetry", type: t.name, token: flush.token });
    const marker = new CoordinatorFlush(
      t.name,
      t.settings.key,
      this.self.toString(),
      flush.target.toString(),
      flush.token,
    );
    if (flush.via.equals(this.self)) this.onFlushMarker(t, marker, null);
    else this.send(t, flush.via, marker);
  }

  /**
   * The resend of an unanswered marker (lost with a dropped connection, or its answer was), with the same token: an
   * answer to any copy proves the same thing (this node sent nothing to `via` since the first copy, its callers wait),
   * and a new token per copy would make every answer stale whenever the round trip through a loaded old coordinator
   * takes longer than the resend interval (seen in zero-downtime.test.ts on a loaded host: the flush never ended).
   * Not to a node that left the view: a late relay from it could land behind what this node sends once the grace is
   * over, so the wait there ends (flushing) instead; the timer keeps the check running while nothing else arrives.
   */
  private onFlushRetry(t: TypeState, token: number): void {
    const flush = t.flush;
    if (flush?.token !== token) return;
    const status = this.statusOf(flush.via);
    if (status === "Removed" || status === "Down") {
      const coordinator = this.s.view.routing;
      // Still waiting (the grace is not over): check again later; the token stands, so a late answer still counts.
      if (coordinator !== null && this.flushing(t, coordinator) && t.flush === flush) {
        this.schedule(coordinatorFlushRetryMs, { kind: "flushRetry", type: t.name, token });
      }
      return;
    }
    this.sendMarker(t, flush);
  }

  /**
   * A flush marker. From the caller itself (it came behind every envelope the caller sent here): the caller's
   * envelopes still waiting here, in handoff buffers of a term this node lost or held since it stepped down, are
   * relayed in order to the target, then the marker behind them. Relayed (from the node the caller last sent to) to
   * this node as the target: everything relayed before it has arrived and was routed or queued here in order, so
   * the caller may send here now; answered unless this node's view elects another coordinator (the caller's view
   * will follow, and its next marker finds that one).
   */
  private onFlushMarker(t: TypeState, marker: CoordinatorFlush, origin: UniqueAddress | null): void {
    requireSameSettings(t, marker.settingsKey);
    const caller = UniqueAddress.parse(marker.caller);
    const target = UniqueAddress.parse(marker.target);
    const from = origin ?? this.self;
    if (from.equals(caller) && !target.equals(this.self)) {
      if (this.handoffTerm(t) !== "lost") {
        // This node still drives handoffs as coordinator: the caller's view is ahead of its own. Relaying now would
        // release the caller while this node's handoff buffers may still hold its envelopes (they would then be
        // dispatched behind the caller's later messages, or fail at their deadline): the marker waits until this
        // node's term is lost, when those buffers are held and relayed in front of it (flushHeld).
        t.pendingMarkers.set(caller.toString(), marker);
        return;
      }
      t.pendingMarkers.delete(caller.toString());
      this.relayFlush(t, marker, caller, target);
      return;
    }
    if (from.equals(caller)) t.pendingMarkers.delete(caller.toString());
    if (!target.equals(this.self)) {
      throw new ClusterShardingConfigurationError("A relayed flush marker must name the node it was relayed to");
    }
    const elected = this.s.view.elected;
    if (elected !== null && !elected.equals(this.self)) return;
    const answer = new CoordinatorFlushed(t.name, t.settings.key, this.self.toString(), marker.token);
    if (caller.equals(this.self)) this.onFlushed(t, answer, null);
    else this.send(t, caller, answer);
  }

  private relayFlush(t: TypeState, marker: CoordinatorFlush, caller: UniqueAddress, target: UniqueAddress): void {
    // Handoffs of a term this node no longer holds (both callers check that it is lost, in the same step) would
    // reject their buffers at their next attempt: ended now, the buffers join the held queues in front (feedHandoff)
    // and the caller's part is relayed below, in order.
    for (const shard of [...t.handoffs.keys()]) this.feedHandoff(t, shard, { kind: "abort" });
    const own = caller.equals(this.self);
    const mine = t.heldForwarded.take((h) => (own ? h.origin === null : h.origin?.equals(caller) === true));
    this.log(
      "info",
      { type: t.name, caller: caller.toString(), target: target.toString(), relayed: mine.length },
      "sharding flush marker relayed to the new coordinator",
    );
    this.relayHeld(t, mine, target);
    this.send(t, target, marker);
  }

  /** The answer to this node's flush: its callers' deliveries go to the new coordinator from now on (flushHeld). */
  private onFlushed(t: TypeState, answer: CoordinatorFlushed, origin: UniqueAddress | null): void {
    requireSameSettings(t, answer.settingsKey);
    const flush = t.flush;
    if (flush === null || flush.token !== answer.token) return;
    const from = origin ?? this.self;
    if (answer.coordinator !== flush.target.toString() || !from.equals(flush.target)) {
      throw new ClusterShardingConfigurationError("A flush answer must come from the coordinator the marker went to");
    }
    t.flush = null;
    t.via = flush.target;
  }

  /**
   * A departing node (Leaving, Exiting) refuses its callers from now on, so no later delivery of theirs can overtake
   * the earlier ones it still holds (from handoff buffers of its lost term): those go to the new coordinator at once.
   */
  private relayOwnIfDeparting(t: TypeState): void {
    const elected = this.s.view.elected;
    if (elected === null || elected.equals(this.self) || !this.departing()) return;
    this.relayHeld(
      t,
      t.heldForwarded.take((h) => h.origin === null),
      elected,
    );
  }

  /** Relays held deliveries to `target` in order (hop 0, naming this node); one relayed here already fails closed. */
  private relayHeld(t: TypeState, held: readonly HeldDelivery<Delivery>[], target: UniqueAddress): void {
    for (const h of held) {
      if (h.delivery.envelope.coordinator !== null) {
        // Relayed here already: one relay at most, so a chain of coordinator changes cannot keep it alive.
        this.reject(h.delivery, new NoShardOwnerError(t.name, h.delivery.envelope.shardId));
        continue;
      }
      this.counters.forwards++;
      const relayed = h.delivery.envelope.relayedBy(this.self);
      shareTyped(h.delivery.envelope, relayed);
      this.effects.push({ kind: "forward", to: target, envelope: relayed, delivery: h.delivery });
    }
  }

  /**
   * Relayed envelopes held while this node's view was re-converging, once it elects another coordinator: they are
   * not relayed a second time (relayFlush), so they fail now rather than at their deadline.
   */
  private rejectHeldRelays(t: TypeState): void {
    for (const h of t.heldForwarded.take((x) => x.delivery.envelope.coordinator !== null)) {
      this.reject(h.delivery, new NoShardOwnerError(t.name, h.delivery.envelope.shardId));
    }
  }

  /** An envelope at this node's daemon: hop 0 asks it as coordinator, hop 1 as owner. */
  private onEnvelope(d: Delivery, origin: UniqueAddress | null): void {
    const envelope = d.envelope;
    const t = this.s.types.get(envelope.entityType);
    if (t === undefined) {
      this.reject(
        d,
        new ClusterShardingConfigurationError(
          `Entity type ${envelope.entityType} is not registered on this node; init it on every node`,
        ),
      );
      return;
    }
    try {
      requireSameSettings(t, envelope.settingsKey);
      if (envelope instanceof DirectEnvelope) {
        requireOwnShard(t, envelope);
        this.receiveDirect(t, d, envelope, origin);
      } else if (envelope.hopCount === 0) {
        requireOwnShard(t, envelope);
        if (envelope.coordinator !== null && (origin === null || envelope.coordinator !== origin.toString())) {
          throw new ClusterShardingConfigurationError("A relayed sharding envelope must come from the node it names");
        }
        this.routeForwarded(t, d, origin, null);
      } else this.receiveAsOwner(t, d, origin);
    } catch (error) {
      this.reject(d, asError(error));
    }
  }

  /**
   * `origin`: the node a hop-0 envelope came from (null: built here), kept with it in a handoff buffer (§8.7). An
   * envelope from another node had its shard checked against its entity id once, on arrival (onEnvelope): whether
   * routed at once or held and routed later, it is not hashed a second time here. Both callers (`routeLocal` and
   * `routeForwarded`) call it only when this node is the elected coordinator and, by `authorReady`, the author of its
   * plan (`routing` is the elected coordinator whenever it is set), so neither is checked again here.
   */
  private routeAsCoordinator(t: TypeState, d: Delivery, origin: UniqueAddress | null): void {
    const { envelope } = d;
    const shard = envelope.shardId;
    if (this.joinBarrier(t, shard, d)) return;
    if (this.bufferInHandoff(t, shard, d, origin)) return;
    let owner = t.plan.allocations.get(shard);
    if (owner === undefined) throw new NoShardOwnerError(envelope.entityType, shard);
    if (!this.isUp(owner)) {
      this.reconcile(t);
      if (this.bufferInHandoff(t, shard, d, origin)) return;
      owner = t.plan.allocations.get(shard);
      if (owner === undefined || !this.isUp(owner)) throw new NoShardOwnerError(envelope.entityType, shard);
    }
    this.dispatch(t, d, owner);
  }

  /** Sends an accepted delivery to `owner`: locally, or one hop to its daemon. */
  private dispatch(t: TypeState, d: Delivery, owner: UniqueAddress): void {
    if (owner.equals(this.self)) {
      if (!this.joinBarrier(t, d.envelope.shardId, d)) this.deliverLocally(t, d);
      return;
    }
    this.effects.push(forwardEffect(this.s, d, owner));
  }

  /**
   * A forwarded envelope (hop 1) at the owner.
   * @throws ClusterShardingConfigurationError unless it comes from the current coordinator for a shard owned or
   * prepared here
   */
  private receiveAsOwner(t: TypeState, d: Delivery, origin: UniqueAddress | null): void {
    const { envelope } = d;
    if (this.s.bugs.acceptForwardFromAnyone !== true) {
      const coordinator = this.s.view.accepting;
      const fromCoordinator =
        coordinator !== null &&
        envelope.hopCount === 1 &&
        envelope.coordinator === coordinator.toString() &&
        (origin === null ? coordinator.equals(this.self) : origin.equals(coordinator));
      if (!fromCoordinator || !this.authorizedShard(t, envelope.shardId, coordinator)) {
        throw new ClusterShardingConfigurationError("Sharding delivery was not authorized by the current coordinator");
      }
    }
    if (this.joinBarrier(t, envelope.shardId, d)) return;
    this.deliverLocally(t, d);
  }

  private authorizedShard(t: TypeState, shard: number, coordinator: UniqueAddress): boolean {
    if (t.prepared.get(shard) === coordinator.toString()) return true;
    return t.plan.author?.equals(coordinator) === true && t.plan.allocations.get(shard)?.equals(this.self) === true;
  }

  /**
   * Hands `d` to the local provider. Deliveries of one shard decided in one step share one `deliver` effect, so a
   * transient failure of one sends every later one behind it into the retry barrier, in order.
   */
  private deliverLocally(t: TypeState, d: Delivery): void {
    const shard = d.envelope.shardId;
    this.reownDrained(t, shard);
    for (let i = this.effects.length - 1; i >= 0; i--) {
      const e = this.effects[i]!;
      if (e.kind === "deliver" && !e.retry && e.type === t.name && e.shard === shard) {
        e.deliveries.push(d);
        return;
      }
    }
    this.effects.push({ kind: "deliver", type: t.name, shard, retry: false, deliveries: [d] });
  }

  private onDelivered(input: Extract<NodeInput, { kind: "delivered" }>): void {
    const t = this.s.types.get(input.type);
    if (t === undefined) return;
    const { shard, deliveries, outcomes } = input;
    assert.ok(outcomes.length <= deliveries.length, "a delivery outcome per attempted delivery, no more");
    if (input.retry) {
      this.applyBarrier(t, shard, t.barrier.settle(shard, outcomes));
      return;
    }
    for (let i = 0; i < deliveries.length; i++) {
      const d = deliveries[i]!;
      const outcome = outcomes[i];
      if (outcome === undefined || t.barrier.has(shard)) {
        // Behind a transient failure of an earlier delivery of this batch: queue in order behind it.
        if (!this.joinBarrier(t, shard, d)) this.reject(d, new ShardLeaseUnavailableError(t.name, shard));
        continue;
      }
      if (outcome === "delivered") continue;
      if (typeof outcome === "object") {
        this.reject(d, outcome.error);
        continue;
      }
      this.applyBarrier(t, shard, t.barrier.failed(shard, d, d.envelope.deliveryAttempt, outcome, this.nowMs));
    }
  }

  // ---------------------------------------------------------------------------------------------------------------
  // The retry barrier (docs/protocol.md §10): one tick per shard queue, never one per message

  /** Queues `d` behind the shard's open retry barrier, so it stays after earlier deliveries; false when none is open. */
  private joinBarrier(t: TypeState, shard: number, d: Delivery): boolean {
    if (!t.barrier.has(shard)) return false;
    const joined = t.barrier.join(shard, d);
    if (!joined.queued && joined.error !== null) this.reject(d, joined.error);
    return true;
  }

  private applyBarrier(t: TypeState, shard: number, result: BarrierResult<Delivery>): void {
    this.counters.leaseRetries += result.leaseRetries;
    for (const r of result.rejected) this.reject(r.item, r.error);
    if (result.next === "none") {
      t.barrierTicks.delete(shard);
      if (!t.barrier.has(shard)) this.startDrainIfWaiting(t, shard);
      return;
    }
    const id = this.s.nextToken++;
    t.barrierTicks.set(shard, id);
    this.schedule(result.next === "tick" ? leaseRetryIntervalMs : 0, { kind: "barrierTick", type: t.name, shard, id });
  }

  private onBarrierTick(t: TypeState, shard: number, id: number): void {
    if (t.barrierTicks.get(shard) !== id) return;
    t.barrierTicks.delete(shard);
    const coordinator = this.s.view.accepting;
    const authorized = coordinator !== null && this.authorizedShard(t, shard, coordinator);
    const begun = t.barrier.begin(shard, this.nowMs, authorized);
    if ("done" in begun) {
      this.applyBarrier(t, shard, begun.done);
      return;
    }
    this.effects.push({ kind: "deliver", type: t.name, shard, retry: true, deliveries: [...begun.attempt] });
  }

  // ---------------------------------------------------------------------------------------------------------------
  // The direct route (docs/protocol.md §8.8): probe and grant, the owner's check, announcements and markers

  /**
   * Whether the shard's deliveries wait for the grant of a probe this node sent through `coordinator`: a delivery
   * sent through the coordinator after the probe could be overtaken by a direct one, so none is. A probe of an
   * earlier coordinator no longer counts (its grant would be refused anyway).
   */
  private awaitingGrant(t: TypeState, shard: number, coordinator: UniqueAddress): boolean {
    if (t.settings.routing !== "direct") return false;
    const route = t.routes.get(shard);
    if (route?.phase !== "probing") return false;
    if (route.coordinator.equals(coordinator)) return true;
    t.routes.delete(shard);
    return false;
  }

  /**
   * Sends `d` straight to its shard's owner when this node holds a valid grant: given under the routing coordinator,
   * which is the author of this node's plan, and that plan still gives the shard to the granting owner. Returns false
   * (the caller takes the coordinator route) otherwise; a grant that is no longer valid is dropped.
   */
  private routeDirect(t: TypeState, d: Delivery, coordinator: UniqueAddress): boolean {
    const shard = d.envelope.shardId;
    const route = t.routes.get(shard);
    if (route?.phase !== "direct") return false;
    const owner = t.plan.allocations.get(shard);
    const valid =
      route.coordinator.equals(coordinator) &&
      t.plan.author?.equals(coordinator) === true &&
      owner?.equals(route.owner) === true;
    if (!valid) {
      t.routes.delete(shard);
      return false;
    }
    this.counters.directRoutes++;
    const envelope = DirectEnvelope.of(d.envelope, route.coordinator, route.generation);
    shareTyped(d.envelope, envelope);
    const direct: Delivery = { envelope, sender: d.sender };
    if (route.owner.equals(this.self)) this.receiveDirect(t, direct, envelope, null);
    else this.effects.push({ kind: "forward", to: route.owner, envelope, delivery: direct });
    return true;
  }

  /**
   * Asks for the direct route to a shard, behind the delivery just sent through `coordinator`: when this node's plan
   * (authored by it) gives the shard to another node, no grant or probe is under way, and no cooling period runs.
   */
  private probeFor(t: TypeState, shard: number, coordinator: UniqueAddress): void {
    const owner = t.plan.allocations.get(shard);
    if (t.plan.author?.equals(coordinator) !== true || owner === undefined || owner.equals(coordinator)) return;
    const route = t.routes.get(shard);
    if (route !== undefined && (route.phase !== "cooling" || this.nowMs < route.untilMs)) return;
    if (this.s.bugs.directWithoutGrant === true) {
      // Planted bug: the plan alone opens the direct route; nothing orders it after what went through the coordinator.
      t.routes.set(shard, { phase: "direct", owner, coordinator, generation: t.plan.generation });
      return;
    }
    const token = this.s.nextToken++;
    t.routes.set(shard, { phase: "probing", token, coordinator });
    this.send(t, coordinator, new DirectProbe(t.name, t.settings.key, shard, this.self.toString(), token));
    this.schedule(directProbeRetryMs, { kind: "probeExpired", type: t.name, shard, token });
  }

  /** The shard goes back to the coordinator route, with no probe for `directProbeRetryMs`; held deliveries go on. */
  private coolRoute(t: TypeState, shard: number): void {
    t.routes.set(shard, { phase: "cooling", untilMs: this.nowMs + directProbeRetryMs });
  }

  /**
   * A probe: at the coordinator (first leg), forwarded to the owner only when a delivery for the shard would be
   * dispatched there at once, so it follows every delivery of the caller's that went before it; else declined. At the
   * owner (second leg, from the accepting coordinator), granted when the shard is this node's in that coordinator's
   * plan and no drain of it was asked in this ownership; else declined.
   */
  private onDirectProbe(t: TypeState, probe: DirectProbe, origin: UniqueAddress | null): void {
    requireSameSettings(t, probe.settingsKey);
    const shard = probe.shardId;
    requireShardInRange(t, shard);
    const caller = UniqueAddress.parse(probe.caller);
    if (probe.coordinator === null) {
      if (origin === null || !origin.equals(caller)) {
        throw new ClusterShardingConfigurationError("A direct-route probe must come from the caller it names");
      }
      // Only a member a handoff waits for (announceHandoff: Up, Leaving, Exiting) may hold a grant: another sender's
      // direct envelopes would not be flushed by a marker before the old owner drains, and registering it would keep
      // an entry per authenticated non-member until the next view change. Such a caller routes through here.
      if (!this.isPlanMember(caller)) {
        this.declineProbe(t, shard, caller);
        return;
      }
      // A grant can only follow this probe: its caller is registered here before it can hold one, so every handoff
      // from now on announces to it and waits for its marker (a plan broadcast alone registers nobody).
      t.registrations.set(origin.toString(), probe.settingsKey);
      const owner = t.plan.allocations.get(shard);
      const routable =
        this.s.view.elected?.equals(this.self) === true &&
        this.isAuthor(t) &&
        !t.barrier.has(shard) &&
        !t.handoffs.has(shard) &&
        owner !== undefined &&
        !owner.equals(this.self) &&
        this.isUp(owner);
      if (!routable) {
        this.declineProbe(t, shard, caller);
        return;
      }
      this.send(t, owner, probe.forwardedBy(this.self));
      return;
    }
    const coordinator = this.checkControl(t, probe.settingsKey, probe.coordinator, origin);
    const grantable =
      t.plan.author?.equals(coordinator) === true &&
      t.plan.allocations.get(shard)?.equals(this.self) === true &&
      t.ownedSince.has(shard) &&
      !t.drains.has(shard) &&
      !t.directClosed.has(shard);
    if (!grantable) {
      this.declineProbe(t, shard, caller);
      return;
    }
    const grant = new DirectGrant(
      t.name,
      t.settings.key,
      shard,
      this.self.toString(),
      coordinator.toString(),
      t.plan.generation,
      probe.token,
    );
    if (caller.equals(this.self)) this.onDirectGrant(t, grant, null);
    else this.send(t, caller, grant);
  }

  /** A probe that cannot be granted now: counted, and the caller told, so its held deliveries go on at once. */
  private declineProbe(t: TypeState, shard: number, caller: UniqueAddress): void {
    this.counters.directProbesDropped++;
    const declined = new DirectRefused(t.name, t.settings.key, shard, this.self.toString());
    if (caller.equals(this.self)) this.onDirectRefused(t, declined, null);
    else this.send(t, caller, declined);
  }

  /**
   * A grant: taken only from the owner it names, for the outstanding probe, while that probe's coordinator is still
   * the routing coordinator and the author of this node's plan, whose generation is at least the grant's and which
   * gives the shard to that owner. Otherwise the shard cools down and is probed again later.
   */
  private onDirectGrant(t: TypeState, grant: DirectGrant, origin: UniqueAddress | null): void {
    requireSameSettings(t, grant.settingsKey);
    const owner = UniqueAddress.parse(grant.owner);
    if (!(origin ?? this.self).equals(owner)) {
      throw new ClusterShardingConfigurationError("A direct-route grant must come from the owner it names");
    }
    const shard = grant.shardId;
    const route = t.routes.get(shard);
    if (route?.phase !== "probing" || route.token !== grant.token) return;
    const coordinator = UniqueAddress.parse(grant.coordinator);
    const valid =
      route.coordinator.equals(coordinator) &&
      this.s.view.routing?.equals(coordinator) === true &&
      t.plan.author?.equals(coordinator) === true &&
      t.plan.generation >= grant.generation &&
      t.plan.allocations.get(shard)?.equals(owner) === true;
    if (valid) t.routes.set(shard, { phase: "direct", owner, coordinator, generation: grant.generation });
    else this.coolRoute(t, shard);
  }

  /**
   * A refusal or a declined probe from `owner` (the transport identity): a grant of that owner, or the probe under
   * way, ends; the shard takes the coordinator route (its held deliveries go on in order).
   */
  private onDirectRefused(t: TypeState, refused: DirectRefused, origin: UniqueAddress | null): void {
    requireSameSettings(t, refused.settingsKey);
    const from = UniqueAddress.parse(refused.owner);
    if (!(origin ?? this.self).equals(from)) {
      throw new ClusterShardingConfigurationError("A direct-route refusal must come from the node it names");
    }
    const route = t.routes.get(refused.shardId);
    if (route?.phase === "direct" && route.owner.equals(from)) {
      this.counters.directFallbacks++;
      this.coolRoute(t, refused.shardId);
    } else if (route?.phase === "probing") this.coolRoute(t, refused.shardId);
  }

  /**
   * The coordinator announces a handoff: this node's grant for the shard ends, and its marker goes to the previous
   * owner behind every direct delivery it sent there, so the owner drains only after them.
   */
  private onHandoffAnnounce(t: TypeState, announce: HandoffAnnounce, origin: UniqueAddress | null): void {
    this.checkControl(t, announce.settingsKey, announce.coordinator, origin);
    requireShardInRange(t, announce.shardId);
    this.coolRoute(t, announce.shardId);
    const previous = UniqueAddress.parse(announce.previousOwner);
    // The previous owner's own callers delivered locally, in order, before its drain: it waits for no marker of its own.
    if (previous.equals(this.self)) return;
    this.send(
      t,
      previous,
      new DirectMarker(
        t.name,
        t.settings.key,
        announce.shardId,
        this.self.toString(),
        announce.coordinator,
        announce.token,
      ),
    );
  }

  /** A member's marker of an announced handoff: recorded, and the shard's drain starts if it waited for this one. */
  private onDirectMarker(t: TypeState, marker: DirectMarker, origin: UniqueAddress | null): void {
    requireSameSettings(t, marker.settingsKey);
    requireShardInRange(t, marker.shardId);
    if (origin === null || marker.caller !== origin.toString()) {
      throw new ClusterShardingConfigurationError("A direct-route marker must come from the member it names");
    }
    t.markers.add(marker.shardId, marker.coordinator, marker.token, marker.caller);
    this.startDrainIfWaiting(t, marker.shardId);
  }

  /**
   * Whether the shard's asked drain may start: no gate; or its coordinator is no longer the accepting one (a direct
   * delivery naming it is refused from now on); or every member it waits for sent its marker or is Down or gone.
   */
  private drainGateOpen(t: TypeState, shard: number): boolean {
    const gate = t.drainGates.get(shard);
    if (gate === undefined) return true;
    // A shard not owned here takes no direct delivery (§8.8 "owner"): nothing to wait for (a late copy of an old
    // passivate, say; waiting would leave a drain pending that fires once the shard is this node's again, as the
    // node simulator found: seed 4202 in direct mode).
    if (t.plan.allocations.get(shard)?.equals(this.self) !== true) return true;
    // Direct envelopes held for want of an accepting coordinator came before their senders' markers: they go first.
    if (t.heldDirect.countOf(shard) > 0) return false;
    const accepting = this.s.view.accepting;
    if (accepting !== null && accepting.toString() !== gate.coordinator) return true;
    for (const member of gate.waitFor) {
      if (t.markers.has(shard, gate, member)) continue;
      const status = this.s.view.snapshot.members.find((m) => m.uniqueAddress.toString() === member)?.status;
      if (status === undefined || status === "Down" || status === "Removed") continue;
      return false;
    }
    return true;
  }

  /**
   * A drain whose markers did not all arrive within the passivate's own timeout (2 s) is not left pending, where it
   * could fire after its handoff ended: it is abandoned and its waiters fail, so the coordinator's handoff retries its
   * attempt (a new announcement, a new gate) or aborts. Nothing was drained; no direct delivery was refused.
   */
  private onDrainGateExpired(t: TypeState, shard: number, token: number): void {
    const gate = t.drainGates.get(shard);
    // A started drain has no gate (startDrainIfWaiting removes it, and drainLocally sets none while one runs).
    if (gate?.token !== token) return;
    const leftMs = gate.sinceMs + handoffTimeoutMs - this.nowMs;
    if (leftMs > 0) {
      // A newer copy of the gate (a retried attempt of the same handoff) waits its own full time.
      this.schedule(leftMs, { kind: "drainGateExpired", type: t.name, shard, token });
      return;
    }
    t.drainGates.delete(shard);
    const waiters = t.drains.get(shard) ?? [];
    t.drains.delete(shard);
    this.log("warn", { type: t.name, shard }, "sharding drain gave up waiting for the handoff's markers");
    const error = new ClusterShardingConfigurationError(
      `Shard ${t.name}/${shard} did not receive every handoff marker within ${handoffTimeoutMs} ms; the handoff retries`,
    );
    for (const w of waiters) this.answer(t, shard, w, "passivated", error);
  }

  /**
   * Announces the handoff of `shard` from `previous` to every member plans go to, and returns the gate of the
   * previous owner's drain: the markers of every member that registered the type with these settings (but this
   * coordinator, which sends nothing directly while it coordinates, and the previous owner itself).
   */
  private announceHandoff(t: TypeState, shard: number, previous: UniqueAddress, token: number): DrainGate {
    const announce = new HandoffAnnounce(
      t.name,
      t.settings.key,
      shard,
      this.self.toString(),
      previous.toString(),
      token,
    );
    const waitFor: string[] = [];
    for (const m of this.s.view.snapshot.members) {
      if (m.uniqueAddress.equals(this.self) || !planMemberStatuses.has(m.status)) continue;
      // Only members that registered the type here can hold a grant (a probe registers its caller): the others
      // would refuse the announcement as for a type they do not know.
      const registered = t.registrations.get(m.uniqueAddress.toString()) === t.settings.key;
      const isPrevious = m.uniqueAddress.equals(previous);
      if (registered || isPrevious) this.send(t, m.uniqueAddress, announce);
      if (registered && !isPrevious) waitFor.push(m.uniqueAddress.toString());
    }
    // A lost announcement (or marker) would hold the drain: a remote one until the passivate's ask times out, a
    // local one forever (the node simulator found it: a link to a joiner dropped the copy). Sent again while it drains.
    this.schedule(coordinatorFlushRetryMs, { kind: "announceRetry", type: t.name, shard, token });
    return { coordinator: this.self.toString(), token, waitFor, sinceMs: this.nowMs };
  }

  /**
   * A direct envelope at its owner (`origin`: the remoting-authenticated sender, null from this node's own caller):
   * delivered when the owner's check passes, else refused with a typed, counted rejection and the sender told.
   */
  private receiveDirect(t: TypeState, d: Delivery, envelope: DirectEnvelope, origin: UniqueAddress | null): void {
    if (
      t.settings.routing === "direct" &&
      (this.s.view.accepting === null || t.heldDirect.countOf(envelope.shardId) > 0) &&
      this.s.bugs.refuseDirectWithoutCoordinator !== true
    ) {
      // No accepting coordinator to check it against: held in order, not refused (see heldDirect). Behind one held
      // envelope of the shard every later one waits too.
      this.hold(t, t.heldDirect, d, origin, false, null);
      return;
    }
    const reason = directRefusal(this.s, t, envelope);
    if (reason !== null) {
      this.counters.directRefusals++;
      this.reject(d, new DirectDeliveryRefusedError(t.name, envelope.shardId, reason));
      const refused = new DirectRefused(t.name, t.settings.key, envelope.shardId, this.self.toString());
      if (origin === null) this.onDirectRefused(t, refused, null);
      else this.send(t, origin, refused);
      return;
    }
    if (this.joinBarrier(t, envelope.shardId, d)) return;
    this.deliverLocally(t, d);
  }

  /**
   * The direct envelopes held while this node had no accepting coordinator, now that it has one: checked, and
   * delivered or refused, in their order of arrival, before anything newer (this runs before and after every input).
   * A gated drain of their shard (they came before their senders' markers) may start once they are through.
   */
  private releaseHeldDirect(t: TypeState): void {
    const released = t.heldDirect.takeAll();
    for (const h of released) {
      const envelope = h.delivery.envelope;
      if (!(envelope instanceof DirectEnvelope)) continue;
      try {
        this.receiveDirect(t, h.delivery, envelope, h.origin);
      } catch (error) {
        this.reject(h.delivery, asError(error));
      }
    }
    for (const shard of new Set(released.map((h) => h.delivery.envelope.shardId))) this.startDrainIfWaiting(t, shard);
  }

  // ---------------------------------------------------------------------------------------------------------------
  // The owner's part of a handoff (docs/protocol.md §9.4)

  /** Waits for the shard's retry queue to empty, then drains its entities (concurrent drains share one). */
  private drainLocally(t: TypeState, shard: number, waiter: ShardWaiter, gate: DrainGate | null = null): void {
    if (gate !== null && !t.drainsStarted.has(shard)) {
      // The newest announced handoff's markers are the ones waited for; this node's own callers take the
      // coordinator route for the shard from now on (their direct deliveries so far were handed over in order).
      t.drainGates.set(shard, gate);
      t.markers.keepOnly(shard, gate);
      this.schedule(handoffTimeoutMs, { kind: "drainGateExpired", type: t.name, shard, token: gate.token });
    }
    if (gate !== null) this.coolRoute(t, shard);
    const waiting = t.drains.get(shard);
    if (waiting !== undefined) {
      // Concurrent drains of one shard share one (a newer gate may have opened it).
      waiting.push(waiter);
      this.startDrainIfWaiting(t, shard);
      return;
    }
    t.drains.set(shard, [waiter]);
    if (this.s.bugs.flushBeforeDrained === true) {
      // Planted bug: report the drain done at once, while the old owner's entities still run.
      this.onDrained(t.name, shard, null);
      t.directClosed.add(shard);
      this.effects.push({ kind: "drainShard", type: t.name, shard });
      return;
    }
    this.startDrainIfWaiting(t, shard);
  }

  private startDrainIfWaiting(t: TypeState, shard: number): void {
    if (!t.drains.has(shard) || t.drainsStarted.has(shard) || t.barrier.has(shard)) return;
    if (!this.drainGateOpen(t, shard)) return;
    t.drainsStarted.add(shard);
    // From here on a direct delivery for the shard is refused: every member that may still send one was waited for.
    t.directClosed.add(shard);
    t.drainGates.delete(shard);
    this.effects.push({ kind: "drainShard", type: t.name, shard });
  }

  private onDrained(type: string, shard: number, error: Error | null): void {
    const t = this.s.types.get(type);
    if (t === undefined) return;
    const waiters = t.drains.get(shard) ?? [];
    t.drains.delete(shard);
    t.drainsStarted.delete(shard);
    t.markers.forget(shard);
    // A failed drain too: the provider marked the shard draining before it failed.
    t.drainedHere.add(shard);
    for (const w of waiters) this.answer(t, shard, w, "passivated", error);
  }

  /** Counts a prepare about to be asked of the provider (its outcome comes back as a `prepared` input). */
  private askPrepare(t: TypeState, shard: number): void {
    t.preparing.set(shard, (t.preparing.get(shard) ?? 0) + 1);
  }

  private onPrepared(input: Extract<NodeInput, { kind: "prepared" }>): void {
    const t = this.s.types.get(input.type);
    if (t === undefined) return;
    // An outcome the core did not count (a shell replaying one by hand) changes nothing here.
    const outstanding = t.preparing.get(input.shard) ?? 0;
    if (outstanding <= 1) t.preparing.delete(input.shard);
    else t.preparing.set(input.shard, outstanding - 1);
    if (input.error === null) t.prepared.set(input.shard, input.coordinator);
    this.answer(t, input.shard, input.waiter, "prepared", input.error);
  }

  private answer(
    t: TypeState,
    shard: number,
    w: ShardWaiter,
    step: "passivated" | "prepared",
    error: Error | null,
  ): void {
    if (w.kind === "ask") this.effects.push({ kind: "ack", replyTo: w.replyTo, error });
    else this.replyToHandoff(t, shard, w.token, error === null ? { kind: step } : { kind: "failed", error });
  }

  // ---------------------------------------------------------------------------------------------------------------
  // The handoffs this node drives as coordinator (docs/protocol.md §9), around the pure handoff.ts

  /**
   * An operator's move of one shard (coordinator/shard-move.ts decides): an ordinary handoff, started only by the
   * coordinator in its current term ("settling" is not enough: an operator can wait for convergence).
   */
  private moveShard(type: string, shard: number, to: UniqueAddress | null): void {
    const t = requireType(this.s, type);
    const decision = decideShardMove(t.plan, shard, to, {
      coordinator: this.s.view.elected,
      drivesHandoffs: this.handoffTerm(t) === "current",
      members: this.placementMembers(t),
      planner: t.planner,
      handoffs: new Set(t.handoffs.keys()),
    });
    this.effects.push({ kind: "shardMoveDecided", decision });
    if (decision.kind !== "moving") return;
    this.log(
      "info",
      { type: t.name, shard, from: decision.from.toString(), to: decision.to.toString() },
      "sharding: an operator moves a shard",
    );
    this.startHandoff(t, shard, decision.from, decision.to);
  }

  private bufferInHandoff(t: TypeState, shard: number, d: Delivery, origin: UniqueAddress | null): boolean {
    if (!t.handoffs.has(shard)) return false;
    // The buffer may have to be relayed by its callers' flush markers (§8.7): each delivery keeps where it came from.
    const tagged = (d.origin ?? null) === origin ? d : { envelope: d.envelope, sender: d.sender, origin };
    this.feedHandoff(t, shard, { kind: "buffer", delivery: tagged });
    return true;
  }

  private startHandoff(t: TypeState, shard: number, previous: UniqueAddress | null, next: UniqueAddress | null): void {
    if (t.handoffs.has(shard)) return;
    t.handoffs.set(shard, {
      state: newHandoff<Delivery>(t.name, shard, previous, next),
      token: this.s.nextToken++,
      startedAtMs: this.nowMs,
    });
    // One line per start and end: operators (and tests) can follow how many shards move at once.
    this.log(
      "info",
      { type: t.name, shard, previous: previous?.toString() ?? null, next: next?.toString() ?? null },
      "sharding handoff started",
    );
    this.feedHandoff(t, shard, this.attemptInput(previous, next, t));
  }

  private attemptInput(
    previous: UniqueAddress | null,
    next: UniqueAddress | null,
    t: TypeState,
  ): HandoffInput<Delivery> {
    const term = this.handoffTerm(t);
    const prev = this.s.view.snapshot.members.find((m) => m.uniqueAddress.equals(previous)); // equals(null) is false
    return {
      kind: "attempt",
      stillCoordinator: term === "current",
      settling: term === "settling",
      nextOwnerUp: next === null || this.isUp(next),
      previousReachable: prev !== undefined && prev.status !== "Down" && prev.status !== "Removed",
    };
  }

  /**
   * Whether this node may drive handoffs: "current" as the elected coordinator and plan author; "settling" when only
   * convergence is missing (no member unreachable, still the lowest Up member and author), as while a leave spreads
   * by gossip; "lost" otherwise (an unreachable member or another coordinator: fail closed).
   */
  private handoffTerm(t: TypeState): "current" | "settling" | "lost" {
    if (!this.isAuthor(t)) return "lost";
    const elected = this.s.view.elected;
    if (elected !== null) return elected.equals(this.self) ? "current" : "lost";
    return this.s.view.accepting?.equals(this.self) ? "settling" : "lost";
  }

  /** A reply or timer of the handoff with `token`; one of an older handoff of the shard is ignored. */
  private replyToHandoff(t: TypeState, shard: number, token: number, input: HandoffInput<Delivery>): void {
    if (t.handoffs.get(shard)?.token !== token) return;
    try {
      this.feedHandoff(t, shard, input);
    } catch (error) {
      this.log("error", { error: asError(error).message, shard, type: t.name }, "sharding handoff step threw");
    }
  }

  /**
   * Feeds the running handoff of `shard`. Precondition: one runs. Every caller establishes it in the same step: a reply
   * or timer by its token (`replyToHandoff`), a buffered delivery by `has` (`bufferInHandoff`), a start by setting it,
   * an abort by the keys of `t.handoffs`, and a handoff's own effects while it is still in the map (only its `finished`
   * effect, performed after the others, takes it out; `stop` clears the map and feeds nothing after).
   */
  private feedHandoff(t: TypeState, shard: number, input: HandoffInput<Delivery>): void {
    const running = t.handoffs.get(shard)!;
    const wasSettling = running.state.settlingRounds > 0;
    // A finished handoff has flushed its whole buffer in order (`dispatch`) or rejected it (`reject`), never dropped a
    // delivery: handoff.ts's only two ways to `done` and `aborted` map every buffered delivery to one such effect and
    // empty the buffer (pinned by handoff-rules: "flush order", "an abort rejects the buffer in order"). The effects
    // below perform each one.
    const [next, effects] = handoffStep(running.state, input);
    running.state = next;
    if (next.settlingRounds > 0 && !wasSettling) {
      this.log("info", { shard, type: t.name }, "sharding handoff waits for membership to re-converge");
    }
    let performed = effects;
    let held = 0;
    // `aborted` here is this very step's abort: a handoff leaves `t.handoffs` in the step it aborts (its `finished`
    // effect), so no later input finds it aborted.
    if (next.phase === "aborted" && t.settings.awaitCoordinator && this.handoffTerm(t) === "lost") {
      // The term was lost (another coordinator, or an unreachable member): the buffer waits for its callers' flush
      // markers (§8.7). A handoff that gave up waiting for convergence in a term that is merely settling (this node
      // still the lowest Up member) rejects its buffer as before: its bound is the settling bound (§9.3). (An empty
      // buffer holds nothing; `holdHandoffBuffer` then only repeats `relayOwnIfDeparting`, which the last hold and
      // the last membership change ran on the same queue and view.)
      const buffered = effects.flatMap((e) => (e.kind === "reject" ? [e.delivery] : []));
      held = buffered.length;
      this.holdHandoffBuffer(t, shard, buffered);
      performed = effects.filter((e) => e.kind !== "reject");
    }
    if (next.phase === "aborted") {
      // Buffered deliveries were accepted: rejecting them is worth an operator's attention. An abort that rejected
      // nothing is retried by the next reconcile and would only be noise at warn.
      const rejected = performed.filter((e) => e.kind === "reject").length;
      this.log(
        rejected > 0 ? "warn" : "info",
        held > 0 ? { shard, type: t.name, rejected, held } : { shard, type: t.name, rejected },
        "sharding handoff aborted",
      );
    }
    for (const effect of performed) this.performHandoffEffect(t, shard, running, effect);
  }

  private performHandoffEffect(
    t: TypeState,
    shard: number,
    running: RunningHandoff,
    effect: HandoffEffect<Delivery>,
  ): void {
    const token = running.token;
    switch (effect.kind) {
      case "passivate": {
        const gate = t.settings.routing === "direct" ? this.announceHandoff(t, shard, effect.owner, token) : null;
        if (effect.owner.equals(this.self)) {
          // Stryker disable next-line StringLiteral: a drain's waiters are told apart by `kind === "ask"` alone (answer, stop)
          this.drainLocally(t, shard, { kind: "handoff", token }, gate);
          return;
        }
        if (this.s.bugs.flushBeforeDrained === true) {
          // Planted bug: ask the old owner to drain, but go on at once as if it had.
          const message = new PassivateShard(
            t.name,
            t.settings.key,
            shard,
            this.self.toString(),
            effect.next?.toString() ?? null,
          );
          this.effects.push({
            kind: "ask",
            to: effect.owner,
            message,
            type: t.name,
            shard,
            token: -1,
            step: "passivated",
          });
          this.feedHandoff(t, shard, { kind: "passivated" });
          return;
        }
        const message = new PassivateShard(
          t.name,
          t.settings.key,
          shard,
          this.self.toString(),
          effect.next?.toString() ?? null,
          gate?.token ?? null,
          gate?.waitFor ?? [],
        );
        this.effects.push({ kind: "ask", to: effect.owner, message, type: t.name, shard, token, step: "passivated" });
        return;
      }
      case "prepare": {
        if (effect.owner.equals(this.self)) {
          this.askPrepare(t, shard);
          this.effects.push({
            kind: "prepareShard",
            type: t.name,
            shard,
            coordinator: this.self.toString(),
            waiter: { kind: "handoff", token },
          });
          return;
        }
        const message = new PrepareShard(t.name, t.settings.key, shard, this.self.toString());
        this.effects.push({ kind: "ask", to: effect.owner, message, type: t.name, shard, token, step: "prepared" });
        return;
      }
      case "complete": {
        if (this.handoffTerm(t) === "settling") {
          // Buffered deliveries were accepted in this term: wait for gossip instead of rejecting them.
          this.feedHandoff(t, shard, { kind: "settling" });
          return;
        }
        try {
          this.storePlan(t, completeHandoffInPlan(t.plan, shard, effect.next, this.self, this.s.view.elected));
          this.afterPlanStored(t);
        } catch (error) {
          this.feedHandoff(t, shard, { kind: "abort" });
          this.log("warn", { error: asError(error).message, shard, type: t.name }, "handoff could not complete");
          return;
        }
        this.feedHandoff(t, shard, { kind: "completed" });
        return;
      }
      case "dispatch":
        this.dispatch(t, effect.delivery, effect.owner);
        return;
      case "reject":
        this.reject(effect.delivery, effect.error);
        return;
      case "scheduleAttempt":
        this.schedule(effect.afterMs, { kind: "handoffAttempt", type: t.name, shard, token });
        return;
      case "scheduleRetryComplete":
        this.schedule(effect.afterMs, { kind: "handoffRetryComplete", type: t.name, shard, token });
        return;
      case "scheduleReconcile":
        this.scheduleReconcile(t, effect.afterMs);
        return;
      case "failedAttempt":
        if (isLeaseUnavailable(effect.error)) this.counters.leaseRetries++;
        this.log(
          "warn",
          { error: effect.error.message, shard, type: t.name },
          "sharding handoff step failed; retrying",
        );
        return;
      case "finished":
        // No other handoff of the shard starts while this one is in the map (`startHandoff` returns), so it is this one.
        t.handoffs.delete(shard);
        this.log("info", { type: t.name, shard, outcome: effect.outcome }, "sharding handoff finished");
        // The next owner may have prepared: from now on this coordinator no longer stands by that preparation.
        if (effect.outcome !== "done" && running.state.next !== null) {
          this.notStoodBySince(t, running.state.next, shard);
          this.schedule(t.settings.leaseDuration / 2, {
            kind: "preparationGrace",
            type: t.name,
            shard,
            node: running.state.next.toString(),
          });
        }
        if (effect.outcome === "done") {
          this.counters.handoffShards++;
          this.counters.rebalanceMoves++;
          t.handoffDuration.observe((this.nowMs - running.startedAtMs) / 1000);
          // `done` follows the `completed` input, fed only after this node stored the completed plan as its author in
          // the same step (the `complete` effect), so it broadcasts as the author.
          this.broadcastPlan(t);
        }
        return;
    }
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Timers, idle passivation, stop

  private onTimer(timer: NodeTimer): void {
    const t = this.s.types.get(timer.type);
    if (t === undefined) return;
    switch (timer.kind) {
      case "reconcile":
        t.reconcileArmed = false;
        this.reconcile(t);
        return;
      case "planSync":
        t.planSyncArmed = false;
        this.syncPlan(t);
        return;
      case "handoffAttempt": {
        const running = t.handoffs.get(timer.shard);
        if (running?.token !== timer.token) return;
        this.replyToHandoff(
          t,
          timer.shard,
          timer.token,
          this.attemptInput(running.state.previous, running.state.next, t),
        );
        return;
      }
      case "handoffRetryComplete":
        this.replyToHandoff(t, timer.shard, timer.token, { kind: "retryComplete" });
        return;
      case "barrierTick":
        this.onBarrierTick(t, timer.shard, timer.id);
        return;
      case "heldSweep":
        this.onHeldSweep(t, timer.id);
        return;
      case "flushRetry":
        this.onFlushRetry(t, timer.token);
        return;
      case "announceRetry": {
        const running = t.handoffs.get(timer.shard);
        const previous = running?.state.previous ?? null;
        if (running?.token !== timer.token || running.state.phase !== "passivating" || previous === null) return;
        this.announceHandoff(t, timer.shard, previous, timer.token);
        return;
      }
      case "drainGateExpired":
        this.onDrainGateExpired(t, timer.shard, timer.token);
        return;
      case "preparationGrace":
        this.onPreparationGrace(t, timer.shard, timer.node);
        return;
      case "probeExpired": {
        const route = t.routes.get(timer.shard);
        if (route?.phase === "probing" && route.token === timer.token) this.coolRoute(t, timer.shard);
        return;
      }
      case "idleSweep":
        if (t.settings.idleTimeout !== null) {
          this.effects.push({ kind: "passivateIdle", type: t.name, idleTimeoutMs: t.settings.idleTimeout });
        }
        return;
    }
  }

  /** Sweeps every half of the idle timeout (every idle timeout below the halving floor). */
  private scheduleIdleSweep(t: TypeState, idleTimeoutMs: number): void {
    const every = idleTimeoutMs < idleSweepHalvingFloorMs ? idleTimeoutMs : idleTimeoutMs / 2;
    this.schedule(every, { kind: "idleSweep", type: t.name });
  }

  private onIdleSwept(type: string, passivated: number, error: Error | null): void {
    const t = this.s.types.get(type);
    if (t === undefined || t.settings.idleTimeout === null) return;
    if (error !== null) {
      this.log("warn", { error: error.message, type }, "idle sweep failed; stopped");
      return;
    }
    this.counters.idlePassivations += passivated;
    this.scheduleIdleSweep(t, t.settings.idleTimeout);
  }

  private stop(): void {
    this.s.stopped = true;
    for (const t of this.s.types.values()) {
      for (const h of t.heldLocal.takeAll()) this.reject(h.delivery, NoShardOwnerError.noCoordinator());
      for (const h of t.heldForwarded.takeAll()) this.reject(h.delivery, NoShardOwnerError.noCoordinator());
      for (const h of t.heldDirect.takeAll()) this.reject(h.delivery, NoShardOwnerError.noCoordinator());
      t.heldSweep = null;
      t.flush = null;
      t.pendingMarkers.clear();
      for (const d of t.barrier.clear()) this.reject(d, new NoShardOwnerError(t.name, d.envelope.shardId));
      t.barrierTicks.clear();
      for (const running of t.handoffs.values()) {
        for (const d of running.state.buffer) this.reject(d, new NoShardOwnerError(t.name, d.envelope.shardId));
      }
      t.handoffs.clear();
      for (const [shard, waiters] of t.drains) {
        for (const w of waiters)
          if (w.kind === "ask")
            this.effects.push({ kind: "ack", replyTo: w.replyTo, error: new NoShardOwnerError(t.name, shard) });
      }
      t.drains.clear();
      t.drainsStarted.clear();
    }
  }
}

/**
 * Refuses an envelope whose shard is not its entity's (another node built it, or it is hostile).
 * @throws ClusterShardingConfigurationError
 */
function requireOwnShard(t: TypeState, envelope: ShardingEnvelope): void {
  const expected = t.settings.partitioner.shardFor(envelope.entityType, envelope.entityId, t.settings.shardCount);
  if (expected !== envelope.shardId) {
    throw new ClusterShardingConfigurationError(
      `Envelope shard ${envelope.shardId} does not match entity shard ${expected}`,
      "shardId",
    );
  }
}

/**
 * Refuses a shard number outside the type's range (a hostile or confused control message).
 * @throws ClusterShardingConfigurationError
 */
function requireShardInRange(t: TypeState, shard: number): void {
  if (shard >= t.settings.shardCount) {
    throw new ClusterShardingConfigurationError(
      `Shard ${shard} is out of range for ${t.name} (${t.settings.shardCount} shards)`,
      "shardId",
    );
  }
}

function isLeaseUnavailable(error: Error): boolean {
  return (
    error instanceof ShardLeaseUnavailableError ||
    (error as { remoteClass?: string }).remoteClass === "ShardLeaseUnavailableError"
  );
}
