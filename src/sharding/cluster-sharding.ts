import {
  type AbstractBehavior,
  type ActorContext,
  type ActorRef,
  type ActorSystem,
  type Class,
  type Extension,
  type ExtensionId,
  InvalidArgumentError,
  type LocalActorRef,
  STOP,
  SupervisorStrategies,
  type Terminated,
  typeNameOf,
  type UniqueAddress,
} from "../actor/index.ts";
import { Cluster } from "../cluster/index.ts";
import { type InboundRejection, Remoting, remotingId } from "../remote/index.ts";
import type { ShardingMember } from "./allocation/strategy.ts";
import { inProcessCodec, type PayloadCodec, RegistryCodec, registerShardingWireTypes } from "./codec.ts";
import { activateTimeoutDefaultMs } from "./constants.ts";
import {
  PassivateShard,
  PlanRequest,
  PlanSnapshot,
  PlanSnapshotRequest,
  PlanUpdate,
  PrepareShard,
  type ShardingControlAck,
  ShardingEnvelope,
  wireNames,
} from "./coordinator/messages.ts";
import { PlanShell } from "./coordinator/plan-shell.ts";
import { ShardingDaemon } from "./daemon.ts";
import { ShardedEntityRef, ShardedEntityType } from "./entity-ref.ts";
import { newEntityTypeState } from "./entity-type-state.ts";
import { asError, ClusterShardingConfigurationError, NoShardOwnerError } from "./errors.ts";
import { HandoffParticipant } from "./handoff/handoff-participant.ts";
import { HandoffShell } from "./handoff/handoff-shell.ts";
import { scheduleIdleSweep } from "./idle-sweep.ts";
import { type ShardingInternalView, shardingInternalsKey } from "./internal-view.ts";
import type { ShardingMembership } from "./membership.ts";
import { EntityProvider, type ShardingProvider } from "./provider.ts";
import { CallerRouter, requireEntityId } from "./routing/caller-router.ts";
import { EnvelopeRouter } from "./routing/envelope-router.ts";
import { OwnerDelivery } from "./routing/owner-delivery.ts";
import { ShardingSettings, type ShardingSettingsOptions } from "./settings.ts";
import { daemonName, ShardingContext } from "./sharding-context.ts";
import { type MalformedReason, type MutableShardingStats, type ShardingStats, snapshotStats } from "./stats.ts";
import { RoutingWait } from "./wait/routing-wait.ts";

/** How many distinct (sender, error) rejections the daemon logs; later ones are only counted (bounded memory). */
const rejectionLogMax = 1_024;

/** The options that wire sharding to a membership view and a payload codec (remoting and cluster by default). */
export interface ShardingRuntime {
  readonly membership: ShardingMembership;
  readonly codec?: PayloadCodec;
  /**
   * Subscribes to inbound envelopes the transport dropped as undecodable (remoting's `onInboundRejected`), so the
   * sharding ones count here too; returns the unsubscribe function.
   */
  readonly inboundRejections?: (listener: (rejection: InboundRejection) => void) => () => void;
}

const shardingWireNames: ReadonlySet<string> = new Set(Object.values(wireNames));

const departureGuardName = "cluster-sharding";
/** Upper bound of one assignment's bytes in a PlanUpdate (shard id plus an owner address of up to ~200 bytes). */
const planBytesPerShardMax = 256;

/**
 * Cluster sharding for one actor system (the seed's `ClusterSharding.get(system)`): register entity types with
 * {@link ClusterSharding.init}, then talk to entities through {@link ClusterSharding.entityRefFor}. Routing goes
 * through the coordinator (the lowest Up member of a converged cluster), which activates the entity locally or
 * forwards one hop to the shard's owner; ownership moves only through a buffered handoff; without a converged
 * coordinator every route fails closed with NoShardOwnerError.
 */
