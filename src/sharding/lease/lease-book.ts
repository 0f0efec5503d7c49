/**
 * The lease bookkeeping of one node's persistent provider for one routing name (docs/protocol.md §11.2), as a pure
 * state machine: `step(state, input, nowMs) => [state, effects]`. The shell performs the effects (database calls,
 * timers, stopping entity actors, answering deliveries) and feeds the results back as inputs.
 *
 * Per shard:
 *
 * ```
 *   (none) --needLease--> acquiring --acquired(token)--> held --renewTick--> held(renewing) --renewed--> held
 *      ^                      |  acquired(null) / error      |  renew null / error, local expiry: loss -> (none)
 *      |                      +------------------------------+  unsafe: loss, dropped WITHOUT release -> (none)
 *      |                                                     |
 *      |                                      drain / retain / stopAll: stop entities
 *      |                                                     v
 *      +---- released / releaseFailed ---- releasing <--entitiesStopped-- draining
 * ```
 *
 * Rules this core keeps:
 * - A delivery is granted only a lease that is held and still valid on the local clock. Local validity is measured
 *   from when the acquire or renew call was issued, so it ends no later than the database's own expiry.
 * - While the node is not safe to own, nothing is acquired or renewed, and every lease is dropped without being
 *   released so that it expires in the database rather than passing to a possibly active partition.
 * - A lease that is handed off, no longer retained or stopped is released only after its entities were stopped.
 * - The epoch of a shard's lease never decreases; a token with a lower epoch than one already seen is refused.
 */
import {
  ClusterShardingConfigurationError,
  ShardHandoffInProgressError,
  ShardLeaseUnavailableError,
} from "../errors.ts";
import type { LeaseUnavailableReason } from "./errors.ts";
import { type ShardLeaseKey, type ShardLeaseToken, sameKey, sameLease } from "./lease-token.ts";

/** What the book needs to know about its provider. Durations in milliseconds. */
export interface LeaseBookConfig {
  /** The cluster name (lease key part). */
  readonly clusterName: string;
  /** The routing name (lease key part; the sharding provider's name). */
  readonly entityType: string;
  /** This node's `UniqueAddress` string. */
  readonly owner: string;
  /** How long an acquired or renewed lease lasts, in ms (default 10,000 in the settings). */
  readonly leaseDurationMs: number;
  /** How long after an acquire or renewal the next renewal is due, in ms; below `leaseDurationMs`. */
  readonly leaseRenewIntervalMs: number;
}

/** One shard's lease, when the book tracks one. */
export type ShardLease =
  | {
      readonly phase: "acquiring";
      readonly callId: number;
      readonly issuedAtMs: number;
      /** Deliveries waiting for this acquire, in arrival order. */
      readonly waiters: readonly number[];
      /** True when the shard was given up while the call was in flight: release whatever comes back. */
      readonly abandoned: boolean;
    }
  | {
      readonly phase: "held";
      readonly token: ShardLeaseToken;
      /** Local-clock end of validity: when the acquire or renew that produced `token` was issued, plus the duration. */
      readonly validUntilMs: number;
      readonly renewDueMs: number;
      /** The renew call in flight, if any. */
      readonly renewCallId: number | null;
      readonly renewIssuedAtMs: number;
    }
  | { readonly phase: "draining"; readonly token: ShardLeaseToken }
  | {
      readonly phase: "releasing";
      readonly callId: number;
      readonly token: ShardLeaseToken;
      /** Deliveries that arrived after the shard was owned again; they acquire once the release is done. */
      readonly waiters: readonly number[];
    };

/** The whole book. Treat as immutable: `step` returns a new one. */
export interface LeaseBookState {
  readonly config: LeaseBookConfig;
  /** Whether the node is currently safe to own (see `safeToOwn`); false until told otherwise. */
  readonly safe: boolean;
  /** True after `stopAll`: nothing is acquired again. */
  readonly stopped: boolean;
  /** The shards this node is authorised to own (from the plan, plus prepared handoff targets). */
  readonly owned: ReadonlySet<number>;
  readonly shards: ReadonlyMap<number, ShardLease>;
  /** The highest epoch ever held per shard, to refuse a token that would move backwards. */
  readonly highestEpoch: ReadonlyMap<number, number>;
  readonly nextCallId: number;
}

/** The counters the book moves (docs/protocol.md §16.2 `lease_acquisitions`, `_renewals`, `_losses`; the barrier counts retries). */
export type LeaseCounter = "leaseAcquisitions" | "leaseRenewals" | "leaseLosses";

