/** Reconnect backoff defaults (docs/protocol.md §3.5): 50 ms doubling to 2 s, ±20 % jitter. */
export const backoffDefaults = { minMs: 50, maxMs: 2_000, factor: 2, jitter: 0.2 } as const;

/**
 * Delay before reconnect attempt number `attempt` (0 for the first retry), in milliseconds. `random` is a number in
 * [0, 1) that spreads the delay by ±jitter so peers that lost each other do not retry in lockstep.
 */
export function backoffDelayMs(
  attempt: number,
  random: number,
  settings: { minMs: number; maxMs: number; factor: number; jitter: number } = backoffDefaults,
): number {
  const base = Math.min(settings.maxMs, settings.minMs * settings.factor ** Math.min(attempt, 30));
  return Math.max(0, base * (1 + settings.jitter * (2 * random - 1)));
}
