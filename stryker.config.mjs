// Mutation testing of the pure protocol cores: `npm run mutation` (not part of `npm test`; docs/mutation.md).
// One file at a time while iterating: `npm run mutation -- --mutate src/sharding/coordinator/plan.ts`.

/** The protocol cores under mutation. Add a new pure core here (and its tests to `coreTests` below). */
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
  "src/sharding/node/**/*.ts",
];

/**
 * The core-level tests (no sockets, no database, no processes): unit, property and simulation tests. Each file runs
 * in its own process; with per-test coverage a mutant runs only the files that execute it.
 */
export const coreTests = [
  "test/sharding/allocation.test.ts",
  "test/sharding/coordinator.test.ts",
  "test/sharding/handoff.test.ts",
  "test/sharding/retry-barrier.test.ts",
  "test/sharding/rules/*.test.ts",
  "test/sharding/lease/lease-book.test.ts",
  "test/sharding/lease/lease-history.test.ts",
  "test/sharding/lease/lease-keeper.test.ts",
  "test/sharding/lease/safe-to-own.test.ts",
  "test/cluster/gossip-authorize.test.ts",
  "test/cluster/gossip-rules.test.ts",
  "test/cluster/merge.test.ts",
  "test/cluster/membership.test.ts",
  "test/cluster/rules.test.ts",
  "test/cluster/safety.test.ts",
  "test/cluster/simulation.test.ts",
  "test/sim/*.test.ts",
];

/** Where the HTML and JSON reports go (git-ignored); MUTATION_REPORT_DIR keeps one-file runs apart. */
const reportDir = process.env.MUTATION_REPORT_DIR ?? "reports/mutation";

/** @type {import("@stryker-mutator/api/core").PartialStrykerOptions} */
export default {
  packageManager: "npm",
  testRunner: "tap",
  plugins: ["@stryker-mutator/tap-runner", "./scripts/mutation/ignore-message-text.mjs"],
  ignorers: ["message-text"],
  mutate: protocolCores,
  tap: {
    testFiles: coreTests,
    // {{hookFile}} is Stryker's coverage hook; tsx runs the TypeScript test files as `npm test` does.
    nodeArgs: ["--require", "{{hookFile}}", "--import", "tsx", "{{testFile}}"],
  },
  coverageAnalysis: "perTest",
  // The instrumented sources carry @ts-nocheck, so no type checker runs on mutants (tsx only strips types).
  checkers: [],
  concurrency: Number(process.env.MUTATION_CONCURRENCY ?? 2),
  timeoutMS: 30_000,
  timeoutFactor: 2,
  reporters: ["progress", "clear-text", "html", "json"],
  htmlReporter: { fileName: `${reportDir}/index.html` },
  jsonReporter: { fileName: `${reportDir}/mutation.json` },
  clearTextReporter: { allowEmojis: false, logTests: false, reportScoreTable: true },
  tempDirName: ".stryker-tmp",
  cleanTempDir: true,
  thresholds: { high: 95, low: 90, break: null },
};
