// The layer rule of DEVELOPERS.md, checked on the import graph of src/: actor ← remote ← cluster ← sharding ←
// singleton, persistence needs only actor, and a layer reaches remoting and cluster membership only through their
// public entry (src/remote/index.ts, src/cluster/index.ts), never through a file behind it; the singleton reaches sharding
// through its index and its internal index (src/sharding/internal/index.ts).
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

/** The only files of a layer that another layer may import. */
const publicEntry: Record<string, string> = { remote: "remote/index.ts", cluster: "cluster/index.ts" };

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

test("the singleton reaches sharding only through its public index, its internal index and its persistent module", () => {
  const allowed = (to: string) =>
    to === "sharding/index.ts" || to === "sharding/internal/index.ts" || to.startsWith("sharding/persistent/");
  const deep = importGraph()
    .filter(([from, to]) => layerOf(from) === "singleton" && layerOf(to) === "sharding" && !allowed(to))
    .map(([from, to]) => `${from} → ${to}`);
  assert.deepEqual(deep, [], `deep imports from the singleton into sharding:\n${deep.join("\n")}`);
});

test("remoting and cluster membership are imported from other layers only through their public index", () => {
  const deep = importGraph()
    .filter(([from, to]) => layerOf(from) !== layerOf(to) && publicEntry[layerOf(to)] !== undefined)
    .filter(([, to]) => to !== publicEntry[layerOf(to)])
    .map(([from, to]) => `${from} → ${to}`);
  assert.deepEqual(deep, [], `deep imports into remote/ or cluster/ internals:\n${deep.join("\n")}`);
});
