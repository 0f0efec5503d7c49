// A Stryker test runner that runs the core node:test files inside its worker process (docs/mutation.md, "Running it").
//
// Why: the tap runner starts one `node --import tsx <file>` process per covering test file per mutant, so most of a
// run's time went into starting tsx and loading the sharding sources again, and coverage was per FILE (a mutant ran
// every test of each file that reached it). Here each Stryker worker loads every test file once, with `node:test`
// replaced by a shim that only collects the tests (node-test-shim.mjs), and then runs single tests:
//   - dry run: every collected test in order, with `__stryker__.currentTestId` set around it, so coverage is per TEST;
//   - mutant run: the mutant switched on (`__stryker__.activeMutant`), the tests that reach it (Stryker's testFilter),
//     fastest first by their dry-run time, stopping at the first failure (unless disableBail).
// A mutant that loops forever is stopped by the hit limit (reported as a timeout) or, when the loop makes no calls to
// mutated code, by Stryker killing the worker after the mutant's timeout and starting a new one.
// Static mutants (code that runs while a file loads) need the mutant active at load time: the runner says it cannot
// reload its environment (`reloadEnvironment: false`), so Stryker gives each one a fresh worker, and a fresh worker
// switches the mutant on before it loads the test files.
//
// The test files must tolerate being run many times in one process (no state left from one run for the next): see
// the isolation audit in docs/mutation.md. `node scripts/mutation/in-process-runner.mjs --twice` runs every test twice
// in one process without Stryker and compares the results.

import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { register as registerHooks } from "node:module";
import { resolve as resolvePath } from "node:path";
import { performance } from "node:perf_hooks";
import { pathToFileURL } from "node:url";

/** Where the dry-run worker leaves each test's time for the other workers (their own runs have no dry run). */
const TIMES_FILE = ".movie-in-process-test-times.json";
const NS = "__stryker__";

// Stryker's API constants, inlined so the self-check (`--twice`) runs without Stryker's packages loaded.
const TestStatus = { Success: 0, Failed: 1, Skipped: 2 };
const DryRunStatus = { Complete: "complete", Error: "error", Timeout: "timeout" };
const MutantRunStatus = { Killed: "killed", Survived: "survived", Timeout: "timeout", Error: "error" };

function describeError(error) {
  if (error instanceof Error) {
    const text = `${error.name}: ${error.message}`;
    return text.length > 2_000 ? `${text.slice(0, 2_000)}…` : text;
  }
  return String(error);
}

export class InProcessNodeTestRunner {
  static inject = ["options", "logger"];

  /** @type {{ id: string, name: string, file: string, fn: (() => unknown) | undefined, skipped: boolean }[] | undefined} */
  tests;
  /** Test id → dry-run time in ms (known after the dry run, or read from TIMES_FILE). */
  times = new Map();
  /** The running test's failure channel: an uncaught error or unhandled rejection fails it. */
  failCurrent = undefined;
  /** Mutant runs in this process since it loaded the test files. */
  mutantRuns = 0;
  /** Set when a mutant left shared state behind (its killing test fails with no mutant): the next run restarts. */
  dirty = false;

  constructor(options, logger) {
    this.testFiles = options.inProcess?.testFiles ?? options.tap?.testFiles ?? [];
    this.log = logger;
    this.verifyKills = options.inProcess?.verifyKills ?? true;
    /** null: keep the times in memory only (the self-check below, which runs in the repository, not a sandbox). */
    this.timesFile = options.inProcess?.timesFile === undefined ? TIMES_FILE : options.inProcess.timesFile;
  }

  capabilities() {
    // Files loaded with `import` cannot be unloaded: a static mutant needs a new process (Stryker starts one).
    return { reloadEnvironment: false };
  }

  async init() {
    // Errors outside a test's await chain (a timer, a dangling promise) fail the test that is running, as node:test
    // fails the file. Between tests there is nothing to fail; they are logged.
    const onError = (error) => {
      if (this.failCurrent !== undefined) this.failCurrent(error);
      else this.log?.warn(`in-process runner: an error outside any test: ${describeError(error)}`);
    };
    process.on("uncaughtException", onError);
    process.on("unhandledRejection", onError);
  }

  get ns() {
    globalThis[NS] ??= {};
    return globalThis[NS];
  }

