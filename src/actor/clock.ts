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

/**
 * Optional on a {@link Cancellable} from a real timer: whether the pending timer keeps the process alive. A
 * {@link TimeoutQueue} keeps its one armed timer but lets the process exit while nothing waits on it.
 */
interface KeepAlive {
  keepAlive(alive: boolean): void;
}

class RealTimer implements Cancellable, KeepAlive {
  constructor(private handle: NodeJS.Timeout | null) {}
  cancel(): void {
    if (this.handle !== null) {
      clearTimeout(this.handle);
      this.handle = null;
    }
  }
  keepAlive(alive: boolean): void {
    if (alive) this.handle?.ref();
    else this.handle?.unref();
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

/** One deadline of a {@link TimeoutQueue}: a node in its lane's doubly linked list, so cancelling is O(1). */
class Deadline implements Cancellable {
  prev: Deadline | null = null;
  next: Deadline | null = null;
  linked = true;
  constructor(
    readonly lane: TimeoutLane,
    readonly dueMs: number,
    readonly callback: () => void,
  ) {}
  cancel(): void {
    if (this.linked) this.lane.unlink(this);
  }
}

/** Deadlines that share one delay: appended in due order (the clock is monotonic), so the head is always next. */
class TimeoutLane {
  private head: Deadline | null = null;
  private tail: Deadline | null = null;
  private timer: Cancellable | null = null;
  private readonly onTimer = (): void => this.fire();

  constructor(
    private readonly scheduler: Scheduler,
    readonly delayMs: number,
    private readonly onIdle: (lane: TimeoutLane) => void,
  ) {}

  add(callback: () => void): Deadline {
    const deadline = new Deadline(this, this.scheduler.now() + this.delayMs, callback);
    const wasEmpty = this.tail === null;
    if (this.tail === null) this.head = deadline;
    else {
      deadline.prev = this.tail;
      this.tail.next = deadline;
    }
    this.tail = deadline;
    if (this.timer === null) this.arm(deadline.dueMs);
    else if (wasEmpty) (this.timer as Partial<KeepAlive>).keepAlive?.(true);
    return deadline;
  }

  unlink(deadline: Deadline): void {
    deadline.linked = false;
    if (deadline.prev === null) this.head = deadline.next;
    else deadline.prev.next = deadline.next;
    if (deadline.next === null) this.tail = deadline.prev;
    else deadline.next.prev = deadline.prev;
    deadline.prev = null;
    deadline.next = null;
    if (this.head === null && this.timer !== null) {
      // A real timer stays armed (re-arming per deadline is what this class avoids) but no longer holds the process
      // open; any other scheduler's timer is cancelled, so a virtual clock shows no phantom pending timers.
      const keepAlive = (this.timer as Partial<KeepAlive>).keepAlive;
      if (keepAlive !== undefined) keepAlive.call(this.timer, false);
      else {
        this.timer.cancel();
        this.timer = null;
      }
    }
  }

  private arm(dueMs: number): void {
    this.timer = this.scheduler.scheduleOnce(dueMs - this.scheduler.now(), this.onTimer);
  }

  private fire(): void {
    this.timer = null;
    const nowMs = this.scheduler.now();
    // Bounded by the lane's length; callbacks may add deadlines, which fall due later (delayMs > 0) or now (0).
    let head = this.head;
    while (head !== null && head.dueMs <= nowMs) {
      this.unlink(head);
      head.callback();
      head = this.head;
    }
    if (head === null) this.onIdle(this);
    else if (this.timer === null) this.arm(head.dueMs);
  }
}

/**
 * Many one-shot timeouts (ask timeouts) on few scheduler timers: deadlines with the same delay form one FIFO lane with
 * a single armed timer, so adding and cancelling a deadline costs a list link instead of a `setTimeout` and a
 * `clearTimeout`. Works on any {@link Scheduler}, so a {@link ManualScheduler} drives it like any other timer.
 */
export class TimeoutQueue {
  private readonly lanes = new Map<number, TimeoutLane>();
  // A lane leaves the map once its timer fired with nothing left, so odd delays do not accumulate lanes.
  private readonly dropLane = (lane: TimeoutLane): void => {
    if (this.lanes.get(lane.delayMs) === lane) this.lanes.delete(lane.delayMs);
  };

  constructor(private readonly scheduler: Scheduler) {}

  /**
   * Runs `callback` once after `delayMs` milliseconds (0 or more; fractions round up to the next millisecond) unless
   * the returned handle is cancelled first.
   */
  schedule(delayMs: number, callback: () => void): Cancellable {
    const laneMs = Math.max(0, Math.ceil(delayMs));
    let lane = this.lanes.get(laneMs);
    if (lane === undefined) {
      lane = new TimeoutLane(this.scheduler, laneMs, this.dropLane);
      this.lanes.set(laneMs, lane);
    }
    return lane.add(callback);
  }

  /** Number of lanes (distinct delays) currently held; for tests. */
  get laneCount(): number {
    return this.lanes.size;
  }
}
