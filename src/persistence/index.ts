/** Persistence: event sourcing, durable state, the store contract, shard leases and epoch fencing. */

export { admit, type CircuitSettings, type CircuitState, closedCircuit, record } from "./circuit-breaker.ts";
export { type CodecClass, JSON_MANIFEST, PersistenceCodec, type Upcaster } from "./codec.ts";
export { Database } from "./database.ts";
export { DurableState, DurableStateBehavior } from "./durable-state.ts";
export {
  type DurableEffect,
  DurableStateEffect,
  Effect,
  type EventEffect,
  EventSourcedEffect,
  type OutboxMessageOrBuilder,
} from "./effect.ts";
export { EntityId, EntityType } from "./entity-type.ts";
export * from "./errors.ts";
export { EventFeed, type EventStreamOptions } from "./event-feed.ts";
export { type BehaviorClass, type EntityContext, EventSourcedBehavior, EventSourcing } from "./event-sourcing.ts";
export {
  checkProjectionControlChange,
  defaultProjectionControl,
  type EventFilter,
  type EventPage,
  type EventQuery,
  entityTypeOf,
  type FeedEvent,
  MAX_TAG_LENGTH,
  MAX_TAGS_PER_EVENT,
  type ProjectionBatchRequest,
  type ProjectionControl,
  type ProjectionControlChange,
  type ProjectionTransaction,
} from "./feed.ts";
export { eventsFingerprint, stateFingerprint } from "./fingerprint.ts";
export {
  defaultGroupCommit,
  GroupCommit,
  type GroupCommitSettings,
  type GroupCommitStats,
  groupCommitSettings,
} from "./group-commit.ts";
export {
  describeLeaseToken,
  type ShardLeaseKey,
  type ShardLeaseToken,
  validateLeaseKey,
  validateLeaseRequest,
  validateLeaseToken,
} from "./lease.ts";
export { MemoryStore, type MemoryStoreOptions } from "./memory/index.ts";
export {
  type AppliedMigration,
  CURRENT_SCHEMA_VERSION,
  checkRebaseline,
  legacyMigrationChecksum,
  MIGRATION_NAMES,
  type Migration,
  type MigrationPlan,
  migrationChecksum,
  planMigrations,
  type SchemaObject,
  schemaObjects,
} from "./migrations.ts";
export { OperationId } from "./operation-id.ts";
export {
  type ClaimedOutboxRow,
  MAX_OUTBOX_ERROR_LENGTH,
  type OutboxClaim,
  type OutboxClaimRef,
  type OutboxClaimRequest,
  type OutboxCounts,
  type OutboxFailure,
  type OutboxSettleResult,
  type ParkedOutboxRow,
} from "./outbox-claim.ts";
export {
  type AttemptResult,
  type DeliveryOutcome,
  defaultOutboxRetryPolicy,
  deliveryOutcome,
  type OutboxRetryPolicy,
  outboxBackoffMs,
  outboxRetryPolicy,
} from "./outbox-delivery.ts";
export {
  deliverThroughSharding,
  type EntityAsker,
  type EntityAskRef,
  type OutboxBatchResult,
  type OutboxDeliverer,
  type OutboxDelivery,
  OutboxDispatcher,
  type OutboxDispatcherOptions,
  type OutboxDispatcherStats,
} from "./outbox-dispatcher.ts";
export {
  entityDestination,
  MAX_DESTINATION_PART_LENGTH,
  MAX_OUTBOX_MESSAGE_ID_LENGTH,
  MAX_OUTBOX_MESSAGES_PER_WRITE,
  type OutboxDestination,
  type OutboxRecord,
  type OutboxSend,
  outboxMessageId,
} from "./outbox-message.ts";
export {
  type AtLeastOnceProjection,
  type ExactlyOnceProjection,
  type Projection,
  type ProjectionRebuild,
  ProjectionRunner,
  type ProjectionRunOptions,
  type ProjectionStats,
  type ProjectionStatus,
} from "./projection.ts";
export { Projections } from "./projections.ts";
export {
  backoffMs,
  defaultResilience,
  type ResilienceSettings,
  type ResilienceStats,
  Resilient,
} from "./resilience.ts";
export { type PersistenceSettings, validatePersistenceSettings } from "./settings.ts";
export {
  type AppendEventsRequest,
  type BackendName,
  type DeleteStateRequest,
  type EventRecord,
  type PersistenceStore,
  type RetentionResult,
  type SaveStateRequest,
  type SnapshotRecord,
  type StateRecord,
  type StoredEvent,
  TOMBSTONE_MANIFEST,
  type WriteResult,
} from "./store.ts";
export { WriteLatency } from "./write-latency.ts";
