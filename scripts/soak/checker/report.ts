// The summary table (Markdown) of a judged run.
import type { Judgement } from "./judge.ts";
import type { FaultLine } from "./types.ts";

export interface RunFacts {
  readonly nodes?: number;
  readonly seed?: number;
  readonly durationMs?: number;
  readonly postgres?: string;
  readonly loadAverage?: { readonly start: number[]; readonly end: number[] };
}

const fmt = (n: number) => n.toLocaleString("en-US");

/** The projection and outbox rows, when the run had that workload. */
function projectionRows(j: Judgement): string[] {
  const p = j.projection.counts;
  const o = j.outbox.counts;
  if (p.samples === 0 && o.delivered === 0 && o.tookEffect === 0) return [];
  return [
    `| projection: list events in the read model exactly once / missing / applied twice / extra | ${fmt(p.applied)} / ${p.missing} / ${p.doubleApplied} / ${p.extra} |`,
    `| projection: checkpoints gone back (${fmt(p.samples)} samples, ${p.ownerChanges} slice owner changes) / slices behind at the end | ${p.regressions} / ${p.slicesBehind} |`,
    `| outbox: messages that took effect once / never / twice or more / without a sender | ${fmt(o.tookEffect)} / ${o.missing} / ${o.duplicates} / ${o.extra} |`,
    `| outbox: rows delivered / pending / parked at the end | ${fmt(o.delivered)} / ${o.pending} / ${o.parked} |`,
  ];
}

export function summaryMarkdown(j: Judgement, facts: RunFacts, faults: readonly FaultLine[] = []): string {
  const l = j.lists.counts;
  const c = j.counters.counts;
  const f = j.fencing.counts;
  const m = j.mailboxes.counts;
  const lines: string[] = [];
  const head = [
    facts.nodes === undefined ? null : `${facts.nodes} nodes`,
    facts.seed === undefined ? null : `seed ${facts.seed}`,
    facts.durationMs === undefined ? null : `${(facts.durationMs / 1000).toFixed(0)} s`,
    facts.loadAverage === undefined
      ? null
      : `load average ${facts.loadAverage.start[0]!.toFixed(1)} at start, ${facts.loadAverage.end[0]!.toFixed(1)} at end`,
  ].filter((x) => x !== null);
  lines.push(`### Soak run: ${head.join(", ")}`, "");
  if (facts.postgres !== undefined) lines.push(`PostgreSQL: ${facts.postgres}`, "");
  lines.push("| operation | ok | fail | info (ambiguous) |", "|---|---:|---:|---:|");
  for (const [f, row] of Object.entries(j.operations).sort()) {
    lines.push(`| ${f} | ${fmt(row.ok)} | ${fmt(row.fail)} | ${fmt(row.info)} |`);
  }
  lines.push("", "| fault | injected | longest write outage |", "|---|---:|---:|");
  for (const [kind, row] of Object.entries(j.availability.byKind).sort()) {
    lines.push(`| ${kind} | ${row.faults} | ${(row.longestOutageMs / 1000).toFixed(1)} s |`);
  }
  lines.push(
    "",
    "| check | result |",
    "|---|---:|",
    `| acknowledged appends lost | ${l.lost} of ${fmt(l.appendsOk)} |`,
    `| acknowledged increments lost | ${c.lost} of ${fmt(c.incrementsOk)} |`,
    `| duplicates (list values, counter increments, ordinary deliveries) | ${l.duplicates + c.duplicates + m.duplicates} |`,
    `| values never invoked | ${l.neverInvoked + c.neverInvoked + m.neverSent} |`,
    `| failed writes that happened | ${l.failedButCommitted + c.failedButCommitted} |`,
    `| writes acknowledged after retries under their one OperationId (appends / increments) | ${fmt(l.appendsOkAfterRetry)} / ${fmt(c.incrementsOkAfterRetry)} |`,
    `| ambiguous appends: committed / not | ${l.infoCommitted} / ${l.infoNotCommitted} |`,
    `| ambiguous increments: committed / not | ${c.infoCommitted} / ${c.infoNotCommitted} |`,
    `| client order violations (lists) | ${l.orderViolations} |`,
    `| read violations (prefix, linearizability; ${fmt(l.reads + c.reads)} reads) | ${l.readViolations + c.readViolations} |`,
    `| final state through entities differs from database | ${l.entityMismatches + c.entityMismatches} |`,
    `| stale-epoch commits (${fmt(f.rows)} event rows, ${f.shards} shards, ${f.epochChanges} epoch changes) | ${f.staleEpochCommits} |`,
    `| event rows without an epoch | ${f.unfencedRows} |`,
    `| ordinary: sender-order inversions (${fmt(m.delivered)} deliveries) | ${m.orderViolations} |`,
    `| ordinary: asks answered / failed / ambiguous / caller gone | ${fmt(m.asksAnswered)} / ${fmt(m.asksFailed)} / ${fmt(m.asksUnknown)} / ${fmt(m.asksUnfinished)} |`,
    `| ordinary: wrong answers | ${m.wrongAnswers} |`,
    `| ordinary: deliveries by a node after it was downed while paused or cut off (not ordered, see docs/soak.md) | ${m.staleOwnerDeliveries} |`,
    ...projectionRows(j),
    `| nodes downed while paused or cut off that exited by themselves afterwards (liveness, not checked) | ${faults.filter((x) => x.selfExited === true).length} of ${faults.filter((x) => typeof x.selfExited === "boolean").length} |`,
    `| **violations** | **${j.violations.length}** |`,
  );
  if (j.mailboxes.staleOwnerDeliveries.length > 0) {
    lines.push("", "Deliveries by downed nodes (first 20):", "");
    for (const d of j.mailboxes.staleOwnerDeliveries) lines.push(`- ${d}`);
  }
  if (j.violations.length > 0) {
    lines.push("", "Violations (first 50):", "");
    for (const v of j.violations.slice(0, 50)) lines.push(`- ${v.check}: ${v.detail}`);
  }
  return `${lines.join("\n")}\n`;
}