/** Why entities of a shard are being stopped. */
export type StopReason = "lost" | "suspended" | "handoff" | "not-retained" | "stopping";

/** The error a refused delivery gets, as data; the shell raises the matching class. */
export type LeaseFailure =
  | { readonly error: "ShardLeaseUnavailableError"; readonly reason: LeaseUnavailableReason; readonly detail?: string }
  | { readonly error: "ShardHandoffInProgressError" };

/** Inputs to {@link step}. Request ids are the shell's delivery ids; call ids come from the book's own effects. */
export type LeaseInput =
  /** A delivery to `shardId` needs the lease (lease retries are counted by the retry barrier, not here). */
  | { readonly kind: "needLease"; readonly requestId: number; readonly shardId: number }
  /** The acquire call `callId` returned a token, or `null` when another owner holds the lease. */
  | {
      readonly kind: "acquired";
      readonly callId: number;
      readonly shardId: number;
      readonly token: ShardLeaseToken | null;
    }
  /** The acquire call `callId` failed (database error or timeout). */
  | { readonly kind: "acquireFailed"; readonly callId: number; readonly shardId: number; readonly error: string }
  /** The renewal timer of `shardId` at `epoch` fired; `safeToOwn` is the rule evaluated on the live snapshot. */
  | { readonly kind: "renewTick"; readonly shardId: number; readonly epoch: number; readonly safeToOwn: boolean }
  /** Something suggests the lease may be gone (an entity stopped after a fenced write): renew now to find out. */
  | { readonly kind: "verify"; readonly shardId: number }
  /** The renew call `callId` returned the reloaded token, or `null` when the lease is no longer ours. */
  | {
      readonly kind: "renewed";
      readonly callId: number;
      readonly shardId: number;
      readonly token: ShardLeaseToken | null;
    }
  /** The renew call `callId` failed. */
  | { readonly kind: "renewFailed"; readonly callId: number; readonly shardId: number; readonly error: string }
  /** The release call `callId` finished (`released` false when the row had already moved on). */
  | { readonly kind: "released"; readonly callId: number; readonly shardId: number; readonly released: boolean }
  /** The release call `callId` failed; the lease will simply expire. */
  | { readonly kind: "releaseFailed"; readonly callId: number; readonly shardId: number; readonly error: string }
  /** The safe-to-own rule changed; `false` suspends every lease without releasing it. */
  | { readonly kind: "safeToOwn"; readonly safe: boolean }
  /** `shardId` became owned here (allocated by the plan, or prepared as a handoff target). */
  | { readonly kind: "own"; readonly shardId: number }
  /** Exactly these shards are owned here now; the others are drained and released. */
  | { readonly kind: "retain"; readonly shardIds: Iterable<number> }
  /** Hand `shardId` off: stop its entities, then release its lease. */
  | { readonly kind: "drain"; readonly shardId: number }
  /** The entities of `shardId` that the book asked to stop have stopped. */
  | { readonly kind: "entitiesStopped"; readonly shardId: number }
  /** The provider stops: every shard is drained and released, nothing is acquired again. */
  | { readonly kind: "stopAll" };

/** Effects of {@link step}, performed by the shell in order. */
export type LeaseEffect =
  | {
      readonly kind: "acquire";
      readonly callId: number;
      readonly key: ShardLeaseKey;
      readonly owner: string;
      readonly leaseDurationMs: number;
    }
  | {
      readonly kind: "renew";
      readonly callId: number;
      readonly token: ShardLeaseToken;
      readonly leaseDurationMs: number;
    }
  | { readonly kind: "release"; readonly callId: number; readonly token: ShardLeaseToken }
  /** Feed `renewTick` for this shard and epoch after `afterMs`. */
  | { readonly kind: "scheduleRenewal"; readonly shardId: number; readonly epoch: number; readonly afterMs: number }
  /** Stop every entity actor of the shard; for `handoff`, `not-retained` and `stopping` answer with `entitiesStopped`. */
  | { readonly kind: "stopEntities"; readonly shardId: number; readonly reason: StopReason }
  /** The delivery may proceed under `token` (entities bind to its epoch). */
  | { readonly kind: "grant"; readonly requestId: number; readonly token: ShardLeaseToken }
  /** The delivery is refused with the given error. */
  | { readonly kind: "fail"; readonly requestId: number; readonly shardId: number; readonly failure: LeaseFailure }
  /** The shard holds no lease here any more (after a drain, retain or stop); a waiting handoff may continue. */
  | { readonly kind: "drained"; readonly shardId: number }
  | { readonly kind: "count"; readonly counter: LeaseCounter; readonly by: number };

