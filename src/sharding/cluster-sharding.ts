import {
  type AbstractBehavior,
  type ActorContext,
  type ActorRef,
  type ActorSystem,
  type Class,
  type Extension,
  type ExtensionId,
  InvalidArgumentError,
  type ReadonlyHistogram,
  STOP,
  SupervisorStrategies,
  type Terminated,
  typeNameOf,
  type UniqueAddress,
} from "../actor/index.ts";
import { Cluster } from "../cluster/index.ts";
import { type InboundRejection, Remoting, remotingId } from "../remote/index.ts";
import type { ShardingMember } from "./allocation/strategy.ts";
import { activateTimeoutDefaultMs } from "./constants.ts";
import type { ShardMoveDecision } from "./coordinator/shard-move.ts";
import { ShardingDaemon } from "./daemon.ts";
import { ShardedEntityRef, ShardedEntityType } from "./entity-ref.ts";
import { asError, ClusterShardingConfigurationError } from "./errors.ts";
import type { ShardingTypeInspection } from "./inspection.ts";
import { inProcessCodec, type PayloadCodec, RegistryCodec, registerShardingWireTypes } from "./internal/codec.ts";
import { attachShardingHost } from "./internal/host.ts";
import {
  CancelPreparations,
  CoordinatorFlush,
  CoordinatorFlushed,
  DirectBatch,
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
  ReceivedDirectBatch,
  type ShardingControlAck,
  ShardingEnvelope,
  wireNames,
} from "./internal/messages.ts";
import { EntityProvider, type ShardingProvider } from "./internal/provider.ts";
import type { ShardLeaseToken } from "./lease/lease-token.ts";
import type { ShardingMembership } from "./membership.ts";
import { CallerRouter, requireEntityId } from "./node/caller-router.ts";
import { departureReady, requireType, type TypeState } from "./node/node-core.ts";
import { daemonName, NodeShell } from "./node/node-shell.ts";
import { ShardingSettings, type ShardingSettingsOptions } from "./settings.ts";
import {
  type MalformedReason,
  type MutableShardingStats,
  type ShardingStats,
  snapshotStats,
  zeroStats,
} from "./stats.ts";
import type { ShardingTracer } from "./tracing/sharding-tracer.ts";

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
  private readonly shell: NodeShell;
  private readonly caller: CallerRouter;
  private readonly counters: MutableShardingStats = zeroStats();
  /** Entity type name → its provider (the core keeps the protocol state, the provider the local entities). */
  private readonly providers = new Map<string, ShardingProvider>();
  private stopping = false;
  /** Entity type name → the message class `init` registered it with (compared by identity on a repeated init). */
  private readonly messageClasses = new Map<string, Class<unknown>>();
  private readonly membership: ShardingMembership;
  private readonly self: UniqueAddress;
  /** The daemon's context: entity actors are its children, spawned from the first route on. */
  private readonly daemonContext: ActorContext<unknown>;
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
    this.daemonContext = system.spawnSystemContext(
      () =>
        new ShardingDaemon({
          daemonReceive: (message, ctx) => this.onDaemonMessage(message, ctx),
          entityTerminated: (signal) => this.onEntityTerminated(signal),
        }),
      daemonName,
      { supervision: SupervisorStrategies.stop() },
    );
    this.daemon = this.daemonContext.self;
    attachShardingHost(this, {
      system,
      membership: this.membership,
      entityParent: this.daemonContext,
      stats: this.counters,
      provider: (name) => this.providers.get(name),
      registerProvider: <T>(provider: ShardingProvider) => this.registerProvider<T>(provider),
    });
    const codec = runtime.codec ?? inProcessCodec;
    this.shell = new NodeShell(system, this.membership, codec, this.daemon, this.counters, this.providers, () => {
      this.stop().catch((error: unknown) => {
        this.system.log.warn({ error }, "sharding failed to stop after this node was downed");
      });
    });
    this.caller = new CallerRouter(this.shell, codec);
    this.membership.registerDepartureGuard(departureGuardName, (member) => departureReady(this.shell.state, member));
    this.unsubscribe = this.membership.subscribe(() =>
      this.shell.run({ kind: "membershipChanged", snapshot: this.membership.snapshot() }),
    );
    this.unsubscribeRejections = runtime.inboundRejections?.((r) => this.onInboundRejection(r)) ?? (() => {});
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
    this.counters.rejectedEnvelopes++;
    this.counters.malformedEnvelopes[reason]++;
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

  /** The sharding extension of `system` when it was started, else undefined (never creates it; for inspection). */
  static find(system: ActorSystem): ClusterSharding | undefined {
    return system.hasExtension(
      shardingExtensionId(() => {
        throw new ClusterShardingConfigurationError("ClusterSharding.find never creates the extension");
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
    const existing = this.providers.get(name);
    if (existing !== undefined) {
      // Compare the class itself: two different classes may share a name. A type registered through
      // registerProvider (persistent entities) has no class here, so only its name can be compared.
      const known = this.messageClasses.get(name);
      const field = (known !== undefined ? known !== messageType : existing.messageTypeName !== messageType.name)
        ? "messageType"
        : existing.settings.incompatibleField(resolved);
      if (field !== null) {
        throw new ClusterShardingConfigurationError(
          `Entity type ${name} is already registered with incompatible settings (${field} differs); use the same settings on every init`,
          field,
        );
      }
      return new ShardedEntityType<T>(name);
    }
    const provider = new EntityProvider<T>(
      name,
      messageType.name,
      resolved,
      (entityId) => () => factory(entityId),
      this.daemonContext,
      this.system.scheduler,
      this.counters,
    );
    this.register(provider);
    this.messageClasses.set(name, messageType);
    return new ShardedEntityType<T>(name);
  }

  /** See {@link ShardingHost.registerProvider}. */
  private registerProvider<T>(provider: ShardingProvider): ShardedEntityType<T> {
    const existing = this.providers.get(provider.name);
    if (existing !== undefined) {
      const field =
        existing.messageTypeName !== provider.messageTypeName
          ? "messageType"
          : existing.settings.incompatibleField(provider.settings);
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
    this.providers.set(provider.name, provider);
    this.shell.run({ kind: "register", name: provider.name, settings });
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
    this.typeState(name);
    requireEntityId(entityId);
    return new ShardedEntityRef<T>(name, entityId, this.caller);
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Inspection and control

  /** Defensive copy of this node's view of the plan of `entityType` (empty while no plan is known). */
  allocations(entityType: ShardedEntityType<unknown> | string): Map<number, UniqueAddress> {
    const state = this.typeState(entityType);
    if (state.plan.generation === 0) this.shell.run({ kind: "syncPlan", type: state.name });
    return new Map(state.plan.allocations);
  }

  /** The generation of this node's plan of `entityType` (0 before any). */
  planGeneration(entityType: ShardedEntityType<unknown> | string): number {
    return this.typeState(entityType).plan.generation;
  }

  /** Live local entity actors over all types. */
  get localEntityCount(): number {
    let n = 0;
    for (const p of this.providers.values()) n += p.entityCount;
    return n;
  }

  /**
   * Traces sharded calls with `tracer` from now on (null stops): a span around each `tell`/`ask` on this node, its
   * `traceparent` carried in the envelope, and a child span where this node delivers a traced envelope to an entity.
   * `registerOpenTelemetryTracing` in `movie/management` installs one built on OpenTelemetry.
   */
  useTracer(tracer: ShardingTracer | null): void {
    this.shell.tracer = tracer;
  }

  /**
   * Messages waiting in the mailbox of this node's sharding daemon (`/system/sharding`, where every envelope from
   * another node arrives): `movie_sharding_daemon_mailbox_size`. A count that keeps growing means the node falls
   * behind its inbound traffic.
   */
  get daemonMailboxSize(): number {
    return this.daemonContext.mailboxSize;
  }

  /** Handoffs running on this node (only the coordinator runs any). */
  get handoffsInProgress(): number {
    let n = 0;
    for (const t of this.shell.state.types.values()) n += t.handoffs.size;
    return n;
  }

  /** True while a handoff of `shardId` of `entityType` runs here (meaningful on the coordinator). */
  handoffInProgress(entityType: ShardedEntityType<unknown> | string, shardId: number): boolean {
    return this.typeState(entityType).handoffs.has(shardId);
  }

  /**
   * Seconds from start to completion of each handoff of `entityType` this node drove as coordinator (aborted ones are
   * not counted); `movie_sharding_handoff_duration_seconds` in the metrics.
   * @throws ClusterShardingConfigurationError when the type is not registered on this node
   */
  handoffDuration(entityType: ShardedEntityType<unknown> | string): ReadonlyHistogram {
    return this.typeState(entityType).handoffDuration;
  }

  /**
   * Moves one shard of `entityType` to `options.to`, or to the least-loaded other member that may host it, through
   * the coordinator's ordinary handoff (the operator's `POST /sharding/types/:type/shards/:shard/rebalance` and
   * `movie rebalance`). Only the coordinator moves shards: on another node, and for a move the type's rebalance
   * policy would undo, the decision is a refusal with a stable `reason`. A `moving` decision means the handoff has
   * started; `handoffInProgress` tells when it is over.
   * @throws ClusterShardingConfigurationError when the type is not registered on this node
   */
  moveShard(
    entityType: ShardedEntityType<unknown> | string,
    shardId: number,
    options: { readonly to?: UniqueAddress } = {},
  ): ShardMoveDecision {
    const state = this.typeState(entityType);
    return this.shell.moveShard(state.name, shardId, options.to ?? null);
  }

  /** The shard of `entityId` of `entityType`. */
  shardOf(entityType: ShardedEntityType<unknown> | string, entityId: string): number {
    const s = this.typeState(entityType);
    return s.settings.partitioner.shardFor(s.name, entityId, s.settings.shardCount);
  }

  /** The names of the entity types registered on this node, sorted. */
  get entityTypeNames(): string[] {
    return [...this.providers.keys()].sort();
  }

  /**
   * A read-only copy of what this node knows of `entityType`: plan, generation and author, the coordinator it routes
   * to, handoffs it drives, local entities per shard and (persistent types) the leases it keeps.
   * @throws ClusterShardingConfigurationError when the type is not registered on this node
   */
  inspect(entityType: ShardedEntityType<unknown> | string): ShardingTypeInspection {
    const state = this.typeState(entityType);
    const provider = this.providers.get(state.name)!;
    if (state.plan.generation === 0) this.shell.run({ kind: "syncPlan", type: state.name });
    return {
      name: state.name,
      shardCount: state.settings.shardCount,
      generation: state.plan.generation,
      planAuthor: state.plan.author,
      coordinator: this.shell.state.view.routing,
      allocations: new Map(state.plan.allocations),
      handoffs: [...state.handoffs.keys()].sort((a, b) => a - b),
      localEntities: provider.entitiesByShard(),
      leases: provider.leases(),
    };
  }

  /**
   * The shard leases this node holds and may write under now, over every persistent entity type (and sharded
   * projection): the leases an outbox dispatcher on this node claims under (`OutboxDispatcher`'s `leases` option,
   * docs/outbox.md). A shard that is draining for a handoff, or whose lease is being acquired or has lapsed, is left
   * out. Empty on a node without persistent types.
   */
  heldShardLeases(): ShardLeaseToken[] {
    const tokens: ShardLeaseToken[] = [];
    for (const provider of this.providers.values()) {
      const held = provider.heldLeaseTokens?.();
      if (held !== undefined) tokens.push(...held);
    }
    return tokens;
  }

  /** A snapshot of the 15 counters (docs/protocol.md §16.2), summed over types. */
  get stats(): ShardingStats {
    return snapshotStats(this.counters);
  }

  /**
   * The owner of the entity's shard in this node's plan, or null when the shard has no owner, there is no
   * coordinator, or the plan is not the current coordinator's.
   */
  ownerFor(entityType: ShardedEntityType<unknown> | string, entityId: string): UniqueAddress | null {
    const state = this.typeState(entityType);
    const coordinator = this.shell.state.view.routing;
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
    if (message instanceof ShardingEnvelope) {
      if (message.traceContextMalformed) this.counters.malformedTraceContexts++;
      this.shell.receive({ envelope: message, sender, origin }, origin);
    } else if (message instanceof ReceivedDirectBatch) {
      // One by one, in order, each as a single direct envelope from this link (docs/protocol.md §8.8 "Batches"), under
      // one clock reading: a plain tell of an accepted shard straight from its record, any other as its envelope.
      const nowMs = this.system.scheduler.now();
      const shell = this.shell;
      for (let i = 0; i < message.records.length; i++) {
        if (shell.receiveRecord(message, i, sender, origin, nowMs)) continue;
        const envelope = message.envelopeAt(i);
        if (envelope.traceContextMalformed) this.counters.malformedTraceContexts++;
        shell.receive({ envelope, sender, origin }, origin, nowMs);
      }
    } else if (message instanceof DirectBatch) {
      // One by one, in order, each as a single direct envelope from this link (docs/protocol.md §8.8 "Batches"), under
      // one clock reading: they arrived together.
      const envelopes = message.envelopes;
      const nowMs = this.system.scheduler.now();
      for (let i = 0; i < envelopes.length; i++) {
        const envelope = envelopes[i]!;
        if (envelope.traceContextMalformed) this.counters.malformedTraceContexts++;
        this.shell.receive({ envelope, sender, origin }, origin, nowMs);
      }
    } else if (
      message instanceof PlanRequest ||
      message instanceof PlanSnapshotRequest ||
      message instanceof PlanSnapshot ||
      message instanceof PlanUpdate ||
      message instanceof PassivateShard ||
      message instanceof PrepareShard ||
      message instanceof CoordinatorFlush ||
      message instanceof CoordinatorFlushed ||
      message instanceof CancelPreparations ||
      message instanceof DirectProbe ||
      message instanceof DirectGrant ||
      message instanceof DirectRefused ||
      message instanceof HandoffAnnounce ||
      message instanceof DirectMarker
    ) {
      this.shell.run({ kind: "control", message, replyTo: sender, origin });
    } else {
      this.counters.rejectedEnvelopes++;
      ctx.log.warn(
        { type: typeNameOf(message), origin: origin?.toString() },
        "sharding daemon ignored an unknown message",
      );
    }
  }

  /** The core's state of `entityType`. @throws ClusterShardingConfigurationError when it is not registered here */
  private typeState(entityType: ShardedEntityType<unknown> | string): TypeState {
    return requireType(this.shell.state, typeof entityType === "string" ? entityType : entityType.name);
  }

  // ---------------------------------------------------------------------------------------------------------------
  // Entity lifecycle, stop

  private onEntityTerminated(signal: Terminated): void {
    for (const provider of this.providers.values()) provider.entityTerminated(signal.ref);
  }

  /** Stops every entity, timer and subscription (the actor system calls this when it terminates). */
  async stop(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    // Queued behind the current step when the core itself asked for the stop (this node was downed).
    this.shell.run({ kind: "stop" });
    this.shell.cancelTimers();
    this.unsubscribe();
    this.unsubscribeRejections();
    this.membership.unregisterDepartureGuard(departureGuardName);
    // The providers stay registered until their entities terminated: the daemon reports each termination to them.
    await Promise.all([...this.providers.values()].map((p) => p.stopAll()));
    this.daemon.sendSystem(STOP);
  }
}

/** The extension id; `create` fails the way docs/protocol.md §5.1 says when remoting or cluster is missing. */
function shardingExtensionId(runtime: () => ShardingRuntime): ExtensionId<ClusterSharding> {
  return {
    key: "movie.cluster-sharding",
    create: (system) => new ClusterSharding(system, runtime()),
  };
}
