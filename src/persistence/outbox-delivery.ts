/**
 * The outcome of one delivery attempt of an outbox row (docs/outbox.md), pure: delivered; failed and retried after an
 * exponential backoff; or failed for the last time (attempt `maxAttempts`) or unreadable, and parked with its error.
 */
import { describe } from "../actor/untrusted.ts";
import { PersistenceConfigurationError } from "./errors.ts";

/** Retry settings of a dispatcher. */
export interface OutboxRetryPolicy {
  /** Attempts before a message is parked (default 10). */
  readonly maxAttempts: number;
  /** Delay after the first failure (default 100 ms); doubled after each further failure. */
  readonly firstBackoffMs: number;
  /** The longest delay (default 30 s). */
  readonly maxBackoffMs: number;
}

/** The default retry settings. */
export const defaultOutboxRetryPolicy: OutboxRetryPolicy = {
  maxAttempts: 10,
  firstBackoffMs: 100,
  maxBackoffMs: 30_000,
};

/** What happened to one claimed row. */
export type DeliveryOutcome =
  | { readonly kind: "delivered" }
  | { readonly kind: "retry"; readonly afterMs: number; readonly error: string }
  | { readonly kind: "park"; readonly error: string };

/** What an attempt observed: success, a failure (possibly transient), or an unreadable message (never retried). */
export type AttemptResult =
  | { readonly ok: true }
  | { readonly ok: false; readonly error: string; readonly unreadable?: boolean };

/**
 * The delay before attempt `attempts + 1` after `attempts` failed ones: firstBackoffMs × 2^(attempts − 1), at most
 * maxBackoffMs.
 */
export function outboxBackoffMs(attempts: number, policy: OutboxRetryPolicy): number {
  const exponent = Math.min(Math.max(attempts - 1, 0), 30);
  return Math.min(policy.firstBackoffMs * 2 ** exponent, policy.maxBackoffMs);
}

/** The outcome of attempt number `attempts` (1-based, as the claim counted it). */
export function deliveryOutcome(attempts: number, result: AttemptResult, policy: OutboxRetryPolicy): DeliveryOutcome {
  if (result.ok) return { kind: "delivered" };
  if (result.unreadable === true) return { kind: "park", error: result.error };
  if (attempts >= policy.maxAttempts) {
    return { kind: "park", error: `gave up after ${attempts} attempts: ${result.error}` };
  }
  return { kind: "retry", afterMs: outboxBackoffMs(attempts, policy), error: result.error };
}

/**
 * The policy with defaults filled in, checked.
 * @throws PersistenceConfigurationError
 */
export function outboxRetryPolicy(partial: Partial<OutboxRetryPolicy> = {}): OutboxRetryPolicy {
  const policy = { ...defaultOutboxRetryPolicy, ...partial };
  const check = (field: keyof OutboxRetryPolicy, min: number, max: number) => {
    const v = policy[field];
    if (typeof v !== "number" || !Number.isSafeInteger(v) || v < min || v > max) {
      throw new PersistenceConfigurationError(
        `outbox.retry.${field}`,
        `${describe(v)}; expected a whole number ${min}..${max}`,
      );
    }
  };
  check("maxAttempts", 1, 1_000_000);
  check("firstBackoffMs", 0, 3_600_000);
  check("maxBackoffMs", policy.firstBackoffMs, 86_400_000);
  return policy;
}