  /** Registers tsx and the node:test shim, then imports every test file once (the first run of this process). */
  async load() {
    if (this.tests !== undefined) return;
    const { register } = await import("tsx/esm/api");
    register();
    registerHooks(new URL("./node-test-hook.mjs", import.meta.url));
    globalThis.__movieNodeTestRegistry ??= { file: undefined, suites: [], tests: [] };
    const registry = globalThis.__movieNodeTestRegistry;
    for (const file of this.testFiles) {
      registry.file = file;
      try {
        await import(pathToFileURL(resolvePath(file)).href);
      } finally {
        registry.file = undefined;
      }
    }
    this.tests = registry.tests;
    if (this.times.size === 0 && this.timesFile !== null && existsSync(this.timesFile)) {
      for (const [id, ms] of Object.entries(JSON.parse(readFileSync(this.timesFile, "utf8")))) this.times.set(id, ms);
    }
  }

  /** Runs one test; resolves to its result (never rejects). */
  async runOne(test) {
    const base = { id: test.id, name: test.name, fileName: test.file };
    if (test.skipped || test.fn === undefined) return { ...base, status: TestStatus.Skipped, timeSpentMs: 0 };
    const start = performance.now();
    let failure;
    try {
      await new Promise((resolve, reject) => {
        this.failCurrent = reject;
        Promise.resolve()
          .then(() => test.fn())
          .then(resolve, reject);
      });
    } catch (error) {
      failure = error ?? new Error("rejected with no reason");
    } finally {
      this.failCurrent = undefined;
    }
    const timeSpentMs = Math.round((performance.now() - start) * 1000) / 1000;
    return failure === undefined
      ? { ...base, status: TestStatus.Success, timeSpentMs }
      : { ...base, status: TestStatus.Failed, timeSpentMs, failureMessage: describeError(failure) };
  }

  async dryRun() {
    try {
      await this.load();
    } catch (error) {
      return { status: DryRunStatus.Error, errorMessage: `loading the test files: ${describeError(error)}` };
    }
    const results = [];
    for (const test of this.tests) {
      this.ns.currentTestId = test.id;
      try {
        results.push(await this.runOne(test));
      } finally {
        this.ns.currentTestId = undefined;
      }
    }
    for (const r of results) this.times.set(r.id, r.timeSpentMs);
    if (this.timesFile !== null) {
      try {
        writeFileSync(this.timesFile, JSON.stringify(Object.fromEntries(this.times)));
      } catch (error) {
        this.log?.warn(`in-process runner: could not store test times: ${describeError(error)}`);
      }
    }
    return {
      status: DryRunStatus.Complete,
      tests: results,
      mutantCoverage: this.ns.mutantCoverage ?? { static: {}, perTest: {} },
    };
  }

  async mutantRun(options) {
    if (this.dirty) {
      // Rejecting makes Stryker start a new worker process and run this mutant there (its retry of a crashed runner).
      throw new Error("in-process runner: an earlier mutant left shared state behind; restarting the worker");
    }
    const ns = this.ns;
    // A static mutant must be active while the files load; Stryker runs it in a fresh process (capabilities).
    ns.activeMutant = options.activeMutant.id;
    try {
      await this.load();
    } catch (error) {
      ns.activeMutant = undefined;
      // Loading failed with the mutant active (a static mutant that breaks a module's top level): a failed test file.
      if (options.mutantActivation === "static") {
        return { status: MutantRunStatus.Killed, killedBy: [], failureMessage: describeError(error), nrOfTests: 0 };
      }
      return { status: MutantRunStatus.Error, errorMessage: `loading the test files: ${describeError(error)}` };
    }
    const byId = new Map(this.tests.map((t, i) => [t.id, { t, i }]));
    const selected =
      options.testFilter === undefined
        ? this.tests.map((t, i) => ({ t, i }))
        : options.testFilter.map((id) => byId.get(id)).filter((e) => e !== undefined);
    // Fastest first: a mutant most tests kill dies in the cheapest one. Ties (and unknown times) keep file order.
    const time = (e) => this.times.get(e.t.id) ?? Number.POSITIVE_INFINITY;
    selected.sort((a, b) => time(a) - time(b) || a.i - b.i);
    if (options.hitLimit !== undefined) {
      ns.hitLimit = options.hitLimit;
      ns.hitCount = 0;
    }
    let ran = 0;
    const killedBy = [];
    let failureMessage;
    try {
      for (const { t } of selected) {
        const result = await this.runOne(t);
        if (ns.hitCount !== undefined && ns.hitCount > ns.hitLimit) {
          return { status: MutantRunStatus.Timeout, reason: `Hit limit reached (${ns.hitCount}/${ns.hitLimit})` };
        }
        if (result.status === TestStatus.Skipped) continue;
        ran++;
        if (result.status === TestStatus.Failed) {
          killedBy.push(t.id);
          failureMessage ??= result.failureMessage;
          if (!options.disableBail) break;
        }
      }
    } finally {
      ns.activeMutant = undefined;
      ns.hitLimit = undefined;
      ns.hitCount = undefined;
    }
    this.mutantRuns++;
    if (killedBy.length > 0 && this.verifyKills && options.mutantActivation !== "static") {
      // A test shares the process with every earlier mutant's run: a mutant that changed a module-level object (a
      // shared constant sorted in place, say) could make later tests fail under mutants they do not detect. So the
      // killing test runs once more with no mutant: it must pass. If it fails, the environment is dirty: after
      // earlier mutants, this result cannot be trusted and the mutant is re-run in a new process (rejecting); as the
      // first mutant of a fresh process, the mutant itself broke the state (a kill the tap runner sees too), and the
      // next mutant starts a new process. Not for a static mutant: the files were loaded with it active, so its
      // process cannot run the test without it (and Stryker starts a new process after it anyway).
      const again = await this.runOne(this.tests[byId.get(killedBy[0]).i]);
      if (again.status === TestStatus.Failed) {
        this.dirty = true;
        this.log?.warn(
          `in-process runner: "${killedBy[0]}" fails with no mutant active after mutant ${options.activeMutant.id}`,
        );
        if (this.mutantRuns > 1) {
          throw new Error(
            `in-process runner: "${killedBy[0]}" fails with no mutant active; re-running in a new worker`,
          );
        }
        this.log?.warn(`in-process runner: mutant ${options.activeMutant.id} left shared state behind; restarting`);
      }
    }
    return killedBy.length > 0
      ? { status: MutantRunStatus.Killed, killedBy, failureMessage, nrOfTests: ran }
      : { status: MutantRunStatus.Survived, nrOfTests: ran };
  }
}

