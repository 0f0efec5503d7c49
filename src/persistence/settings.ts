import { checkSettingKeys, type SettingsShapeOf } from "../actor/settings-keys.ts";
import { describe } from "../actor/untrusted.ts";
import { PersistenceConfigurationError } from "./errors.ts";
import type { GroupCommitSettings } from "./group-commit.ts";
import type { ResilienceSettings } from "./resilience.ts";
import type { BackendName } from "./store.ts";

/** Backend configuration (docs/protocol.md §13.5). */
export interface PersistenceSettings {
  /** Which backend; default "memory". */
  backend?: BackendName;
  /** PostgreSQL URL, required for "postgres" (postgres:// or postgresql://). */
  connectionUri?: string;
  /** SQLite database file for "sqlite"; default data/movie_persistence.sqlite3. */
  dbPath?: string;
  /** SQLite PRAGMA synchronous; default "normal" (see SqliteStoreOptions.synchronous for what it risks). */
  synchronous?: "normal" | "full";
  /** SQLite: total (asynchronous) wait for another connection's write lock, ms; default 5000. */
  busyTimeoutMs?: number;
  /** PostgreSQL schema for all tables (created if missing); default the server's search_path. */
  schema?: string;
  /** PostgreSQL connections; default 4. */
  poolSize?: number;
  /** Timeout, retries and circuit breaker of the PostgreSQL backend. */
  resilience?: Partial<ResilienceSettings>;
  /**
   * Group commit of the PostgreSQL backend's one-event appends, or false for none; default 64 per batch, 1 in flight,
   * at most 10,000 waiting (past that an append rejects PersistenceOverloadedError).
   */
  groupCommit?: Partial<GroupCommitSettings> | false;
}

/** Every key of {@link PersistenceSettings}, with those of its resilience and group-commit objects. */
const persistenceSettingsShape = {
  backend: true,
  connectionUri: true,
  dbPath: true,
  synchronous: true,
  busyTimeoutMs: true,
  schema: true,
  poolSize: true,
  resilience: {
    operationTimeoutMs: true,
    maxRetries: true,
    minBackoffMs: true,
    maxBackoffMs: true,
    failureThreshold: true,
    resetTimeoutMs: true,
  } satisfies SettingsShapeOf<ResilienceSettings>,
  groupCommit: {
    maxBatchSize: true,
    maxConcurrentBatches: true,
    maxWaiting: true,
  } satisfies SettingsShapeOf<GroupCommitSettings>,
} as const satisfies SettingsShapeOf<PersistenceSettings>;

const backends: readonly string[] = ["memory", "sqlite", "postgres"];

/**
 * Checks settings before anything is opened.
 * @throws PersistenceConfigurationError naming the setting
 * @throws UnknownSettingError for a key no setting has (e.g. `path`, which is `dbPath`)
 */
export function validatePersistenceSettings(
  settings: PersistenceSettings,
): Required<Pick<PersistenceSettings, "backend">> & PersistenceSettings {
  if (settings === null || typeof settings !== "object") {
    throw new PersistenceConfigurationError(
      "settings",
      'expected an object such as { backend: "postgres", connectionUri }',
    );
  }
  checkSettingKeys("Database.configure", settings, persistenceSettingsShape);
  const backend = settings.backend ?? "memory";
  if (!backends.includes(backend)) {
    throw new PersistenceConfigurationError("backend", `${describe(backend)}; use one of ${backends.join(", ")}`);
  }
  if (backend === "postgres") {
    const uri = settings.connectionUri;
    if (typeof uri !== "string" || uri.length === 0) {
      throw new PersistenceConfigurationError(
        "connectionUri",
        "the postgres backend needs a connection URI such as postgres://user@127.0.0.1:5432/db",
      );
    }
    if (!/^postgres(ql)?:\/\/[^/\s]+/.test(uri)) {
      throw new PersistenceConfigurationError(
        "connectionUri",
        `"${uri}" must start with postgres:// or postgresql:// and name a host`,
      );
    }
  }
  if (
    backend === "sqlite" &&
    settings.dbPath !== undefined &&
    (typeof settings.dbPath !== "string" || settings.dbPath.length === 0)
  ) {
    throw new PersistenceConfigurationError("dbPath", "must be a non-empty file path or :memory:");
  }
  return { ...settings, backend };
}
