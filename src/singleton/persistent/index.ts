/**
 * Persistent cluster singletons (`movie/singleton/persistent`): a singleton backed by an event-sourced or
 * durable-state entity, fenced by a PostgreSQL shard lease. A module of its own so that `movie/singleton` loads no
 * persistence code. Importing it adds `singletons.initEventSourced` and `singletons.initDurableState` to
 * ClusterSingleton.
 */
import "./singleton-methods.ts";

export { initDurableStateSingleton, initEventSourcedSingleton } from "./init-persistent-singleton.ts";
