/**
 * Sequencing for remote system messages (STOP, watch, unwatch, Terminated), which unlike user messages must survive a
 * reconnect (REFERENCE §5: sequenced, acknowledged, de-duplicated, replayed). Pure bookkeeping; the association shell
 * writes and re-writes what these say.
 */

/** Most unacknowledged system messages kept per peer (REFERENCE §5: 1,024 pending per stripe). */
export const systemPendingMax = 1024;
/** Most inbound sequence streams remembered (REFERENCE §5: 8,192 dedup streams per receiver). */
export const systemStreamsMax = 8192;

/** One sequenced system message as it travels. */
export interface SequencedSystemMessage {
  readonly seq: number;
  readonly body: Record<string, unknown>;
}

/** The sending side towards one peer incarnation: numbers messages and keeps them until acknowledged. */
export class SystemOutbox {
  private nextSeq = 1;
  private unacked: SequencedSystemMessage[] = [];
  /** Messages dropped because the pending bound was reached. */
  overflowed = 0;

  /** Numbers `body` and keeps it until acknowledged; returns it for writing. */
  enqueue(body: Record<string, unknown>): SequencedSystemMessage {
    const message = { seq: this.nextSeq++, body };
    if (this.unacked.length >= systemPendingMax) {
      this.unacked.shift();
      this.overflowed++;
    }
    this.unacked.push(message);
    return message;
  }

  /** Forgets everything up to and including `seq` (acks are cumulative). */
  ack(seq: number): void {
    let drop = 0;
    while (drop < this.unacked.length && this.unacked[drop]!.seq <= seq) drop++;
    if (drop > 0) this.unacked = this.unacked.slice(drop);
  }

  /** What to (re)write after a (re)connect, oldest first. */
  get pending(): readonly SequencedSystemMessage[] {
    return this.unacked;
  }

  /** Starts over for a new peer incarnation; returns how many unacknowledged messages were abandoned. */
  reset(): number {
    const abandoned = this.unacked.length;
    this.unacked = [];
    this.nextSeq = 1;
    return abandoned;
  }
}

/** What the receiver does with an inbound sequence number. */
export type InboxVerdict = "deliver" | "duplicate" | "gap";

/** The receiving side for every peer incarnation: delivers each sequence number once, in order. */
export class SystemInbox {
  private readonly lastSeq = new Map<string, number>();

  /** Verdict for `seq` from `peer` (a UniqueAddress string); records it when delivered. */
  accept(peer: string, seq: number): InboxVerdict {
    const last = this.lastSeq.get(peer) ?? 0;
    if (seq <= last) return "duplicate";
    if (seq !== last + 1) return "gap";
    if (!this.lastSeq.has(peer) && this.lastSeq.size >= systemStreamsMax) {
      const oldest = this.lastSeq.keys().next().value;
      if (oldest !== undefined) this.lastSeq.delete(oldest);
    }
    this.lastSeq.set(peer, seq);
    return "deliver";
  }

  /** The cumulative ack to send to `peer`. */
  acked(peer: string): number {
    return this.lastSeq.get(peer) ?? 0;
  }

  /** Forgets a peer incarnation that is gone for good. */
  forget(peer: string): void {
    this.lastSeq.delete(peer);
  }
}
