// Ordinary entities (at-most-once delivery): no numbered message delivered twice, per sender the numbers delivered
// to one entity never go backwards, nothing delivered that was never sent, and every ask completed to its caller
// (answered, failed or timed out), with the answer to its own number.
import type { Operation } from "./operations.ts";
import type { CheckResult, DeliveryLine, Violation } from "./types.ts";

export function checkMailboxes(operations: readonly Operation[], deliveries: readonly DeliveryLine[]): CheckResult {
  const violations: Violation[] = [];
  const v = (check: string, detail: string) => violations.push({ check, detail });
  const counts = {
    tellsSent: 0,
    asksSent: 0,
    delivered: 0,
    duplicates: 0,
    orderViolations: 0,
    neverSent: 0,
    asksAnswered: 0,
    asksFailed: 0,
    asksUnknown: 0,
    asksUnfinished: 0,
    wrongAnswers: 0,
  };
  const sent = new Map<string, Operation>();
  for (const op of operations) {
    if (op.f !== "tell" && op.f !== "ask") continue;
    if (op.f === "tell" && op.type !== "fail") counts.tellsSent++;
    if (op.f === "ask") {
      counts.asksSent++;
      if (op.type === "ok") {
        counts.asksAnswered++;
        if (op.result !== op.value) {
          counts.wrongAnswers++;
          v(
            "ask-answer",
            `mailbox ${op.key}: ${op.process}'s ask ${String(op.value)} was answered ${JSON.stringify(op.result)}`,
          );
        }
      } else if (op.type === "fail") counts.asksFailed++;
      else if (op.complete === null) counts.asksUnfinished++;
      else counts.asksUnknown++;
    }
    sent.set(`${op.key}\u0000${op.process}\u0000${String(op.value)}`, op);
  }
  const seen = new Set<string>();
  const lastBySender = new Map<string, DeliveryLine>();
  for (const d of [...deliveries].sort((a, b) => a.time - b.time)) {
    counts.delivered++;
    const id = `${d.entity}\u0000${d.from}\u0000${d.n}`;
    if (seen.has(id)) {
      counts.duplicates++;
      v(
        "duplicate-delivery",
        `mailbox ${d.entity}: message ${d.n} from ${d.from} delivered twice (again on ${d.node} at ${d.time} ms)`,
      );
    }
    seen.add(id);
    if (!sent.has(id)) {
      counts.neverSent++;
      v("never-sent", `mailbox ${d.entity}: message ${d.n} from ${d.from} was delivered but never sent`);
    }
    const pair = `${d.entity}\u0000${d.from}`;
    const last = lastBySender.get(pair);
    if (last !== undefined && d.n < last.n) {
      counts.orderViolations++;
      v(
        "sender-order",
        `mailbox ${d.entity}: from ${d.from}, message ${d.n} (at ${d.time} ms on ${d.node}) was delivered after message ${last.n} (at ${last.time} ms on ${last.node})`,
      );
    }
    if (last === undefined || d.n > last.n) lastBySender.set(pair, d);
  }
  return { violations, counts };
}
