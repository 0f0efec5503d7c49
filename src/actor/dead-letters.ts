import type { ActorRef } from "./actor-ref.ts";

/**
 * A message that could not be delivered: its recipient was stopped, never existed, or was draining (`reason`
 * absent), or its bounded mailbox was full (`reason: "mailboxOverflow"`).
 */
export interface DeadLetter {
  readonly message: unknown;
  readonly sender: ActorRef<unknown> | null;
  readonly recipient: string;
  readonly reason?: "mailboxOverflow";
}

/** Counts dead letters and hands them to listeners (tests and logging). */
export class DeadLetterOffice {
  private total = 0;
  private overflows = 0;
  private readonly listeners = new Set<(letter: DeadLetter) => void>();

  /** Dead letters so far. */
  get count(): number {
    return this.total;
  }

  /** Dead letters that were refused by a full bounded mailbox (also counted in {@link count}). */
  get overflowCount(): number {
    return this.overflows;
  }

  publish(message: unknown, sender: ActorRef<unknown> | null, recipient: string, overflow = false): void {
    this.total++;
    if (overflow) this.overflows++;
    if (this.listeners.size === 0) return;
    const letter: DeadLetter = overflow
      ? { message, sender, recipient, reason: "mailboxOverflow" }
      : { message, sender, recipient };
    for (const listener of this.listeners) {
      try {
        listener(letter);
      } catch {
        // A listener's failure must not stop delivery to the others or to the sender.
      }
    }
  }

  subscribe(listener: (letter: DeadLetter) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}
