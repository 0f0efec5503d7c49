/**
 * An events-per-second figure over a sliding window, as a pure value of (time, running total) samples. The rate is the
 * total's growth since the window's baseline (the newest sample at or before `now − windowMs`, else the oldest one)
 * over the time since that baseline, and 0 until that span reaches `minSpanMs`: two batches a millisecond apart say
 * nothing about a rate (the old ProjectionRunner floored the span at 1 ms and reported 100,000 events/s for a batch of
 * 100 right after its start). Samples closer than `bucketMs` to the previous one are merged into it, so a window holds
 * at most about windowMs / bucketMs samples however many batches run.
 */

/** Settings of a {@link RateWindow}, in ms. */
export interface RateWindowSettings {
  /** The window the rate is measured over (default 10,000). */
  readonly windowMs: number;
  /** The shortest span that yields a rate; shorter spans report 0 (default 1,000). */
  readonly minSpanMs: number;
  /** Samples closer than this are merged (default windowMs / 100). */
  readonly bucketMs: number;
}

interface Sample {
  atMs: number;
  total: number;
}

/** A sliding-window rate of a growing total; times come from the caller's monotonic clock. */
export class RateWindow {
  private readonly samples: Sample[];
  private readonly settings: RateWindowSettings;

  /** Starts the window at `startMs` with `total` (usually 0): what is counted later counts from there. */
  constructor(startMs: number, total = 0, settings: Partial<RateWindowSettings> = {}) {
    const windowMs = settings.windowMs ?? 10_000;
    this.settings = {
      windowMs,
      minSpanMs: settings.minSpanMs ?? 1_000,
      bucketMs: settings.bucketMs ?? windowMs / 100,
    };
    this.samples = [{ atMs: startMs, total }];
  }

  /** Records the running total at `atMs` (non-decreasing times). */
  record(atMs: number, total: number): void {
    const samples = this.samples;
    const last = samples[samples.length - 1]!;
    const previous = samples[samples.length - 2];
    if (previous !== undefined && atMs - previous.atMs < this.settings.bucketMs) {
      last.atMs = atMs;
      last.total = total;
    } else {
      samples.push({ atMs, total });
    }
    // Keep one sample at or before the window's start: it is the baseline.
    const start = atMs - this.settings.windowMs;
    while (samples.length > 2 && samples[1]!.atMs <= start) samples.shift();
  }

  /** Events per second over the window ending at `nowMs`; 0 while the span is shorter than minSpanMs. */
  rate(nowMs: number): number {
    const start = nowMs - this.settings.windowMs;
    let baseline = this.samples[0]!;
    for (const s of this.samples) {
      if (s.atMs <= start) baseline = s;
      else break;
    }
    const spanMs = nowMs - baseline.atMs;
    if (spanMs < this.settings.minSpanMs) return 0;
    const latest = this.samples[this.samples.length - 1]!;
    return ((latest.total - baseline.total) * 1000) / spanMs;
  }
}