export class ClusterSharding implements Extension {
  private readonly ctx: ShardingContext;
  private readonly owner: OwnerDelivery;
  private readonly plans: PlanShell;
  private readonly handoffs: HandoffShell;
  private readonly participant: HandoffParticipant;
  private readonly envelopes: EnvelopeRouter;
  private readonly caller: CallerRouter;
  /** Entity type name → the message class `init` registered it with (compared by identity on a repeated init). */
  private readonly messageClasses = new Map<string, Class<unknown>>();
  private readonly membership: ShardingMembership;
  private readonly self: UniqueAddress;
  private daemonContext: ActorContext<unknown> | null = null;
  /** Sender and error of each rejection logged (at most {@link rejectionLogMax}; later ones are only counted). */
  private readonly rejectionsLogged = new Set<string>();
  /** This node's own status in the last membership view that listed it. */
  private lastSelfStatus: string | undefined;
  private readonly daemon: ActorRef<unknown>;
  private readonly unsubscribe: () => void;
  private readonly unsubscribeRejections: () => void;

  /** @internal Use {@link ClusterSharding.get}. */
  constructor(
    private readonly system: ActorSystem,
    runtime: ShardingRuntime,
  ) {
    this.membership = runtime.membership;
    this.self = this.membership.selfAddress;
    this.daemon = system.spawnSystemActor(
      () =>
        new ShardingDaemon({
          daemonStarted: (ctx) => {
            this.daemonContext = ctx;
          },
          daemonReceive: (message, ctx) => this.onDaemonMessage(message, ctx),
          entityTerminated: (signal) => this.onEntityTerminated(signal),
        }),
      daemonName,
      { supervision: SupervisorStrategies.stop() },
    );
    this.ctx = new ShardingContext(system, this.membership, runtime.codec ?? inProcessCodec, this.daemon);
    this.owner = new OwnerDelivery(this.ctx);
    this.plans = new PlanShell(this.ctx, (state, shard, previous, next) =>
      this.handoffs.startHandoff(state, shard, previous, next),
    );
    this.participant = new HandoffParticipant(this.ctx);
    this.handoffs = new HandoffShell(this.ctx, this.plans, this.owner, this.participant);
    this.envelopes = new EnvelopeRouter(this.ctx, this.plans, this.handoffs, this.owner);
    this.caller = new CallerRouter(this.ctx, this.envelopes);
    // Zero-downtime hook 4 (wait/routing-wait.ts): routes held while there is no coordinator re-enter here.
    this.ctx.wait = new RoutingWait(this.ctx, (state, envelope, sender) =>
      this.envelopes.handleEnvelope(state, envelope, sender, null, true),
    );
    this.membership.registerDepartureGuard(departureGuardName, (member) => this.plans.departureReady(member));
    this.unsubscribe = this.membership.subscribe(() => this.onMembershipChange());
    this.unsubscribeRejections = runtime.inboundRejections?.((r) => this.onInboundRejection(r)) ?? (() => {});
  }

  private onMembershipChange(): void {
    if (this.ctx.stopped) return;
    const status = this.membership.snapshot().members.find((m) => m.uniqueAddress.equals(this.self))?.status;
    const was = this.lastSelfStatus;
    if (status !== undefined) this.lastSelfStatus = status;
    // Down, or gone (Removed) without having left gracefully: the cluster has put this node out, so nothing here
    // may keep serving. Its entities stop now, whatever the plan still says, and this extension stops with them.
    const graceful = was === "Leaving" || was === "Exiting";
    if (status === "Down" || (status === undefined && was !== undefined && !graceful)) {
      this.system.log.warn(
        { node: this.self.toString(), status: status ?? "Removed", localEntities: this.localEntityCount },
        "this node was downed: sharding stops every local entity and no longer serves",
      );
      this.stop().catch((error: unknown) => {
        this.system.log.warn({ error }, "sharding failed to stop after this node was downed");
      });
      return;
    }
    this.plans.onMembershipChange();
  }