/**
 * Validates `config` and returns an empty book (not yet safe to own, no shard owned).
 * @throws ClusterShardingConfigurationError when a key part is empty or the durations are out of range
 */
export function createLeaseBook(config: LeaseBookConfig): LeaseBookState {
  if (config.clusterName.length === 0) throw configError("cluster name must not be empty", "clusterName");
  if (config.entityType.length === 0) throw configError("persistent sharding name must not be empty", "routingName");
  if (config.owner.length === 0) throw configError("lease owner must not be empty", "owner");
  if (!(Number.isFinite(config.leaseDurationMs) && config.leaseDurationMs > 0)) {
    throw configError("shard lease duration must be positive", "leaseDuration");
  }
  if (
    !(
      Number.isFinite(config.leaseRenewIntervalMs) &&
      config.leaseRenewIntervalMs > 0 &&
      config.leaseRenewIntervalMs < config.leaseDurationMs
    )
  ) {
    throw configError(
      "shard lease renewal interval must be positive and shorter than its duration",
      "leaseRenewInterval",
    );
  }
  return {
    config,
    safe: false,
    stopped: false,
    owned: new Set(),
    shards: new Map(),
    highestEpoch: new Map(),
    nextCallId: 1,
  };
}

function configError(text: string, field: string): ClusterShardingConfigurationError {
  return new ClusterShardingConfigurationError(`Invalid persistent sharding settings: ${text}`, field);
}

/**
 * The token a delivery to `shardId` may use right now without a step, or `null` when the slow path ({@link step}
 * with `needLease`) must decide. This is the hot path: it allocates nothing.
 */
export function liveToken(state: LeaseBookState, shardId: number, nowMs: number): ShardLeaseToken | null {
  if (!state.safe || state.stopped) return null;
  const lease = state.shards.get(shardId);
  if (lease === undefined || lease.phase !== "held" || nowMs >= lease.validUntilMs) return null;
  return lease.token;
}

/** The lease key of `shardId` under this book's config. */
export function leaseKey(config: LeaseBookConfig, shardId: number): ShardLeaseKey {
  return { clusterName: config.clusterName, entityType: config.entityType, shardId };
}

/** Mutable working copy of one step; turned back into an immutable state at the end. */
class Draft {
  safe: boolean;
  stopped: boolean;
  owned: Set<number>;
  shards: Map<number, ShardLease>;
  highestEpoch: Map<number, number>;
  nextCallId: number;
  readonly effects: LeaseEffect[] = [];

  constructor(
    readonly state: LeaseBookState,
    readonly nowMs: number,
  ) {
    this.safe = state.safe;
    this.stopped = state.stopped;
    this.owned = new Set(state.owned);
    this.shards = new Map(state.shards);
    this.highestEpoch = new Map(state.highestEpoch);
    this.nextCallId = state.nextCallId;
  }

  get config(): LeaseBookConfig {
    return this.state.config;
  }

  callId(): number {
    return this.nextCallId++;
  }

  count(counter: LeaseCounter, by = 1): void {
    if (by > 0) this.effects.push({ kind: "count", counter, by });
  }

  fail(requestIds: readonly number[], shardId: number, failure: LeaseFailure): void {
    for (const requestId of requestIds) this.effects.push({ kind: "fail", requestId, shardId, failure });
  }

  startAcquire(shardId: number, waiters: readonly number[]): void {
    const callId = this.callId();
    this.shards.set(shardId, { phase: "acquiring", callId, issuedAtMs: this.nowMs, waiters, abandoned: false });
    this.effects.push({
      kind: "acquire",
      callId,
      key: leaseKey(this.config, shardId),
      owner: this.config.owner,
      leaseDurationMs: this.config.leaseDurationMs,
    });
  }

  /** The lease is gone (the database or the local clock says so): stop entities, forget it, count a loss. */
  lose(shardId: number): void {
    this.shards.delete(shardId);
    this.count("leaseLosses");
    this.effects.push({ kind: "stopEntities", shardId, reason: "lost" });
  }

