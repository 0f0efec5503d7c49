import type { ActorRef } from "./actor-ref.ts";
import type { UniqueAddress } from "./address.ts";

/**
 * An unbounded FIFO of (message, sender, origin) triples in one growable ring buffer, so enqueueing allocates nothing
 * per message once the buffer has grown to the working size.
 */
export class Mailbox {
  private slots: unknown[] = new Array(3 * 16);
  private head = 0;
  private count = 0;

  get size(): number {
    return this.count;
  }

  push(message: unknown, sender: ActorRef<unknown> | null, origin: UniqueAddress | null): void {
    const capacity = this.slots.length / 3;
    if (this.count === capacity) this.grow();
    const at = 3 * ((this.head + this.count) % (this.slots.length / 3));
    this.slots[at] = message;
    this.slots[at + 1] = sender;
    this.slots[at + 2] = origin;
    this.count++;
  }

  /** Removes the head; read it first with the peek accessors. */
  shift(): void {
    const at = 3 * this.head;
    this.slots[at] = undefined;
    this.slots[at + 1] = undefined;
    this.slots[at + 2] = undefined;
    this.head = (this.head + 1) % (this.slots.length / 3);
    this.count--;
  }

  peekMessage(): unknown {
    return this.slots[3 * this.head];
  }
  peekSender(): ActorRef<unknown> | null {
    return this.slots[3 * this.head + 1] as ActorRef<unknown> | null;
  }
  peekOrigin(): UniqueAddress | null {
    return this.slots[3 * this.head + 2] as UniqueAddress | null;
  }

  /** Empties the mailbox, calling `each` for every message in order. */
  drain(each: (message: unknown, sender: ActorRef<unknown> | null) => void): void {
    while (this.count > 0) {
      const message = this.peekMessage();
      const sender = this.peekSender();
      this.shift();
      each(message, sender);
    }
  }

  private grow(): void {
    const capacity = this.slots.length / 3;
    const next: unknown[] = new Array(this.slots.length * 2);
    for (let i = 0; i < this.count; i++) {
      const from = 3 * ((this.head + i) % capacity);
      next[3 * i] = this.slots[from];
      next[3 * i + 1] = this.slots[from + 1];
      next[3 * i + 2] = this.slots[from + 2];
    }
    this.slots = next;
    this.head = 0;
  }
}
