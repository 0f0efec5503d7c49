/** Persistence: event sourcing, durable state, the store contract, shard leases and epoch fencing. */
export * from "./errors.ts";
export { eventsFingerprint, stateFingerprint } from "./fingerprint.ts";
export {
  describeLeaseToken,
  type ShardLeaseKey,
  type ShardLeaseToken,
  validateLeaseKey,
  validateLeaseRequest,
  validateLeaseToken,
} from "./lease.ts";
export { MemoryStore, type MemoryStoreOptions } from "./memory/index.ts";
export { OperationId } from "./operation-id.ts";
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
