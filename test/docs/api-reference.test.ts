// `npm run docs` writes the API reference from the TSDoc, and typedoc.json makes every warning an error (an
// undocumented export, a link to something not exported). Nothing else runs it, so without this test an export added
// without its documentation would break the command quietly, as four did once. `--emit none` validates without
// writing the site.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { dirname, join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

test("the API reference builds with no warnings: every public export is documented and every link resolves", () => {
  const result = spawnSync(
    process.execPath,
    [join(root, "node_modules", "typedoc", "bin", "typedoc"), "--emit", "none"],
    {
      cwd: root,
      encoding: "utf8",
      timeout: 110_000,
    },
  );
  const colour = new RegExp(`${String.fromCharCode(27)}\\[[0-9;]*m`, "g");
  const output = `${result.stdout}${result.stderr}`.replace(colour, "");
  assert.equal(result.error, undefined, `typedoc did not run: ${result.error?.message}`);
  assert.equal(result.status, 0, `typedoc reported problems (fix the TSDoc it names):\n${output}`);
  assert.doesNotMatch(output, /\[(warning|error)\]/, output);
});
