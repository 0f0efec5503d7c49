/**
 * The deliveries one node holds for one entity type while routing waits for a converged coordinator (or for the
 * coordinator's owner of the shard): a FIFO per shard, bounded in count, each entry with its own deadline. Pure: no
 * clock, no I/O; the shell (routing-wait.ts) passes `nowMs` and performs what the results say.
 *
 * Order: a shard's entries leave only from the head and only in order, and while a shard holds anything every new
 * delivery for it is held behind (the shell's rule), so what one sender sent to one entity stays in its order.
 */

/** Where a delivery was held: on the caller (it never reached a coordinator) or on a node acting as coordinator. */
export type HeldAt = "caller" | "coordinator";

/** One held delivery. */
export interface HeldEntry<D> {
  readonly delivery: D;
  readonly heldAt: HeldAt;
  /** Monotonic ms after which the entry is refused. */
  readonly deadlineMs: number;
}

export class HeldDeliveries<D> {
  private readonly shards = new Map<number, HeldEntry<D>[]>();
  private count = 0;

  constructor(
    /** Most entries per shard. */
    private readonly perShard: number,
  ) {}

  /** Entries held over all shards. */
  get size(): number {
    return this.count;
  }

  /** True while `shard` holds anything (new deliveries for it must then be held behind). */
  holds(shard: number): boolean {
    return this.shards.has(shard);
  }

  /** Appends `entry` to `shard`'s queue; false when the queue is full (the entry is not held). */
  hold(shard: number, entry: HeldEntry<D>): boolean {
    let queue = this.shards.get(shard);
    if (queue === undefined) {
      queue = [];
      this.shards.set(shard, queue);
    }
    if (queue.length >= this.perShard) return false;
    queue.push(entry);
    this.count++;
    return true;
  }

  /** The oldest entry of `shard`, or undefined. */
  head(shard: number): HeldEntry<D> | undefined {
    return this.shards.get(shard)?.[0];
  }

  /** Removes the head of `shard` (after the shell routed it). */
  shift(shard: number): void {
    const queue = this.shards.get(shard);
    if (queue === undefined || queue.length === 0) return;
    queue.shift();
    this.count--;
    if (queue.length === 0) this.shards.delete(shard);
  }

  /** The shards that hold anything, ascending. */
  heldShards(): number[] {
    return [...this.shards.keys()].sort((a, b) => a - b);
  }

  /** Removes and returns every entry whose deadline is at or before `nowMs` (the rest keep their order). */
  expire(nowMs: number): { shard: number; entry: HeldEntry<D> }[] {
    const expired: { shard: number; entry: HeldEntry<D> }[] = [];
    for (const [shard, queue] of this.shards) {
      if (!queue.some((e) => e.deadlineMs <= nowMs)) continue;
      const kept = queue.filter((e) => {
        if (e.deadlineMs > nowMs) return true;
        expired.push({ shard, entry: e });
        return false;
      });
      if (kept.length === 0) this.shards.delete(shard);
      else this.shards.set(shard, kept);
    }
    this.count -= expired.length;
    return expired;
  }

  /** Removes and returns everything (sharding stops). */
  clear(): HeldEntry<D>[] {
    const all = [...this.shards.values()].flat();
    this.shards.clear();
    this.count = 0;
    return all;
  }
}
