/**
 * A circuit breaker as a pure core (docs/protocol.md §13.1: failure threshold 5, reset timeout 5 s): `failureThreshold`
 * consecutive failures open it; while open, requests fail fast; after `resetTimeoutMs` one trial request is let
 * through (half-open) and its outcome closes or re-opens the breaker.
 */
export interface CircuitState {
  readonly mode: "closed" | "open" | "half-open";
  readonly consecutiveFailures: number;
  readonly openedAtMs: number;
}

/** Breaker settings, in milliseconds. */
export interface CircuitSettings {
  readonly failureThreshold: number;
  readonly resetTimeoutMs: number;
}

/** A closed breaker. */
export const closedCircuit: CircuitState = { mode: "closed", consecutiveFailures: 0, openedAtMs: 0 };

/** Whether a request may run at `nowMs`, and the state after admitting it (open turns half-open after the timeout). */
export function admit(
  state: CircuitState,
  settings: CircuitSettings,
  nowMs: number,
): { allowed: boolean; state: CircuitState; retryAfterMs: number } {
  if (state.mode === "closed") return { allowed: true, state, retryAfterMs: 0 };
  const elapsed = nowMs - state.openedAtMs;
  if (state.mode === "open" && elapsed >= settings.resetTimeoutMs) {
    return { allowed: true, state: { ...state, mode: "half-open" }, retryAfterMs: 0 };
  }
  // Half-open admits exactly one trial; others fail fast until it settles.
  return { allowed: false, state, retryAfterMs: Math.max(0, settings.resetTimeoutMs - elapsed) };
}

/** The state after a request settled: a success closes, a failure counts (and opens at the threshold). */
export function record(state: CircuitState, settings: CircuitSettings, ok: boolean, nowMs: number): CircuitState {
  if (ok) return closedCircuit;
  const failures = state.consecutiveFailures + 1;
  if (state.mode === "half-open" || failures >= settings.failureThreshold) {
    return { mode: "open", consecutiveFailures: failures, openedAtMs: nowMs };
  }
  return { mode: "closed", consecutiveFailures: failures, openedAtMs: 0 };
}
