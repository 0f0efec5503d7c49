import type { ActorSystem, BehaviorSource, Extension, ExtensionId } from "../../actor/index.ts";
import { checkSettingKeys } from "../../actor/settings-keys.ts";
import { Cluster } from "../../cluster/index.ts";
import { Database, DurableState, type EntityType, EventSourcing } from "../../persistence/index.ts";
import type { ClusterSharding } from "../cluster-sharding.ts";
import { ShardedEntityType } from "../entity-ref.ts";
import { ClusterShardingConfigurationError } from "../errors.ts";
import { shardingHostOf } from "../internal/host.ts";
import { safeToOwn } from "../lease/safe-to-own.ts";
import { ShardingSettings, type ShardingSettingsOptions, shardingSettingsShape } from "../settings.ts";
import {
  PersistentEntityProvider,
  type PersistentKind,
  type PersistentProviderOptions,
} from "./persistent-provider.ts";

/** Stops the persistent providers (entities, then lease releases) while the Database they release through is open. */
class PersistentLeaseRelease implements Extension {
  readonly providers: { stopAll(): Promise<void> }[] = [];
  async stop(): Promise<void> {
    await Promise.all(this.providers.map((p) => p.stopAll()));
  }
}
const leaseReleaseId: ExtensionId<PersistentLeaseRelease> = {
  key: "movie.persistent-lease-release",
  create: () => new PersistentLeaseRelease(),
};

/** Settings of a persistent sharded type: the ordinary ones plus `routingName`. Durations in milliseconds. */
export interface PersistentShardingOptions extends ShardingSettingsOptions {
  /**
   * The sharding facade's name (and the lease key's entity type); default the entity type's name. Persistence ids
   * stay `"<EntityType>:<id>"` whatever it is; two routing names over one entity type are two independent facades.
   * Every node must use the same value.
   */
  routingName?: string;
}

/** Cluster name of the lease key when no cluster extension is running (tests over a fake membership). */
const defaultClusterName = "movie-cluster";

/**
 * Shards the event-sourced entity type `entityType` (from `EventSourcing.get(system).registerEntity`) across the
 * cluster, fenced by PostgreSQL shard leases (docs/protocol.md §11). Idempotent when every setting matches.
 * @deprecated Use `sharding.initEventSourced(entityType, options)`, added by importing `movie/sharding/persistent`;
 *   this function stays for one release.
 * @throws ClusterShardingConfigurationError when the backend is not PostgreSQL, the routing name is empty, the
 *   settings are invalid, or an earlier init of the same routing name differs (naming the field)
 */
export function initEventSourced<T>(
  sharding: ClusterSharding,
  entityType: EntityType<T>,
  options: PersistentShardingOptions = {},
): ShardedEntityType<T> {
  return initPersistent(sharding, entityType, options, "event-sourced");
}

/**
 * Shards the durable-state entity type `entityType` (from `DurableState.get(system).registerEntity`); otherwise as
 * {@link initEventSourced}.
 * @deprecated Use `sharding.initDurableState(entityType, options)`, added by importing `movie/sharding/persistent`;
 *   this function stays for one release.
 * @throws ClusterShardingConfigurationError as {@link initEventSourced}
 */
export function initDurableState<T>(
  sharding: ClusterSharding,
  entityType: EntityType<T>,
  options: PersistentShardingOptions = {},
): ShardedEntityType<T> {
  return initPersistent(sharding, entityType, options, "durable-state");
}

