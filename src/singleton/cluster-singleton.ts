import type {
  AbstractBehavior,
  ActorRef,
  ActorSystem,
  AskOptions,
  Cancellable,
  Class,
  Extension,
  ExtensionId,
  SystemMessage,
  UniqueAddress,
} from "../actor/index.ts";
import {
  ClusterSharding,
  LeastLoadedAllocation,
  NoRebalance,
  RoleAwareAllocation,
  type ShardedEntityRef,
} from "../sharding/index.ts";
import { shardingHostOf } from "../sharding/internal/index.ts";
import { isActivationCoordinator } from "./activation-coordinator.ts";
import { ClusterSingletonConfigurationError } from "./errors.ts";
import {
  type ClusterSingletonOptions,
  type ClusterSingletonSettings,
  firstActivationDelayMs,
  resolveSingletonSettings,
  singletonSettingsKey,
} from "./settings.ts";
import { SingletonPartitioner } from "./singleton-partitioner.ts";
import { SingletonCounters, type SingletonStats } from "./stats.ts";
import { ordinarySingletonEntityId, singletonTypeName } from "./type-name.ts";

interface Registration {
  readonly ref: ClusterSingletonRef<unknown>;
  readonly messageTypeName: string;
  readonly settingsKey: string;
  readonly typeName: string;
  readonly entityId: string;
  timer: Cancellable | null;
  lastActivationError: string | null;
}

/**
 * Cluster singletons of one actor system (docs/protocol.md §12): each is a one-shard sharding facade
 * `movie.singleton.<name>` with `NoRebalance` (so its placement is sticky), activated eagerly by the activation
 * coordinator (the lowest `Up` node of a converged, fully reachable cluster) and re-created after it stops.
 */
export class ClusterSingleton implements Extension {
  private static readonly id: ExtensionId<ClusterSingleton> = {
    key: "movie.singleton",
    create: (system) => new ClusterSingleton(system),
  };
  private readonly registrations = new Map<string, Registration>();
  private readonly counters = new SingletonCounters();
  private stopped = false;

  private constructor(private readonly system: ActorSystem) {}

  /**
   * The singleton extension of `system`; cluster sharding must be available (remoting and cluster enabled first).
   * @throws ClusterShardingConfigurationError when sharding cannot start
   */
  static get(system: ActorSystem): ClusterSingleton {
    ClusterSharding.get(system);
    return system.extension(ClusterSingleton.id);
  }

  private get sharding(): ClusterSharding {
    return ClusterSharding.get(this.system);
  }

  /**
   * Registers singleton `name` whose one instance accepts `messageType`, created by `factory()` on the owner. Every
   * node that may own or call it must init it with identical settings. Returns the same ref when called again with
   * the same settings.
   * @throws InvalidArgumentError for an empty name
   * @throws ClusterSingletonConfigurationError for invalid settings, or a mismatch with an earlier init
   */
  init<T>(
    name: string,
    messageType: Class<T>,
    options: ClusterSingletonOptions,
    factory: () => AbstractBehavior<T>,
  ): ClusterSingletonRef<T> {
    const settings = resolveSingletonSettings(name, options);
    const settingsKey = singletonSettingsKey(settings);
    const backing = { messageTypeName: messageType.name, settingsKey, entityId: ordinarySingletonEntityId };
    return this.registerBacked<T>(name, backing, settings, (sharding, typeName) => {
      const partitioner = new SingletonPartitioner({
        kind: "Behavior",
        persistenceEntityType: "",
        messageType: messageType.name,
        entityId: ordinarySingletonEntityId,
        settingsKey,
        lease: null,
      });
      sharding.init(
        typeName,
        messageType,
        { shardCount: 1, partitioner, allocation: allocationFor(settings), rebalance: new NoRebalance() },
        () => factory(),
      );
    });
  }

  /**
   * @internal For `movie/singleton/persistent`: registers singleton `name` whose sharding type (`typeName`, entity
   * `entityId`) `initSharding` creates; the same ref comes back when `messageTypeName` and `settingsKey` match an
   * earlier registration.
   * @throws ClusterSingletonConfigurationError on a mismatch with an earlier init
   */
  registerBacked<T>(
    name: string,
    backing: { readonly messageTypeName: string; readonly settingsKey: string; readonly entityId: string },
    settings: ClusterSingletonSettings,
    initSharding: (sharding: ClusterSharding, typeName: string) => void,
  ): ClusterSingletonRef<T> {
    const typeName = singletonTypeName(name);
    const existing = this.registrations.get(name);
    if (existing !== undefined) {
      if (existing.messageTypeName !== backing.messageTypeName || existing.settingsKey !== backing.settingsKey) {
        throw new ClusterSingletonConfigurationError(
          name,
          existing.messageTypeName !== backing.messageTypeName ? "messageType" : "settings",
          "already registered with different settings; use the same message or entity type and settings on every init",
        );
      }
      return existing.ref as ClusterSingletonRef<T>;
    }
    initSharding(this.sharding, typeName);
    return this.remember(name, typeName, backing.entityId, backing.messageTypeName, backing.settingsKey, settings);
  }

  private remember<T>(
    name: string,
    typeName: string,
    entityId: string,
    messageTypeName: string,
    settingsKey: string,
    settings: ClusterSingletonSettings,
  ): ClusterSingletonRef<T> {
    const ref = new ClusterSingletonRef<T>(name, this.sharding.entityRefFor<T>(typeName, entityId), this);
    const registration: Registration = {
      ref: ref as ClusterSingletonRef<unknown>,
      messageTypeName,
      settingsKey,
      typeName,
      entityId,
      timer: null,
      lastActivationError: null,
    };
    this.registrations.set(name, registration);
    this.counters.increment("registrations");
    this.schedule(registration, firstActivationDelayMs, settings);
    return ref;
  }

