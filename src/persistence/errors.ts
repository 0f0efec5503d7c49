/** Errors raised by the persistence layer. Each has a stable `name` and carries the fields a caller acts on. */
import type { ShardLeaseToken } from "./lease.ts";

/** A write named an expected revision that is not the stored one: someone else wrote first (docs/protocol.md §13.1). */
export class ConcurrentWriteError extends Error {
  override readonly name = "ConcurrentWriteError";
  constructor(
    readonly persistenceId: string,
    readonly expectedRevision: number,
    readonly actualRevision: number,
  ) {
    super(
      `Concurrent write to ${persistenceId}: expected revision ${expectedRevision} but the store holds ${actualRevision}; reload and retry`,
    );
  }
}

/** An OperationId was reused with different content; an id names exactly one write. */
export class OperationConflictError extends Error {
  override readonly name = "OperationConflictError";
  constructor(
    readonly persistenceId: string,
    readonly operationId: string,
  ) {
    super(
      `Operation ${operationId} on ${persistenceId} was already used with different content; use a new OperationId for a new write`,
    );
  }
}

/** A fenced mutation came from a lease that is no longer current (older epoch, other owner, or expired). */
export class StaleShardOwnerError extends Error {
  override readonly name = "StaleShardOwnerError";
  readonly owner: string;
  readonly clusterName: string;
  readonly entityType: string;
  readonly shardId: number;
  readonly epoch: number;
  constructor(readonly token: ShardLeaseToken) {
    super(
      `Stale shard owner ${token.owner} for ${token.key.clusterName}/${token.key.entityType}/${token.key.shardId} at epoch ${token.epoch}: ` +
        "the lease expired or moved to another owner, so nothing was written; send the command again through sharding " +
        "(it routes to the shard's current owner) or acquire the lease anew before writing",
    );
    this.owner = token.owner;
    this.clusterName = token.key.clusterName;
    this.entityType = token.key.entityType;
    this.shardId = token.key.shardId;
    this.epoch = token.epoch;
  }
}

/** `deleteEventsTo` was asked to drop events that no snapshot covers yet. */
export class UnsafeRetentionError extends Error {
  override readonly name = "UnsafeRetentionError";
  constructor(
    readonly persistenceId: string,
    readonly requestedSequenceNr: number,
    readonly snapshotSequenceNr: number | null,
  ) {
    super(
      `Refusing to delete events of ${persistenceId} up to ${requestedSequenceNr}: ${
        snapshotSequenceNr === null ? "no snapshot exists" : `the latest snapshot is at ${snapshotSequenceNr}`
      }; save a snapshot at or past that sequence first`,
    );
  }
}

/** A stored row could not be read back (bad manifest, undecodable payload, impossible values). Never skipped. */
export class CorruptPersistentRecordError extends Error {
  override readonly name = "CorruptPersistentRecordError";
  constructor(
    readonly persistenceId: string,
    readonly sequenceNr: number,
    detail: string,
  ) {
    super(`Corrupt stored record for ${persistenceId} at sequence ${sequenceNr}: ${detail}; repair or remove the row`);
  }
}

/** A persistence setting is missing or invalid (no PostgreSQL URI, malformed URL, unopenable SQLite path, …). */
export class PersistenceConfigurationError extends Error {
  override readonly name = "PersistenceConfigurationError";
  constructor(
    readonly setting: string,
    detail: string,
  ) {
    super(`Invalid persistence setting ${setting}: ${detail}`);
  }
}

/** A store argument is invalid (empty persistence id, negative revision, empty event list where one is needed, …). */
export class InvalidPersistenceRequestError extends Error {
  override readonly name = "InvalidPersistenceRequestError";
  constructor(
    readonly field: string,
    detail: string,
  ) {
    super(`Invalid persistence request field ${field}: ${detail}`);
  }
}

/** The database holds a schema version newer than this build knows; upgrade the library before using it. */
export class UnsupportedSchemaVersionError extends Error {
  override readonly name = "UnsupportedSchemaVersionError";
  constructor(
    readonly foundVersion: number,
    readonly supportedVersion: number,
  ) {
    super(
      `Database schema version ${foundVersion} is newer than this build supports (${supportedVersion}); upgrade movie before connecting`,
    );
  }
}

