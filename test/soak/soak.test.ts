// The CI soak: `npm run soak`'s harness on 3 real node processes (a frontend and two backends) and the test
// PostgreSQL (MOVIE_POSTGRES_TEST_URL, else the local server, else a throwaway one), one round of the seeded schedule
// (every fault kind once), then the checker. Any violation fails the test and keeps the run directory for
// `npm run soak:check -- <dir>`. About 100 s on the project's 2-core machine under load; the summary table is printed.
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { checkRun } from "../../scripts/soak/check.ts";
import { runSoak } from "../../scripts/soak/harness.ts";
import { faultKinds } from "../../scripts/soak/schedule.ts";
import { postgresTestUrl } from "../persistence/pg-fixture.ts";

// A fixed seed: a failure replays with `npm run soak -- --nodes 3 --seconds 0 --seed 17`.
const seed = Number(process.env.MOVIE_SOAK_SEED ?? 17);

test(`soak: 3 nodes, every fault kind once (seed ${seed}); nothing acknowledged is lost, no stale epoch commits`, {
  timeout: 600_000,
}, async () => {
  const dir = mkdtempSync(join(tmpdir(), "movie-soak-ci-"));
  const started = Date.now();
  const lines: string[] = [];
  await runSoak({
    dir,
    nodes: 3,
    faultPhaseMs: 0,
    seed,
    workersPerNode: 2,
    thinkMs: 20,
    retryBudgetMs: 20_000,
    gapMs: [1_000, 1_500],
    postgresUrl: await postgresTestUrl(),
    say: (line) => lines.push(line),
  });
  const result = checkRun(dir);
  const meta = JSON.parse(readFileSync(join(dir, "run.json"), "utf8")) as { faultsByKind: Record<string, number> };
  console.log(`${result.report}\nCI soak took ${((Date.now() - started) / 1000).toFixed(0)} s; run directory ${dir}`);
  for (const kind of faultKinds) assert.ok((meta.faultsByKind[kind] ?? 0) >= 1, `fault ${kind} was injected`);
  assert.equal(result.violations, 0, `${result.report}\nharness log:\n${lines.join("\n")}\nrun directory kept: ${dir}`);
  rmSync(dir, { recursive: true, force: true });
});
