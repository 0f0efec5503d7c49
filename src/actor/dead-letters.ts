import type { ActorRef } from "./actor-ref.ts";

/** A message that could not be delivered: its recipient was stopped, never existed, or was draining. */
export interface DeadLetter {
  readonly message: unknown;
  readonly sender: ActorRef<unknown> | null;
  readonly recipient: string;
}

/** Counts dead letters and hands them to listeners (tests and logging). */
export class DeadLetterOffice {
  private total = 0;
  private readonly listeners = new Set<(letter: DeadLetter) => void>();

  /** Dead letters so far. */
  get count(): number {
    return this.total;
  }

  publish(message: unknown, sender: ActorRef<unknown> | null, recipient: string): void {
    this.total++;
    if (this.listeners.size === 0) return;
    const letter: DeadLetter = { message, sender, recipient };
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