  private onInboundRejection(rejection: InboundRejection): void {
    if (rejection.typeName === null || !shardingWireNames.has(rejection.typeName)) return;
    if (rejection.reason === "unknownType") return;
    this.countMalformed(rejection.reason);
    this.system.log.warn(
      { peer: rejection.peer.toString(), type: rejection.typeName, reason: rejection.reason },
      "sharding rejected an undecodable message",
    );
  }

  private countMalformed(reason: MalformedReason): void {
    this.ctx.counters.rejectedEnvelopes++;
    this.ctx.counters.malformedEnvelopes[reason]++;
  }

  /**
   * The sharding extension of `system`, created on first use.
   * @throws ClusterShardingConfigurationError "cluster sharding requires remoting" / "... requires cluster
   * membership" when those are not enabled first
   */
  static get(system: ActorSystem): ClusterSharding {
    return system.extension(
      shardingExtensionId(() => {
        let remoting: Remoting;
        try {
          remoting = Remoting.get(system);
        } catch {
          throw new ClusterShardingConfigurationError(
            "cluster sharding requires remoting; await system.enableRemoting({ host, port }) first",
          );
        }
        let cluster: Cluster;
        try {
          cluster = Cluster.get(system);
        } catch {
          throw new ClusterShardingConfigurationError(
            "cluster sharding requires cluster membership; await system.enableCluster({ seedNodes }) first",
          );
        }
        registerShardingWireTypes(remoting.registry);
        return {
          membership: cluster,
          codec: new RegistryCodec(remoting.registry),
          inboundRejections: (listener) => remoting.onInboundRejected(listener),
        };
      }),
    );
  }

