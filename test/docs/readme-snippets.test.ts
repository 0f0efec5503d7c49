// Every ```ts / ```typescript block of README.md, DEVELOPERS.md and docs/*.md is type-checked against the package's own exports,
// so the documentation cannot drift from the API. Each block becomes a module of its own in .tmp/doc-snippets/ (inside
// the repository, so `import ... from "movie"` and "movie/remote" resolve through package.json "exports" as a
// self-reference), and one TypeScript program with the repository's compiler options checks them all at once.
// A block that is deliberately not a complete module is exempted by the line `<!-- not-checked: reason -->` right
// before its fence; keep those rare.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { type TypeScriptBlock, typeScriptBlocks } from "./markdown-blocks.ts";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
/** The front door, the contributors' guide and every guide under docs/ (found, not listed, so a new guide is checked). */
const documents = [
  "README.md",
  "DEVELOPERS.md",
  ...readdirSync(join(root, "docs"))
    .filter((name) => name.endsWith(".md"))
    .sort()
    .map((name) => `docs/${name}`),
];
const outDir = join(root, ".tmp", "doc-snippets");
/** How many blocks the documents hold at least today: fewer means the fence parsing broke, not that docs shrank. */
const minimumBlocks = 6;
const maximumExempt = 2;

interface Snippet extends TypeScriptBlock {
  readonly document: string;
}

/** The repository's compiler options (tsconfig.json), which the snippets are held to as well. */
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
  // rootDirs lets a snippet's relative import ("./examples/...") resolve from the document's folder, as a reader's
  // would; module NodeNext in this "type": "module" package makes each snippet an ES module, so top-level await works.
  return { ...parsed.options, noEmit: true, rootDirs: [root, outDir] };
}

/** `README.md:212:5 TS2304: Cannot find name 'system'.`, the position mapped back to the document. */
function format(snippet: Snippet, diagnostic: ts.Diagnostic): string {
  const message = ts.flattenDiagnosticMessageText(diagnostic.messageText, "\n    ");
  if (diagnostic.file === undefined || diagnostic.start === undefined) return `TS${diagnostic.code}: ${message}`;
  const { line, character } = diagnostic.file.getLineAndCharacterOfPosition(diagnostic.start);
  return `${snippet.document}:${snippet.fenceLine + 1 + line}:${character + 1} TS${diagnostic.code}: ${message}`;
}

test("the block scanner finds TypeScript fences, their lines and their exemptions", () => {
  const text = [
    "# Title", // 1
    "```sh", // 2
    "npm test", // 3
    "```", // 4
    "````md", // 5
    "```ts", // 6: quoted inside a longer fence, not a block
    "const quoted = 1;",
    "```",
    "````", // 9
    "```ts", // 10
    "const a: number = 1;",
    "```",
    "<!-- not-checked: a fragment of the block above -->", // 13
    "~~~typescript", // 14
    "a + 1;",
    "~~~",
    "<!-- not-checked: nothing follows -->", // 17
    "",
    "```TS title", // 19
    "const b = 2;",
    "const c = 3;",
    "```",
    "```ts runs", // 23
    "console.log(1);",
    "```",
  ].join("\n");
  const { blocks, strayMarkers } = typeScriptBlocks(text);
  assert.deepEqual(blocks, [
    { fenceLine: 10, code: "const a: number = 1;", exempt: null, runs: false },
    { fenceLine: 14, code: "a + 1;", exempt: "a fragment of the block above", runs: false },
    { fenceLine: 19, code: "const b = 2;\nconst c = 3;", exempt: null, runs: false },
    { fenceLine: 23, code: "console.log(1);", exempt: null, runs: true },
  ]);
  assert.deepEqual(strayMarkers, [17]);
});

