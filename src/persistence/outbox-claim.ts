/**
 * Claiming outbox rows for delivery (docs/outbox.md): a dispatcher takes a batch of undelivered, unparked rows whose
 * "not before" time (`lease_until_epoch_ms`) has passed on the database clock, and sets it to now + `leaseMs` under
 * its own name, in one statement (PostgreSQL: FOR UPDATE SKIP LOCKED, so two dispatchers never take the same row;
 * SQLite: one writer at a time). A row stays invisible to other claims until its lease ends: when the dispatcher dies
 * mid-batch, the rows come back after `leaseMs` and are delivered again (at-least-once). Each claim counts an attempt.
 */
import { describe } from "../actor/untrusted.ts";
import { InvalidPersistenceRequestError } from "./errors.ts";
import { decodeDestination, type OutboxDestination } from "./outbox-message.ts";

/** A claim: who claims, how many rows at most, and for how long. */
export interface OutboxClaimRequest {
  /** The claiming dispatcher's name (recorded as `lease_owner`; outcomes of another owner's claim are refused). */
  readonly owner: string;
  /** At most this many rows (1..1000). */
  readonly limit: number;
  /** The visibility timeout: the rows are the claimer's for this long (1 ms .. 1 hour). */
  readonly leaseMs: number;
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
}

/** What a failed delivery does to its row: come back after `retryAfterMs`, or be parked with the error. */
export interface OutboxFailure {
  readonly offset: number;
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
export function checkClaim(request: OutboxClaimRequest): OutboxClaimRequest {
  if (request === null || typeof request !== "object") {
    throw new InvalidPersistenceRequestError("claim", "expected { owner, limit, leaseMs }");
  }
  return {
    owner: checkOwner(request.owner),
    limit: whole("limit", request.limit, 1, 1000),
    leaseMs: whole("leaseMs", request.leaseMs, 1, 3_600_000),
  };
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
  return {
    offset,
    messageId,
    persistenceId,
    destination: decodeDestination(row.destination),
    manifest,
    payload,
    attempts,
  };
}