  /** Give the shard's lease up in order: entities first, then the release. */
  beginDrain(shardId: number, reason: StopReason, failure: LeaseFailure): void {
    const lease = this.shards.get(shardId);
    if (lease === undefined) {
      this.effects.push({ kind: "drained", shardId });
      return;
    }
    switch (lease.phase) {
      case "held":
        this.shards.set(shardId, { phase: "draining", token: lease.token });
        this.effects.push({ kind: "stopEntities", shardId, reason });
        return;
      case "acquiring":
        this.fail(lease.waiters, shardId, failure);
        this.shards.set(shardId, { ...lease, waiters: [], abandoned: true });
        return;
      case "releasing":
        // Already on its way out; whoever re-owned it in the meantime is no longer authorised.
        this.fail(lease.waiters, shardId, failure);
        this.shards.set(shardId, { ...lease, waiters: [] });
        return;
      case "draining":
        return;
    }
  }

  /** Not safe to own: drop every lease without releasing it, stop entities, count the losses (docs/protocol.md §11.1). */
  suspend(): void {
    this.safe = false;
    let lost = 0;
    for (const [shardId, lease] of [...this.shards]) {
      switch (lease.phase) {
        case "held":
        case "draining":
          lost++;
          this.shards.delete(shardId);
          if (lease.phase === "held") this.effects.push({ kind: "stopEntities", shardId, reason: "suspended" });
          else this.effects.push({ kind: "drained", shardId });
          break;
        case "acquiring":
          // Whatever this call returns is never used nor released: the entry is gone, so the result is stale.
          this.fail(lease.waiters, shardId, { error: "ShardLeaseUnavailableError", reason: "unsafe" });
          this.shards.delete(shardId);
          break;
        case "releasing":
          // The release was sent while it was still safe; it completes as it is.
          this.fail(lease.waiters, shardId, { error: "ShardLeaseUnavailableError", reason: "unsafe" });
          this.shards.set(shardId, { ...lease, waiters: [] });
          break;
      }
    }
    this.count("leaseLosses", lost);
  }

  finish(): [LeaseBookState, LeaseEffect[]] {
    const state: LeaseBookState = {
      config: this.config,
      safe: this.safe,
      stopped: this.stopped,
      owned: this.owned,
      shards: this.shards,
      highestEpoch: this.highestEpoch,
      nextCallId: this.nextCallId,
    };
    return [state, this.effects];
  }
}

const unavailable = (reason: LeaseUnavailableReason, detail?: string): LeaseFailure =>
  detail === undefined
    ? { error: "ShardLeaseUnavailableError", reason }
    : { error: "ShardLeaseUnavailableError", reason, detail };
const handoff: LeaseFailure = { error: "ShardHandoffInProgressError" };

/** Advances the book by one input at local monotonic time `nowMs` (ms); returns the new book and its effects. */
export function step(state: LeaseBookState, input: LeaseInput, nowMs: number): [LeaseBookState, LeaseEffect[]] {
  return stepAll(state, [input], nowMs);
}

/**
 * Advances the book by several inputs at one instant: the same book and the same effects, in the same order, as
 * stepping through them one by one, but with one working copy of the book instead of one per input, so that a
 * renewal round or a batch answer for n shards costs O(n) rather than O(n²).
 */
export function stepAll(
  state: LeaseBookState,
  inputs: readonly LeaseInput[],
  nowMs: number,
): [LeaseBookState, LeaseEffect[]] {
  const d = new Draft(state, nowMs);
  for (const input of inputs) apply(d, input);
  return d.finish();
}

