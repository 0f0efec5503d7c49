/** Totals of the sharding layer that singleton stats copy (for the whole actor system, not one singleton). */
export interface SharedShardingTotals {
  readonly handoffsInProgress: number;
  readonly handoffsCompleted: number;
  readonly rejectedEnvelopes: number;
  readonly leaseAcquisitions: number;
  readonly leaseRenewals: number;
  readonly leaseLosses: number;
  readonly leaseRetries: number;
}

/** A snapshot of the singleton counters of one actor system, summed over its singletons (docs/protocol.md §12). */
export interface SingletonStats {
  /** `init` calls that registered a new singleton. */
  readonly registrations: number;
  /** Eager activations sent by this node (as activation coordinator). */
  readonly activationAttempts: number;
  /** Activations that created a singleton's first instance. */
  readonly activations: number;
  /** Activations that re-created a singleton after it stopped or moved. */
  readonly reactivations: number;
  /** Activations that failed or timed out. */
  readonly activationFailures: number;
  readonly tells: number;
  readonly asks: number;
  /** `sendSystem(STOP)` calls on singleton refs. */
  readonly stopRequests: number;
  /** Tells and asks that sharding refused (no owner, incompatible settings, …). */
  readonly routingRejections: number;
  /** Times a singleton's observed owner changed from one node to another. */
  readonly ownerChanges: number;
  readonly sharedShardingHandoffsInProgress: number;
  readonly sharedShardingHandoffsCompleted: number;
  readonly sharedShardingRejectedEnvelopes: number;
  readonly sharedShardingLeaseAcquisitions: number;
  readonly sharedShardingLeaseRenewals: number;
  readonly sharedShardingLeaseLosses: number;
  readonly sharedShardingLeaseRetries: number;
}

/** The counters the singleton layer owns (everything in {@link SingletonStats} except the shared sharding copies). */
export type SingletonCounter =
  | "registrations"
  | "activationAttempts"
  | "activationFailures"
  | "tells"
  | "asks"
  | "stopRequests"
  | "routingRejections";

/** Mutable singleton counters of one actor system, with the few rules that decide which counter moves. */
export class SingletonCounters {
  private readonly values: Record<SingletonCounter | "activations" | "reactivations" | "ownerChanges", number> = {
    registrations: 0,
    activationAttempts: 0,
    activations: 0,
    reactivations: 0,
    activationFailures: 0,
    tells: 0,
    asks: 0,
    stopRequests: 0,
    routingRejections: 0,
    ownerChanges: 0,
  };
  private readonly everActivated = new Set<string>();
  private readonly lastOwner = new Map<string, string>();

  /** Adds `by` (default 1) to `counter`. */
  increment(counter: SingletonCounter, by = 1): void {
    this.values[counter] += by;
  }

  /**
   * Counts the answer to an eager activation of singleton `name`: an accepted one is its first creation the first time,
   * a re-creation afterwards; a refused one (the instance was already alive) counts nothing.
   */
  recordActivation(name: string, accepted: boolean): void {
    if (!accepted) return;
    if (this.everActivated.has(name)) this.values.reactivations++;
    else {
      this.everActivated.add(name);
      this.values.activations++;
    }
  }

  /** Records the owner observed for singleton `name` (`null`: none right now); a different owner than before counts. */
  recordOwner(name: string, owner: string | null): void {
    if (owner === null) return;
    const previous = this.lastOwner.get(name);
    if (previous !== undefined && previous !== owner) this.values.ownerChanges++;
    this.lastOwner.set(name, owner);
  }

  /** A snapshot, with the sharding totals of the same system copied in. */
  snapshot(shared: SharedShardingTotals): SingletonStats {
    return {
      ...this.values,
      sharedShardingHandoffsInProgress: shared.handoffsInProgress,
      sharedShardingHandoffsCompleted: shared.handoffsCompleted,
      sharedShardingRejectedEnvelopes: shared.rejectedEnvelopes,
      sharedShardingLeaseAcquisitions: shared.leaseAcquisitions,
      sharedShardingLeaseRenewals: shared.leaseRenewals,
      sharedShardingLeaseLosses: shared.leaseLosses,
      sharedShardingLeaseRetries: shared.leaseRetries,
    };
  }
}
