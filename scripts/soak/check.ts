// Judges a run directory: reads what the harness wrote (docs/soak.md), runs every check (checker/judge.ts), and
// writes summary.md, summary.json and availability.svg next to the history.
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { availabilitySvg } from "./checker/availability-svg.ts";
import { judge } from "./checker/judge.ts";
import { type RunFacts, summaryMarkdown } from "./checker/report.ts";
import type {
  CounterRow,
  DeliveryLine,
  EventRow,
  FaultLine,
  HistoryLine,
  OutboxData,
  ProjectionData,
  RunData,
} from "./checker/types.ts";
import { readJsonl } from "./jsonl.ts";
import { soakProjectionName } from "./projection.ts";

/** Reads a run directory. @throws Error naming the missing file */
export function loadRun(dir: string): { data: RunData; facts: RunFacts } {
  const need = (name: string) => {
    const path = join(dir, name);
    if (!existsSync(path)) throw new Error(`${path} is missing: is ${dir} a soak run directory?`);
    return path;
  };
  const db = JSON.parse(readFileSync(need("final-db.json"), "utf8")) as {
    events: EventRow[];
    counters: CounterRow[];
    projection?: Omit<ProjectionData, "samples" | "name">;
    outbox?: OutboxData;
  };
  const samplesPath = join(dir, "checkpoints.jsonl");
  const samples = existsSync(samplesPath) ? readJsonl<ProjectionData["samples"][number]>(samplesPath).records : [];
  const entities = existsSync(join(dir, "final-entities.json"))
    ? (JSON.parse(readFileSync(join(dir, "final-entities.json"), "utf8")) as {
        lists?: Record<string, string[]>;
        counters?: Record<string, { count: number; ops: string[] }>;
      })
    : null;
  const facts = existsSync(join(dir, "run.json"))
    ? (JSON.parse(readFileSync(join(dir, "run.json"), "utf8")) as RunFacts)
    : {};
  return {
    data: {
      history: readJsonl<HistoryLine>(need("history.jsonl")).records,
      deliveries: existsSync(join(dir, "deliveries.jsonl"))
        ? readJsonl<DeliveryLine>(join(dir, "deliveries.jsonl")).records
        : [],
      faults: existsSync(join(dir, "faults.jsonl")) ? readJsonl<FaultLine>(join(dir, "faults.jsonl")).records : [],
      events: db.events,
      counters: db.counters,
      entityLists: entities?.lists ?? null,
      entityCounters: entities?.counters ?? null,
      projection: db.projection === undefined ? null : { ...db.projection, name: soakProjectionName, samples },
      outbox: db.outbox ?? null,
    },
    facts,
  };
}

export function checkRun(dir: string): { report: string; violations: number } {
  const { data, facts } = loadRun(dir);
  const j = judge(data);
  const report = summaryMarkdown(j, facts, data.faults);
  writeFileSync(join(dir, "summary.md"), report);
  writeFileSync(
    join(dir, "summary.json"),
    `${JSON.stringify(
      {
        violations: j.violations,
        lists: j.lists.counts,
        counters: j.counters.counts,
        fencing: j.fencing.counts,
        mailboxes: j.mailboxes.counts,
        projection: j.projection.counts,
        outbox: j.outbox.counts,
        operations: j.operations,
        faults: j.availability.byKind,
      },
      null,
      2,
    )}\n`,
  );
  const title = `Movie soak: ${facts.nodes ?? "?"} nodes, seed ${facts.seed ?? "?"}: operations per second, faults shaded`;
  writeFileSync(join(dir, "availability.svg"), availabilitySvg(j.availability, data.faults, title));
  return { report, violations: j.violations.length };
}