test("every TypeScript block in README.md, DEVELOPERS.md and docs/*.md compiles against the package's exports", () => {
  const snippets: Snippet[] = [];
  for (const document of documents) {
    const { blocks, strayMarkers } = typeScriptBlocks(readFileSync(join(root, document), "utf8"));
    assert.deepEqual(strayMarkers, [], `${document}: a not-checked marker must be the line right before a ts fence`);
    snippets.push(...blocks.map((block) => ({ ...block, document })));
  }
  assert.ok(
    snippets.length >= minimumBlocks,
    `found only ${snippets.length} TypeScript blocks; is the scanner broken?`,
  );
  const exempt = snippets.filter((s) => s.exempt !== null).map((s) => `${s.document}:${s.fenceLine} (${s.exempt})`);
  assert.ok(exempt.length <= maximumExempt, `too many not-checked blocks; make these compile: ${exempt.join(", ")}`);

  // Overwritten on every run, so a fresh clone and a stale folder behave the same.
  rmSync(outDir, { recursive: true, force: true });
  mkdirSync(outDir, { recursive: true });
  const files = new Map<string, Snippet>();
  for (const snippet of snippets) {
    if (snippet.exempt !== null) continue;
    const name = `${snippet.document.replace(/\W/g, "-")}-${String(snippet.fenceLine).padStart(4, "0")}.ts`;
    // A snippet sits in the mirror of its document's folder, so "../examples/..." in docs/ resolves as it reads.
    const folder = join(outDir, dirname(snippet.document));
    mkdirSync(folder, { recursive: true });
    // The trailing export makes every snippet a module of its own (no clashes between blocks) without moving a line.
    writeFileSync(join(folder, name), `${snippet.code}\nexport {};\n`);
    files.set(join(folder, name), snippet);
  }
  // The canary proves that "movie" resolves to the real declarations and that type errors are reported at all: an
  // unresolved import would give TS2307 here instead of TS2322.
  const canary = join(outDir, "canary.ts");
  writeFileSync(canary, `import { ActorSystem } from "movie";\nexport const wrong: number = ActorSystem;\n`);

  const program = ts.createProgram({ rootNames: [...files.keys(), canary], options: compilerOptions() });
  const diagnosticsOf = (file: string) => {
    const source = program.getSourceFile(file);
    assert.ok(source !== undefined, `${file} is not in the program`);
    return [...program.getSyntacticDiagnostics(source), ...program.getSemanticDiagnostics(source)];
  };
  const canaryCodes = diagnosticsOf(canary).map((d) => d.code);
  assert.deepEqual(canaryCodes, [2322], "the canary must fail with exactly TS2322 (is the self-reference broken?)");

  const failures = program.getOptionsDiagnostics().map((d) => ts.flattenDiagnosticMessageText(d.messageText, "\n"));
  for (const [file, snippet] of files) {
    const diagnostics = diagnosticsOf(file);
    if (diagnostics.length === 0) continue;
    failures.push(
      `${snippet.document}:${snippet.fenceLine}: the block does not compile (${relative(root, file)}):\n` +
        diagnostics.map((d) => `  ${format(snippet, d)}`).join("\n"),
    );
  }
  if (failures.length > 0) {
    assert.fail(
      `\n${failures.join("\n\n")}\nFix the block, or mark a deliberate fragment <!-- not-checked: why -->.\n`,
    );
  }
  // Kept on failure so the named module can be inspected; removed when everything compiles.
  rmSync(outDir, { recursive: true, force: true });
});

// A block fenced as ```ts runs is a whole program: it must not only compile but run to exit code 0 from source, as a
// reader who pastes it would run it. Only quick, self-contained programs are marked (no fixed ports, no servers).
test("every ```ts runs block of the documents runs to exit code 0", () => {
  const runnable: Snippet[] = [];
  for (const document of documents) {
    const { blocks } = typeScriptBlocks(readFileSync(join(root, document), "utf8"));
    runnable.push(...blocks.filter((block) => block.runs).map((block) => ({ ...block, document })));
  }
  assert.ok(runnable.length >= 2, `found only ${runnable.length} runnable blocks; is the info-string parsing broken?`);
  const runDir = join(root, ".tmp", "doc-runs");
  rmSync(runDir, { recursive: true, force: true });
  const failures: string[] = [];
  for (const snippet of runnable) {
    // The mirror of the document's folder one level deeper (.tmp/doc-runs/<folder>) would break "../examples"
    // imports, so a relative import is rewritten to the repository root's absolute path instead.
    const code = snippet.code.replace(/from "(\.{1,2}\/[^"]+)"/g, (_all, path: string) => {
      return `from ${JSON.stringify(resolve(root, dirname(snippet.document), path))}`;
    });
    const file = join(runDir, `${snippet.document.replace(/\W/g, "-")}-${snippet.fenceLine}.ts`);
    mkdirSync(runDir, { recursive: true });
    writeFileSync(file, `${code}\nexport {};\n`);
    const result = spawnSync(process.execPath, ["--conditions=movie-source", "--import", "tsx", file], {
      cwd: root,
      env: { ...process.env, MOVIE_LOG_LEVEL: "silent" },
      encoding: "utf8",
      timeout: 60_000,
    });
    if (result.status !== 0) {
      const why = result.error !== undefined ? result.error.message : `exit code ${result.status}`;
      failures.push(`${snippet.document}:${snippet.fenceLine}: ${why}\n${result.stdout}${result.stderr}`.trimEnd());
    }
  }
  assert.deepEqual(failures, [], `runnable blocks failed:\n${failures.join("\n\n")}`);
  rmSync(runDir, { recursive: true, force: true });
});