/**
 * An applied migration's recorded checksum is not this build's hash of its statements (the migration's SQL was edited,
 * or another build migrated the database), or it is an earlier build's version-and-name checksum while schema
 * objects that history creates are missing (`missingObjects`).
 */
export class MigrationChecksumMismatchError extends Error {
  override readonly name = "MigrationChecksumMismatchError";
  constructor(
    readonly version: number,
    /** This build's checksum of the migration's statements. */
    readonly expectedChecksum: string,
    /** What the database records. */
    readonly actualChecksum: string,
    /** Objects (`table event_journal`, …) the applied history creates that the database lacks; empty otherwise. */
    readonly missingObjects: readonly string[] = [],
  ) {
    super(
      missingObjects.length === 0
        ? `Migration ${version} checksum mismatch: this build's statements hash to ${expectedChecksum} but the database records ${actualChecksum}, so the SQL that was applied is not this build's; connect with the build that migrated this database or restore it from a backup (never edit an applied migration: add a new version). If the change is known and intended, record this build's checksum for version ${version} by hand`
        : `Migration ${version} records the checksum of an earlier build (version and name only), but objects its history creates are missing (${missingObjects.join(", ")}): the database was not migrated by this history; restore it from a backup, or drop the schema and let the store migrate it afresh`,
    );
  }
}

/** The migration history is not the contiguous sequence 1..n. */
export class InvalidMigrationHistoryError extends Error {
  override readonly name = "InvalidMigrationHistoryError";
  constructor(readonly versions: readonly number[]) {
    super(`Invalid migration history [${versions.join(", ")}]: versions must be contiguous from 1; repair the table`);
  }
}

/** A store operation did not finish within the operation timeout; its outcome is unknown (retry with the same id). */
export class PersistenceTimeoutError extends Error {
  override readonly name = "PersistenceTimeoutError";
  constructor(
    readonly operation: string,
    readonly timeoutMs: number,
  ) {
    super(
      `Persistence operation ${operation} timed out after ${timeoutMs} ms; its outcome is unknown, retry with the same OperationId`,
    );
  }
}

/** The circuit breaker is open after repeated failures; requests fail fast until the reset timeout passes. */
export class CircuitOpenError extends Error {
  override readonly name = "CircuitOpenError";
  constructor(
    readonly operation: string,
    readonly retryAfterMs: number,
  ) {
    super(
      `Persistence circuit breaker is open; ${operation} rejected without trying, retry in ${Math.ceil(retryAfterMs)} ms`,
    );
  }
}

/** The connection to the database failed or was lost during an operation (outcome unknown for writes). */
export class PersistenceConnectionError extends Error {
  override readonly name = "PersistenceConnectionError";
  constructor(
    readonly operation: string,
    override readonly cause: Error,
  ) {
    super(`Persistence operation ${operation} lost its database connection: ${cause.message}`);
  }
}

/** The store was closed; create a new one. */
export class StoreClosedError extends Error {
  override readonly name = "StoreClosedError";
  constructor(
    readonly backend: string,
    /** Set when the store was closed because its actor system stopped (there is nothing to configure then). */
    readonly systemStopped = false,
  ) {
    super(
      systemStopped
        ? `The actor system's Database stopped with the system (its ${backend} store is closed); create a new ActorSystem to persist again`
        : `The ${backend} persistence store is closed; configure a new one`,
    );
  }
}

/** What a value of the persistence codec is to its entity; it names the class to register in the error. */
export type CodecRole = "event" | "state" | "snapshot" | "value";

/**
 * A value has no manifest in the codec: its class was not registered with the system's persistence codec. The message
 * says what to register where: `MessageRegistry.register` (remoting) and `Database.get(system).codec.register`
 * (persistence) are separate registries, and a persistent entity's state class needs the codec as well as its events,
 * since every command handler receives a codec copy of the state.
 */
