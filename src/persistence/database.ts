import type { ActorSystem, Extension, ExtensionId } from "../actor/index.ts";
import { PersistenceCodec } from "./codec.ts";
import { PersistenceConfigurationError, StoreClosedError } from "./errors.ts";
import { EventFeed } from "./event-feed.ts";
import type { ShardLeaseKey, ShardLeaseToken } from "./lease.ts";
import { MemoryStore } from "./memory/index.ts";
import { type PersistenceSettings, validatePersistenceSettings } from "./settings.ts";
import type { BackendName, PersistenceStore } from "./store.ts";
import { requireStore } from "./store-check.ts";
import { WriteLatency } from "./write-latency.ts";

const defaultSqlitePath = "data/movie_persistence.sqlite3";

/**
 * The actor system's persistence backend and codec: `Database.get(system)`. Until configured it uses an in-memory
 * store. `configure` opens SQLite or PostgreSQL by loading their entry points on demand, so a system that never asks
 * for them never loads `better-sqlite3` or `pg`.
 */
export class Database implements Extension {
  private static readonly id: ExtensionId<Database> = {
    key: "movie.persistence.database",
    create: (s) => new Database(s),
  };
  /** The (de)serialisation registry for events, snapshots and durable state of this system. */
  readonly codec = new PersistenceCodec();
  /** Latency histograms of entity writes on this system, whatever the backend. */
  readonly writeLatency = new WriteLatency();
  private current: PersistenceStore | null = null;
  private owned = false;
  /** The name of the backend that was open when the system stopped, or null while running. */
  private stoppedBackend: string | null = null;

  private constructor(readonly system: ActorSystem) {}

  /** The Database extension of `system`. */
  static get(system: ActorSystem): Database {
    return system.extension(Database.id);
  }

  /**
   * Opens the configured backend and makes it this system's store (closing a previous one it opened).
   * @throws PersistenceConfigurationError (bad settings, unopenable SQLite path), schema errors, connection errors
   */
  async configure(settings: PersistenceSettings): Promise<PersistenceStore> {
    if (this.stoppedBackend !== null) throw new StoreClosedError(this.stoppedBackend, true);
    const checked = validatePersistenceSettings(settings);
    let store: PersistenceStore;
    if (checked.backend === "memory") {
      store = new MemoryStore({ scheduler: this.system.scheduler });
    } else if (checked.backend === "sqlite") {
      const { SqliteStore } = await import("./sqlite/index.ts");
      const sqlite = SqliteStore.open({
        dbPath: checked.dbPath ?? defaultSqlitePath,
        ...(checked.synchronous === undefined ? {} : { synchronous: checked.synchronous }),
        ...(checked.busyTimeoutMs === undefined ? {} : { busyTimeoutMs: checked.busyTimeoutMs }),
        scheduler: this.system.scheduler,
      });
      this.logRebaseline(sqlite.rebaselinedMigrations);
      store = sqlite;
    } else {
      const { PostgresStore } = await import("./postgres/index.ts");
      const postgres = await PostgresStore.connect({
        connectionUri: checked.connectionUri!,
        ...(checked.schema === undefined ? {} : { schema: checked.schema }),
        ...(checked.poolSize === undefined ? {} : { poolSize: checked.poolSize }),
        ...(checked.resilience === undefined ? {} : { resilience: checked.resilience }),
        ...(checked.groupCommit === undefined ? {} : { groupCommit: checked.groupCommit }),
        scheduler: this.system.scheduler,
        onPoolError: (error) => this.system.log.warn({ error }, "idle PostgreSQL connection failed"),
      });
      this.logRebaseline(postgres.rebaselinedMigrations);
      store = postgres;
    }
    await this.replace(store, true);
    return store;
  }

  /**
   * Makes `store` this system's store; the caller keeps ownership (it is not closed when the system stops).
   * @throws PersistenceConfigurationError when `store` lacks a method of the PersistenceStore contract
   */
  async use(store: PersistenceStore): Promise<void> {
    if (this.stoppedBackend !== null) throw new StoreClosedError(this.stoppedBackend, true);
    requireStore(store);
    await this.replace(store, false);
  }

  /** The store in use (an in-memory one until configured). */
  get store(): PersistenceStore {
    // After stop a quietly opened in-memory store would swallow writes (a lease release at shutdown went there once
    // and the PostgreSQL row stayed live until it expired): refuse instead.
    if (this.stoppedBackend !== null) throw new StoreClosedError(this.stoppedBackend, true);
    if (this.current === null) {
      this.current = new MemoryStore({ scheduler: this.system.scheduler });
      this.owned = true;
    }
    return this.current;
  }

  /** The global event feed of the store in use: offset queries and live streams (see docs/persistence-feed.md). */
  get events(): EventFeed {
    return new EventFeed(this.store, this.system.scheduler);
  }

  /** The backend in use; sharding requires "postgres" for clustered persistent entities (docs/protocol.md §11). */
  get backendName(): BackendName {
    return this.store.backendName;
  }

  /** See {@link PersistenceStore.acquireShardLease}. */
  acquireShardLease(key: ShardLeaseKey, owner: string, durationMs: number): Promise<ShardLeaseToken | null> {
    return this.store.acquireShardLease(key, owner, durationMs);
  }

  /** See {@link PersistenceStore.renewShardLease}. */
  renewShardLease(token: ShardLeaseToken, durationMs: number): Promise<ShardLeaseToken | null> {
    return this.store.renewShardLease(token, durationMs);
  }

  /** See {@link PersistenceStore.acquireShardLeases}. */
  acquireShardLeases(
    keys: readonly ShardLeaseKey[],
    owner: string,
    durationMs: number,
  ): Promise<(ShardLeaseToken | null)[]> {
    return this.store.acquireShardLeases(keys, owner, durationMs);
  }

  /** See {@link PersistenceStore.renewShardLeases}. */
  renewShardLeases(tokens: readonly ShardLeaseToken[], durationMs: number): Promise<(ShardLeaseToken | null)[]> {
    return this.store.renewShardLeases(tokens, durationMs);
  }

  /** See {@link PersistenceStore.releaseShardLease}. */
  releaseShardLease(token: ShardLeaseToken): Promise<boolean> {
    return this.store.releaseShardLease(token);
  }

  /** Closes the store if this extension opened it. */
  async stop(): Promise<void> {
    this.stoppedBackend = this.current?.backendName ?? "memory";
    if (this.current !== null && this.owned) await this.current.close();
    this.current = null;
  }

  private logRebaseline(versions: readonly number[]): void {
    if (versions.length === 0) return;
    this.system.log.info(
      { versions },
      "persistence migrations recorded by an earlier build were re-baselined to statement checksums (once)",
    );
  }

  private async replace(store: PersistenceStore, owned: boolean): Promise<void> {
    if (store === null || typeof store !== "object") {
      throw new PersistenceConfigurationError("store", "expected a PersistenceStore");
    }
    const previous = this.current;
    const previousOwned = this.owned;
    this.current = store;
    this.owned = owned;
    if (previous !== null && previous !== store && previousOwned) await previous.close();
  }
}
