// Runs every test file under test/ with Node's own test runner through tsx.
// Node 20's --test does not expand globs itself, so the file list is built here.
import { spawnSync } from "node:child_process";
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";

function findTests(dir: string): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(dir)) {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) found.push(...findTests(path));
    else if (entry.endsWith(".test.ts")) found.push(path);
  }
  return found;
}

const filters = process.argv.slice(2);
const files = findTests("test")
  .filter((f) => filters.length === 0 || filters.some((x) => f.includes(x)))
  .sort();
if (files.length === 0) {
  console.error(`no test files match ${filters.join(" ")}`);
  process.exit(1);
}
// Multi-node tests mostly wait on loopback I/O, so more files than cores run at once.
const concurrency = process.env.MOVIE_TEST_CONCURRENCY ?? "3";
// --conditions=movie-source resolves `import ... from "movie/..."` (package.json "exports") to src/*.ts instead of the
// built dist/, so tests and the README snippets run against the live source without a build.
function runFiles(batch: string[], timeoutMs: number): number {
  if (batch.length === 0) return 0;
  const result = spawnSync(
    process.execPath,
    [
      "--conditions=movie-source",
      "--import",
      "tsx",
      "--test",
      `--test-concurrency=${concurrency}`,
      `--test-timeout=${timeoutMs}`,
      ...batch,
    ],
    {
      stdio: "inherit",
      env: {
        ...process.env,
        MOVIE_LOG_LEVEL: process.env.MOVIE_LOG_LEVEL ?? "silent",
        // Every answer the sharding shell takes from its memory is checked against the core (node/shortcut-memo.ts).
        MOVIE_SHARDING_VERIFY_MEMO: process.env.MOVIE_SHARDING_VERIFY_MEMO ?? "1",
      },
    },
  );
  return result.status ?? 1;
}
// The packed-tarball consumer test builds, packs and installs the package: on a loaded machine that alone can pass
// the 2-minute bound of the others (Node's --test-timeout bounds a whole file too), so it runs last with 10 minutes.
const isPackageTest = (f: string) => f.startsWith(join("test", "package"));
const status = runFiles(
  files.filter((f) => !isPackageTest(f)),
  120_000,
);
const packageStatus = runFiles(files.filter(isPackageTest), 600_000);
process.exit(status !== 0 ? status : packageStatus);
