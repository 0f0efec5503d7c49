/**
 * Claiming outbox rows for delivery (docs/outbox.md): a dispatcher takes a batch of undelivered, unparked rows whose
 * "not before" time (`lease_until_epoch_ms`) has passed on the database clock, and sets it to now + `leaseMs` under
 * its own name, in one statement (PostgreSQL: FOR UPDATE SKIP LOCKED, so two dispatchers never take the same row;
 * SQLite: one writer at a time). A row stays invisible to other claims until its lease ends: when the dispatcher dies
 * mid-batch, the rows come back after `leaseMs` and are delivered again (at-least-once). Each claim counts an attempt.
 *
 * Claims follow shard ownership (migration 15): each row records the shard lease key its sender wrote it under (the
 * write's fence), and only a claimer that presents that shard's current lease (owner, epoch, unexpired on the
 * database clock) takes it, recording the epoch on the row. A claim under a newer epoch also takes rows still claimed
 * under an older one (their claimer lost the shard), and a settle (complete, fail) of a sharded row changes it only
 * while the epoch it was claimed under is still the lease's current one: a stale owner can neither claim nor settle.
 * Rows without a shard (written unfenced, or before migration 15) are claimed by any claimer that asks for them.
 */
import { describe } from "../actor/untrusted.ts";
import { InvalidPersistenceRequestError } from "./errors.ts";
import { type ShardLeaseKey, type ShardLeaseToken, validateLeaseToken } from "./lease.ts";
import { decodeDestination, type OutboxDestination } from "./outbox-message.ts";

/** A claim: who claims, how many rows at most, for how long, and for which shards. */
export interface OutboxClaimRequest {
  /** The claiming dispatcher's name (recorded as `lease_owner`; outcomes of another owner's claim are refused). */
  readonly owner: string;
  /** At most this many rows (1..1000). */
  readonly limit: number;
  /** The visibility timeout: the rows are the claimer's for this long (1 ms .. 1 hour). */
  readonly leaseMs: number;
  /**
   * The shard leases the claimer holds (at most 10,000; `ClusterSharding.heldShardLeases()` on a node): rows written
   * under those shards are claimed, each under its lease, when the lease table still has that owner and epoch,
   * unexpired. A lease that is not current claims nothing and comes back in {@link OutboxClaim.staleLeases}.
   * Default none: only rows without a shard.
   */
  readonly leases?: readonly ShardLeaseToken[];
  /** Whether rows without a shard (written unfenced, or before migration 15) are claimed too; default true. */
  readonly unsharded?: boolean;
}

/** A claim request, checked. */
export interface CheckedClaim {
  readonly owner: string;
  readonly limit: number;
  readonly leaseMs: number;
  readonly leases: readonly ShardLeaseToken[];
  readonly unsharded: boolean;
}

/** What a claim took. */
export interface OutboxClaim {
  /** The rows claimed, oldest first. */
  readonly rows: ClaimedOutboxRow[];
  /** The leases of the request that were not current (another owner or epoch, expired): nothing was claimed under them. */
  readonly staleLeases: ShardLeaseToken[];
}

/** A claimed row as a settle names it: its offset and the epoch it was claimed under (null: a row without a shard). */
export interface OutboxClaimRef {
  readonly offset: number;
  readonly claimEpoch: number | null;
}

/** What a settle (completeOutbox, failOutbox) did. */
export interface OutboxSettleResult {
  /** Rows changed. */
  readonly settled: number;
  /**
   * Rows left unchanged because the shard lease they were claimed under is no longer current (another epoch, expired
   * or released) or a claim under a newer epoch took them: a stale owner's settle changes nothing.
   */
  readonly stale: number;
}

/** A claimed row, read back and checked. */
export interface ClaimedOutboxRow {
  /** The row's position in the outbox (commit order within one writer; the key of outcomes). */
  readonly offset: number;
  readonly messageId: string;
  /** The persistence id of the writer that sent it. */
  readonly persistenceId: string;
  /** The destination, or why it cannot be read (a corrupt row: the dispatcher parks it). */
  readonly destination: OutboxDestination | { readonly unreadable: string };
  readonly manifest: string;
  readonly payload: string;
  /** Attempts so far, this claim included. */
  readonly attempts: number;
  /** The shard its sender wrote it under, or null (written unfenced, or before migration 15). */
  readonly senderShard: ShardLeaseKey | null;
  /** The lease epoch it was claimed under (a settle must name it), or null for a row without a shard. */
  readonly claimEpoch: number | null;
}

