// The summary table (Markdown) of a judged run.
import type { Judgement } from "./judge.ts";

export interface RunFacts {
  readonly nodes?: number;
  readonly seed?: number;
  readonly durationMs?: number;
  readonly postgres?: string;
  readonly loadAverage?: { readonly start: number[]; readonly end: number[] };
}

const fmt = (n: number) => n.toLocaleString("en-US");

export function summaryMarkdown(j: Judgement, facts: RunFacts): string {
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
    `| **violations** | **${j.violations.length}** |`,
  );
  if (j.violations.length > 0) {
    lines.push("", "Violations (first 50):", "");
    for (const v of j.violations.slice(0, 50)) lines.push(`- ${v.check}: ${v.detail}`);
  }
  return `${lines.join("\n")}\n`;
}
