/** Lease bookkeeping for persistent sharded entities: pure core, token shape, ownership rule, entity-epoch rule. */
export { bindEntity, type EntityBinding } from "./entity-epoch.ts";
export type { LeaseUnavailableReason } from "./errors.ts";
export {
  createLeaseBook,
  failureError,
  type LeaseBookConfig,
  type LeaseBookState,
  type LeaseCounter,
  type LeaseEffect,
  type LeaseFailure,
  type LeaseInput,
  leaseKey,
  liveToken,
  type ShardLease,
  type StopReason,
  step,
} from "./lease-book.ts";
export { LeaseKeeper, type LeaseKeeperHooks, type LeaseStore } from "./lease-keeper.ts";
export { type ShardLeaseKey, type ShardLeaseToken, sameKey, sameLease } from "./lease-token.ts";
export { type OwnershipSnapshot, safeToOwn } from "./safe-to-own.ts";
