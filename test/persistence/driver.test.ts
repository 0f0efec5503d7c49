// The PostgreSQL and SQLite drivers are optional peer dependencies: a backend imported without its driver must fail
// with one MissingDriverError naming the package to install. The packed-tarball consumer test (test/package/) proves
// it for real in a project without `pg`; these cases pin the loader's rule for telling "not installed" apart.
import assert from "node:assert/strict";
import { test } from "node:test";
import { loadDriver } from "../../src/persistence/driver.ts";
import { MissingDriverError } from "../../src/persistence/index.ts";

test("a driver that is not installed becomes one MissingDriverError that says what to install", async () => {
  const missing = "movie-test-no-such-driver";
  const error = await loadDriver(missing, "movie/persistence/example", () => import(missing)).then(
    () => assert.fail("the import of a package that does not exist resolved"),
    (e: unknown) => e,
  );
  assert.ok(error instanceof MissingDriverError, `expected MissingDriverError, got ${String(error)}`);
  assert.equal(error.packageName, missing);
  assert.equal(error.entryPoint, "movie/persistence/example");
  assert.match(error.message, /movie\/persistence\/example needs the package "movie-test-no-such-driver"/);
  assert.match(error.message, /npm install movie-test-no-such-driver/);
});

test("an installed driver is returned as loaded", async () => {
  const pg = await loadDriver("pg", "movie/persistence/postgres", () => import("pg"));
  assert.equal(typeof pg.default.Pool, "function");
});

test("a missing dependency of the driver, or any other failure, is rethrown unchanged", async () => {
  const inner = Object.assign(new Error("Cannot find package 'pg-types' imported from /x/pg/index.js"), {
    code: "ERR_MODULE_NOT_FOUND",
  });
  await assert.rejects(
    loadDriver("pg", "movie/persistence/postgres", () => Promise.reject(inner)),
    (e) => e === inner,
  );
  const other = new SyntaxError("Unexpected token");
  await assert.rejects(
    loadDriver("pg", "movie/persistence/postgres", () => Promise.reject(other)),
    (e) => e === other,
  );
});
