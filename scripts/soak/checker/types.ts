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
  /** For a node downed while paused or cut off: whether it exited by itself afterwards. */
  readonly selfExited?: boolean | null;
  /** The incarnation the operator downed while it was paused or cut off, and when. */
  readonly downed?: { readonly node: string; readonly at: number };
}

/** What the projection workload left (final-db.json `projection`, checkpoints.jsonl). */
export interface ProjectionData {
  /** The projection's name; slice i's checkpoint is `<name>/slice-<i>-of-<slices>`. */
  readonly name: string;
  readonly slices: number;
  /** The read model: one row per list event applied, with how many times it was applied. */
  readonly readModel: readonly {
    readonly key: string;
    readonly seq: number;
    readonly value: unknown;
    readonly times: number;
  }[];
  /** The checkpoints at the end, and the feed's latest offset then. */
  readonly checkpoints: readonly { readonly name: string; readonly offset: number }[];
  readonly latestOffset: number;
  /** Each slice's shard lease epoch at the end (epoch − 1 owner changes); absent in hand-made data. */
  readonly sliceEpochs?: readonly number[];
  /** Every checkpoint as sampled through the run. */
  readonly samples: readonly { readonly time: number; readonly name: string; readonly offset: number }[];
}

/** What the outbox workload left (final-db.json `outbox`): counts of rows and the receivers' effects. */
export interface OutboxData {
  readonly pending: number;
  readonly parked: number;
  readonly delivered: number;
  /** Every Tallied event: the tally (list key) and the list value it took in. */
  readonly tallies: readonly { readonly key: string; readonly value: unknown }[];
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
  /** The projection and outbox workload's results (null for a run directory of a soak without them). */
  readonly projection?: ProjectionData | null;
  readonly outbox?: OutboxData | null;
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
