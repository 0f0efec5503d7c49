// The package as a user gets it: `npm pack` (its prepack runs `npm run build`), the tarball installed into a scratch
// project in a temp folder (from the npm cache when it has everything, so it runs offline after `npm ci`), then
//  1. plain JavaScript run by plain `node` (no tsx, no loader, no movie-source condition) runs the seed's Order
//     example across two OS processes: the entity lives in the backend process, the frontend process asks it;
//  2. the persistence backends, imported without their optional drivers, fail with one MissingDriverError each;
//  3. a TypeScript consumer (module/moduleResolution nodenext) type-checks every self-contained ts block of README.md
//     and docs/*.md against the packed .d.ts files;
//  4. publint (strict) and @arethetypeswrong/cli (esm-only profile: the package is ES modules only) find nothing.
// It took 80 s alone with the machine's 2 cores shared by eight engineers (load average 18): the build in prepack about
// 40 s, the install 14 s, attw 17 s; the two node processes take about 2 s of it. Inside the full suite on that load the
// build and install alone took over 120 s, so the before hook has its own 10-minute timeout.
import assert from "node:assert/strict";
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { typeScriptBlocks } from "../docs/markdown-blocks.ts";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const consumerSources = join(root, "test", "package", "consumer");
const scratch = mkdtempSync(join(tmpdir(), "movie-consumer-"));
const app = join(scratch, "app");
let tarball = "";

/** The environment of a user's shell: none of the repository's loader flags or npm's script variables leak in. */
function userEnvironment(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (key === "NODE_OPTIONS" || key.startsWith("npm_") || key.startsWith("TSX")) continue;
    env[key] = value;
  }
  return { ...env, MOVIE_LOG_LEVEL: "silent" };
}

function run(command: string, args: string[], cwd: string): string {
  const result = spawnSync(command, args, { cwd, encoding: "utf8", env: userEnvironment(), timeout: 300_000 });
  assert.equal(
    result.status,
    0,
    `${command} ${args.join(" ")} (in ${cwd}) failed with ${result.status}:\n${result.stdout}\n${result.stderr}`,
  );
  return result.stdout;
}

const npm = process.platform === "win32" ? "npm.cmd" : "npm";
const bin = (name: string) => join(root, "node_modules", ".bin", name);

before(
  () => {
    const packed = JSON.parse(run(npm, ["pack", "--json", "--pack-destination", scratch], root)) as {
      filename: string;
      size: number;
      unpackedSize: number;
      entryCount: number;
    }[];
    const { filename, size, unpackedSize, entryCount } = packed[0]!;
    tarball = join(scratch, filename);
    console.log(
      `packed ${filename}: ${(size / 1024).toFixed(1)} kB, ${entryCount} files, ${(unpackedSize / 1024 / 1024).toFixed(1)} MB unpacked`,
    );
    mkdirSync(app);
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "movie-consumer", private: true, type: "module" }));
    // The OpenTelemetry API is the optional peer a user installs to use registerOpenTelemetryMetrics (docs/operations.md
    // shows it); the database drivers stay out, so their missing-driver error is tested below.
    const otel = "@opentelemetry/api@1.10.0";
    run(npm, ["install", "--prefer-offline", "--no-audit", "--no-fund", tarball, otel], app);
    for (const file of readdirSync(consumerSources)) copyFileSync(join(consumerSources, file), join(app, file));
  },
  { timeout: 600_000 },
); // build + install: 80 s on the shared machine, more under the full suite's load

after(() => rmSync(scratch, { recursive: true, force: true }));

function lines(child: ChildProcess): AsyncIterator<string> {
  return createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
}

async function firstLine(child: ChildProcess, stderr: () => string, what: string): Promise<unknown> {
  const exited = new Promise<never>((_, reject) =>
    child.once("exit", (code) => reject(new Error(`${what} exited with ${code} before printing:\n${stderr()}`))),
  );
  const next = await Promise.race([lines(child).next(), exited]);
  assert.ok(!next.done, `${what} closed its output without a line:\n${stderr()}`);
  return JSON.parse(next.value);
}

function node(args: string[]): { child: ChildProcess; stderr: () => string } {
  const child = spawn(process.execPath, args, { cwd: app, env: userEnvironment(), stdio: ["pipe", "pipe", "pipe"] });
  let text = "";
  child.stderr!.on("data", (chunk: Buffer) => (text += chunk.toString()));
  return { child, stderr: () => text };
}

test("the installed package is the built one: dist/ present, no .ts source is loaded at run time", () => {
  const installed = join(app, "node_modules", "movie");
  assert.ok(existsSync(join(installed, "dist", "index.js")), "dist/index.js is in the tarball");
  assert.ok(existsSync(join(installed, "dist", "index.d.ts")), "dist/index.d.ts is in the tarball");
  assert.ok(existsSync(join(installed, "dist", "index.d.ts.map")), "declaration maps are in the tarball");
  assert.ok(existsSync(join(installed, "LICENSE")), "the license is in the tarball");
  assert.ok(!existsSync(join(installed, "node_modules")), "nothing was installed under the package itself");
  for (const peer of ["pg", "better-sqlite3"]) {
    assert.ok(!existsSync(join(app, "node_modules", peer)), `${peer} is an optional peer and was not installed`);
  }
  // The host the persistent provider and the singleton are handed is not part of ClusterSharding's published type.
  const declaration = readFileSync(join(installed, "dist", "sharding", "cluster-sharding.d.ts"), "utf8");
  assert.doesNotMatch(
    declaration,
    /\bhost\s*[:;]|: ShardingHost\b/,
    "ClusterSharding's declaration has no host member",
  );
});

