// Mutation testing of the pure protocol cores: `npm run mutation` (not part of `npm test`; docs/mutation.md).
// One file at a time while iterating: `npm run mutation -- --mutate src/sharding/coordinator/plan.ts`.

import { readdirSync } from "node:fs";

/**
 * The protocol cores under mutation. Add a new pure core here (and its tests to `coreTests` below). Only the pure
 * parts of the sharding node are listed: its shell (node-shell.ts), the caller router and the relayed-ask sender do
 * I/O and are tested by the multi-node and TCP suites, which this run leaves out.
 */
export const protocolCores = [
  "src/sharding/coordinator/plan.ts",
  "src/sharding/handoff/handoff.ts",
  "src/sharding/lease/lease-book.ts",
  "src/sharding/internal/retry-barrier.ts",
  "src/cluster/gossip/merge.ts",
  "src/cluster/gossip/authorize.ts",
  "src/sharding/allocation/least-loaded.ts",
  "src/sharding/allocation/rendezvous.ts",
  "src/sharding/rebalance/rate-limited.ts",
  "src/sharding/node/node-core.ts",
  "src/sharding/node/held-deliveries.ts",
  "src/sharding/node/view.ts",
  // The direct route's state (the caller's route per shard, the owner's marker book): pure, no I/O, and the marker
  // book's bound and forgetting are rules an owner's drain gate depends on (docs/protocol.md §8.8).
  "src/sharding/node/direct-route.ts",
];

/** Every `*.test.ts` directly in `dir`, by name. */
const testsIn = (dir) =>
  readdirSync(dir)
    .filter((name) => name.endsWith(".test.ts"))
    .sort()
    .map((name) => `${dir}/${name}`);

/**
 * The rule files that kill most node-core mutants, run before the other rule files (the rest stay in name order). In
 * the scoped runs of 2026-12-06 (711 killed node-core mutants, name order) these two killed 98 % and 100 % of the
 * mutants they ran on, although they ran only on the mutants every earlier file had let through, while the files
 * before them killed 17 % to 52 %: a killed node-core mutant ran 2.19 rule files on average, the one that killed it
 * included. Order decides only which covering file runs first, never whether a mutant is killed.
 */
const killFirst = ["test/sharding/rules/node-plan-rules.test.ts", "test/sharding/rules/node-routing-rules.test.ts"];
const rulesFirst = (files) => [
  ...killFirst.filter((f) => files.includes(f)),
  ...files.filter((f) => !killFirst.includes(f)),
];

/**
 * The core-level tests (no sockets, no database, no processes): rule, unit, property and simulation tests. The
 * in-process runner (the default) runs a mutant's covering TESTS fastest first by their dry-run time, so this order
 * only breaks ties. The tap runner (MUTATION_RUNNER=tap) runs each covering FILE in its own process, in this order,
 * and stops at the first that fails, so there the order is the cost: the rule tests (one scenario per rule, under a
 * second of CPU each) first, then the unit and property tests, the two simulators last (the node simulator alone costs
 * more than all the others together).
 */
export const coreTests = [
  ...rulesFirst(testsIn("test/sharding/rules")),
  "test/cluster/gossip-rules.test.ts",
  "test/cluster/gossip-authorize.test.ts",
  "test/cluster/rules.test.ts",
  "test/sharding/retry-barrier.test.ts",
  "test/sharding/lease/lease-book.test.ts",
  "test/sharding/lease/safe-to-own.test.ts",
  "test/sharding/coordinator.test.ts",
  "test/sharding/handoff.test.ts",
  "test/sharding/node-view.test.ts",
  "test/cluster/merge.test.ts",
  "test/cluster/safety.test.ts",
  "test/cluster/membership.test.ts",
  "test/sharding/lease/lease-keeper.test.ts",
  "test/sharding/allocation.test.ts",
  "test/sharding/lease/lease-history.test.ts",
  "test/cluster/simulation.test.ts",
  "test/sim/node-sim.test.ts",
];

/**
 * MUTATION_TESTS (comma-separated substrings of test paths) keeps only the matching files of `coreTests`, in their
 * order: `MUTATION_TESTS=test/sharding/rules/` runs a line range against the rule tests alone while iterating (a
 * survivor there may still die in a slower file, so only a run with every file gives the score).
 */
const selected = process.env.MUTATION_TESTS?.split(",").filter((s) => s !== "");
const testFiles =
  selected === undefined || selected.length === 0
    ? coreTests
    : coreTests.filter((file) => selected.some((s) => file.includes(s)));