/** What a failed delivery does to its row: come back after `retryAfterMs`, or be parked with the error. */
export interface OutboxFailure {
  readonly offset: number;
  /** The epoch the row was claimed under ({@link ClaimedOutboxRow.claimEpoch}); absent or null for a row without a shard. */
  readonly claimEpoch?: number | null;
  readonly error: string;
  readonly retryAfterMs: number;
  readonly park: boolean;
}

/** Counts of the outbox's rows by state, and the backlog's age. */
export interface OutboxCounts {
  /** Undelivered and not parked: the backlog (it includes `claimed` and `retrying`). */
  readonly pending: number;
  /** Pending rows a dispatcher's claim holds now (being delivered). */
  readonly claimed: number;
  /** Pending rows not claimed now that had a failed (or abandoned) attempt: waiting for their retry. */
  readonly retrying: number;
  readonly parked: number;
  readonly delivered: number;
  /**
   * Milliseconds since the oldest pending row was written, on the database clock (SQLite keeps whole seconds), or
   * null with no backlog.
   */
  readonly oldestPendingAgeMs: number | null;
}

/** A parked row, for operators: what it was and why it stopped. */
export interface ParkedOutboxRow {
  readonly offset: number;
  readonly messageId: string;
  readonly persistenceId: string;
  readonly attempts: number;
  readonly lastError: string;
}

/**
 * The "not claimable before" time of a parked row: the largest safe integer, so no claim ever reaches it and a parked
 * row needs no column of its own.
 */
export const PARKED_UNTIL_MS = Number.MAX_SAFE_INTEGER;

/** Longest error text stored with a failed row. */
export const MAX_OUTBOX_ERROR_LENGTH = 1000;

const whole = (field: string, value: unknown, min: number, max: number): number => {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < min || value > max) {
    throw new InvalidPersistenceRequestError(field, `${describe(value)}; expected a whole number ${min}..${max}`);
  }
  return value;
};

/**
 * Validates a claim request.
 * @throws InvalidPersistenceRequestError
 */
export function checkClaim(request: OutboxClaimRequest): CheckedClaim {
  if (request === null || typeof request !== "object") {
    throw new InvalidPersistenceRequestError("claim", "expected { owner, limit, leaseMs }");
  }
  const leases = request.leases ?? [];
  if (!Array.isArray(leases) || leases.length > MAX_CLAIM_LEASES) {
    throw new InvalidPersistenceRequestError("leases", `expected an array of at most ${MAX_CLAIM_LEASES} lease tokens`);
  }
  for (const lease of leases) validateLeaseToken(lease);
  const unsharded = request.unsharded ?? true;
  if (typeof unsharded !== "boolean") throw new InvalidPersistenceRequestError("unsharded", "must be a boolean");
  return {
    owner: checkOwner(request.owner),
    limit: whole("limit", request.limit, 1, 1000),
    leaseMs: whole("leaseMs", request.leaseMs, 1, 3_600_000),
    leases,
    unsharded,
  };
}

/** The most leases one claim may present. */
export const MAX_CLAIM_LEASES = 10_000;

/**
 * Validates the claimed rows a settle names (at most 1000): offsets whole numbers of 1 or more, epochs whole numbers
 * of 1 or more or null.
 * @throws InvalidPersistenceRequestError
 */
export function checkClaimRefs(refs: readonly OutboxClaimRef[]): OutboxClaimRef[] {
  if (!Array.isArray(refs) || refs.length > 1000) {
    throw new InvalidPersistenceRequestError("rows", "expected an array of at most 1000 claimed rows");
  }
  return refs.map((ref) => {
    if (ref === null || typeof ref !== "object") {
      throw new InvalidPersistenceRequestError("row", "expected { offset, claimEpoch }");
    }
    return {
      offset: whole("offset", ref.offset, 1, Number.MAX_SAFE_INTEGER),
      claimEpoch: checkEpoch(ref.claimEpoch),
    };
  });
}

/** A claim epoch: absent or null (no shard), else a whole number of 1 or more. */
function checkEpoch(epoch: unknown): number | null {
  return epoch === undefined || epoch === null ? null : whole("claimEpoch", epoch, 1, Number.MAX_SAFE_INTEGER);
}

/**
 * Validates a claim owner's name.
 * @throws InvalidPersistenceRequestError
 */
export function checkOwner(owner: unknown): string {
  if (typeof owner !== "string" || owner.length === 0 || owner.length > 256) {
    throw new InvalidPersistenceRequestError(
      "owner",
      `${describe(owner)}; expected a non-empty string of at most 256 characters`,
    );
  }
  return owner;
}

