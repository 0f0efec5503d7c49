import type { ActorRef } from "./actor-ref.ts";
import type { UniqueAddress } from "./address.ts";

/**
 * A message that travels with a sender or a remote origin. Plain tells (no sender, no origin) are queued bare, so the
 * common case allocates nothing per message.
 */
export class Envelope {
  constructor(
    readonly message: unknown,
    readonly sender: ActorRef<unknown> | null,
    readonly origin: UniqueAddress | null,
  ) {}
}

/** Slots allocated on the first message; small because most sharded entities hold a message or two at a time. */
const initialCapacity = 8;

/**
 * An unbounded FIFO in one growable ring buffer whose capacity is a power of two (so wrapping is a mask, not a
 * division). Items are bare messages or {@link Envelope}s; the cell tells them apart.
 */
export class Mailbox {
  private slots: unknown[] = new Array(initialCapacity);
  private mask = initialCapacity - 1;
  private head = 0;
  private count = 0;

  /** Number of queued items. */
  get size(): number {
    return this.count;
  }

  /** Appends an item (a message or an {@link Envelope}). */
  push(item: unknown): void {
    if (this.count > this.mask) this.grow();
    this.slots[(this.head + this.count) & this.mask] = item;
    this.count++;
  }

  /** Removes and returns the oldest item; only call when {@link size} is above 0. */
  shift(): unknown {
    const at = this.head;
    const item = this.slots[at];
    this.slots[at] = undefined;
    this.head = (at + 1) & this.mask;
    this.count--;
    return item;
  }

  /** Empties the mailbox, calling `each` for every message in order. */
  drain(each: (message: unknown, sender: ActorRef<unknown> | null, origin: UniqueAddress | null) => void): void {
    while (this.count > 0) {
      const item = this.shift();
      if (item instanceof Envelope) each(item.message, item.sender, item.origin);
      else each(item, null, null);
    }
  }

  private grow(): void {
    const capacity = this.mask + 1;
    const next: unknown[] = new Array(capacity * 2);
    for (let i = 0; i < this.count; i++) next[i] = this.slots[(this.head + i) & this.mask];
    this.slots = next;
    this.mask = capacity * 2 - 1;
    this.head = 0;
  }
}