/**
 * The node simulator's two sweeps (test/sim/node-sim.test.ts: operator shard moves, coordinator churn) run 50 seeded
 * histories each per mutant here instead of `npm test`'s 200 (its pinned seeds and planted-bug tests are unchanged).
 * Nearly every mutant the rule tests let through reaches both sweeps (2026-12-07: each covers some 3,700 of the 4,447
 * mutants, and they took 8.7 s and 6.3 s of the dry run's 27 s under load), and every survivor pays for them in full.
 * A killed mutant usually fails in the first few histories; one that only histories 51 to 200 would catch is reported
 * as surviving, so the scores are lower bounds. Set MOVIE_SIM_OPERATOR_HISTORIES / MOVIE_SIM_CHURN_HISTORIES to run more. (The suite's 10,000 seeded
 * histories are in node-sim-histories-*.test.ts, which this run leaves out; MOVIE_SIM_HISTORIES only sizes those.)
 */
process.env.MOVIE_SIM_OPERATOR_HISTORIES ??= "50";
process.env.MOVIE_SIM_CHURN_HISTORIES ??= "50";

/** Where the HTML and JSON reports go (git-ignored); MUTATION_REPORT_DIR keeps one-file runs apart. */
const reportDir = process.env.MUTATION_REPORT_DIR ?? "reports/mutation";

/** @type {import("@stryker-mutator/api/core").PartialStrykerOptions} */
/**
 * The test runner (docs/mutation.md, "Running it"): by default scripts/mutation/in-process-runner.mjs, which loads every
 * test file once per worker process and runs single tests (per-test coverage, no process per test file);
 * MUTATION_RUNNER=tap selects Stryker's tap runner (one `node --import tsx` process per covering test file), kept to
 * compare against.
 */
const runner = process.env.MUTATION_RUNNER === "tap" ? "tap" : "in-process";
const runnerOptions =
  runner === "tap"
    ? {
        testRunner: "tap",
        plugins: ["@stryker-mutator/tap-runner", "./scripts/mutation/ignore-message-text.mjs"],
        tap: {
          testFiles,
          // {{hookFile}} is Stryker's coverage hook; tsx runs the TypeScript test files as `npm test` does.
          nodeArgs: ["--require", "{{hookFile}}", "--import", "tsx", "{{testFile}}"],
        },
      }
    : {
        testRunner: "node-test-in-process",
        plugins: ["./scripts/mutation/in-process-runner.mjs", "./scripts/mutation/ignore-message-text.mjs"],
        inProcess: { testFiles },
      };

export default {
  packageManager: "npm",
  ...runnerOptions,
  ignorers: ["message-text"],
  mutate: protocolCores,
  coverageAnalysis: "perTest",
  // The instrumented sources carry @ts-nocheck, so no type checker runs on mutants (tsx only strips types).
  checkers: [],
  concurrency: Number(process.env.MUTATION_CONCURRENCY ?? 2),
  // The initial run executes every test file once, 1 to 2 minutes on an idle machine; under the load of a shared
  // machine it took more than Stryker's default 5 minutes.
  dryRunTimeoutMinutes: 30,
  // A mutant that loops forever (57 of the node core's 1,345 in a rule-test run) waits out this timeout on top of
  // twice its tests' own time: 30 s made them a quarter of that run's wall time. 10 s beyond twice the time of the
  // slowest file (the node simulator, 16 s under load) still leaves a loaded machine room.
  timeoutMS: 10_000,
  timeoutFactor: 2,
  reporters: ["progress", "clear-text", "html", "json"],
  htmlReporter: { fileName: `${reportDir}/index.html` },
  jsonReporter: { fileName: `${reportDir}/mutation.json` },
  // With `--reporters progress,event-recorder,json` a long run leaves one file per tested mutant as it goes, so a run
  // stopped early still tells what it measured (the JSON and HTML reports are written only at the end).
  eventReporter: { baseDir: `${reportDir}/events` },
  clearTextReporter: { allowEmojis: false, logTests: false, reportScoreTable: true },
  tempDirName: ".stryker-tmp",
  // Not copied into the sandbox: reports, scratch output and the sandboxes of other runs (one-file runs side by side
  // pass their own --tempDirName .stryker-tmp-<name>).
  ignorePatterns: ["/reports", "/.tmp", "/.stryker-tmp*", "/soak-runs", "/bench/results", "/dist", "/.docs-api"],
  cleanTempDir: true,
  thresholds: { high: 95, low: 90, break: null },
};
