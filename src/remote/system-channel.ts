/**
 * Sequencing for remote system messages (STOP, watch, unwatch, Terminated), which unlike user messages must survive a
 * reconnect (docs/protocol.md §3.7: sequenced, acknowledged, de-duplicated, replayed). Pure bookkeeping; the association shell
 * writes and re-writes what these say.
 *
 * A stream is numbered by its epoch. When the sender's bound of unacknowledged messages is reached (a partition held
 * more than 1,024), dropping the oldest would leave the receiver waiting for it forever, so the sender abandons the
 * whole stream instead and starts the next epoch at sequence 1; both sides then end every watch between the pair as
 * if the peer incarnation were lost (watchers get `Terminated` with addressTerminated), since some of the abandoned
 * messages were watches, unwatches or Terminated notifications.
 */

/** Most unacknowledged system messages kept per peer (docs/protocol.md §3.7: 1,024 pending per stripe). */
export const systemPendingMax = 1024;
/** Most inbound sequence streams remembered (docs/protocol.md §3.7: 8,192 dedup streams per receiver). */
export const systemStreamsMax = 8192;
/** Least milliseconds between two resends that gap reports ask for, per association. */
export const systemResendIntervalMs = 200;

/** One sequenced system message as it travels. */
export interface SequencedSystemMessage {
  readonly seq: number;
  readonly body: Record<string, unknown>;
}

/** The sending side towards one peer incarnation: numbers messages and keeps them until acknowledged. */
export class SystemOutbox {
  private nextSeq = 1;
  private unacked: SequencedSystemMessage[] = [];
  /** The current stream's number (0 first; one more after each {@link restartStream}). */
  epoch = 0;

  /** True when no further message fits: the caller restarts the stream before enqueuing (see the file comment). */
  get full(): boolean {
    return this.unacked.length >= systemPendingMax;
  }

  /**
   * Numbers `body` and keeps it until acknowledged; returns it for writing.
   * @throws RangeError when {@link full} (restart the stream first)
   */
  enqueue(body: Record<string, unknown>): SequencedSystemMessage {
    if (this.full) throw new RangeError(`more than ${systemPendingMax} unacknowledged system messages`);
    const message = { seq: this.nextSeq++, body };
    this.unacked.push(message);
    return message;
  }

  /** Forgets everything up to and including `seq` of stream `epoch` (acks are cumulative; other epochs' are stale). */
  ack(seq: number, epoch: number): void {
    if (epoch !== this.epoch) return;
    let drop = 0;
    while (drop < this.unacked.length && this.unacked[drop]!.seq <= seq) drop++;
    if (drop > 0) this.unacked = this.unacked.slice(drop);
  }

  /** What to (re)write after a (re)connect, oldest first. */
  get pending(): readonly SequencedSystemMessage[] {
    return this.unacked;
  }

  /** Abandons the current stream and starts the next epoch at sequence 1; returns how many messages were abandoned. */
  restartStream(): number {
    const abandoned = this.unacked.length;
    this.unacked = [];
    this.nextSeq = 1;
    this.epoch++;
    return abandoned;
  }

  /** Starts over at epoch 0 for a new peer incarnation; returns how many unacknowledged messages were abandoned. */
  reset(): number {
    const abandoned = this.unacked.length;
    this.unacked = [];
    this.nextSeq = 1;
    // A new incarnation has never seen this node's streams: a later epoch would read as a restart to it.
    this.epoch = 0;
    return abandoned;
  }
}

/** What the receiver does with an inbound sequence number. */
export type InboxVerdict = "deliver" | "duplicate" | "gap";

/** Where an inbound epoch stands: the current stream, a newer one (the sender restarted it), or an abandoned one. */
export type EpochVerdict = "current" | "restarted" | "stale";

interface InboundStream {
  epoch: number;
  seq: number;
}

/** The receiving side for every peer incarnation: delivers each sequence number once, in order. */
export class SystemInbox {
  private readonly streams = new Map<string, InboundStream>();

  private stream(peer: string): InboundStream {
    let stream = this.streams.get(peer);
    if (stream === undefined) {
      if (this.streams.size >= systemStreamsMax) {
        const oldest = this.streams.keys().next().value;
        if (oldest !== undefined) this.streams.delete(oldest);
      }
      this.streams.set(peer, (stream = { epoch: 0, seq: 0 }));
    }
    return stream;
  }

  /**
   * Places a message of stream `epoch` from `peer` (a UniqueAddress string): a newer epoch than the one known starts
   * over at sequence 0 ("restarted": the caller ends the watches with the peer), an older one is "stale". A peer not
   * known yet with an epoch past 0 restarted too: it may have abandoned messages this node never saw (and ended the
   * watches this node holds on its actors), so this node must end its side as well.
   */
  observe(peer: string, epoch: number): EpochVerdict {
    const known = this.streams.get(peer);
    if (known === undefined) {
      this.stream(peer).epoch = epoch;
      return epoch === 0 ? "current" : "restarted";
    }
    if (epoch === known.epoch) return "current";
    if (epoch < known.epoch) return "stale";
    known.epoch = epoch;
    known.seq = 0;
    return "restarted";
  }

  /** Verdict for `seq` from `peer` in its current stream; records it when delivered. */
  accept(peer: string, seq: number): InboxVerdict {
    const stream = this.stream(peer);
    if (seq <= stream.seq) return "duplicate";
    if (seq !== stream.seq + 1) return "gap";
    stream.seq = seq;
    return "deliver";
  }

  /** The cumulative ack to send to `peer`. */
  acked(peer: string): number {
    return this.streams.get(peer)?.seq ?? 0;
  }

  /** The epoch of `peer`'s current stream (0 when unknown). */
  epochOf(peer: string): number {
    return this.streams.get(peer)?.epoch ?? 0;
  }

  /** Forgets a peer incarnation that is gone for good. */
  forget(peer: string): void {
    this.streams.delete(peer);
  }
}

/**
 * Rate limit of gap-report resends on one association: at most one per {@link systemResendIntervalMs}, and a report
 * that comes too soon schedules one deferred resend rather than being lost (the receiver reports a gap only when a
 * frame arrives, so a stream could otherwise stall).
 */
export class ResendLimiter {
  private lastMs = Number.NEGATIVE_INFINITY;
  private deferred = false;

  constructor(private readonly intervalMs = systemResendIntervalMs) {}

  /** For a gap report at `nowMs`: "now" (resend now), a delay in ms (schedule one resend then), or null (one is). */
  request(nowMs: number): "now" | number | null {
    if (this.deferred) return null;
    const wait = this.lastMs + this.intervalMs - nowMs;
    if (wait <= 0) {
      this.lastMs = nowMs;
      return "now";
    }
    this.deferred = true;
    return wait;
  }

  /** The deferred resend runs at `nowMs`. */
  fired(nowMs: number): void {
    this.deferred = false;
    this.lastMs = nowMs;
  }

  /** The deferred resend was cancelled (the connection closed; reconnecting resends everything anyway). */
  cancelled(): void {
    this.deferred = false;
  }
}