export class UnknownManifestError extends Error {
  override readonly name = "UnknownManifestError";
  constructor(
    /** The class name (the manifest it would have). */
    readonly manifest: string,
    /** What the value was to its entity, when the codec was told. */
    readonly role: CodecRole = "value",
  ) {
    const what =
      role === "event"
        ? `the event class ${manifest}`
        : role === "state"
          ? `the state class ${manifest} (command handlers receive a codec copy of the state, so it is encoded even before anything is saved)`
          : role === "snapshot"
            ? `the state class ${manifest}, which a snapshot stores`
            : `the class ${manifest}`;
    super(
      `${what} is not registered with the persistence codec; call Database.get(system).codec.register(${manifest}) on every node before the entity runs. MessageRegistry.register (from movie/remote) is a separate registry, for messages sent between nodes only`,
    );
  }
}

/**
 * The store refused a request at once because a bounded queue is full (group commit's `maxWaiting` appends already
 * wait for a statement): the database is not keeping up. Nothing was sent, so a retry with the same OperationId is
 * safe.
 */
export class PersistenceOverloadedError extends Error {
  override readonly name = "PersistenceOverloadedError";
  constructor(
    /** The bounded queue, e.g. "group commit". */
    readonly queue: string,
    /** Its bound (items). */
    readonly limit: number,
  ) {
    super(
      `Persistence ${queue} is full (${limit} requests already wait for the database); nothing was written: back off and retry with the same OperationId, or raise the bound if the database has headroom`,
    );
  }
}

/**
 * `deleteEventsTo` would delete feed events that a projection has not processed yet (docs/protocol.md §13.1): its checkpoint
 * is below the largest offset the delete would remove.
 */
export class ProjectionBehindRetentionError extends Error {
  override readonly name = "ProjectionBehindRetentionError";
  constructor(
    readonly persistenceId: string,
    readonly requestedSequenceNr: number,
    /** A projection that lags (the one with the smallest checkpoint). */
    readonly projectionName: string,
    /** Its checkpoint offset. */
    readonly checkpointOffset: number,
  ) {
    super(
      `Refusing to delete events of ${persistenceId} up to ${requestedSequenceNr}: projection ${projectionName} is at offset ${checkpointOffset} and has not processed them yet; let it catch up, or delete its checkpoint if it is retired`,
    );
  }
}

/**
 * A projection's checkpoint was not where this instance expected it: another instance (or a rebuild) moved it, so
 * this batch committed nothing. The runner reloads the checkpoint and continues from there.
 */
export class ProjectionCheckpointConflictError extends Error {
  override readonly name = "ProjectionCheckpointConflictError";
  constructor(
    readonly projectionName: string,
    readonly expectedOffset: number,
    readonly actualOffset: number,
  ) {
    super(
      `Projection ${projectionName} checkpoint is at ${actualOffset}, not ${expectedOffset}: another instance or a rebuild moved it, so this batch committed nothing; reload the checkpoint and continue from it`,
    );
  }
}

/**
 * A rebuild batch found the projection's control row no longer asking for the rebuild it carried out (an operator
 * changed or withdrew it meanwhile): the batch committed nothing. The runner reads the control row again.
 */
export class ProjectionRebuildSupersededError extends Error {
  override readonly name = "ProjectionRebuildSupersededError";
  constructor(
    readonly projectionName: string,
    readonly rebuildFrom: number,
  ) {
    super(
      `Projection ${projectionName}: the rebuild from offset ${rebuildFrom} is no longer asked for (the operator changed it), so this batch committed nothing; read the control row again`,
    );
  }
}

/**
 * A persistence backend's driver package is not installed. The drivers are optional peer dependencies, so a user of
 * plain actors does not install them; the backend's entry point names the one it needs.
 */
export class MissingDriverError extends Error {
  override readonly name = "MissingDriverError";
  constructor(
    /** The npm package to install, e.g. `pg`. */
    readonly packageName: string,
    /** The Movie entry point that needs it, e.g. `movie/persistence/postgres`. */
    readonly entryPoint: string,
  ) {
    super(
      `${entryPoint} needs the package "${packageName}", which is not installed; run \`npm install ${packageName}\` in your project`,
    );
  }
}
