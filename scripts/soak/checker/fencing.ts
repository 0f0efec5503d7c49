// Fencing: every list event row records the shard epoch it was written under and a write order taken at insert
// (migration 8). Per shard, in write order, epochs never go backwards: a row under epoch e written after a row under
// a higher epoch is a commit by a stale owner. Every soak append is fenced, so a row without an epoch is a violation
// too.
import type { CheckResult, EventRow, Violation } from "./types.ts";

export function checkFencing(events: readonly EventRow[]): CheckResult {
  const violations: Violation[] = [];
  const counts = { rows: events.length, shards: 0, epochChanges: 0, staleEpochCommits: 0, unfencedRows: 0 };
  const byShard = new Map<number, EventRow[]>();
  for (const e of events) {
    if (e.epoch === null || e.writeOrder === null) {
      counts.unfencedRows++;
      violations.push({ check: "unfenced", detail: `list ${e.key} row ${e.seq} has no shard epoch or write order` });
      continue;
    }
    byShard.set(e.shard, [...(byShard.get(e.shard) ?? []), e]);
  }
  counts.shards = byShard.size;
  for (const [shard, rows] of byShard) {
    rows.sort((a, b) => a.writeOrder! - b.writeOrder!);
    let highest: EventRow | null = null;
    for (const row of rows) {
      if (highest !== null && row.epoch! < highest.epoch!) {
        counts.staleEpochCommits++;
        violations.push({
          check: "stale-epoch",
          detail: `shard ${shard}: list ${row.key} row ${row.seq} was written under epoch ${row.epoch} (write order ${row.writeOrder}) after list ${highest.key} row ${highest.seq} under epoch ${highest.epoch} (write order ${highest.writeOrder})`,
        });
        continue;
      }
      if (highest !== null && row.epoch! > highest.epoch!) counts.epochChanges++;
      if (highest === null || row.epoch! > highest.epoch!) highest = row;
    }
  }
  return { violations, counts };
}
