/**
 * `singletons.initEventSourced(...)` and `singletons.initDurableState(...)`, added to ClusterSingleton by importing
 * `movie/singleton/persistent`, so `movie/singleton` loads no persistence code and persistent singletons are still
 * initialised with a method like `singletons.init`.
 */
import type { EntityType } from "../../persistence/index.ts";
import { ClusterSingleton, type ClusterSingletonRef } from "../cluster-singleton.ts";
import type { PersistentSingletonOptions } from "../settings.ts";
import { initPersistentSingleton } from "./init-persistent-singleton.ts";

declare module "../cluster-singleton.ts" {
  interface ClusterSingleton {
    /**
     * Registers persistent singleton `name`: the event-sourced entity `options.entityId` of `entityType`, fenced by the
     * PostgreSQL lease `(cluster, "movie.singleton.<name>", 0)`; it survives its owner's leave with its state. Returns
     * the same ref when called again with the same settings. Added by importing `movie/singleton/persistent`.
     * @throws ClusterSingletonConfigurationError for invalid settings, or a mismatch with an earlier init
     * @throws ClusterShardingConfigurationError when the persistence backend is not PostgreSQL
     * @throws UnknownSettingError for an option no setting has
     */
    initEventSourced<T>(
      name: string,
      entityType: EntityType<T>,
      options: PersistentSingletonOptions,
    ): ClusterSingletonRef<T>;
    /**
     * Registers persistent singleton `name` backed by a durable-state entity; otherwise as
     * {@link ClusterSingleton.initEventSourced}. Added by importing `movie/singleton/persistent`.
     */
    initDurableState<T>(
      name: string,
      entityType: EntityType<T>,
      options: PersistentSingletonOptions,
    ): ClusterSingletonRef<T>;
  }
}

ClusterSingleton.prototype.initEventSourced = function initEventSourced<T>(
  this: ClusterSingleton,
  name: string,
  entityType: EntityType<T>,
  options: PersistentSingletonOptions,
): ClusterSingletonRef<T> {
  return initPersistentSingleton(this, name, entityType, options, "EventSourced");
};

ClusterSingleton.prototype.initDurableState = function initDurableState<T>(
  this: ClusterSingleton,
  name: string,
  entityType: EntityType<T>,
  options: PersistentSingletonOptions,
): ClusterSingletonRef<T> {
  return initPersistentSingleton(this, name, entityType, options, "DurableState");
};
