// `movie/singleton` must not load persistence code (issue 8): only `movie/singleton/persistent` does. Checked in a
// child process, whose resolve hook records every module the import pulls in.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);
const recorder = fileURLToPath(new URL("./fixtures/loaded-modules.mjs", import.meta.url));
const src = new URL("../../src/", import.meta.url);

async function loadedBy(entry: string): Promise<string[]> {
  const { stdout } = await run(process.execPath, ["--import", "tsx", recorder, fileURLToPath(new URL(entry, src))]);
  const urls = JSON.parse(stdout) as string[];
  return urls.filter((url) => url.startsWith(src.href)).map((url) => url.slice(src.href.length));
}

test("importing movie/singleton loads no module of src/persistence; movie/singleton/persistent does", async () => {
  const [ordinary, persistent] = await Promise.all([
    loadedBy("singleton/index.ts"),
    loadedBy("singleton/persistent/index.ts"),
  ]);
  assert.ok(ordinary.includes("singleton/cluster-singleton.ts"), `the recorder saw the singleton: ${ordinary}`);
  assert.deepEqual(
    ordinary.filter((m) => m.startsWith("persistence/") || m.startsWith("sharding/persistent/")),
    [],
    "no persistence code behind movie/singleton",
  );
  assert.ok(
    persistent.some((m) => m.startsWith("persistence/")),
    "the persistent entry does load persistence",
  );
});
