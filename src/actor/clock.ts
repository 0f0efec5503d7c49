/**
 * The one clock and scheduler of the codebase. Nothing outside this file calls `Date.now`, `performance.now`
 * or `setTimeout` directly: real systems use {@link RealScheduler}, tests and simulations inject a
 * {@link ManualScheduler} and advance it by hand so timers fire in a known order.
 */

/** A handle to a scheduled callback. Cancelling twice, or after it ran, is a no-op. */
export interface Cancellable {
  /** Cancels the callback; a no-op once it ran or was cancelled. */
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
  /** Cancels the callback; a no-op once it ran or was cancelled. */
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

/** A virtual timer: pending until it runs or is cancelled. */
class ManualTimer implements Cancellable {
  pending = true;
  constructor(
    private readonly owner: ManualScheduler,
    readonly dueMs: number,
    readonly seq: number,
    readonly callback: () => void,
  ) {}
  /** Cancels the callback; a no-op once it ran or was cancelled. */
  cancel(): void {
    if (!this.pending) return;
    this.pending = false;
    this.owner.timerCancelled();
  }
}

function runsBefore(a: ManualTimer, b: ManualTimer): boolean {
  return a.dueMs < b.dueMs || (a.dueMs === b.dueMs && a.seq < b.seq);
}

/**
 * A virtual clock for deterministic tests: time moves only when {@link ManualScheduler.advance} is called, and due
 * timers run in (due time, scheduling order) order. Timers scheduled by a running timer for a time inside the advanced
 * window run in the same `advance` call. Timers sit in a binary heap; cancelled ones are dropped lazily.
 */
export class ManualScheduler implements Scheduler {
  private nowMs: number;
  private seq = 0;
  private heap: ManualTimer[] = [];
  private live = 0;

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
    const timer = new ManualTimer(this, this.nowMs + Math.max(0, delayMs), this.seq++, callback);
    this.push(timer);
    this.live++;
    return timer;
  }

  /** Number of timers that are scheduled and not cancelled. */
  get pendingTimers(): number {
    return this.live;
  }

  /** Moves time forward by `ms`, running every timer that falls due on the way, in order. */
  advance(ms: number): void {
    const targetMs = this.nowMs + ms;
    for (;;) {
      const next = this.popDue(targetMs);
      if (next === undefined) break;
      this.nowMs = Math.max(this.nowMs, next.dueMs);
      next.pending = false;
      this.live--;
      next.callback();
    }
    this.nowMs = targetMs;
  }

  /** @internal */
  timerCancelled(): void {
    this.live--;
    // Keep the heap proportional to the live timers even when most are cancelled before they fall due.
    if (this.heap.length > 64 && this.heap.length > 2 * this.live) {
      const kept = this.heap.filter((t) => t.pending);
      this.heap = [];
      for (const t of kept) this.push(t);
    }
  }

  private popDue(limitMs: number): ManualTimer | undefined {
    for (;;) {
      const top = this.heap[0];
      if (top === undefined) return undefined;
      if (top.pending && top.dueMs > limitMs) return undefined;
      this.popTop();
      if (top.pending) return top;
    }
  }

  private push(timer: ManualTimer): void {
    const heap = this.heap;
    let at = heap.length;
    heap.push(timer);
    while (at > 0) {
      const parent = (at - 1) >> 1;
      if (!runsBefore(timer, heap[parent]!)) break;
      heap[at] = heap[parent]!;
      at = parent;
    }
    heap[at] = timer;
  }

  private popTop(): void {
    const heap = this.heap;
    const last = heap.pop()!;
    if (heap.length === 0) return;
    let at = 0;
    for (;;) {
      const left = 2 * at + 1;
      if (left >= heap.length) break;
      const right = left + 1;
      const child = right < heap.length && runsBefore(heap[right]!, heap[left]!) ? right : left;
      if (!runsBefore(heap[child]!, last)) break;
      heap[at] = heap[child]!;
      at = child;
    }
    heap[at] = last;
  }
}

/** Something a {@link TimeoutQueue} calls back without a closure per deadline (an ask, an actor's receive timeout). */
export interface TimeoutTarget {
  /** Runs when the deadline passes. */
  onTimeout(): void;
}

/**
 * One deadline of a {@link TimeoutQueue}: a node in its lane's doubly linked list, so cancelling is O(1). Five fields:
 * a million idle actors with a receive timeout hold a million of these.
 */
class Deadline implements Cancellable {
  prev: Deadline | null = null;
  next: Deadline | null = null;
  constructor(
    /** Null once it ran or was cancelled. */
    public lane: TimeoutLane | null,
    readonly dueMs: number,
    readonly target: TimeoutTarget | (() => void),
  ) {}
  /** Cancels the callback; a no-op once it ran or was cancelled. */
  cancel(): void {
    this.lane?.unlink(this);
  }
  run(): void {
    const target = this.target;
    if (typeof target === "function") target();
    else target.onTimeout();
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

  add(target: TimeoutTarget | (() => void)): Deadline {
    // Whole milliseconds (never early) keep the due time a small integer rather than a boxed double.
    const deadline = new Deadline(this, Math.ceil(this.scheduler.now() + this.delayMs), target);
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
    deadline.lane = null;
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
    try {
      let head = this.head;
      while (head !== null && head.dueMs <= nowMs) {
        this.unlink(head);
        head.run();
        head = this.head;
      }
    } finally {
      // Even if a callback threw, the deadlines behind it keep their timer.
      const head = this.head;
      if (head === null) this.onIdle(this);
      else if (this.timer === null) this.arm(head.dueMs);
    }
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
   * Runs `callback` (a function or a {@link TimeoutTarget}) once after `delayMs` milliseconds (0 or more; fractions
   * round up to the next millisecond) unless the returned handle is cancelled first.
   */
  schedule(delayMs: number, callback: TimeoutTarget | (() => void)): Cancellable {
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
