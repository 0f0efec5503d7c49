// The durable-state counters: the saved state lists the increments it applied, so the same checks as the lists apply
// (acknowledged exactly once, failed absent, nothing never invoked, ambiguous resolved), the count equals the number
// of applied increments, and every counter read is consistent with one order of the increments (prefix-order.ts).
import type { Operation } from "./operations.ts";
import { type RankedOp, realTimeInversions } from "./prefix-order.ts";
import type { CheckResult, CounterRow, Violation } from "./types.ts";

export function checkCounters(
  operations: readonly Operation[],
  rows: readonly CounterRow[],
  entityCounters: Readonly<Record<string, { count: number; ops: readonly string[] }>> | null,
): CheckResult {
  const violations: Violation[] = [];
  const v = (check: string, detail: string) => violations.push({ check, detail });
  const counts = {
    incrementsOk: 0,
    incrementsOkAfterRetry: 0,
    incrementsFail: 0,
    incrementsInfo: 0,
    infoCommitted: 0,
    infoNotCommitted: 0,
    lost: 0,
    duplicates: 0,
    neverInvoked: 0,
    failedButCommitted: 0,
    reads: 0,
    readViolations: 0,
    entityMismatches: 0,
  };
  const applied = new Map<string, string[]>();
  for (const row of rows) {
    const ops = Array.isArray(row.ops) ? row.ops.map(String) : [];
    if (!Array.isArray(row.ops) || row.count !== ops.length) {
      v("counter-state", `counter ${row.key}: count ${JSON.stringify(row.count)} but ${ops.length} applied operations`);
    }
    applied.set(row.key, ops);
    const seen = new Set<string>();
    for (const op of ops) {
      if (seen.has(op)) {
        counts.duplicates++;
        v("duplicate", `counter ${row.key}: increment ${op} applied twice`);
      }
      seen.add(op);
    }
  }
  const increments = operations.filter((o) => o.f === "incr");
  const invoked = new Set(increments.map((o) => `${o.key}\u0000${String(o.value)}`));
  for (const [key, ops] of applied) {
    for (const op of ops) {
      if (!invoked.has(`${key}\u0000${op}`)) {
        counts.neverInvoked++;
        v("never-invoked", `counter ${key}: increment ${op} was never invoked by any client`);
      }
    }
  }
  const index = (op: Operation): number | null => {
    const i = applied.get(op.key)?.indexOf(String(op.value)) ?? -1;
    return i < 0 ? null : i;
  };
  for (const op of increments) {
    const at = index(op);
    if (op.type === "ok") {
      counts.incrementsOk++;
      if (op.attempts > 1) counts.incrementsOkAfterRetry++;
      if (at === null) {
        counts.lost++;
        v("lost", `counter ${op.key}: acknowledged increment ${String(op.value)} is not in the final state`);
      }
    } else if (op.type === "fail") {
      counts.incrementsFail++;
      if (at !== null) {
        counts.failedButCommitted++;
        v("fail-happened", `counter ${op.key}: increment ${String(op.value)} reported fail is in the final state`);
      }
    } else {
      counts.incrementsInfo++;
      if (at === null) counts.infoNotCommitted++;
      else counts.infoCommitted++;
    }
  }
  const reads = operations.filter((o) => o.f === "read-counter" && o.type === "ok");
  for (const key of new Set([...applied.keys(), ...reads.map((r) => r.key)])) {
    const ranked: RankedOp[] = [];
    for (const op of increments) {
      if (op.key !== key || op.type === "fail") continue;
      const at = index(op);
      if (at !== null) {
        ranked.push({
          rank: 2 * at + 1,
          invoke: op.invoke,
          complete: op.complete ?? Infinity,
          label: `increment ${String(op.value)}`,
        });
      }
    }
    const total = applied.get(key)?.length ?? 0;
    for (const read of reads) {
      if (read.key !== key) continue;
      counts.reads++;
      const count = read.result;
      if (typeof count !== "number" || !Number.isInteger(count) || count < 0 || count > total) {
        counts.readViolations++;
        v(
          "read-range",
          `counter ${key}: a read at ${read.invoke} ms saw ${JSON.stringify(count)}, outside 0..${total}`,
        );
        continue;
      }
      ranked.push({ rank: 2 * count, invoke: read.invoke, complete: read.complete!, label: `read of ${count}` });
    }
    for (const [x, y] of realTimeInversions(ranked)) {
      counts.readViolations++;
      v(
        "linearizability",
        `counter ${key}: ${y.label} finished at ${y.complete} ms, before ${x.label} began at ${x.invoke} ms, yet must follow it`,
      );
    }
  }
  if (entityCounters !== null) {
    for (const [key, state] of Object.entries(entityCounters)) {
      const ops = applied.get(key) ?? [];
      if (state.count !== ops.length || state.ops.length !== ops.length || state.ops.some((op, i) => op !== ops[i])) {
        counts.entityMismatches++;
        v(
          "final-read",
          `counter ${key}: the entity answered ${state.count}, the database holds ${ops.length} applied increments`,
        );
      }
    }
  }
  return { violations, counts };
}
