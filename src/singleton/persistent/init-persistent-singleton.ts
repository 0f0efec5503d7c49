import type { EntityType } from "../../persistence/index.ts";
import { NoRebalance } from "../../sharding/index.ts";
import { initPersistent } from "../../sharding/persistent/init-persistent.ts";
import { allocationFor, type ClusterSingleton, type ClusterSingletonRef } from "../cluster-singleton.ts";
import {
  type PersistentSingletonOptions,
  resolvePersistentSingletonSettings,
  singletonSettingsKey,
} from "../settings.ts";
import { SingletonPartitioner } from "../singleton-partitioner.ts";

/**
 * Registers persistent singleton `name` on `singletons` (`ClusterSingleton.get(system)`): the event-sourced entity
 * `options.entityId` of `entityType`, fenced by the PostgreSQL lease `(cluster, "movie.singleton.<name>", 0)`; it
 * survives its owner's leave with its state. Returns the same ref when called again with the same settings.
 * @throws ClusterSingletonConfigurationError for invalid settings, or a mismatch with an earlier init
 * @throws ClusterShardingConfigurationError when the persistence backend is not PostgreSQL
 * @deprecated Use `ClusterSingleton.get(system).initEventSourced(name, entityType, options)`, added by importing
 *   `movie/singleton/persistent`; this function stays for one release.
 */
export function initEventSourcedSingleton<T>(
  singletons: ClusterSingleton,
  name: string,
  entityType: EntityType<T>,
  options: PersistentSingletonOptions,
): ClusterSingletonRef<T> {
  return initPersistentSingleton(singletons, name, entityType, options, "EventSourced");
}

/**
 * Registers a persistent singleton backed by a durable-state entity; otherwise as {@link initEventSourcedSingleton}.
 * @throws ClusterSingletonConfigurationError, ClusterShardingConfigurationError as {@link initEventSourcedSingleton}
 * @deprecated Use `ClusterSingleton.get(system).initDurableState(name, entityType, options)`, added by importing
 *   `movie/singleton/persistent`; this function stays for one release.
 */
export function initDurableStateSingleton<T>(
  singletons: ClusterSingleton,
  name: string,
  entityType: EntityType<T>,
  options: PersistentSingletonOptions,
): ClusterSingletonRef<T> {
  return initPersistentSingleton(singletons, name, entityType, options, "DurableState");
}

/** @internal The one implementation behind the methods and the deprecated functions. */
export function initPersistentSingleton<T>(
  singletons: ClusterSingleton,
  name: string,
  entityType: EntityType<T>,
  options: PersistentSingletonOptions,
  kind: "EventSourced" | "DurableState",
): ClusterSingletonRef<T> {
  const settings = resolvePersistentSingletonSettings(name, options);
  const lease = { leaseDurationMs: settings.leaseDurationMs, leaseRenewIntervalMs: settings.leaseRenewIntervalMs };
  const settingsKey = `${kind};${entityType.name};${settings.entityId};${singletonSettingsKey(settings)};${lease.leaseDurationMs}/${lease.leaseRenewIntervalMs}`;
  const messageTypeName = entityType.commandClass.name;
  const backing = { messageTypeName, settingsKey, entityId: settings.entityId };
  return singletons.registerBacked<T>(name, backing, settings, (sharding, typeName) => {
    const partitioner = new SingletonPartitioner({
      kind,
      persistenceEntityType: entityType.name,
      messageType: messageTypeName,
      entityId: settings.entityId,
      settingsKey: singletonSettingsKey(settings),
      lease,
    });
    const shardingOptions = {
      routingName: typeName,
      shardCount: 1,
      partitioner,
      allocation: allocationFor(settings),
      rebalance: new NoRebalance(),
      leaseDuration: lease.leaseDurationMs,
      leaseRenewInterval: lease.leaseRenewIntervalMs,
    };
    initPersistent(sharding, entityType, shardingOptions, kind === "EventSourced" ? "event-sourced" : "durable-state");
  });
}