function apply(d: Draft, input: LeaseInput): void {
  switch (input.kind) {
    case "needLease":
      needLease(d, input.requestId, input.shardId);
      break;
    case "acquired":
      acquired(d, input.callId, input.shardId, input.token);
      break;
    case "acquireFailed":
      acquireFailed(d, input.callId, input.shardId, input.error);
      break;
    case "renewTick":
      renewTick(d, input.shardId, input.epoch, input.safeToOwn);
      break;
    case "verify": {
      const lease = d.shards.get(input.shardId);
      if (d.safe && lease?.phase === "held" && lease.renewCallId === null && d.nowMs < lease.validUntilMs) {
        const callId = d.callId();
        d.shards.set(input.shardId, { ...lease, renewCallId: callId, renewIssuedAtMs: d.nowMs });
        d.effects.push({ kind: "renew", callId, token: lease.token, leaseDurationMs: d.config.leaseDurationMs });
      }
      break;
    }
    case "renewed":
      renewed(d, input.callId, input.shardId, input.token);
      break;
    case "renewFailed":
      renewed(d, input.callId, input.shardId, null);
      break;
    case "released":
    case "releaseFailed":
      releaseDone(d, input.callId, input.shardId);
      break;
    case "safeToOwn":
      if (input.safe) d.safe = true;
      else d.suspend();
      break;
    case "own":
      if (!d.stopped) d.owned.add(input.shardId);
      break;
    case "retain": {
      const keep = new Set(input.shardIds);
      d.owned = d.stopped ? new Set() : keep;
      for (const shardId of [...d.shards.keys()]) {
        if (!keep.has(shardId)) d.beginDrain(shardId, "not-retained", unavailable("not-owned"));
      }
      break;
    }
    case "drain":
      d.owned.delete(input.shardId);
      d.beginDrain(input.shardId, "handoff", handoff);
      break;
    case "entitiesStopped": {
      const lease = d.shards.get(input.shardId);
      if (lease?.phase === "draining") {
        const callId = d.callId();
        d.shards.set(input.shardId, { phase: "releasing", callId, token: lease.token, waiters: [] });
        d.effects.push({ kind: "release", callId, token: lease.token });
      }
      break;
    }
    case "stopAll":
      d.stopped = true;
      d.owned = new Set();
      for (const shardId of [...d.shards.keys()]) d.beginDrain(shardId, "stopping", unavailable("stopped"));
      break;
  }
}

function needLease(d: Draft, requestId: number, shardId: number): void {
  const lease = d.shards.get(shardId);
  if (d.stopped) {
    d.fail([requestId], shardId, unavailable("stopped"));
    return;
  }
  if (!d.safe) {
    d.fail([requestId], shardId, unavailable("unsafe"));
    return;
  }
  if (lease?.phase === "draining") {
    d.fail([requestId], shardId, handoff);
    return;
  }
  if (!d.owned.has(shardId)) {
    d.fail([requestId], shardId, unavailable("not-owned"));
    return;
  }
  if (lease === undefined) {
    d.startAcquire(shardId, [requestId]);
    return;
  }
  switch (lease.phase) {
    case "acquiring":
      d.shards.set(shardId, { ...lease, waiters: [...lease.waiters, requestId], abandoned: false });
      return;
    case "releasing":
      d.shards.set(shardId, { ...lease, waiters: [...lease.waiters, requestId] });
      return;
    case "held":
      if (d.nowMs < lease.validUntilMs) {
        d.effects.push({ kind: "grant", requestId, token: lease.token });
        return;
      }
      // The renewal did not come back in time: the database may already have moved the lease on.
      d.lose(shardId);
      d.startAcquire(shardId, [requestId]);
      return;
  }
}

function acquired(d: Draft, callId: number, shardId: number, token: ShardLeaseToken | null): void {
  const lease = d.shards.get(shardId);
  // A result for a call the book no longer tracks (suspended meanwhile) is neither used nor released.
  if (lease?.phase !== "acquiring" || lease.callId !== callId) return;
  if (token === null) {
    d.shards.delete(shardId);
    d.fail(lease.waiters, shardId, unavailable("fenced"));
    if (lease.abandoned) d.effects.push({ kind: "drained", shardId });
    return;
  }
  const highest = d.highestEpoch.get(shardId) ?? 0;
  if (!sameKey(token.key, leaseKey(d.config, shardId)) || token.owner !== d.config.owner || token.epoch < highest) {
    d.shards.delete(shardId);
    const detail = `acquire returned a token for ${token.key.entityType}/${token.key.shardId} by ${token.owner} at epoch ${token.epoch}, expected ${d.config.entityType}/${shardId} by ${d.config.owner} at epoch >= ${highest}`;
    d.fail(lease.waiters, shardId, unavailable("error", detail));
    if (lease.abandoned) d.effects.push({ kind: "drained", shardId });
    return;
  }
  if (d.nowMs >= lease.issuedAtMs + d.config.leaseDurationMs) {
    // The answer took longer than the lease lasts: it may have expired and moved on already. Let it expire.
    d.shards.delete(shardId);
    d.fail(lease.waiters, shardId, unavailable("error", "the acquire answered after the lease would have expired"));
    if (lease.abandoned) d.effects.push({ kind: "drained", shardId });
    return;
  }
  d.highestEpoch.set(shardId, token.epoch);
  if (lease.abandoned || d.stopped || !d.owned.has(shardId)) {
    const failure = d.stopped ? unavailable("stopped") : unavailable("not-owned");
    d.fail(lease.waiters, shardId, failure);
    const releaseId = d.callId();
    d.shards.set(shardId, { phase: "releasing", callId: releaseId, token, waiters: [] });
    d.effects.push({ kind: "release", callId: releaseId, token });
    return;
  }
  const renewDueMs = d.nowMs + d.config.leaseRenewIntervalMs;
  d.shards.set(shardId, {
    phase: "held",
    token,
    validUntilMs: lease.issuedAtMs + d.config.leaseDurationMs,
    renewDueMs,
    renewCallId: null,
    renewIssuedAtMs: lease.issuedAtMs,
  });
  d.count("leaseAcquisitions");
  d.effects.push({ kind: "scheduleRenewal", shardId, epoch: token.epoch, afterMs: d.config.leaseRenewIntervalMs });
  for (const requestId of lease.waiters) d.effects.push({ kind: "grant", requestId, token });
}

