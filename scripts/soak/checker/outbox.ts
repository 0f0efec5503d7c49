// The outbox check: every committed list append's outbox message took effect exactly once at its receiver (the
// tally of its key holds its value once), nothing took effect that no committed append sent, and nothing is left
// pending or parked once the run drained.
import type { CheckResult, EventRow, OutboxData, Violation } from "./types.ts";

export function checkOutbox(outbox: OutboxData | null, events: readonly EventRow[]): CheckResult {
  const violations: Violation[] = [];
  const counts = {
    sent: events.length,
    tookEffect: 0,
    missing: 0,
    duplicates: 0,
    extra: 0,
    pending: 0,
    parked: 0,
    delivered: 0,
  };
  if (outbox === null) return { violations, counts };
  counts.pending = outbox.pending;
  counts.parked = outbox.parked;
  counts.delivered = outbox.delivered;
  const effects = new Map<string, number>();
  for (const t of outbox.tallies) {
    const id = `${t.key}\u0000${String(t.value)}`;
    effects.set(id, (effects.get(id) ?? 0) + 1);
  }
  for (const event of events) {
    const id = `${event.key}\u0000${String(event.value)}`;
    const n = effects.get(id) ?? 0;
    effects.delete(id);
    if (n === 1) counts.tookEffect++;
    else if (n === 0) {
      counts.missing++;
      violations.push({
        check: "outbox-missing",
        detail: `list ${event.key} value ${String(event.value)}: its message never took effect at tally ${event.key}`,
      });
    } else {
      counts.duplicates++;
      violations.push({
        check: "outbox-duplicate",
        detail: `list ${event.key} value ${String(event.value)}: its message took effect ${n} times`,
      });
    }
  }
  for (const [id, n] of effects) {
    counts.extra += n;
    const [key, value] = id.split("\u0000");
    violations.push({
      check: "outbox-extra",
      detail: `tally ${key} holds ${value} ${n} times, which no committed append sent`,
    });
  }
  if (outbox.pending > 0 || outbox.parked > 0) {
    violations.push({
      check: "outbox-undelivered",
      detail: `${outbox.pending} pending and ${outbox.parked} parked messages at the end`,
    });
  }
  return { violations, counts };
}
