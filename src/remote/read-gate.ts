import type { Cancellable, Scheduler } from "../actor/index.ts";
import type { RemotingStats } from "./stats.ts";

/** What the gate pauses: a connection's reading (accepted or dialled: a peer may send traffic on either). */
export interface Pausable {
  pauseReading(): void;
  resumeReading(): void;
}

/** Milliseconds between looks at the backlog while sockets are paused. */
const pollMs = 2;

/**
 * Socket read backpressure of one node: after each received chunk of a connection, {@link afterChunk} looks
 * at how many inbound messages wait in local mailboxes (`backlog()`, the actor system's count); above `max` that
 * connection stops reading, so TCP slows its sender instead of this node's heap growing. While any connection is
 * paused the backlog is polled, and all resume once it is down to half of `max`. The check is once per chunk, so the
 * backlog may exceed `max` by one chunk's messages.
 */
export class ReadGate {
  private readonly paused = new Set<Pausable>();
  private timer: Cancellable | null = null;

  constructor(
    private readonly backlog: () => number,
    /** The bound, in messages. */
    readonly max: number,
    private readonly scheduler: Scheduler,
    private readonly stats: RemotingStats,
  ) {}

  /** Called once per chunk an inbound connection delivered. */
  afterChunk(connection: Pausable): void {
    if (this.backlog() <= this.max) return;
    if (this.paused.has(connection)) return;
    this.paused.add(connection);
    this.stats.readPauses++;
    connection.pauseReading();
    if (this.timer === null) this.poll();
  }

  /** Forgets `connection` (it closed). */
  forget(connection: Pausable): void {
    this.paused.delete(connection);
  }

  /** Stops polling and forgets the paused connections (remoting stops: they are closing). */
  stop(): void {
    this.timer?.cancel();
    this.timer = null;
    this.paused.clear();
  }

  private poll(): void {
    this.timer = this.scheduler.scheduleOnce(pollMs, () => {
      this.timer = null;
      if (this.backlog() > this.max / 2) {
        this.poll();
        return;
      }
      const paused = [...this.paused];
      this.paused.clear();
      for (const connection of paused) connection.resumeReading();
    });
  }
}
