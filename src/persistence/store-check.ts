import { describe } from "../actor/untrusted.ts";
import { PersistenceConfigurationError } from "./errors.ts";
import type { PersistenceStore } from "./store.ts";

type MethodName = {
  [K in keyof PersistenceStore]: PersistenceStore[K] extends (...args: never[]) => unknown ? K : never;
}[keyof PersistenceStore];

/**
 * Every method of the store contract. `satisfies` makes a method added to PersistenceStore a compile error here until
 * it is listed, so `Database.use` never accepts a store that lacks it.
 */
const storeMethods = {
  appendEvents: true,
  loadEvents: true,
  loadRevision: true,
  saveSnapshot: true,
  loadSnapshot: true,
  deleteSnapshot: true,
  deleteEventsTo: true,
  saveState: true,
  deleteState: true,
  loadState: true,
  acquireShardLease: true,
  renewShardLease: true,
  acquireShardLeases: true,
  renewShardLeases: true,
  releaseShardLease: true,
  queryEvents: true,
  latestOffset: true,
  onEventsCommitted: true,
  loadProjectionOffset: true,
  saveProjectionOffset: true,
  deleteProjectionOffset: true,
  loadProjectionControl: true,
  setProjectionControl: true,
  runProjectionBatch: true,
  claimOutbox: true,
  completeOutbox: true,
  failOutbox: true,
  purgeOutbox: true,
  outboxCounts: true,
  parkedOutbox: true,
  retryParkedOutbox: true,
  close: true,
} as const satisfies Record<MethodName, true>;

const backendNames: readonly unknown[] = ["memory", "sqlite", "postgres"];

/**
 * Checks that `store` keeps the PersistenceStore contract as far as can be seen without calling it: an object with
 * every method and a known `backendName`.
 * @throws PersistenceConfigurationError naming what is missing
 */
export function requireStore(store: unknown): asserts store is PersistenceStore {
  if (store === null || typeof store !== "object") {
    throw new PersistenceConfigurationError(
      "store",
      `${describe(store)} is not a store; pass a PersistenceStore such as MemoryStore, SqliteStore or PostgresStore, or call configure({ backend })`,
    );
  }
  const missing = Object.keys(storeMethods).filter(
    (name) => typeof (store as Record<string, unknown>)[name] !== "function",
  );
  if (missing.length > 0) {
    throw new PersistenceConfigurationError(
      "store",
      `the object lacks ${missing.map((m) => `${m}()`).join(", ")} of the PersistenceStore contract; pass a MemoryStore, SqliteStore, PostgresStore or a complete implementation`,
    );
  }
  const backend = (store as { backendName?: unknown }).backendName;
  if (!backendNames.includes(backend)) {
    throw new PersistenceConfigurationError(
      "store",
      `backendName is ${describe(backend)}; a store names its backend "memory", "sqlite" or "postgres" (sharding decides by it whether writes can be fenced)`,
    );
  }
}
