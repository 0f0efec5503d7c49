/**
 * Header compression (as Akka Artery's): the sender of a connection gives each envelope header it writes out (recipient,
 * sender, sender uid, type) a small id; the receiver remembers the header under that id, and later frames with the same
 * header carry only the id. Ids are per connection and assigned by the sender alone, so there is no negotiation: a
 * new connection (reconnect, peer restart with a new uid) starts with empty tables on both sides, and TCP's ordering
 * guarantees a definition arrives before the frames that use it.
 */

/** Header ids per connection (1..this); the receiver refuses larger ids. Bounds the receiver's memory per connection. */
export const headerTableSize = 1024;

/**
 * The sender's side: header key → id, at most `capacity` entries. When full, the CLOCK algorithm picks the id to
 * reuse: a hand sweeps the slots, clearing "recently used" bits, and takes the first slot not used since the last
 * sweep. Reusing an id is safe because the new definition travels on the same ordered connection before any frame
 * that uses it.
 */
export class OutboundHeaderTable {
  private readonly ids = new Map<string, number>();
  /** Key of each id (index 0 unused). */
  private readonly keys: (string | undefined)[];
  /** Recently-used bit of each id. */
  private readonly used: Uint8Array;
  private hand = 1;
  private next = 1;
  /** Ids taken back from a header to give to another. */
  evictions = 0;

  constructor(
    readonly capacity = headerTableSize,
    /** Called on every eviction (the node's stats count them). */
    private readonly onEvict: (() => void) | null = null,
  ) {
    if (!Number.isInteger(capacity) || capacity < 1 || capacity > 0xffff) {
      throw new RangeError(`header table capacity ${capacity}; use 1-65535`);
    }
    this.keys = new Array(capacity + 1);
    this.used = new Uint8Array(capacity + 1);
  }

  /** Number of headers with an id. */
  get size(): number {
    return this.ids.size;
  }

  /** The id of `key` (marked recently used), or 0 when it has none. */
  lookup(key: string): number {
    const id = this.ids.get(key);
    if (id === undefined) return 0;
    this.used[id] = 1;
    return id;
  }

  /** Marks `id` recently used (the caller's fast path found it without a lookup). */
  touch(id: number): void {
    this.used[id] = 1;
  }

  /** Gives `key` (which has no id) an id, taking one back from another header when the table is full. */
  assign(key: string): number {
    let id: number;
    if (this.next <= this.capacity) {
      id = this.next++;
    } else {
      // CLOCK: at most two sweeps, since the first clears every bit it passes.
      while (this.used[this.hand] === 1) {
        this.used[this.hand] = 0;
        this.hand = this.hand === this.capacity ? 1 : this.hand + 1;
      }
      id = this.hand;
      this.hand = this.hand === this.capacity ? 1 : this.hand + 1;
      const evicted = this.keys[id];
      if (evicted !== undefined) {
        this.ids.delete(evicted);
        this.evictions++;
        this.onEvict?.();
      }
    }
    this.ids.set(key, id);
    this.keys[id] = key;
    this.used[id] = 1;
    return id;
  }

  /** Forgets the header with `id` (its definition was never sent, e.g. the frame was refused as too large). */
  release(id: number): void {
    const key = this.keys[id];
    if (key === undefined) return;
    this.ids.delete(key);
    this.keys[id] = undefined;
    this.used[id] = 0;
    // A released id is reused only after a full sweep; that is rare enough not to track a free list.
  }

  /** The key that currently owns `id`, if any (tests and diagnostics). */
  keyOf(id: number): string | undefined {
    return this.keys[id];
  }
}
