// `npm run soak -- [--seconds 600] [--nodes 4] [--seed 1] [--workers 2] [--out dir]`: runs a chaos soak (harness.ts)
// into a run directory, then checks it (check.ts) and exits non-zero on any violation. docs/soak.md explains the
// output.
import { join } from "node:path";
import { parseArgs } from "node:util";
import { checkRun } from "./check.ts";
import { runSoak } from "./harness.ts";

const { values } = parseArgs({
  options: {
    seconds: { type: "string", default: "60" },
    nodes: { type: "string", default: "4" },
    seed: { type: "string", default: "1" },
    workers: { type: "string", default: "2" },
    "think-ms": { type: "string", default: "20" },
    out: { type: "string" },
  },
});

function positiveInt(name: string, text: string | undefined, min: number, max: number): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < min || n > max) {
    console.error(`--${name} must be a whole number from ${min} to ${max} (got ${JSON.stringify(text)})`);
    process.exit(2);
  }
  return n;
}

const seconds = positiveInt("seconds", values.seconds, 0, 86_400);
const nodes = positiveInt("nodes", values.nodes, 3, 5);
const seed = positiveInt("seed", values.seed, 0, 2 ** 31 - 1);
const workers = positiveInt("workers", values.workers, 1, 16);
const thinkMs = positiveInt("think-ms", values["think-ms"], 0, 10_000);
const dir = values.out ?? join("soak-runs", `seed-${seed}-${new Date().toISOString().replace(/[:.]/g, "-")}`);
const started = Date.now();
const say = (line: string) => console.log(`${((Date.now() - started) / 1000).toFixed(1).padStart(6)}s  ${line}`);

say(`soak: ${nodes} nodes, seed ${seed}, fault phase ${seconds} s (at least one round of every fault), run dir ${dir}`);
await runSoak({
  dir,
  nodes,
  faultPhaseMs: seconds * 1000,
  seed,
  workersPerNode: workers,
  thinkMs,
  retryBudgetMs: 20_000,
  gapMs: [2_000, 5_000],
  say,
});
const result = checkRun(dir);
console.log(result.report);
say(result.violations === 0 ? "no violations" : `${result.violations} VIOLATIONS (see ${join(dir, "summary.md")})`);
process.exit(result.violations === 0 ? 0 : 1);
