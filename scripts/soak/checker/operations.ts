// Pairs each process's invocations with their completions. A process runs one operation at a time, so the next
// completion of a process completes its open invocation. An invocation never completed (its node was killed) is
// indeterminate: `info`, as Jepsen treats a crashed process's last operation.
import type { HistoryLine } from "./types.ts";

export interface Operation {
  readonly process: string;
  readonly f: string;
  readonly key: string;
  /** The invocation's value (the appended value, the increment's OperationId, the message number). */
  readonly value: unknown;
  /** The completion's value (what a read returned). */
  readonly result: unknown;
  readonly type: "ok" | "fail" | "info";
  readonly invoke: number;
  /** Completion time; null when the process never completed it. */
  readonly complete: number | null;
  readonly error?: string;
  /** Attempts under the write's one OperationId (1 when not recorded). */
  readonly attempts: number;
}

export interface Paired {
  readonly operations: Operation[];
  /** Completions with no open invocation of their process (a malformed history). */
  readonly orphans: HistoryLine[];
}

export function pairOperations(history: readonly HistoryLine[]): Paired {
  const open = new Map<string, HistoryLine>();
  const operations: Operation[] = [];
  const orphans: HistoryLine[] = [];
  const close = (inv: HistoryLine, done: HistoryLine | null) => {
    operations.push({
      process: inv.process,
      f: inv.f,
      key: inv.key,
      value: inv.value,
      result: done?.value ?? null,
      type: done === null ? "info" : (done.type as Operation["type"]),
      invoke: inv.time,
      complete: done?.time ?? null,
      ...(done?.error === undefined ? {} : { error: done.error }),
      attempts: typeof done?.attempts === "number" ? done.attempts : 1,
    });
  };
  for (const line of history) {
    if (line.type === "invoke") {
      const previous = open.get(line.process);
      if (previous !== undefined) close(previous, null);
      open.set(line.process, line);
      continue;
    }
    const inv = open.get(line.process);
    if (inv === undefined || inv.f !== line.f || inv.key !== line.key) {
      orphans.push(line);
      continue;
    }
    open.delete(line.process);
    close(inv, line);
  }
  for (const inv of open.values()) close(inv, null);
  return { operations, orphans };
}
