/** Why a persistent shard's lease cannot be used right now (carried by the lease core's `fail` effects). */
export type LeaseUnavailableReason =
  /** The database returned no lease: another owner holds it and it has not expired. */
  | "fenced"
  /** The acquire or renew call failed (database error or timeout), or answered too late to be trusted. */
  | "error"
  /** This node is not safe to own (not Up, not converged, or a member is unreachable). */
  | "unsafe"
  /** The shard is not in this node's authorised owned set. */
  | "not-owned"
  /** The provider is stopping or stopped. */
  | "stopped";
