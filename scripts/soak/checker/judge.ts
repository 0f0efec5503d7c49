// Runs every check over a run's data (pure: the unit tests feed it hand-made histories).
import { type Availability, availability } from "./availability.ts";
import { checkCounters } from "./counters.ts";
import { checkFencing } from "./fencing.ts";
import { checkLists } from "./lists.ts";
import { checkMailboxes } from "./mailboxes.ts";
import { pairOperations } from "./operations.ts";
import { checkOutbox } from "./outbox.ts";
import { checkProjection } from "./projection.ts";
import type { CheckResult, RunData, Violation } from "./types.ts";

export interface Judgement {
  readonly violations: Violation[];
  readonly lists: CheckResult;
  readonly counters: CheckResult;
  readonly fencing: CheckResult;
  readonly mailboxes: CheckResult & { staleOwnerDeliveries: string[] };
  readonly projection: CheckResult;
  readonly outbox: CheckResult;
  readonly operations: Record<string, { ok: number; fail: number; info: number }>;
  readonly availability: Availability;
}

export function judge(data: RunData): Judgement {
  const { operations, orphans } = pairOperations(data.history);
  const history: Violation[] = orphans.map((line) => ({
    check: "history",
    detail: `${line.process}: a ${line.type} of ${line.f} ${line.key} at ${line.time} ms completes no open invocation`,
  }));
  const lists = checkLists(operations, data.events, data.entityLists);
  const counters = checkCounters(operations, data.counters, data.entityCounters);
  const fencing = checkFencing(data.events);
  const mailboxes = checkMailboxes(operations, data.deliveries, data.faults);
  const projection = checkProjection(data.projection ?? null, data.events);
  const outbox = checkOutbox(data.outbox ?? null, data.events);
  const byF: Judgement["operations"] = {};
  for (const op of operations) {
    const row = byF[op.f] ?? { ok: 0, fail: 0, info: 0 };
    row[op.type]++;
    byF[op.f] = row;
  }
  return {
    violations: [
      ...history,
      ...lists.violations,
      ...counters.violations,
      ...fencing.violations,
      ...mailboxes.violations,
      ...projection.violations,
      ...outbox.violations,
    ],
    lists,
    counters,
    fencing,
    mailboxes,
    projection,
    outbox,
    operations: byF,
    availability: availability(operations, data.faults),
  };
}
