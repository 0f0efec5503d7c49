import type { Logger } from "../actor/index.ts";

/** How many operator actions {@link OperatorLog} keeps for the dashboard (older ones are only logged). */
export const operatorActionsKept = 50;

/** One write request: who sent it, what it asked, when, and what came of it. */
export interface OperatorAction {
  /** Wall-clock time, epoch milliseconds. */
  readonly atEpochMs: number;
  /** `down`, `leave`, `rebalance`, or a projection's `projection-pause` / `-resume` / `-rebuild`. */
  readonly action: "down" | "leave" | "rebalance" | "projection-pause" | "projection-resume" | "projection-rebuild";
  /**
   * The member address it named; for a rebalance `<type>/<shard> to <member>`; for a projection its name (and
   * ` from <offset>` for a rebuild).
   */
  readonly target: string;
  /** The peer's IP address and port, when the server knows them. */
  readonly remote: string | null;
  /** The request's User-Agent, cut to 100 characters. */
  readonly userAgent: string | null;
  /** `accepted`, or the error that refused it. */
  readonly outcome: string;
}

/**
 * The audit trail of the management endpoint: every write is logged (warn level, since it changes the cluster) and
 * the last 50 (`operatorActionsKept`) are kept for the dashboard; refusals are counted.
 */
export class OperatorLog {
  private readonly recent: OperatorAction[] = [];
  accepted = 0;
  unauthorized = 0;
  badRequests = 0;

  constructor(private readonly log: Logger) {}

  /** Records and logs one write. */
  record(action: OperatorAction): void {
    if (action.outcome === "accepted") this.accepted++;
    this.recent.push(action);
    if (this.recent.length > operatorActionsKept) this.recent.shift();
    this.log.warn({ ...action }, "management: operator action");
  }

  /** The last actions, oldest first. */
  get actions(): readonly OperatorAction[] {
    return [...this.recent];
  }
}
