import { InvalidArgumentError } from "./errors.ts";

/**
 * What a parent does when a child's `receive` throws (or its Promise rejects):
 * - `restart`: a new behavior instance from the child's factory; the mailbox is kept; children are stopped. At most
 *   `maxRestarts` within `withinMs`, after which the child stops.
 * - `resume`: keep the instance and its state, drop the failed message, go on.
 * - `stop`: stop the child.
 */
export type SupervisorStrategy =
  | { readonly kind: "restart"; readonly maxRestarts: number; readonly withinMs: number }
  | { readonly kind: "resume" }
  | { readonly kind: "stop" };

/** Ready-made strategies. */
export const SupervisorStrategies = {
  /** Restart, at most `maxRestarts` (default 10) times within `withinMs` (default 60 s), then stop. */
  restart(options: { maxRestarts?: number; withinMs?: number } = {}): SupervisorStrategy {
    const maxRestarts = options.maxRestarts ?? 10;
    const withinMs = options.withinMs ?? 60_000;
    if (!Number.isInteger(maxRestarts) || maxRestarts < 0) {
      throw new InvalidArgumentError("maxRestarts", `${maxRestarts}; expected a whole number of 0 or more`);
    }
    if (!Number.isFinite(withinMs) || withinMs <= 0) {
      throw new InvalidArgumentError("withinMs", `${withinMs} ms; expected a positive duration`);
    }
    return { kind: "restart", maxRestarts, withinMs };
  },
  /** Keep the failed actor's instance and state, drop the failed message, go on. */
  resume(): SupervisorStrategy {
    return { kind: "resume" };
  },
  /** Stop the failed actor. */
  stop(): SupervisorStrategy {
    return { kind: "stop" };
  },
};

/** The strategy used when neither the spawn options nor the parent name one. */
export const defaultSupervisorStrategy: SupervisorStrategy = SupervisorStrategies.restart();

/** Decides restart versus stop for a restart strategy: pure bookkeeping over the recent restart times. */
export function restartAllowed(
  strategy: { maxRestarts: number; withinMs: number },
  recentRestartsMs: readonly number[],
  nowMs: number,
): { allowed: boolean; recent: number[] } {
  const recent = recentRestartsMs.filter((t) => nowMs - t < strategy.withinMs);
  if (recent.length >= strategy.maxRestarts) return { allowed: false, recent };
  recent.push(nowMs);
  return { allowed: true, recent };
}
