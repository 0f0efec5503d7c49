import { type Scheduler, TimeoutQueue } from "../actor/index.ts";
import { admit, type CircuitSettings, type CircuitState, closedCircuit, record } from "./circuit-breaker.ts";
import { CircuitOpenError, PersistenceConnectionError, PersistenceTimeoutError } from "./errors.ts";

/** Retry, timeout and breaker settings of a networked store (defaults from docs/protocol.md §13.1). */
export interface ResilienceSettings {
  /** Deadline of one attempt in milliseconds; default 5000. */
  operationTimeoutMs: number;
  /** Retries after a lost connection (never after a conflict); default 2. */
  maxRetries: number;
  /** First backoff in milliseconds, doubled per retry; default 10. */
  minBackoffMs: number;
  /** Backoff cap in milliseconds; default 250. */
  maxBackoffMs: number;
  /** Consecutive infrastructure failures that open the breaker; default 5. */
  failureThreshold: number;
  /** How long the breaker stays open in milliseconds; default 5000. */
  resetTimeoutMs: number;
}

/** The docs/protocol.md §13.1 defaults. */
export const defaultResilience: ResilienceSettings = {
  operationTimeoutMs: 5000,
  maxRetries: 2,
  minBackoffMs: 10,
  maxBackoffMs: 250,
  failureThreshold: 5,
  resetTimeoutMs: 5000,
};

/** Counters of a {@link Resilient} executor. */
export interface ResilienceStats {
  attempts: number;
  retries: number;
  timeouts: number;
  connectionFailures: number;
  circuitRejections: number;
}

/** The backoff before retry `attempt` (1-based): min * 2^(attempt-1), capped. */
export function backoffMs(settings: ResilienceSettings, attempt: number): number {
  return Math.min(settings.maxBackoffMs, settings.minBackoffMs * 2 ** (attempt - 1));
}

/**
 * Runs store operations with a per-attempt timeout, bounded retries with backoff after connection loss (every store
 * operation is idempotent: writes carry an OperationId), and a circuit breaker so a dead database does not pile up
 * work. Logical errors (conflicts, stale owners) pass straight through and do not count as failures.
 */
export class Resilient {
  private circuit: CircuitState = closedCircuit;
  readonly stats: ResilienceStats = {
    attempts: 0,
    retries: 0,
    timeouts: 0,
    connectionFailures: 0,
    circuitRejections: 0,
  };
  private readonly breaker: CircuitSettings;
  // Every attempt has the same deadline: one lane of one armed timer instead of a setTimeout and clearTimeout per
  // query, which showed in the profile of the persistent command path.
  private readonly deadlines: TimeoutQueue;

  constructor(
    private readonly settings: ResilienceSettings,
    private readonly scheduler: Scheduler,
    private readonly isConnectionError: (error: unknown) => boolean,
  ) {
    this.breaker = { failureThreshold: settings.failureThreshold, resetTimeoutMs: settings.resetTimeoutMs };
    this.deadlines = new TimeoutQueue(scheduler);
  }

  /** The breaker's mode, for inspection. */
  get circuitMode(): CircuitState["mode"] {
    return this.circuit.mode;
  }

  /**
   * Runs `attempt` under the policy.
   * @throws CircuitOpenError, PersistenceTimeoutError, PersistenceConnectionError, or the operation's own error
   */
  async run<R>(operation: string, attempt: () => Promise<R>): Promise<R> {
    for (let retry = 0; ; retry++) {
      const admission = admit(this.circuit, this.breaker, this.scheduler.now());
      if (!admission.allowed) {
        this.stats.circuitRejections++;
        throw new CircuitOpenError(operation, admission.retryAfterMs);
      }
      this.circuit = admission.state;
      this.stats.attempts++;
      try {
        const result = await this.withTimeout(operation, attempt);
        this.circuit = record(this.circuit, this.breaker, true, this.scheduler.now());
        return result;
      } catch (error) {
        const timedOut = error instanceof PersistenceTimeoutError;
        const lost = !timedOut && this.isConnectionError(error);
        if (!timedOut && !lost) {
          // The database answered: it is healthy even though the request failed.
          this.circuit = record(this.circuit, this.breaker, true, this.scheduler.now());
          throw error;
        }
        if (timedOut) this.stats.timeouts++;
        else this.stats.connectionFailures++;
        this.circuit = record(this.circuit, this.breaker, false, this.scheduler.now());
        // A timed-out attempt may still be running on the server; retrying it would only stack work.
        if (timedOut) throw error;
        if (retry >= this.settings.maxRetries) throw new PersistenceConnectionError(operation, error as Error);
        this.stats.retries++;
        await new Promise<void>((resolve) => this.scheduler.scheduleOnce(backoffMs(this.settings, retry + 1), resolve));
      }
    }
  }

  private withTimeout<R>(operation: string, attempt: () => Promise<R>): Promise<R> {
    const timeoutMs = this.settings.operationTimeoutMs;
    return new Promise<R>((resolve, reject) => {
      let settled = false;
      const timer = this.deadlines.schedule(timeoutMs, () => {
        if (settled) return;
        settled = true;
        reject(new PersistenceTimeoutError(operation, timeoutMs));
      });
      attempt().then(
        (value) => {
          if (settled) return;
          settled = true;
          timer.cancel();
          resolve(value);
        },
        (error: unknown) => {
          if (settled) return;
          settled = true;
          timer.cancel();
          reject(error);
        },
      );
    });
  }
}
