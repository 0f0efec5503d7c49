/**
 * Timing and capacity constants of cluster sharding (docs/protocol.md §15). Relations between them are asserted when this
 * module loads, so a change that breaks one fails at once rather than in a rare interleaving.
 */
import assert from "node:assert/strict";

/** Tick of the per-shard delivery retry barrier (the original's LEASE_RETRY_INTERVAL, docs/protocol.md §15), ms. */
export const leaseRetryIntervalMs = 25;
/** Delay between coordinator reconciles, and before a failed handoff is retried (RECONCILE_INTERVAL), ms. */
export const reconcileIntervalMs = 100;
/** Period of a non-coordinator's plan poll (PLAN_SYNC_INTERVAL), ms. */
export const planSyncIntervalMs = 250;
/** Timeout of the PassivateShard and PrepareShard asks of a handoff (HANDOFF_TIMEOUT), ms. */
export const handoffTimeoutMs = 2_000;
/**
 * Consecutive 100 ms rounds a handoff waits for membership to re-converge ("settling": no member unreachable, still
 * the lowest Up member) before it aborts as docs/protocol.md §9.3 step 1 says. The original aborts at once; waiting out a
 * brief flicker keeps accepted deliveries, but a buffered delivery should wait no longer than one handoff step may
 * take (HANDOFF_TIMEOUT), so the bound is handoffTimeoutMs / reconcileIntervalMs = 20 rounds.
 */
export const handoffSettlingRoundsMax = handoffTimeoutMs / reconcileIntervalMs;
/** Accepted deliveries buffered per moving shard at the coordinator; also the cap of a shard's retry queue. */
export const handoffBufferCountMax = 1_024;
/** Deliveries the retry barrier makes before it yields the event loop (DELIVERY_RETRY_DRAIN_BATCH). */
export const deliveryRetryDrainBatch = 64;
/**
 * How long a caller waits for the answer to its flush marker of a coordinator change before it sends the marker again
 * (the marker or its answer was lost with a dropped connection), ms (docs/protocol.md §8.7).
 */
export const coordinatorFlushRetryMs = 300;
/**
 * How long a caller waits for the answer to its flush marker once the node it sent the marker to has left its view
 * (a graceful leave: that process may still relay for a moment), before it sends to the new coordinator anyway, ms.
 */
export const coordinatorFlushGraceMs = 1_000;
/**
 * Direct routing (docs/protocol.md §8.8): how long a caller waits for the grant of its probe before it routes the
 * shard's held deliveries through the coordinator again, and how long it then waits before it asks again, ms.
 */
export const directProbeRetryMs = 500;
/** How long a newly elected coordinator collects plan snapshots before it publishes, ms. */
export const bootstrapSnapshotWindowMs = 500;
/** Default timeout of `ShardedEntityRef.ask`, ms. */
export const askTimeoutDefaultMs = 30_000;
/** Default timeout of `ClusterSharding.activate`, ms. */
export const activateTimeoutDefaultMs = 2_000;
/** Below this idle timeout the idle sweep runs every idleTimeout instead of every idleTimeout / 2, ms. */
export const idleSweepHalvingFloorMs = 20;
/** Default shard lease duration (ordinary entities carry it too: it is part of the settings key), ms. */
export const leaseDurationDefaultMs = 10_000;
/** Default shard lease renewal interval, ms. */
export const leaseRenewIntervalDefaultMs = 3_000;
/** Default number of shards per entity type. */
export const shardCountDefault = 256;

// The barrier must tick several times within the shortest sensible lease window, or a retry is a single shot.
/**
 * Highest plan generation a peer's PlanSnapshot may carry. Legitimate generations grow by one per handoff or
 * bootstrap and never come near 2^40; the bound stops a member from pushing the coordinator to 2^53, where the next
 * generation no longer fits a safe integer and every later PlanUpdate would fail to decode.
 */
export const planSnapshotGenerationMax = 2 ** 40;

assert.ok(leaseRetryIntervalMs * 4 <= reconcileIntervalMs);
// Non-coordinators poll less often than the coordinator reconciles, so a poll usually finds a settled plan.
assert.ok(planSyncIntervalMs > reconcileIntervalMs);
// A bootstrap must span several reconcile rounds so snapshot requests can be re-sent before it publishes.
assert.ok(bootstrapSnapshotWindowMs >= 2 * reconcileIntervalMs);
// A handoff step that times out is retried after one reconcile interval, which must be the shorter of the two.
assert.ok(handoffTimeoutMs > reconcileIntervalMs);
// The settling bound is a whole number of reconcile rounds, and at least one.
assert.ok(Number.isInteger(handoffSettlingRoundsMax) && handoffSettlingRoundsMax >= 1);
// A batch drains strictly fewer deliveries than a full queue holds, so a full queue always yields at least once.
assert.ok(deliveryRetryDrainBatch < handoffBufferCountMax);
// Default leases renew well inside their duration (the same rule settings validation enforces).
assert.ok(leaseRenewIntervalDefaultMs < leaseDurationDefaultMs);