// The Stryker plugin, declared only when Stryker loads this file (the self-check below needs no Stryker packages).
export const strykerPlugins = await (async () => {
  const { declareClassPlugin, PluginKind } = await import("@stryker-mutator/api/plugin");
  return [declareClassPlugin(PluginKind.TestRunner, "node-test-in-process", InProcessNodeTestRunner)];
})();

export const strykerValidationSchema = {
  $schema: "http://json-schema.org/draft-07/schema#",
  type: "object",
  properties: {
    inProcess: {
      type: "object",
      properties: { testFiles: { type: "array", items: { type: "string" } }, verifyKills: { type: "boolean" } },
      additionalProperties: false,
    },
  },
};

// Self-check: `node scripts/mutation/in-process-runner.mjs --twice [files…]` runs the dry run twice in this process
// (no mutant, no coverage) and fails if any test's status differs between the runs: state one run leaves for the next.
if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const args = process.argv.slice(2).filter((a) => a !== "--twice");
  const { coreTests } = await import(pathToFileURL(resolvePath("stryker.config.mjs")).href);
  const files = args.length > 0 ? args : coreTests;
  const runner = new InProcessNodeTestRunner({ inProcess: { testFiles: files, timesFile: null } }, console);
  await runner.init();
  const rounds = [];
  for (let round = 1; round <= 2; round++) {
    const start = performance.now();
    const result = await runner.dryRun();
    if (result.status !== DryRunStatus.Complete) {
      console.error(`round ${round}: ${result.errorMessage}`);
      process.exit(1);
    }
    rounds.push(result.tests);
    const failed = result.tests.filter((t) => t.status === TestStatus.Failed);
    const skipped = result.tests.filter((t) => t.status === TestStatus.Skipped).length;
    console.log(
      `round ${round}: ${result.tests.length} tests, ${failed.length} failed, ${skipped} skipped, ${((performance.now() - start) / 1000).toFixed(1)} s`,
    );
    for (const t of failed) console.log(`  FAILED ${t.id}: ${t.failureMessage}`);
  }
  const differ = rounds[0].filter((t, i) => rounds[1][i]?.id !== t.id || rounds[1][i].status !== t.status);
  for (const t of differ) console.log(`  DIFFERS ${t.id}`);
  const slowest = [...rounds[0]].sort((a, b) => b.timeSpentMs - a.timeSpentMs).slice(0, 10);
  for (const t of slowest) console.log(`  ${(t.timeSpentMs / 1000).toFixed(2)} s ${t.id}`);
  console.log(differ.length === 0 ? "both rounds agree" : `${differ.length} tests differ between the rounds`);
  process.exit(differ.length === 0 && rounds[0].every((t) => t.status !== TestStatus.Failed) ? 0 : 1);
}
