// Sharding's internals (src/sharding/internal/index.ts: the planner, providers, retry barrier, wire classes, codecs,
// election helpers, the host interface) are not part of any package entry: each entry of package.json "exports" is
// read with the type checker, values and types alike, and none may export a declaration the internal index exports,
// except the one documented type that `ClusterSharding.activate` resolves with.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import ts from "typescript";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const internalIndex = join(root, "src/sharding/internal/index.ts");

/** Package entry → its source file (the `movie-source` condition of package.json "exports"). */
function packageEntries(): Map<string, string> {
  const manifest = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
    exports: Record<string, string | Record<string, string>>;
  };
  const entries = new Map<string, string>();
  for (const [subpath, target] of Object.entries(manifest.exports)) {
    if (typeof target === "string") continue; // ./package.json
    const source = target["movie-source"];
    assert.ok(source !== undefined, `${subpath} has no movie-source condition`);
    entries.set(subpath === "." ? "movie" : `movie/${subpath.slice(2)}`, join(root, source));
  }
  return entries;
}

/** The repository's compiler options (tsconfig.json: the movie-source condition, .ts imports). */
function compilerOptions(): ts.CompilerOptions {
  const parsed = ts.getParsedCommandLineOfConfigFile(
    join(root, "tsconfig.json"),
    {},
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (d) => assert.fail(ts.flattenDiagnosticMessageText(d.messageText, "\n")),
    },
  );
  assert.ok(parsed !== undefined, "tsconfig.json could not be read");
  return { ...parsed.options, noEmit: true };
}

/** Every export of `file` (values and types), as name → the declaration it stands for (aliases followed). */
function exportsOf(program: ts.Program, file: string): Map<string, ts.Symbol> {
  const checker = program.getTypeChecker();
  const source = program.getSourceFile(file);
  assert.ok(source !== undefined, `${file} is not in the program`);
  const module = checker.getSymbolAtLocation(source);
  assert.ok(module !== undefined, `${file} is not a module`);
  const found = new Map<string, ts.Symbol>();
  for (const symbol of checker.getExportsOfModule(module)) {
    const target = symbol.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(symbol) : symbol;
    found.set(symbol.getName(), target);
  }
  return found;
}

test("no package entry exports a declaration of sharding's internal index (but ShardingControlAck, activate's result)", () => {
  const entries = packageEntries();
  assert.ok(entries.size >= 10 && entries.has("movie/sharding"), `entries read: ${[...entries.keys()].join(", ")}`);
  const program = ts.createProgram({
    rootNames: [internalIndex, ...entries.values()],
    options: compilerOptions(),
  });
  const internal = exportsOf(program, internalIndex);
  // The check is not vacuous: the internal index holds the classes that left movie/sharding.
  for (const name of ["AllocationPlanner", "EntityProvider", "RetryBarrier", "RegistryCodec", "electCoordinator"]) {
    assert.ok(internal.has(name), `${name} is not in the internal index`);
  }
  const internalDeclarations = new Map([...internal].map(([name, symbol]) => [symbol, name]));
  const leaked: string[] = [];
  for (const [entry, file] of entries) {
    for (const [name, symbol] of exportsOf(program, file)) {
      const internalName = internalDeclarations.get(symbol);
      if (internalName !== undefined) leaked.push(`${entry}: ${name}`);
    }
  }
  assert.deepEqual(
    leaked,
    ["movie/sharding: ShardingControlAck"],
    `internals on a package entry:\n${leaked.join("\n")}`,
  );
});