test("plain node runs the seed's Order example across two OS processes from the packed tarball", async () => {
  const backend = node(["order-node.mjs", "backend"]);
  try {
    const ready = (await firstLine(backend.child, backend.stderr, "the backend")) as { port: number; pid: number };
    const frontend = node(["order-node.mjs", "frontend", String(ready.port)]);
    const result = (await firstLine(frontend.child, frontend.stderr, "the frontend")) as {
      reply: { parcels: string[]; hostPid: number };
      frontendPid: number;
    };
    assert.deepEqual(result.reply.parcels, ["parcel-7"]);
    assert.equal(result.reply.hostPid, backend.child.pid, "the order lives in the backend process");
    assert.notEqual(result.frontendPid, backend.child.pid);
    const code = await new Promise((r) => frontend.child.once("exit", r));
    assert.equal(code, 0, `the frontend exits cleanly:\n${frontend.stderr()}`);
  } finally {
    const exited = new Promise((r) => backend.child.once("exit", r));
    backend.child.stdin!.end();
    await exited;
  }
});

test("a persistence backend imported without its driver throws one MissingDriverError naming the package", () => {
  for (const [entry, packageName] of [
    ["movie/persistence/postgres", "pg"],
    ["movie/persistence/sqlite", "better-sqlite3"],
  ] as const) {
    const result = spawnSync(process.execPath, ["missing-driver.mjs", entry], {
      cwd: app,
      env: userEnvironment(),
      encoding: "utf8",
    });
    assert.equal(result.status, 0, result.stderr);
    const thrown = JSON.parse(result.stdout) as { name: string; message: string; packageName: string };
    assert.equal(thrown.name, "MissingDriverError", `${entry}: ${result.stdout}`);
    assert.equal(thrown.packageName, packageName);
    assert.ok(thrown.message.includes(`npm install ${packageName}`), thrown.message);
    assert.equal(result.stderr, "", "nothing else is printed");
  }
  const plain = spawnSync(process.execPath, ["missing-driver.mjs", "movie/persistence"], {
    cwd: app,
    env: userEnvironment(),
    encoding: "utf8",
  });
  assert.deepEqual(JSON.parse(plain.stdout), { imported: true }, "movie/persistence itself needs no driver");
});

test("a nodenext TypeScript consumer type-checks the documentation's snippets against the packed .d.ts", () => {
  const documents = [
    "README.md",
    ...(existsSync(join(root, "docs")) ? readdirSync(join(root, "docs")).filter((f) => f.endsWith(".md")) : []).map(
      (f) => `docs/${f}`,
    ),
  ];
  const snippetDir = join(app, "snippets");
  mkdirSync(snippetDir);
  const files = new Map<string, string>();
  const skipped: string[] = [];
  for (const document of documents) {
    for (const block of typeScriptBlocks(readFileSync(join(root, document), "utf8")).blocks) {
      if (block.exempt !== null) continue;
      // A block that imports the repository's own files (./examples/...) is checked in the repository only.
      if (/from\s+["']\.{1,2}\//.test(block.code)) {
        skipped.push(`${document}:${block.fenceLine}`);
        continue;
      }
      const file = join(snippetDir, `${document.replace(/\W/g, "-")}-${block.fenceLine}.ts`);
      writeFileSync(file, `${block.code}\nexport {};\n`);
      files.set(file, `${document}:${block.fenceLine}`);
    }
  }
  assert.ok(files.size >= 5, `only ${files.size} self-contained blocks found`);
  const canary = join(snippetDir, "canary.ts");
  writeFileSync(canary, `import { ActorSystem } from "movie";\nexport const wrong: number = ActorSystem;\n`);
  const program = ts.createProgram({
    rootNames: [...files.keys(), canary],
    options: {
      target: ts.ScriptTarget.ES2022,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      strict: true,
      noEmit: true,
      skipLibCheck: true,
      types: ["node"],
      typeRoots: [join(root, "node_modules", "@types")],
    },
  });
  const diagnostics = (file: string) => {
    const source = program.getSourceFile(file)!;
    return [...program.getSyntacticDiagnostics(source), ...program.getSemanticDiagnostics(source)];
  };
  assert.deepEqual(
    diagnostics(canary).map((d) => d.code),
    [2322],
    "the canary fails with TS2322 only (else movie did not resolve)",
  );
  const failures: string[] = [];
  for (const [file, where] of files) {
    for (const d of diagnostics(file)) {
      const line = d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start).line + 1 : 0;
      failures.push(`${where} (+${line}) TS${d.code}: ${ts.flattenDiagnosticMessageText(d.messageText, " ")}`);
    }
  }
  const resolvedFrom = program.getSourceFiles().find((f) => f.fileName.includes("/node_modules/movie/"))?.fileName;
  assert.ok(resolvedFrom?.includes("/node_modules/movie/dist/"), `movie resolved to ${resolvedFrom}, not dist/`);
  assert.deepEqual(failures, [], `snippets fail against the packed types:\n${failures.join("\n")}`);
  if (skipped.length > 0) console.log(`checked in the repository only (relative imports): ${skipped.join(", ")}`);
});

test("publint (strict) and arethetypeswrong (esm-only) find no problem in the tarball", () => {
  const lint = run(bin("publint"), ["run", tarball, "--strict"], root);
  assert.match(lint, /All good!/, lint);
  run(bin("attw"), [tarball, "--profile", "esm-only", "--format", "ascii"], root);
});
