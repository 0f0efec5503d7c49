// Availability over time: completions per second by outcome, and per fault the longest stretch in which no write
// (append or increment) was acknowledged anywhere in the cluster, among the stretches that overlap the fault's window
// (from its start until the cluster was healthy again).
import type { Operation } from "./operations.ts";
import type { FaultLine } from "./types.ts";

export interface Availability {
  /** Per second since the run's origin: acknowledged operations and failed or ambiguous ones. */
  readonly seconds: { readonly ok: number; readonly errors: number }[];
  /** Per fault kind: the longest write outage (ms) over its faults, and how many faults. */
  readonly byKind: Record<string, { faults: number; longestOutageMs: number }>;
}

export function availability(operations: readonly Operation[], faults: readonly FaultLine[]): Availability {
  const seconds: { ok: number; errors: number }[] = [];
  for (const op of operations) {
    if (op.complete === null) continue;
    const s = Math.floor(op.complete / 1000);
    while (seconds.length <= s) seconds.push({ ok: 0, errors: 0 });
    if (op.type === "ok") seconds[s]!.ok++;
    else seconds[s]!.errors++;
  }
  const writes = operations
    .filter((o) => (o.f === "append" || o.f === "incr") && o.type === "ok" && o.complete !== null)
    .map((o) => o.complete!)
    .sort((a, b) => a - b);
  const byKind: Availability["byKind"] = {};
  for (const fault of faults) {
    const from = fault.start;
    const to = fault.recovered ?? fault.end;
    let longest = 0;
    // The gaps between consecutive acknowledged writes that overlap [from, to].
    for (let i = 0; i + 1 < writes.length; i++) {
      const a = writes[i]!;
      const b = writes[i + 1]!;
      if (b < from || a > to) continue;
      longest = Math.max(longest, b - a);
    }
    const entry = byKind[fault.kind] ?? { faults: 0, longestOutageMs: 0 };
    byKind[fault.kind] = {
      faults: entry.faults + 1,
      longestOutageMs: Math.max(entry.longestOutageMs, Math.round(longest)),
    };
  }
  return { seconds, byKind };
}
