// The layer rule of DEVELOPERS.md and docs/protocol.md §1.4, checked on the import graph of src/: actor ← remote ←
// cluster ← sharding ← singleton, persistence needs only actor, and an import that crosses from one layer into another
// names that layer's entry (its index.ts), never a file behind it. The few exceptions are listed in `entries` below
// with the reason for each; anything else (sharding reaching into remote/codec.ts, say) fails with the edge named.
import assert from "node:assert/strict";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, normalize, relative } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const src = fileURLToPath(new URL("../../src/", import.meta.url));

function sources(dir: string): string[] {
  const found: string[] = [];
  for (const entry of readdirSync(dir)) {
    const path = join(dir, entry);
    if (statSync(path).isDirectory()) found.push(...sources(path));
    else if (entry.endsWith(".ts")) found.push(path);
  }
  return found;
}

/** Every relative import of every file under src/, as [importer, imported], both relative to src/. */
function importGraph(): [string, string][] {
  const edges: [string, string][] = [];
  const specifier =
    /(?:^|\n)\s*(?:import|export)\b[^"']*?from\s*["'](\.{1,2}\/[^"']+)["']|import\(\s*["'](\.{1,2}\/[^"']+)["']\s*\)|(?:^|\n)\s*import\s*["'](\.{1,2}\/[^"']+)["']/g;
  for (const file of sources(src)) {
    const text = readFileSync(file, "utf8");
    for (const m of text.matchAll(specifier)) {
      const target = normalize(join(dirname(file), m[1] ?? m[2] ?? m[3]!));
      edges.push([relative(src, file), relative(src, target)]);
    }
  }
  return edges;
}

/** The layer of a file relative to src/ (src/index.ts is the actor runtime's entry). */
function layerOf(file: string): string {
  return file.includes("/") ? file.slice(0, file.indexOf("/")) : "actor";
}

const below: Record<string, readonly string[]> = {
  actor: [],
  remote: ["actor"],
  cluster: ["actor", "remote"],
  sharding: ["actor", "remote", "cluster", "persistence"],
  singleton: ["actor", "remote", "cluster", "sharding", "persistence"],
  persistence: ["actor"],
  management: ["actor", "remote", "cluster", "sharding", "singleton", "persistence"],
};

/**
 * The files of a layer that another layer may import, and which importers may. `from` is a prefix of the importing
 * file (relative to src/); an entry without `from` is open to every layer above.
 */
const entries: Record<string, readonly { file: string; from?: string; why: string }[]> = {
  actor: [
    { file: "index.ts", why: "the package entry (movie)" },
    { file: "actor/index.ts", why: "the runtime's entry" },
    { file: "actor/untrusted.ts", why: "describing and rebuilding hostile values, shared by every layer" },
    { file: "actor/settings-keys.ts", why: "the unknown-setting check, shared by every settings object" },
    { file: "actor/clock.ts", from: "management/", why: "the one place that reads time (management's latencies)" },
  ],
  remote: [
    { file: "remote/index.ts", why: "movie/remote" },
    {
      file: "remote/short-text.ts",
      from: "sharding/internal/",
      why: "the codecs' hot-path text read, shared with the direct batch codec (not public API)",
    },
  ],
  cluster: [{ file: "cluster/index.ts", why: "movie/cluster" }],
  persistence: [
    { file: "persistence/index.ts", why: "movie/persistence" },
    { file: "persistence/postgres/index.ts", why: "movie/persistence/postgres" },
    { file: "persistence/sqlite/index.ts", why: "movie/persistence/sqlite" },
  ],
  sharding: [
    { file: "sharding/index.ts", why: "movie/sharding" },
    { file: "sharding/persistent/index.ts", why: "movie/sharding/persistent" },
    {
      file: "sharding/internal/index.ts",
      from: "singleton/",
      why: "sharding's internals: election, safe-to-own, the host",
    },
    {
      file: "sharding/persistent/init-persistent.ts",
      from: "singleton/persistent/",
      why: "persistent singletons are persistent sharded entities of one shard",
    },
  ],
  singleton: [
    { file: "singleton/index.ts", why: "movie/singleton" },
    { file: "singleton/persistent/index.ts", why: "movie/singleton/persistent" },
  ],
  management: [{ file: "management/index.ts", why: "movie/management" }],
};

/** The edges of `edges` that cross into another layer through a file its `entries` do not open to the importer. */
function deepImports(edges: readonly [string, string][]): string[] {
  return edges
    .filter(([from, to]) => layerOf(from) !== layerOf(to))
    .filter(([from, to]) => !(entries[layerOf(to)] ?? []).some((e) => e.file === to && from.startsWith(e.from ?? "")))
    .map(([from, to]) => `${from} → ${to}`);
}

test("the import graph sees the files and the imports (the check below is not vacuous)", () => {
  const edges = importGraph();
  assert.ok(edges.length > 500, `${edges.length} imports found`);
  assert.ok(edges.some(([from, to]) => from.startsWith("sharding/") && to === "remote/index.ts"));
  assert.ok(edges.some(([from, to]) => from === "remote/codec.ts" && to === "actor/untrusted.ts"));
});

test("a layer imports only the layers below it", () => {
  const upward = importGraph()
    .filter(([from, to]) => layerOf(from) !== layerOf(to))
    .filter(([from, to]) => !(below[layerOf(from)] ?? []).includes(layerOf(to)))
    .map(([from, to]) => `${from} → ${to}`);
  assert.deepEqual(upward, [], `imports against the layer order:\n${upward.join("\n")}`);
});

test("an import into another layer names that layer's entry, or one of the listed exceptions", () => {
  const deep = deepImports(importGraph());
  assert.deepEqual(deep, [], `deep imports into another layer:\n${deep.join("\n")}`);
});

test("the check refuses the regressions it exists for", () => {
  // Sharding before the nested-message API imported remoting's codec, envelope and registry directly; the management
  // server reaching sharding's internals, or the cluster singleton a sharding file behind its index, must fail too.
  const planted: [string, string][] = [
    ["sharding/node/node-shell.ts", "remote/codec.ts"],
    ["sharding/internal/envelope-codec.ts", "remote/message-registry.ts"],
    ["sharding/cluster-sharding.ts", "cluster/membership.ts"],
    ["sharding/persistent/init-persistent.ts", "persistence/database.ts"],
    ["management/views.ts", "sharding/internal/index.ts"],
    ["singleton/cluster-singleton.ts", "sharding/persistent/init-persistent.ts"],
    ["singleton/cluster-singleton.ts", "sharding/node/node-core.ts"],
    ["remote/remoting.ts", "actor/clock.ts"],
  ];
  const allowed: [string, string][] = [
    ["sharding/node/node-shell.ts", "remote/index.ts"],
    ["singleton/activation-coordinator.ts", "sharding/internal/index.ts"],
    ["singleton/persistent/singleton-methods.ts", "sharding/persistent/init-persistent.ts"],
    ["sharding/node/node-core.ts", "sharding/internal/codec.ts"],
  ];
  assert.deepEqual(
    deepImports([...planted, ...allowed]),
    planted.map(([from, to]) => `${from} → ${to}`),
  );
});