  /** The node that owns singleton `name` in the current plan, or null. */
  owner(name: string): UniqueAddress | null {
    const r = this.registrations.get(name);
    if (r === undefined) return null;
    const owner = this.sharding.ownerFor(r.typeName, r.entityId);
    this.counters.recordOwner(name, owner?.toString() ?? null);
    return owner;
  }

  /** True when this node owns singleton `name`. */
  isLocallyOwned(name: string): boolean {
    return this.owner(name)?.equals(shardingHostOf(this.sharding).membership.selfAddress) === true;
  }

  /** True while singleton `name`'s shard is being handed off (meaningful on the sharding coordinator). */
  handoffInProgress(name: string): boolean {
    const r = this.registrations.get(name);
    return r !== undefined && this.sharding.handoffInProgress(r.typeName, 0);
  }

  /** The last eager activation failure of singleton `name` as `"ErrorClass: message"`, or null. */
  lastActivationError(name: string): string | null {
    return this.registrations.get(name)?.lastActivationError ?? null;
  }

  /** Singleton counters of this system, with copies of the whole system's sharding totals. */
  get stats(): SingletonStats {
    const s = this.sharding.stats;
    return this.counters.snapshot({
      handoffsInProgress: this.sharding.handoffsInProgress,
      handoffsCompleted: s.handoffShards,
      rejectedEnvelopes: s.rejectedEnvelopes,
      leaseAcquisitions: s.leaseAcquisitions,
      leaseRenewals: s.leaseRenewals,
      leaseLosses: s.leaseLosses,
      leaseRetries: s.leaseRetries,
    });
  }

  /** Stops the activation loops (the actor system calls this when it terminates). */
  stop(): void {
    this.stopped = true;
    for (const r of this.registrations.values()) r.timer?.cancel();
  }

  /** @internal Counts a call made through a ref. */
  count(counter: "tells" | "asks" | "stopRequests" | "routingRejections"): void {
    this.counters.increment(counter);
  }

  private schedule(r: Registration, delayMs: number, settings: ClusterSingletonSettings): void {
    if (this.stopped) return;
    r.timer = this.system.scheduler.scheduleOnce(delayMs, () => {
      r.timer = null;
      this.attempt(r, settings);
      this.schedule(r, settings.activationIntervalMs, settings);
    });
  }

  /** One eager activation attempt, sent only by the activation coordinator (so never from several nodes at once). */
  private attempt(r: Registration, settings: ClusterSingletonSettings): void {
    if (this.stopped) return;
    const membership = shardingHostOf(this.sharding).membership;
    if (!isActivationCoordinator({ ...membership.snapshot(), self: membership.selfAddress })) return;
    const name = r.ref.name;
    this.counters.increment("activationAttempts");
    this.owner(name);
    this.sharding.activate(r.typeName, r.entityId, settings.activationTimeoutMs).then(
      (ack) => this.counters.recordActivation(name, ack.accepted),
      (error: unknown) => {
        this.counters.increment("activationFailures");
        r.lastActivationError = error instanceof Error ? `${error.name}: ${error.message}` : `Error: ${String(error)}`;
      },
    );
  }
}

/** @internal The singleton's placement: least loaded, constrained to `roles` when there are any. */
export function allocationFor(settings: ClusterSingletonSettings) {
  const leastLoaded = new LeastLoadedAllocation();
  return settings.roles.length === 0 ? leastLoaded : new RoleAwareAllocation(leastLoaded, settings.roles);
}

/** A location-transparent ref to a cluster singleton, usable from any node that initialised it. */
export class ClusterSingletonRef<T> {
  /** @internal Use {@link ClusterSingleton.init}. */
  constructor(
    readonly name: string,
    private readonly entity: ShardedEntityRef<T>,
    private readonly singletons: ClusterSingleton,
  ) {}

  /**
   * Sends `message` to the singleton wherever it runs.
   * @throws NoShardOwnerError when the cluster has no converged coordinator and the message cannot wait for one (its
   * shard's held queue is full, or awaitCoordinator is false; docs/protocol.md §8.6): routing fails closed
   */
  tell(message: T, sender: ActorRef<unknown> | null = null): void {
    this.singletons.count("tells");
    try {
      this.entity.tell(message, sender);
    } catch (error) {
      this.singletons.count("routingRejections");
      throw error;
    }
  }

  /** Asks the singleton; rejects with the sharding, remote or timeout error. */
  ask<R>(message: T, replyType: Class<R>, timeoutMs = 30_000, options?: AskOptions): Promise<R> {
    this.singletons.count("asks");
    try {
      return this.entity.ask(message, replyType, timeoutMs, options).catch((error: unknown) => {
        this.singletons.count("routingRejections");
        throw error;
      });
    } catch (error) {
      this.singletons.count("routingRejections");
      return Promise.reject(error);
    }
  }

  /**
   * `STOP` passivates the singleton; the activation loop re-creates it behind this same ref.
   * @throws UnsupportedSystemMessageError for any other system message
   */
  sendSystem(message: SystemMessage): void {
    this.entity.sendSystem(message);
    this.singletons.count("stopRequests");
  }

  /** The owning node in the current plan, or null. */
  owner(): UniqueAddress | null {
    return this.singletons.owner(this.name);
  }

  /** True when this node owns the singleton. */
  isLocallyOwned(): boolean {
    return this.singletons.isLocallyOwned(this.name);
  }
}
