/**
 * The one clock and scheduler of the codebase. Nothing outside this file calls `Date.now`, `performance.now`
 * or `setTimeout` directly: real systems use {@link RealScheduler}, tests and simulations inject a
 * {@link ManualScheduler} and advance it by hand so timers fire in a known order.
 */

/** A handle to a scheduled callback. Cancelling twice, or after it ran, is a no-op. */
export interface Cancellable {
  cancel(): void;
}

/** Time source plus one-shot timers. Every timer in Movie goes through one of these. */
export interface Scheduler {
  /** Monotonic milliseconds (never goes backwards; unrelated to the wall clock). */
  now(): number;
  /** Wall-clock milliseconds since the Unix epoch, for display and logs only. */
  wallNow(): number;
  /** Runs `callback` once after `delayMs` milliseconds (0 or more). */
  scheduleOnce(delayMs: number, callback: () => void): Cancellable;
}

class RealTimer implements Cancellable {
  constructor(private handle: NodeJS.Timeout | null) {}
  cancel(): void {
    if (this.handle !== null) {
      clearTimeout(this.handle);
      this.handle = null;
    }
  }
}

/** The scheduler of a running process: `performance.now()` and `setTimeout`. */
export class RealScheduler implements Scheduler {
  now(): number {
    return performance.now();
  }
  wallNow(): number {
    return Date.now();
  }
  scheduleOnce(delayMs: number, callback: () => void): Cancellable {
    return new RealTimer(setTimeout(callback, Math.max(0, delayMs)));
  }
}

interface ManualTimer {
  readonly dueMs: number;
  readonly seq: number;
  readonly callback: () => void;
  cancelled: boolean;
}

/**
 * A virtual clock for deterministic tests: time moves only when {@link ManualScheduler.advance} is called, and due
 * timers run in (due time, scheduling order) order. Timers scheduled by a running timer for a time inside the advanced
 * window run in the same `advance` call.
 */
export class ManualScheduler implements Scheduler {
  private nowMs: number;
  private seq = 0;
  private timers: ManualTimer[] = [];

  constructor(
    startMs = 0,
    private readonly wallOffsetMs = 1_700_000_000_000,
  ) {
    this.nowMs = startMs;
  }

  now(): number {
    return this.nowMs;
  }
  wallNow(): number {
    return this.wallOffsetMs + this.nowMs;
  }

  scheduleOnce(delayMs: number, callback: () => void): Cancellable {
    const timer: ManualTimer = {
      dueMs: this.nowMs + Math.max(0, delayMs),
      seq: this.seq++,
      callback,
      cancelled: false,
    };
    this.timers.push(timer);
    return {
      cancel: () => {
        timer.cancelled = true;
      },
    };
  }

  /** Number of timers that are scheduled and not cancelled. */
  get pendingTimers(): number {
    return this.timers.filter((t) => !t.cancelled).length;
  }

  /** Moves time forward by `ms`, running every timer that falls due on the way, in order. */
  advance(ms: number): void {
    const targetMs = this.nowMs + ms;
    for (;;) {
      const next = this.nextDue(targetMs);
      if (next === undefined) break;
      this.nowMs = Math.max(this.nowMs, next.dueMs);
      next.cancelled = true;
      next.callback();
    }
    this.nowMs = targetMs;
    this.timers = this.timers.filter((t) => !t.cancelled);
  }

  private nextDue(limitMs: number): ManualTimer | undefined {
    let best: ManualTimer | undefined;
    for (const t of this.timers) {
      if (t.cancelled || t.dueMs > limitMs) continue;
      if (best === undefined || t.dueMs < best.dueMs || (t.dueMs === best.dueMs && t.seq < best.seq)) best = t;
    }
    return best;
  }
}
