// The soak's one time base: milliseconds since the run started, read from process.hrtime (CLOCK_MONOTONIC on Linux,
// one clock for every process on the host), so the harness and every node stamp history on the same monotonic line.
// No fault and no check depends on wall clocks agreeing; wall time is only logged beside faults for people.

/** The run's origin as a decimal string of nanoseconds, passed to every node in MOVIE_SOAK_T0. */
export function originNow(): string {
  return process.hrtime.bigint().toString();
}

/** Milliseconds (three decimals) since `origin`. */
export function sinceMs(origin: bigint): number {
  return Math.round(Number(process.hrtime.bigint() - origin) / 1_000) / 1_000;
}