/**
 * Validates outbox offsets (whole numbers of 1 or more, at most 1000).
 * @throws InvalidPersistenceRequestError
 */
export function checkOffsets(offsets: readonly number[]): readonly number[] {
  if (!Array.isArray(offsets) || offsets.length > 1000) {
    throw new InvalidPersistenceRequestError("offsets", "expected an array of at most 1000 outbox offsets");
  }
  for (const offset of offsets) whole("offset", offset, 1, Number.MAX_SAFE_INTEGER);
  return offsets;
}

/**
 * Validates a failure outcome; the error text is cut to MAX_OUTBOX_ERROR_LENGTH.
 * @throws InvalidPersistenceRequestError
 */
export function checkFailure(failure: OutboxFailure): OutboxFailure {
  if (failure === null || typeof failure !== "object") {
    throw new InvalidPersistenceRequestError("failure", "expected { offset, error, retryAfterMs, park }");
  }
  if (typeof failure.error !== "string") throw new InvalidPersistenceRequestError("failure.error", "must be a string");
  if (typeof failure.park !== "boolean") throw new InvalidPersistenceRequestError("failure.park", "must be a boolean");
  return {
    offset: whole("failure.offset", failure.offset, 1, Number.MAX_SAFE_INTEGER),
    claimEpoch: checkEpoch(failure.claimEpoch),
    error: failure.error.slice(0, MAX_OUTBOX_ERROR_LENGTH),
    retryAfterMs: whole("failure.retryAfterMs", failure.retryAfterMs, 0, 86_400_000),
    park: failure.park,
  };
}

/** OutboxCounts from the counts query's row (numbers may arrive as text or null: PostgreSQL BIGINT, SQLite sum). */
export function outboxCountsOf(row: Record<string, unknown> | undefined): OutboxCounts {
  const n = (value: unknown): number => {
    const v = Number(value ?? 0);
    return Number.isSafeInteger(v) && v >= 0 ? v : 0;
  };
  const age = row?.oldest_pending_age_ms;
  return {
    pending: n(row?.pending),
    claimed: n(row?.claimed),
    retrying: n(row?.retrying),
    parked: n(row?.parked),
    delivered: n(row?.delivered),
    oldestPendingAgeMs: age === null || age === undefined ? null : n(Math.max(0, Math.floor(Number(age)))),
  };
}

/**
 * A claimed row as the database returned it, checked: numbers may arrive as text (PostgreSQL BIGINT). A row whose
 * columns are not what the schema says yields null (the caller counts and skips it; its lease ends and it is seen
 * again, so an operator can repair it).
 */
export function checkClaimedRow(row: Record<string, unknown>): ClaimedOutboxRow | null {
  const offset = Number(row.outbox_offset);
  const attempts = Number(row.attempts);
  const { message_id: messageId, persistence_id: persistenceId, manifest, payload } = row;
  if (!Number.isSafeInteger(offset) || offset < 1 || !Number.isSafeInteger(attempts) || attempts < 0) return null;
  if (typeof messageId !== "string" || typeof persistenceId !== "string") return null;
  if (typeof manifest !== "string" || typeof payload !== "string") return null;
  const senderShard = checkSenderShard(row.sender_cluster, row.sender_type, row.sender_shard);
  if (senderShard === undefined) return null;
  const claimEpoch = row.claim_epoch === null || row.claim_epoch === undefined ? null : Number(row.claim_epoch);
  if (claimEpoch !== null && (!Number.isSafeInteger(claimEpoch) || claimEpoch < 1)) return null;
  if ((senderShard === null) !== (claimEpoch === null)) return null;
  return {
    offset,
    messageId,
    persistenceId,
    destination: decodeDestination(row.destination),
    manifest,
    payload,
    attempts,
    senderShard,
    claimEpoch,
  };
}

/** A row's sender shard columns: null when all three are null, undefined when they are not a lease key. */
function checkSenderShard(cluster: unknown, type: unknown, shard: unknown): ShardLeaseKey | null | undefined {
  if ((cluster === null || cluster === undefined) && (type === null || type === undefined)) {
    return shard === null || shard === undefined ? null : undefined;
  }
  const shardId = Number(shard);
  if (typeof cluster !== "string" || cluster.length === 0 || typeof type !== "string" || type.length === 0) {
    return undefined;
  }
  if (shard === null || !Number.isSafeInteger(shardId) || shardId < 0) return undefined;
  return { clusterName: cluster, entityType: type, shardId };
}