  /** @internal Starts sharding on `system` over an explicit membership view and codec (tests, simulations). */
  static start(system: ActorSystem, runtime: ShardingRuntime): ClusterSharding {
    return system.extension(shardingExtensionId(() => runtime));
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Registration

  /**
   * Registers the entity type `name` whose actors accept `messageType`, created by `factory(entityId)` on first
   * message. Idempotent when name, message type and every compatibility setting match (the first factory stays).
   * @throws ClusterShardingConfigurationError for invalid settings, or a mismatch with an earlier init (naming the field)
   * @throws InvalidArgumentError for an empty name
   */
  init<T>(
    name: string,
    messageType: Class<T>,
    settings: ShardingSettingsOptions | ShardingSettings,
    factory: (entityId: string) => AbstractBehavior<T>,
  ): ShardedEntityType<T> {
    if (typeof name !== "string" || name.length === 0) {
      throw new InvalidArgumentError("entity type name", "entity type name must not be empty");
    }
    if (typeof messageType !== "function") {
      throw new ClusterShardingConfigurationError(`init of ${name} needs the entity's message class`, "messageType");
    }
    if (typeof factory !== "function") {
      throw new ClusterShardingConfigurationError(
        `init of ${name} needs an entity factory (entityId) => behavior`,
        "factory",
      );
    }
    const resolved = settings instanceof ShardingSettings ? settings : ShardingSettings.create(settings ?? {});
    const existing = this.ctx.types.get(name);
    if (existing !== undefined) {
      // Compare the class itself: two different classes may share a name. A type registered through
      // registerProvider (persistent entities) has no class here, so only its name can be compared.
      const known = this.messageClasses.get(name);
      const field = (
        known !== undefined
          ? known !== messageType
          : existing.provider.messageTypeName !== messageType.name
      )
        ? "messageType"
        : existing.provider.settings.incompatibleField(resolved);
      if (field !== null) {
        throw new ClusterShardingConfigurationError(
          `Entity type ${name} is already registered with incompatible settings (${field} differs); use the same settings on every init`,
          field,
        );
      }
      return new ShardedEntityType<T>(name);
    }
    const host = this.requireDaemonContext();
    const provider = new EntityProvider<T>(
      name,
      messageType.name,
      resolved,
      (entityId) => () => factory(entityId),
      host,
      this.system.scheduler,
      this.ctx.counters,
    );
    this.register(provider);
    this.messageClasses.set(name, messageType);
    return new ShardedEntityType<T>(name);
  }

  /**
   * Registers a provider under its routing name (`provider.name`): the path `init` takes for ordinary entities and
   * persistent initializers take with a `routingName` facade over a persistence entity type. Idempotent like `init`:
   * an equal message type and compatible settings keep the existing provider and return its type.
   * @throws ClusterShardingConfigurationError naming the mismatching field
   */
  registerProvider<T>(provider: ShardingProvider): ShardedEntityType<T> {
    const existing = this.ctx.types.get(provider.name);
    if (existing !== undefined) {
      const field =
        existing.provider.messageTypeName !== provider.messageTypeName
          ? "messageType"
          : existing.provider.settings.incompatibleField(provider.settings);
      if (field !== null) {
        throw new ClusterShardingConfigurationError(
          `Entity type ${provider.name} is already registered with incompatible settings (${field} differs); use the same settings on every init`,
          field,
        );
      }
      return new ShardedEntityType<T>(provider.name);
    }
    this.register(provider);
    return new ShardedEntityType<T>(provider.name);
  }

  /** @internal The daemon's context, under which providers spawn their entity actors. */
  get entityHost(): ActorContext<unknown> {
    return this.requireDaemonContext();
  }

  /** @internal The counters providers increment (activations, local deliveries, lease counters). */
  get mutableStats(): MutableShardingStats {
    return this.ctx.counters;
  }

  /** @internal Not public API: the private parts sharding's persistent module and the singleton read (internal-view.ts). */
  [shardingInternalsKey](): ShardingInternalView {
    return { system: this.system, membership: this.membership, provider: (name) => this.ctx.types.get(name)?.provider };
  }

  private register(provider: ShardingProvider): void {
    const settings = provider.settings;
    // The whole plan travels in one PlanUpdate frame; a shard count whose plan cannot fit would fail every publish.
    const maxFrameBytes = this.system.hasExtension(remotingId)?.settings.maxFrameBytes;
    if (maxFrameBytes !== undefined && settings.shardCount * planBytesPerShardMax > maxFrameBytes) {
      throw new ClusterShardingConfigurationError(
        `Entity type ${provider.name}: a plan of ${settings.shardCount} shards may not fit in one remoting frame of ${maxFrameBytes} bytes; lower shardCount or raise the remoting maxFrameBytes`,
        "shardCount",
      );
    }
    this.probeAllocation(provider.name, settings);
    const state = newEntityTypeState(provider);
    this.ctx.types.set(provider.name, state);
    this.plans.syncPlan(state);
    if (settings.idleTimeout !== null) scheduleIdleSweep(this.ctx, state, settings.idleTimeout);
  }

  /**
   * Runs the allocation strategy once on this node as an Up member, so a strategy that refuses it (a non-positive
   * weight from WeightedLeastLoadedAllocation's function) fails `init` instead of every later reconcile. Other
   * members are checked when the coordinator places shards on them (see `PlanShell.reconcile`).
   */
  private probeAllocation(name: string, settings: ShardingSettings): void {
    const self = this.membership.snapshot().members.find((m) => m.uniqueAddress.equals(this.self));
    const probe: ShardingMember = { uniqueAddress: this.self, status: "Up", roles: self?.roles ?? [] };
    try {
      settings.allocation.allocate(0, [probe], new Map());
    } catch (error) {
      throw new ClusterShardingConfigurationError(
        `Entity type ${name}: the allocation strategy refused this node: ${asError(error).message}`,
        "allocation",
      );
    }
  }

  /**
   * A logical ref to entity `entityId` of `entityType` (the value `init` returned, or its name).
   * @throws ClusterShardingConfigurationError when the type is not registered on this node
   * @throws InvalidArgumentError for an empty id or one with a lone surrogate (not well-formed Unicode)
   */
  entityRefFor<T>(entityType: ShardedEntityType<T> | string, entityId: string): ShardedEntityRef<T> {
    const name = typeof entityType === "string" ? entityType : entityType.name;
    this.ctx.requireType(name);
    requireEntityId(entityId);
    return new ShardedEntityRef<T>(name, entityId, this.caller);
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Inspection and control

  /** Defensive copy of this node's view of the plan of `entityType` (empty while no plan is known). */
  allocations(entityType: ShardedEntityType<unknown> | string): Map<number, UniqueAddress> {
    const state = this.ctx.requireType(typeof entityType === "string" ? entityType : entityType.name);
    if (state.plan.generation === 0) this.plans.syncPlan(state);
    return new Map(state.plan.allocations);
  }

  /** The generation of this node's plan of `entityType` (0 before any). */
  planGeneration(entityType: ShardedEntityType<unknown> | string): number {
    return this.ctx.requireType(typeof entityType === "string" ? entityType : entityType.name).plan.generation;
  }

  /** Live local entity actors over all types. */
  get localEntityCount(): number {
    let n = 0;
    for (const t of this.ctx.types.values()) n += t.provider.entityCount;
    return n;
  }

  /** Handoffs running on this node (only the coordinator runs any). */
  get handoffsInProgress(): number {
    let n = 0;
    for (const t of this.ctx.types.values()) n += t.handoffs.size;
    return n;
  }

  /** True while a handoff of `shardId` of `entityType` runs here (meaningful on the coordinator). */
  handoffInProgress(entityType: ShardedEntityType<unknown> | string, shardId: number): boolean {
    return this.ctx.requireType(typeof entityType === "string" ? entityType : entityType.name).handoffs.has(shardId);
  }

  /** The shard of `entityId` of `entityType`. */
  shardOf(entityType: ShardedEntityType<unknown> | string, entityId: string): number {
    const s = this.ctx.requireType(typeof entityType === "string" ? entityType : entityType.name);
    const name = s.provider.name;
    return s.provider.settings.partitioner.shardFor(name, entityId, s.provider.settings.shardCount);
  }

  /** A snapshot of the 15 counters (REFERENCE §7), summed over types. */
  get stats(): ShardingStats {
    return snapshotStats(this.ctx.counters);
  }

  /**
   * The owner of the entity's shard in this node's plan, or null when the shard has no owner, there is no
   * coordinator, or the plan is not the current coordinator's.
   */
  ownerFor(entityType: ShardedEntityType<unknown> | string, entityId: string): UniqueAddress | null {
    const state = this.ctx.requireType(typeof entityType === "string" ? entityType : entityType.name);
    const coordinator = this.ctx.routingCoordinator();
    if (coordinator === null || state.plan.author === null || !state.plan.author.equals(coordinator)) return null;
    return state.plan.allocations.get(this.shardOf(entityType, entityId)) ?? null;
  }

  /**
   * Creates the entity on its owner now, through the coordinator like any route. Resolves `accepted: true` only when
   * this call created a new actor.
   */
  activate(
    entityType: ShardedEntityType<unknown> | string,
    entityId: string,
    timeoutMs = activateTimeoutDefaultMs,
  ): Promise<ShardingControlAck> {
    return this.caller.activate(typeof entityType === "string" ? entityType : entityType.name, entityId, timeoutMs);
  }

  // ---------------------------------------------------------------------------------------------------------------
  // The daemon: everything that arrives at /system/sharding

  private onDaemonMessage(message: unknown, ctx: ActorContext<unknown>): void {
    const origin = ctx.origin;
    const sender = ctx.sender;
    try {
      if (message instanceof ShardingEnvelope) {
        const state = this.ctx.types.get(message.entityType);
        if (state === undefined) {
          this.ctx.reject(
            { envelope: message, sender, typed: undefined },
            new ClusterShardingConfigurationError(
              `Entity type ${message.entityType} is not registered on this node; init it on every node`,
            ),
          );
          return;
        }
        this.envelopes.handleEnvelope(state, message, sender, origin);
      } else if (message instanceof PlanRequest) this.plans.onPlanRequest(message, origin);
      else if (message instanceof PlanSnapshotRequest) this.plans.onPlanSnapshotRequest(message, origin);
      else if (message instanceof PlanSnapshot) this.plans.onPlanSnapshot(message, origin);
      else if (message instanceof PlanUpdate) this.plans.onPlanUpdate(message, origin);
      else if (message instanceof PassivateShard) this.participant.onPassivateShard(message, sender, origin);
      else if (message instanceof PrepareShard) this.participant.onPrepareShard(message, sender, origin);
      else {
        this.ctx.counters.rejectedEnvelopes++;
        ctx.log.warn(
          { type: typeNameOf(message), origin: origin?.toString() },
          "sharding daemon ignored an unknown message",
        );
      }
    } catch (error) {
      this.ctx.counters.rejectedEnvelopes++;
      const err = asError(error);
      if (sender !== null && expectsReply(message)) sender.failAsk?.(err);
      // Once per sender and error: a peer repeating a refused message must not write a log line per message.
      const key = `${origin?.toString() ?? "local"} ${err.name}: ${err.message.slice(0, 200)}`;
      if (!this.rejectionsLogged.has(key) && this.rejectionsLogged.size < rejectionLogMax) {
        this.rejectionsLogged.add(key);
        ctx.log.warn(
          { error: err.message, origin: origin?.toString() },
          "sharding daemon rejected a message (logged once per sender and error; stats.rejectedEnvelopes counts every one)",
        );
      }
    }
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Entity lifecycle, stop

  private onEntityTerminated(signal: Terminated): void {
    for (const state of this.ctx.types.values()) state.provider.entityTerminated(signal.ref);
  }

  private requireDaemonContext(): ActorContext<unknown> {
    // The daemon's preStart runs on its first dispatch, possibly after the first route; its cell is its context
    // from the moment it exists, so entities can be spawned under it at once.
    return this.daemonContext ?? (this.daemon as LocalActorRef<unknown>).cell;
  }

  /** Stops every entity, timer and subscription (the actor system calls this when it terminates). */
  async stop(): Promise<void> {
    if (this.ctx.stopped) return;
    this.ctx.stopped = true;
    this.unsubscribe();
    this.unsubscribeRejections();
    this.membership.unregisterDepartureGuard(departureGuardName);
    this.ctx.wait?.stop();
    for (const state of this.ctx.types.values()) {
      state.reconcileTimer?.cancel();
      state.planSyncTimer?.cancel();
      state.idleTimer?.cancel();
      for (const t of state.barrierTimers.values()) t.cancel();
      for (const d of state.barrier.clear())
        this.ctx.reject(d, new NoShardOwnerError(state.provider.name, d.envelope.shardId));
      for (const running of state.handoffs.values()) {
        for (const d of running.state.buffer)
          this.ctx.reject(d, new NoShardOwnerError(state.provider.name, d.envelope.shardId));
      }
      state.handoffs.clear();
    }
    await Promise.all([...this.ctx.types.values()].map((s) => s.provider.stopAll()));
    this.ctx.types.clear();
    this.daemon.sendSystem(STOP);
  }
}

/** The extension id; `create` fails the way REFERENCE §2 says when remoting or cluster is missing. */
function shardingExtensionId(runtime: () => ShardingRuntime): ExtensionId<ClusterSharding> {
  return {
    key: "movie.cluster-sharding",
    create: (system) => new ClusterSharding(system, runtime()),
  };
}

function expectsReply(message: unknown): boolean {
  return (
    message instanceof PassivateShard ||
    message instanceof PrepareShard ||
    (message instanceof ShardingEnvelope && message.askTimeoutMs !== null)
  );
}
