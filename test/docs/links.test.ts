// The README is a front door to the guides in docs/, and the guides link to each other and into the repository: a
// link that points at a file or a heading that is not there is a broken door. Every relative link of README.md,
// DEVELOPERS.md and docs/*.md must name an existing file and, when it has a #fragment into a Markdown file, a heading
// of that file (GitHub's anchor rules: lower case, punctuation dropped, spaces to hyphens, duplicates numbered).
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const documents = [
  "README.md",
  "DEVELOPERS.md",
  ...readdirSync(join(root, "docs"))
    .filter((name) => name.endsWith(".md"))
    .map((name) => `docs/${name}`),
];

/** Lines outside fenced code blocks, with their 1-based numbers: links and headings inside code are text. */
function proseLines(text: string): Array<[number, string]> {
  const lines: Array<[number, string]> = [];
  let fence: string | null = null;
  text.split("\n").forEach((line, index) => {
    const marker = /^(`{3,}|~{3,})/.exec(line)?.[1];
    if (marker !== undefined) {
      if (fence === null) fence = marker;
      else if (marker.startsWith(fence)) fence = null;
      return;
    }
    if (fence === null) lines.push([index + 1, line]);
  });
  return lines;
}

export function githubAnchor(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\- _]/gu, "")
    .replace(/ /g, "-");
}

function anchorsOf(file: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const [, line] of proseLines(readFileSync(file, "utf8"))) {
    const heading = /^#{1,6} (.*)$/.exec(line)?.[1];
    if (heading === undefined) continue;
    const base = githubAnchor(heading);
    const count = seen.get(base) ?? 0;
    seen.set(base, count + 1);
    anchors.add(count === 0 ? base : `${base}-${count}`);
  }
  return anchors;
}

test("GitHub anchors drop punctuation and keep hyphens and underscores", () => {
  assert.equal(githubAnchor("The seed's example in TypeScript"), "the-seeds-example-in-typescript");
  assert.equal(githubAnchor("Measured (`npm run bench:remote`)"), "measured-npm-run-benchremote");
  assert.equal(githubAnchor("Identity: `secret`, `tls`, binding"), "identity-secret-tls-binding");
});

test("every relative link in README.md, DEVELOPERS.md and docs/*.md points at an existing file and heading", () => {
  const broken: string[] = [];
  let checked = 0;
  for (const document of documents) {
    const file = join(root, document);
    for (const [lineNumber, line] of proseLines(readFileSync(file, "utf8"))) {
      for (const match of line.matchAll(/\]\(([^)\s]+)\)/g)) {
        const target = match[1] ?? "";
        if (/^[a-z]+:/i.test(target)) continue; // https:, mailto:
        checked += 1;
        const [path = "", fragment] = target.split("#");
        const targetFile = path === "" ? file : resolve(dirname(file), path);
        const where = `${document}:${lineNumber}: ${target}`;
        if (!existsSync(targetFile)) {
          broken.push(`${where} (no file ${relative(root, targetFile)})`);
          continue;
        }
        if (fragment !== undefined && targetFile.endsWith(".md") && !anchorsOf(targetFile).has(fragment)) {
          broken.push(`${where} (no heading with that anchor in ${relative(root, targetFile)})`);
        }
      }
    }
  }
  assert.ok(checked >= 20, `only ${checked} relative links found; is the link pattern broken?`);
  assert.deepEqual(broken, [], `broken links:\n${broken.join("\n")}`);
});
