/** Something with queued work that the dispatcher runs. */
export interface Runnable {
  /** Processes a bounded batch of work; the runnable re-schedules itself if it has more. */
  run(): void;
}

/** How many consecutive microtask turns may run before the dispatcher yields a macrotask turn to I/O. */
const microtaskTurnsMax = 64;
/** How many runnables one turn processes before it yields. */
const runsPerTurnMax = 4096;

/**
 * Runs actors on the event loop. A turn starts on a microtask (cheap, so an ask round trip costs microseconds), but
 * after {@link microtaskTurnsMax} microtask turns in a row, or when a turn hits its batch bound, the next turn is a
 * `setImmediate` so sockets and timers are never starved by busy actors.
 */
export class Dispatcher {
  // A ring whose capacity is a power of two, so wrapping is a mask.
  private queue: (Runnable | undefined)[] = new Array(64);
  private mask = 63;
  private head = 0;
  private count = 0;
  private scheduled = false;
  private microtaskTurns = 0;
  private readonly turn = (): void => this.runTurn();
  private readonly macroTurn = (): void => {
    this.microtaskTurns = 0;
    this.runTurn();
  };

  /** Queues `runnable` to run on a coming turn; the caller makes sure it is queued at most once at a time. */
  schedule(runnable: Runnable): void {
    if (this.count > this.mask) this.grow();
    this.queue[(this.head + this.count) & this.mask] = runnable;
    this.count++;
    if (!this.scheduled) {
      this.scheduled = true;
      if (this.microtaskTurns < microtaskTurnsMax) {
        this.microtaskTurns++;
        queueMicrotask(this.turn);
      } else {
        setImmediate(this.macroTurn);
      }
    }
  }

  private runTurn(): void {
    let runs = 0;
    while (this.count > 0 && runs < runsPerTurnMax) {
      const runnable = this.queue[this.head]!;
      this.queue[this.head] = undefined;
      this.head = (this.head + 1) & this.mask;
      this.count--;
      runs++;
      runnable.run();
    }
    if (this.count > 0) {
      setImmediate(this.macroTurn);
    } else {
      this.scheduled = false;
    }
  }

  private grow(): void {
    const next: (Runnable | undefined)[] = new Array(this.queue.length * 2);
    for (let i = 0; i < this.count; i++) next[i] = this.queue[(this.head + i) & this.mask];
    this.queue = next;
    this.mask = next.length - 1;
    this.head = 0;
  }
}
