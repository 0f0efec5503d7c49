/**
 * The sharding errors the lease core and the singleton raise, with REFERENCE §3.14's texts. They are defined here
 * (not imported from `src/sharding/errors.ts`) only while that file is being written on another branch; on merge
 * these become re-exports of the sharding layer's classes, which keep the same names and fields.
 */

/** Why a persistent shard's lease cannot be used right now. */
export type LeaseUnavailableReason =
  /** The database returned no lease: another owner holds it and it has not expired. */
  | "fenced"
  /** The acquire or renew call failed (database error or timeout). */
  | "error"
  /** This node is not safe to own (not Up, not converged, or a member is unreachable). */
  | "unsafe"
  /** The shard is not in this node's authorised owned set. */
  | "not-owned"
  /** The provider is stopping or stopped. */
  | "stopped";

/**
 * A delivery to a persistent shard could not get its lease (REFERENCE §3.12); the retry barrier retries it until the
 * lease window ends.
 */
export class ShardLeaseUnavailableError extends Error {
  override readonly name = "ShardLeaseUnavailableError";
  constructor(
    readonly entityType: string,
    readonly shardId: number,
    readonly reason: LeaseUnavailableReason = "fenced",
  ) {
    super(`Persistent shard ${entityType}/${shardId} is fenced by another owner`);
  }
}

/** A delivery reached a shard that is draining on this node for a handoff; it is retried until the handoff ends. */
export class ShardHandoffInProgressError extends Error {
  override readonly name = "ShardHandoffInProgressError";
  constructor(
    readonly entityType: string,
    readonly shardId: number,
  ) {
    super(`Shard ${entityType}/${shardId} is draining on its previous owner`);
  }
}

/** A sharding setting, registration or envelope does not fit this node's configuration. */
export class ClusterShardingConfigurationError extends Error {
  override readonly name = "ClusterShardingConfigurationError";
  /** @param message says what is wrong and what to change */
  constructor(
    message: string,
    readonly field: string | null = null,
  ) {
    super(message);
  }
}
