// The projection checks: the read model equals a fold of the committed list events, each applied exactly once, and
// no slice's checkpoint ever went back (sampled through the run) and every slice caught up at the end.
import type { CheckResult, EventRow, ProjectionData, Violation } from "./types.ts";

export function checkProjection(projection: ProjectionData | null, events: readonly EventRow[]): CheckResult {
  const violations: Violation[] = [];
  const counts = {
    events: events.length,
    applied: 0,
    missing: 0,
    doubleApplied: 0,
    extra: 0,
    samples: 0,
    regressions: 0,
    slicesBehind: 0,
    ownerChanges: 0,
  };
  if (projection === null) return { violations, counts };
  counts.ownerChanges = (projection.sliceEpochs ?? []).reduce((sum, epoch) => sum + Math.max(0, epoch - 1), 0);
  const rows = new Map(projection.readModel.map((r) => [`${r.key}\u0000${r.seq}`, r]));
  for (const event of events) {
    const id = `${event.key}\u0000${event.seq}`;
    const row = rows.get(id);
    rows.delete(id);
    if (row === undefined) {
      counts.missing++;
      violations.push({
        check: "projection-missing",
        detail: `list ${event.key} event ${event.seq} (${String(event.value)}) is not in the read model`,
      });
    } else if (row.times !== 1 || row.value !== event.value) {
      counts.doubleApplied++;
      violations.push({
        check: "projection-applied-twice",
        detail: `list ${event.key} event ${event.seq}: the read model holds ${JSON.stringify(row.value)} applied ${row.times} times; the journal holds ${JSON.stringify(event.value)} (once)`,
      });
    } else counts.applied++;
  }
  for (const row of rows.values()) {
    counts.extra++;
    violations.push({
      check: "projection-extra",
      detail: `the read model holds list ${row.key} event ${row.seq}, which the journal does not`,
    });
  }
  const last = new Map<string, { time: number; offset: number }>();
  for (const sample of [...projection.samples].sort((a, b) => a.time - b.time)) {
    counts.samples++;
    const before = last.get(sample.name);
    if (before !== undefined && sample.offset < before.offset) {
      counts.regressions++;
      violations.push({
        check: "projection-checkpoint-back",
        detail: `${sample.name}: checkpoint ${before.offset} at ${before.time} ms, then ${sample.offset} at ${sample.time} ms`,
      });
    }
    last.set(sample.name, sample);
  }
  const final = new Map(projection.checkpoints.map((c) => [c.name, c.offset]));
  for (let i = 0; i < projection.slices; i++) {
    const name = `${projection.name}/slice-${i}-of-${projection.slices}`;
    const offset = final.get(name);
    if (offset !== projection.latestOffset) {
      counts.slicesBehind++;
      violations.push({
        check: "projection-behind",
        detail: `${name}: checkpoint ${offset ?? "none"} at the end, the feed's latest offset ${projection.latestOffset}`,
      });
    }
  }
  return { violations, counts };
}
