import assert from "node:assert/strict";
import type { UniqueAddress } from "../../actor/index.ts";

/**
 * Deliveries waiting for a routing authority (docs/protocol.md §8.6): while membership re-converges after a join or a
 * leave, or a new coordinator collects snapshots before its first plan, a node cannot route, and the seed's rule
 * says it must not guess an owner. Instead of failing the caller at once, the node keeps the delivery here, per
 * shard and in arrival order, until a converged coordinator exists; then the whole queue is routed in that order, so
 * one sender's messages to one entity keep their order through the wait.
 *
 *   hold ──▶ [shard FIFO, ≤ perShardMax] ──▶ take (authority back: routed in order)
 *                      │
 *                      └──▶ expire (its deadline passed: rejected with NoShardOwnerError)
 *
 * Bounded twice: a count per shard (a hold past it is refused, the caller's own call fails) and a deadline per
 * delivery (the node's `heldDeliveryTimeout`, and for an ask also its own timeout). It reads no clock: callers pass
 * `nowMs`.
 */
export interface HeldDelivery<D> {
  readonly delivery: D;
  /** Past this instant (ms, the node's clock) the delivery is rejected instead of routed. */
  readonly deadlineMs: number;
  /** Where a forwarded hop-0 envelope came from (null: a caller on this node). */
  readonly origin: UniqueAddress | null;
  /** A caller's route that counts in `remoteRoutes` once it goes to a remote coordinator. */
  readonly countsRemoteRoute: boolean;
}

export class HeldDeliveries<D> {
  private readonly shards = new Map<number, HeldDelivery<D>[]>();
  private count = 0;

  constructor(
    /** Most deliveries held for one shard. */
    readonly perShardMax: number,
  ) {
    assert.ok(Number.isSafeInteger(perShardMax) && perShardMax >= 1, "a held queue holds at least one delivery");
  }

  /** Deliveries held, over all shards. */
  /** Deliveries held for `shard`. */
  countOf(shard: number): number {
    return this.shards.get(shard)?.length ?? 0;
  }

  get size(): number {
    return this.count;
  }

  /** Queues `held` behind the shard's earlier deliveries; false (nothing kept) when the shard already holds the most. */
  hold(shard: number, held: HeldDelivery<D>): boolean {
    let queue = this.shards.get(shard);
    if (queue === undefined) {
      queue = [];
      this.shards.set(shard, queue);
    }
    if (queue.length >= this.perShardMax) return false;
    queue.push(held);
    this.count++;
    return true;
  }

  /**
   * Puts `entries` in front of the shard's held deliveries, in their order (they were accepted before any of those),
   * as many as fit the bound; returns the rest (the latest of `entries`), which the caller fails.
   */
  holdFront(shard: number, entries: readonly HeldDelivery<D>[]): HeldDelivery<D>[] {
    const queue = this.shards.get(shard) ?? [];
    const room = Math.max(0, this.perShardMax - queue.length);
    const kept = entries.slice(0, room);
    if (kept.length > 0) {
      this.shards.set(shard, [...kept, ...queue]);
      this.count += kept.length;
    }
    return entries.slice(room);
  }

  /** Removes and returns the held deliveries `which` selects, shard by shard in arrival order; the rest keep theirs. */
  take(which: (held: HeldDelivery<D>) => boolean): HeldDelivery<D>[] {
    const taken: HeldDelivery<D>[] = [];
    for (const [shard, queue] of this.shards) {
      const kept = queue.filter((h) => {
        if (!which(h)) return true;
        taken.push(h);
        return false;
      });
      this.keep(shard, kept);
    }
    this.count -= taken.length;
    return taken;
  }

  /**
   * Removes and returns every delivery of the shards `which` selects, shard by shard, each in arrival order; the other
   * shards keep theirs untouched. Asks once per shard, not per delivery: a pass that runs on every step over a shard
   * that must keep waiting costs nothing per delivery it holds.
   */
  takeShards(which: (shard: number) => boolean): HeldDelivery<D>[] {
    const taken: HeldDelivery<D>[] = [];
    for (const [shard, queue] of this.shards) {
      if (!which(shard)) continue;
      for (const h of queue) taken.push(h);
      this.shards.delete(shard);
    }
    this.count -= taken.length;
    return taken;
  }

  /** Every held delivery, shard by shard, each shard in arrival order (nothing removed; for inspection). */
  list(): HeldDelivery<D>[] {
    const all: HeldDelivery<D>[] = [];
    for (const queue of this.shards.values()) for (const h of queue) all.push(h);
    return all;
  }

  /** Removes and returns every held delivery, shard by shard, each shard in arrival order. */
  takeAll(): HeldDelivery<D>[] {
    const all = this.list();
    this.shards.clear();
    this.count = 0;
    return all;
  }

  /** Removes and returns the deliveries whose deadline is at or before `nowMs`; the rest keep their order. */
  expire(nowMs: number): HeldDelivery<D>[] {
    const expired: HeldDelivery<D>[] = [];
    for (const [shard, queue] of this.shards) {
      const kept = queue.filter((h) => {
        if (h.deadlineMs > nowMs) return true;
        expired.push(h);
        return false;
      });
      this.keep(shard, kept);
    }
    this.count -= expired.length;
    return expired;
  }

  /**
   * Stores what a shard keeps after a removal. A queue left empty is dropped so that `take`, `expire` and
   * `nextDeadlineMs` walk only the shards that hold something (an empty queue would hold, list and expire nothing, and
   * take a new delivery as a missing one does: the drop changes the cost, not what is held). Storing `kept` when
   * nothing was removed stores the same entries again, so there is no check for it.
   */
  private keep(shard: number, kept: HeldDelivery<D>[]): void {
    if (kept.length === 0) this.shards.delete(shard);
    else this.shards.set(shard, kept);
  }

  /** The earliest deadline held, or null when nothing is held. */
  nextDeadlineMs(): number | null {
    let next: number | null = null;
    for (const queue of this.shards.values()) {
      for (const h of queue) next = next === null ? h.deadlineMs : Math.min(next, h.deadlineMs);
    }
    return next;
  }
}
