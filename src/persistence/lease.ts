import { describe } from "../actor/untrusted.ts";
import { InvalidPersistenceRequestError } from "./errors.ts";

/** Identifies one shard lease: (cluster name, entity type, shard id), docs/protocol.md §13.2 `shard_lease`. */
export interface ShardLeaseKey {
  readonly clusterName: string;
  readonly entityType: string;
  readonly shardId: number;
}

/**
 * Proof of holding a shard lease: the key, the owner string, the epoch (monotonic per ownership transfer) and the
 * expiry in database-clock epoch milliseconds. Passed as the fence of every fenced mutation.
 */
export interface ShardLeaseToken {
  readonly key: ShardLeaseKey;
  readonly owner: string;
  readonly epoch: number;
  readonly leaseUntilEpochMs: number;
}

/**
 * Validates a lease key (docs/protocol.md §13.3): cluster name and entity type not empty, shard id a whole number >= 0.
 * @throws InvalidPersistenceRequestError
 */
export function validateLeaseKey(key: ShardLeaseKey): ShardLeaseKey {
  if (key === null || typeof key !== "object") {
    throw new InvalidPersistenceRequestError("lease key", "expected { clusterName, entityType, shardId }");
  }
  requireNonEmpty("clusterName", key.clusterName);
  requireNonEmpty("entityType", key.entityType);
  if (!Number.isSafeInteger(key.shardId) || key.shardId < 0) {
    throw new InvalidPersistenceRequestError(
      "shardId",
      `${describe(key.shardId)}; expected a whole number of 0 or more`,
    );
  }
  return key;
}

/**
 * Validates an owner string (not empty) and a lease duration (whole milliseconds above 0).
 * @throws InvalidPersistenceRequestError
 */
export function validateLeaseRequest(owner: string, durationMs: number): void {
  requireNonEmpty("owner", owner);
  if (!Number.isSafeInteger(durationMs) || durationMs <= 0) {
    throw new InvalidPersistenceRequestError(
      "lease duration",
      `${describe(durationMs)} ms; expected a whole number above 0`,
    );
  }
}

/**
 * Validates a token given back to renew, release or a fenced mutation.
 * @throws InvalidPersistenceRequestError
 */
export function validateLeaseToken(token: ShardLeaseToken): ShardLeaseToken {
  if (token === null || typeof token !== "object") {
    throw new InvalidPersistenceRequestError("fence", "expected a ShardLeaseToken from acquireShardLease");
  }
  validateLeaseKey(token.key);
  requireNonEmpty("owner", token.owner);
  if (!Number.isSafeInteger(token.epoch) || token.epoch < 1) {
    throw new InvalidPersistenceRequestError("epoch", `${describe(token.epoch)}; expected a whole number of 1 or more`);
  }
  return token;
}

/** A short printable form of a token, for logs and actor names: `cluster/type/shard@epoch`. */
export function describeLeaseToken(token: ShardLeaseToken): string {
  return `${token.key.clusterName}/${token.key.entityType}/${token.key.shardId}@${token.epoch}`;
}

function requireNonEmpty(field: string, value: unknown): void {
  if (typeof value !== "string" || value.length === 0) {
    throw new InvalidPersistenceRequestError(field, "must be a non-empty string");
  }
}