/** @internal The one implementation behind the methods and the deprecated functions. */
export function initPersistent<T>(
  sharding: ClusterSharding,
  entityType: EntityType<T>,
  options: PersistentShardingOptions,
  kind: "event-sourced" | "durable-state",
): ShardedEntityType<T> {
  const system = shardingHostOf(sharding).system;
  if (entityType === null || typeof entityType !== "object" || typeof entityType.name !== "string") {
    throw new ClusterShardingConfigurationError(
      `init of a ${kind} sharded type needs the EntityType that registerEntity returned`,
      "entityType",
    );
  }
  if (entityType.kind !== kind) {
    throw new ClusterShardingConfigurationError(
      `${entityType.name} is a ${entityType.kind} entity type; shard it with ${entityType.kind === "event-sourced" ? "initEventSourced" : "initDurableState"}`,
      "entityType",
    );
  }
  checkSettingKeys(kind === "event-sourced" ? "initEventSourced" : "initDurableState", options, {
    ...shardingSettingsShape,
    routingName: true,
  });
  const { routingName = entityType.name, ...settingsOptions } = options;
  const behaviorFor =
    kind === "event-sourced"
      ? (entityId: string, fence: Parameters<EventSourcing["entityBehavior"]>[1]) =>
          EventSourcing.get(system).entityBehavior<T>(entityType.id(entityId), fence)
      : (entityId: string, fence: Parameters<DurableState["entityBehavior"]>[1]) =>
          DurableState.get(system).entityBehavior<T>(entityType.id(entityId), fence);
  return initProvider<T>(sharding, {
    routingName,
    kind,
    entityTypeName: entityType.name,
    messageTypeName: entityType.commandClass.name,
    options: settingsOptions,
    behaviorFor: (entityId, fence) => behaviorFor(entityId, fence) as BehaviorSource<T>,
  });
}

/** What {@link initProvider} registers: a routing name whose entities are built by `behaviorFor` under a lease. */
export interface LeasedProviderSpec<T> {
  readonly routingName: string;
  readonly kind: PersistentKind;
  readonly entityTypeName: string;
  readonly messageTypeName: string;
  readonly options: ShardingSettingsOptions;
  readonly behaviorFor: PersistentProviderOptions<T>["behaviorFor"];
}

/**
 * @internal Registers a PersistentEntityProvider (entities activated under the shard's PostgreSQL lease) for
 * `spec.routingName`, or returns the existing one when every setting matches. Shared by persistent entities and
 * sharded projections.
 */
export function initProvider<T>(sharding: ClusterSharding, spec: LeasedProviderSpec<T>): ShardedEntityType<T> {
  const host = shardingHostOf(sharding);
  const system = host.system;
  const { routingName, kind } = spec;
  if (typeof routingName !== "string" || routingName.length === 0) {
    throw new ClusterShardingConfigurationError("persistent sharding name must not be empty", "routingName");
  }
  // SQLite's file-local ownership cannot fence writers on different nodes, so it is refused even on one node (§4.7).
  const backend = Database.get(system).backendName;
  if (backend !== "postgres") {
    throw new ClusterShardingConfigurationError(
      `clustered persistent entities require the PostgreSQL backend (this system uses ${backend}); configure Database.get(system) with backend "postgres"`,
      "backend",
    );
  }
  const settings = ShardingSettings.create(spec.options);
  const existing = host.provider(routingName);
  if (existing !== undefined) {
    const field =
      !(existing instanceof PersistentEntityProvider) || existing.kind !== kind
        ? "kind"
        : existing.entityTypeName !== spec.entityTypeName
          ? "entityType"
          : existing.messageTypeName !== spec.messageTypeName
            ? "messageType"
            : existing.settings.incompatibleField(settings);
    if (field !== null) {
      throw new ClusterShardingConfigurationError(
        `Entity type ${routingName} is already registered with incompatible settings (${field} differs); use the same settings on every init`,
        field,
      );
    }
    return new ShardedEntityType<T>(routingName);
  }
  const membership = host.membership;
  const provider = new PersistentEntityProvider<T>({
    name: routingName,
    entityTypeName: spec.entityTypeName,
    kind,
    messageTypeName: spec.messageTypeName,
    settings,
    behaviorFor: spec.behaviorFor,
    host: host.entityParent,
    scheduler: system.scheduler,
    stats: host.stats,
    leases: Database.get(system),
    clusterName: clusterNameOf(system),
    owner: membership.selfAddress.toString(),
    safeToOwn: () => safeToOwn({ ...membership.snapshot(), self: membership.selfAddress }),
    onDeadLetter: (listener) => system.onDeadLetter(listener),
    log: system.log,
  });
  // The lease store is the Database extension, which the system stops (closing its pool) before ClusterSharding,
  // created earlier: released then, a lease would go to nowhere and stay live in the database until it expires,
  // holding the shard from its next owner. This extension is created after the Database, so it stops before it.
  const registered = host.registerProvider<T>(provider);
  system.extension(leaseReleaseId).providers.push(provider);
  return registered;
}

function clusterNameOf(system: ActorSystem): string {
  try {
    return Cluster.get(system).settings.clusterName;
  } catch {
    return defaultClusterName;
  }
}
