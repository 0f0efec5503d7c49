// `sharding.initEventSourced` / `initDurableState` and `singletons.initEventSourced` / `initDurableState` exist once
// `movie/sharding/persistent` / `movie/singleton/persistent` is imported, and not before: ordinary sharding and the
// plain singleton stay free of persistence code. Checked in child processes, each starting from a clean module graph.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);
const src = (path: string) => fileURLToPath(new URL(`../../src/${path}`, import.meta.url));

async function methodsAfter(imports: string[]): Promise<Record<string, string>> {
  const script = [
    ...imports.map((path) => `await import(${JSON.stringify(src(path))});`),
    `const { ClusterSharding } = await import(${JSON.stringify(src("sharding/index.ts"))});`,
    `const { ClusterSingleton } = await import(${JSON.stringify(src("singleton/index.ts"))});`,
    "console.log(JSON.stringify({",
    "  shardingEventSourced: typeof ClusterSharding.prototype.initEventSourced,",
    "  shardingDurableState: typeof ClusterSharding.prototype.initDurableState,",
    "  singletonEventSourced: typeof ClusterSingleton.prototype.initEventSourced,",
    "  singletonDurableState: typeof ClusterSingleton.prototype.initDurableState,",
    "}));",
  ].join("\n");
  const { stdout } = await run(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script]);
  return JSON.parse(stdout) as Record<string, string>;
}

test("the persistent init methods come with their entry points only", async () => {
  const [plain, sharding, singleton] = await Promise.all([
    methodsAfter([]),
    methodsAfter(["sharding/persistent/index.ts"]),
    methodsAfter(["singleton/persistent/index.ts"]),
  ]);
  assert.deepEqual(plain, {
    shardingEventSourced: "undefined",
    shardingDurableState: "undefined",
    singletonEventSourced: "undefined",
    singletonDurableState: "undefined",
  });
  assert.equal(sharding.shardingEventSourced, "function");
  assert.equal(sharding.shardingDurableState, "function");
  assert.equal(sharding.singletonEventSourced, "undefined");
  assert.equal(singleton.singletonEventSourced, "function");
  assert.equal(singleton.singletonDurableState, "function");
});
