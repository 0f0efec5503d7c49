// The data the checker reads from a run directory (docs/soak.md), and what it reports.

/** One line of history.jsonl. */
export interface HistoryLine {
  readonly process: string;
  readonly type: "invoke" | "ok" | "fail" | "info";
  readonly f: string;
  readonly key: string;
  readonly value: unknown;
  readonly time: number;
  readonly error?: string;
  /** On a write's completion: how many attempts it took under its one OperationId. */
  readonly attempts?: number;
}

/** One line of deliveries.jsonl: an ordinary entity received a numbered tell or ask. */
export interface DeliveryLine {
  readonly entity: string;
  readonly from: string;
  readonly n: number;
  readonly kind: "tell" | "ask";
  readonly node: string;
  readonly time: number;
}

/** One event row of final-db.json. */
export interface EventRow {
  readonly key: string;
  readonly seq: number;
  readonly value: unknown;
  readonly shard: number;
  readonly epoch: number | null;
  readonly writeOrder: number | null;
}

/** One counter row of final-db.json. */
export interface CounterRow {
  readonly key: string;
  readonly count: unknown;
  readonly ops: unknown;
}

/** One line of faults.jsonl. */
export interface FaultLine {
  readonly kind: string;
  readonly target: string;
  readonly start: number;
  readonly end: number;
  readonly recovered: number | null;
  readonly detail?: string;
}

/** Everything a check needs. */
export interface RunData {
  readonly history: readonly HistoryLine[];
  readonly deliveries: readonly DeliveryLine[];
  readonly faults: readonly FaultLine[];
  readonly events: readonly EventRow[];
  readonly counters: readonly CounterRow[];
  /** The lists and counters as read back through the entities at the end (null when not read). */
  readonly entityLists: Readonly<Record<string, readonly string[]>> | null;
  readonly entityCounters: Readonly<Record<string, { count: number; ops: readonly string[] }>> | null;
}

/** A violation: which check, and a sentence naming the key, values and times involved. */
export interface Violation {
  readonly check: string;
  readonly detail: string;
}

/** A check's violations and its counts for the summary table. */
export interface CheckResult {
  readonly violations: Violation[];
  readonly counts: Record<string, number>;
}
