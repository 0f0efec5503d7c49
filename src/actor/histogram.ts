/**
 * A fixed-bucket histogram: counts of observed values by upper bound, their sum and their count, in the shape
 * Prometheus and OpenTelemetry expect. Observing is a bounded loop over a handful of bounds and three additions, so it
 * can sit on a hot path; the buckets are chosen once (no quantiles, no memory that grows with the observations).
 */

/** Upper bounds in seconds for latencies from a millisecond to ten seconds (Prometheus' default spacing, 1-2.5-5). */
export const latencyBucketsSeconds: readonly number[] = Object.freeze([
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
]);

/** Upper bounds for batch sizes, powers of two from 1 to 1024. */
export const batchSizeBuckets: readonly number[] = Object.freeze([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]);

/** Longest list of bounds a histogram takes: each observation walks them, so they stay few. */
export const histogramBucketCountMax = 64;

/** A histogram's values at one moment. */
export interface HistogramSnapshot {
  /** The upper bounds, strictly increasing; the implicit last bucket (`+Inf`) is not listed. */
  readonly bounds: readonly number[];
  /**
   * Observations per bucket, not cumulative: `counts[i]` holds values in `(bounds[i-1], bounds[i]]`, and
   * `counts[bounds.length]` those above the last bound. Its sum is `count`.
   */
  readonly counts: readonly number[];
  /** Sum of every observed value. */
  readonly sum: number;
  /** Number of observations. */
  readonly count: number;
}

/** Receives each value a {@link Histogram} observes (the OpenTelemetry bridge records it on its own instrument). */
export type HistogramListener = (value: number) => void;

/** What a reader of a histogram may do (the metrics exposition, the OpenTelemetry bridge): everything but observe. */
export type ReadonlyHistogram = Pick<Histogram, "bounds" | "count" | "snapshot" | "subscribe">;

/**
 * A histogram with fixed upper bounds. Values that are not finite numbers are ignored (a clock that went backwards
 * gives a negative duration, which lands in the first bucket rather than being dropped).
 */
export class Histogram {
  /** The upper bounds, strictly increasing. */
  readonly bounds: readonly number[];
  private readonly counts: number[];
  private total = 0;
  private observations = 0;
  private listeners: readonly HistogramListener[] = [];

  /**
   * @param bounds upper bounds, finite and strictly increasing, 1 to {@link histogramBucketCountMax} of them.
   * @throws RangeError when the bounds are empty, too many, not finite or not strictly increasing.
   */
  constructor(bounds: readonly number[]) {
    if (bounds.length === 0 || bounds.length > histogramBucketCountMax) {
      throw new RangeError(`a histogram takes 1 to ${histogramBucketCountMax} bounds, got ${bounds.length}`);
    }
    for (let i = 0; i < bounds.length; i++) {
      const b = bounds[i]!;
      if (!Number.isFinite(b)) throw new RangeError(`histogram bound ${i} is not a finite number: ${b}`);
      if (i > 0 && b <= bounds[i - 1]!) {
        throw new RangeError(`histogram bounds must be strictly increasing: ${bounds[i - 1]} then ${b}`);
      }
    }
    this.bounds = Object.freeze([...bounds]);
    this.counts = new Array<number>(bounds.length + 1).fill(0);
  }

  /** Counts `value` in the first bucket whose bound is at least `value`; ignores values that are not finite. */
  observe(value: number): void {
    if (!Number.isFinite(value)) return;
    const bounds = this.bounds;
    let i = 0;
    while (i < bounds.length && value > bounds[i]!) i++;
    this.counts[i]!++;
    this.total += value;
    this.observations++;
    const listeners = this.listeners;
    for (let j = 0; j < listeners.length; j++) listeners[j]!(value);
  }

  /** Number of observations so far. */
  get count(): number {
    return this.observations;
  }

  /** A copy of the values now. */
  snapshot(): HistogramSnapshot {
    return Object.freeze({
      bounds: this.bounds,
      counts: Object.freeze([...this.counts]),
      sum: this.total,
      count: this.observations,
    });
  }

  /** Calls `listener` with every later observation; returns the function that stops it. */
  subscribe(listener: HistogramListener): () => void {
    this.listeners = [...this.listeners, listener];
    return () => {
      this.listeners = this.listeners.filter((l) => l !== listener);
    };
  }
}
