// The event-sourced lists: every acknowledged append is in the final list exactly once, a failed one is absent, no
// value appears that was never invoked, each client's acknowledged appends to a key appear in acknowledgement order,
// ambiguous ones are resolved against the final list, the list read through the entities equals the database's, and
// every read is consistent with one order of the appends (prefix-order.ts).
import type { Operation } from "./operations.ts";
import { type RankedOp, realTimeInversions } from "./prefix-order.ts";
import type { CheckResult, EventRow, Violation } from "./types.ts";

const show = (value: unknown): string => JSON.stringify(value) ?? "undefined";

/** The final list per key from the database rows, in sequence order. */
export function finalLists(events: readonly EventRow[]): Map<string, string[]> {
  const byKey = new Map<string, EventRow[]>();
  for (const e of events) {
    const rows = byKey.get(e.key) ?? [];
    rows.push(e);
    byKey.set(e.key, rows);
  }
  const lists = new Map<string, string[]>();
  for (const [key, rows] of byKey) {
    rows.sort((a, b) => a.seq - b.seq);
    lists.set(
      key,
      rows.map((r) => (typeof r.value === "string" ? r.value : show(r.value))),
    );
  }
  return lists;
}

export function checkLists(
  operations: readonly Operation[],
  events: readonly EventRow[],
  entityLists: Readonly<Record<string, readonly string[]>> | null,
): CheckResult {
  const violations: Violation[] = [];
  const v = (check: string, detail: string) => violations.push({ check, detail });
  const lists = finalLists(events);
  const counts = {
    appendsOk: 0,
    appendsOkAfterRetry: 0,
    appendsFail: 0,
    appendsInfo: 0,
    infoCommitted: 0,
    infoNotCommitted: 0,
    lost: 0,
    duplicates: 0,
    neverInvoked: 0,
    failedButCommitted: 0,
    orderViolations: 0,
    reads: 0,
    readViolations: 0,
    entityMismatches: 0,
  };
  // Sequence gaps would mean the journal lost a row in the middle.
  for (const [key, rows] of groupSeqs(events)) {
    rows.forEach((seq, i) => {
      if (seq !== i + 1) v("journal", `list ${key}: sequence numbers ${rows.join(",")} are not 1..${rows.length}`);
    });
  }
  const positions = new Map<string, Map<string, number[]>>();
  for (const [key, values] of lists) {
    const at = new Map<string, number[]>();
    values.forEach((value, i) => {
      at.set(value, [...(at.get(value) ?? []), i]);
    });
    positions.set(key, at);
    for (const [value, where] of at) {
      if (where.length > 1) {
        counts.duplicates++;
        v(
          "duplicate",
          `list ${key}: value ${show(value)} appears ${where.length} times (positions ${where.join(",")})`,
        );
      }
    }
  }
  const appends = operations.filter((o) => o.f === "append");
  const invoked = new Map<string, Operation>();
  for (const op of appends) invoked.set(`${op.key}\u0000${String(op.value)}`, op);
  for (const [key, values] of lists) {
    for (const value of values) {
      if (!invoked.has(`${key}\u0000${value}`)) {
        counts.neverInvoked++;
        v("never-invoked", `list ${key}: value ${show(value)} was never appended by any client`);
      }
    }
  }
  const index = (op: Operation): number | null => positions.get(op.key)?.get(String(op.value))?.[0] ?? null;
  for (const op of appends) {
    const at = index(op);
    if (op.type === "ok") {
      counts.appendsOk++;
      if (op.attempts > 1) counts.appendsOkAfterRetry++;
      if (at === null) {
        counts.lost++;
        v(
          "lost",
          `list ${op.key}: acknowledged append ${show(op.value)} (ok at ${op.complete} ms) is not in the final list`,
        );
      }
    } else if (op.type === "fail") {
      counts.appendsFail++;
      if (at !== null) {
        counts.failedButCommitted++;
        v(
          "fail-happened",
          `list ${op.key}: append ${show(op.value)} reported fail (${op.error ?? "?"}) is in the final list at ${at}`,
        );
      }
    } else {
      counts.appendsInfo++;
      if (at === null) counts.infoNotCommitted++;
      else counts.infoCommitted++;
    }
  }
  // Per client and key, acknowledged appends in acknowledgement order must be in increasing list positions.
  const byClientKey = new Map<string, Operation[]>();
  for (const op of appends) {
    if (op.type !== "ok") continue;
    const k = `${op.process}\u0000${op.key}`;
    byClientKey.set(k, [...(byClientKey.get(k) ?? []), op]);
  }
  for (const ops of byClientKey.values()) {
    ops.sort((a, b) => a.complete! - b.complete!);
    let last: Operation | null = null;
    for (const op of ops) {
      const at = index(op);
      if (at === null) continue;
      if (last !== null && at < index(last)!) {
        counts.orderViolations++;
        v(
          "client-order",
          `list ${op.key}: ${op.process} had ${show(last.value)} acknowledged before ${show(op.value)}, but the list has them the other way round`,
        );
      }
      last = op;
    }
  }
  // Reads: a prefix of the final list, and in one real-time-consistent order with the appends.
  const reads = operations.filter((o) => o.f === "read" && o.type === "ok");
  const keys = new Set([...lists.keys(), ...reads.map((r) => r.key)]);
  for (const key of keys) {
    const list = lists.get(key) ?? [];
    const ranked: RankedOp[] = [];
    for (const op of appends) {
      if (op.key !== key || op.type === "fail") continue;
      const at = index(op);
      if (at === null) continue;
      ranked.push({
        rank: 2 * at + 1,
        invoke: op.invoke,
        complete: op.complete ?? Infinity,
        label: `append ${show(op.value)}`,
      });
    }
    for (const read of reads) {
      if (read.key !== key) continue;
      counts.reads++;
      const seen = Array.isArray(read.result) ? (read.result as unknown[]) : null;
      if (seen === null || seen.some((value, i) => value !== list[i])) {
        counts.readViolations++;
        v(
          "read-prefix",
          `list ${key}: a read at ${read.invoke}..${read.complete} ms saw ${show(seen)}, not a prefix of the final list`,
        );
        continue;
      }
      ranked.push({
        rank: 2 * seen.length,
        invoke: read.invoke,
        complete: read.complete!,
        label: `read of ${seen.length}`,
      });
    }
    for (const [x, y] of realTimeInversions(ranked)) {
      counts.readViolations++;
      v(
        "linearizability",
        `list ${key}: ${y.label} finished at ${y.complete} ms, before ${x.label} began at ${x.invoke} ms, yet must follow it`,
      );
    }
  }
  if (entityLists !== null) {
    for (const key of Object.keys(entityLists)) {
      const a = lists.get(key) ?? [];
      const b = entityLists[key] ?? [];
      if (a.length !== b.length || a.some((x, i) => x !== b[i])) {
        counts.entityMismatches++;
        v(
          "final-read",
          `list ${key}: the entity answered ${b.length} values, the database holds ${a.length}, and they differ`,
        );
      }
    }
  }
  return { violations, counts };
}

function groupSeqs(events: readonly EventRow[]): Map<string, number[]> {
  const out = new Map<string, number[]>();
  for (const e of events) out.set(e.key, [...(out.get(e.key) ?? []), e.seq]);
  for (const seqs of out.values()) seqs.sort((a, b) => a - b);
  return out;
}