function acquireFailed(d: Draft, callId: number, shardId: number, error: string): void {
  const lease = d.shards.get(shardId);
  if (lease?.phase !== "acquiring" || lease.callId !== callId) return;
  d.shards.delete(shardId);
  d.fail(lease.waiters, shardId, unavailable("error", error));
  if (lease.abandoned) d.effects.push({ kind: "drained", shardId });
}

function renewTick(d: Draft, shardId: number, epoch: number, safeToOwn: boolean): void {
  if (!safeToOwn) {
    if (d.safe || d.shards.size > 0) d.suspend();
    return;
  }
  const lease = d.shards.get(shardId);
  if (lease?.phase !== "held" || lease.token.epoch !== epoch || lease.renewCallId !== null) return;
  if (d.nowMs < lease.renewDueMs) {
    // Timers may fire a little early on a real clock: wait for the rest rather than renew early or stall.
    d.effects.push({ kind: "scheduleRenewal", shardId, epoch, afterMs: lease.renewDueMs - d.nowMs });
    return;
  }
  if (d.nowMs >= lease.validUntilMs) {
    d.lose(shardId);
    return;
  }
  if (!d.owned.has(shardId)) {
    d.beginDrain(shardId, "not-retained", unavailable("not-owned"));
    return;
  }
  const callId = d.callId();
  d.shards.set(shardId, { ...lease, renewCallId: callId, renewIssuedAtMs: d.nowMs });
  d.effects.push({ kind: "renew", callId, token: lease.token, leaseDurationMs: d.config.leaseDurationMs });
}

function renewed(d: Draft, callId: number, shardId: number, token: ShardLeaseToken | null): void {
  const lease = d.shards.get(shardId);
  if (lease?.phase !== "held" || lease.renewCallId !== callId) return;
  if (token === null || !sameLease(token, lease.token) || d.nowMs >= lease.renewIssuedAtMs + d.config.leaseDurationMs) {
    d.lose(shardId);
    return;
  }
  d.shards.set(shardId, {
    phase: "held",
    token,
    validUntilMs: lease.renewIssuedAtMs + d.config.leaseDurationMs,
    renewDueMs: d.nowMs + d.config.leaseRenewIntervalMs,
    renewCallId: null,
    renewIssuedAtMs: lease.renewIssuedAtMs,
  });
  d.count("leaseRenewals");
  d.effects.push({ kind: "scheduleRenewal", shardId, epoch: token.epoch, afterMs: d.config.leaseRenewIntervalMs });
}

function releaseDone(d: Draft, callId: number, shardId: number): void {
  const lease = d.shards.get(shardId);
  if (lease?.phase !== "releasing" || lease.callId !== callId) return;
  d.shards.delete(shardId);
  d.effects.push({ kind: "drained", shardId });
  if (lease.waiters.length === 0) return;
  if (d.stopped) {
    d.fail(lease.waiters, shardId, unavailable("stopped"));
    return;
  }
  if (!d.safe) {
    d.fail(lease.waiters, shardId, unavailable("unsafe"));
    return;
  }
  if (!d.owned.has(shardId)) {
    d.fail(lease.waiters, shardId, unavailable("not-owned"));
    return;
  }
  d.startAcquire(shardId, lease.waiters);
}

/** The error object a `fail` effect stands for, carrying the shard and the reason. */
export function failureError(
  config: LeaseBookConfig,
  shardId: number,
  failure: LeaseFailure,
): ShardLeaseUnavailableError | ShardHandoffInProgressError {
  return failure.error === "ShardHandoffInProgressError"
    ? new ShardHandoffInProgressError(config.entityType, shardId)
    : new ShardLeaseUnavailableError(config.entityType, shardId);
}
