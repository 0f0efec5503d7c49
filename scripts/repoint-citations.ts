/**
 * Rewrites the code's citations of the original implementation's reference notes (the word REFERENCE, a section
 * sign and a section number, as in the comments written before docs/protocol.md existed) into citations of
 * docs/protocol.md, by the mapping table below. Prints every change and every citation it cannot map, and exits 1
 * when there is one (nothing is written then), so the table can be completed first.
 *
 *   tsx scripts/repoint-citations.ts            rewrite the files in place
 *   tsx scripts/repoint-citations.ts --check    print what would change; write nothing
 *   tsx scripts/repoint-citations.ts --root D   work on the checkout at D (default: the current directory)
 *
 * Scanned: src/, test/, bench/, examples/, scripts/ (.ts, .js, .mjs, .md), README.md, DEVELOPERS.md and docs/*.md
 * except docs/protocol.md itself (whose appendix lists the old sections on purpose) and this script.
 */
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join, sep } from "node:path";

/** Where each section of the reference notes went in docs/protocol.md (its Appendix A). */
const sections: Readonly<Record<string, string>> = {
  "1": "1.3",
  "2": "5.1",
  "2.2": "5.1",
  "2.3": "11",
  "2.4": "8.1",
  "2.5": "16",
  "3": "6",
  "3.1": "5.2",
  "3.2": "5.3",
  "3.3": "5.4",
  "3.4": "6.1",
  "3.5": "6.2",
  "3.6": "8",
  "3.7": "7",
  "3.8": "9",
  "3.9": "10",
  "3.10": "8.4",
  "3.11": "11.4",
  "3.12": "11",
  "3.13": "15",
  "3.14": "16.1",
  "3.15": "12",
  "4.1": "13.1",
  "4.2": "13.1",
  "4.3": "13.1",
  "4.4": "13.2",
  "4.5": "13.3",
  "4.6": "13.4",
  "4.7": "11",
  "4.8": "13.5",
  "5": "3",
  "6": "4",
  "7": "16.2",
};

/**
 * Sections with no counterpart in docs/protocol.md (the original's benchmarks): a citation of one alone is replaced
 * by this text instead.
 */
const elsewhere: Readonly<Record<string, string>> = {
  "8": "the original's published benchmark figures",
};

/** Ranges of sections cited as one (`§2–3`). */
const ranges: Readonly<Record<string, string>> = {
  "2–3": "5–§10",
  "2-3": "5–§10",
  "3.5–3.11": "6–§10",
  "3.5-3.11": "6–§10",
};

/**
 * A more precise target for a section when the cited line (or its file) says what it is about. The first rule whose
 * `ref` matches and whose `file` (tested on the path with forward slashes) and `line` patterns both match wins.
 */
interface Refinement {
  readonly ref: string;
  readonly file?: RegExp;
  readonly line?: RegExp;
  readonly to: string;
}

const refinements: readonly Refinement[] = [
  // Reference §2.4: entity references and their payloads.
  { ref: "2.4", file: /\/sharding\/codec\.ts$/, to: "7.2" },
  // Reference §3: the plan poll.
  { ref: "3", line: /PLAN_SYNC|plan poll|polls the coordinator/i, to: "6.4" },
  // Reference §3.5: plan state, bootstrap, plan updates.
  { ref: "3.5", line: /reconcile|bootstrap/i, to: "6.3" },
  { ref: "3.5", line: /PlanUpdate|plan request|plan poll/i, to: "6.4" },
  // Reference §3.6: the routing path.
  { ref: "3.6", file: /\/entity-ref\.ts$/, to: "8.1" },
  { ref: "3.6", line: /caller side|caller-side/i, to: "8.1" },
  { ref: "3.6", line: /reached this node|as the coordinator|at hop 0/i, to: "8.2" },
  { ref: "3.6", line: /to its shard's owner|owner side|at the owner/i, to: "8.3" },
  // Reference §3.8: the handoff.
  { ref: "3.8", line: /step 1|abort/i, to: "9.3" },
  { ref: "3.8", line: /step 2|not asked to drain/i, to: "9.2" },
  { ref: "3.8", file: /\/handoff-participant\.ts$/, to: "9.4" },
  { ref: "3.8", line: /owner's part/i, to: "9.4" },
  // Reference §3.10: activation, passivation, idle passivation.
  { ref: "3.10", line: /epoch/i, to: "11.3" },
  // Reference §3.11 and §3.12: failure behaviour, the persistent provider and its leases.
  { ref: "3.11", file: /\/safe-to-own\.ts$/, to: "11.1" },
  { ref: "3.11", file: /\/lease-book\.ts$/, to: "11.2" },
  { ref: "3.11", line: /not safe|safe to own|without releasing/i, to: "11.1" },
  { ref: "3.12", line: /not safe|safe to own|without releasing/i, to: "11.1" },
  { ref: "3.12", file: /\/lease-book\.ts$/, to: "11.2" },
  // Reference §4.7: the SQLite rule.
  { ref: "4.7", line: /not a supported clustered mode/i, to: "13.4" },
  // Reference §4.8: configuration, and the networked store's resilience.
  { ref: "4.8", line: /retry|breaker|timeout|resilience/i, to: "13.1" },
  { ref: "4.8", file: /\/(resilience|circuit-breaker)\.ts$/, to: "13.1" },
  // Reference §5: remoting.
  { ref: "5", line: /handshake/i, to: "3.2" },
  { ref: "5", line: /sequenced|de-?duplicat|dedup|pending per stripe/i, to: "3.7" },
  { ref: "5", line: /system messages a node applies/i, to: "3.8" },
  { ref: "5", line: /reply/i, to: "3.6" },
  { ref: "5", line: /incarnation/i, to: "2.2" },
  { ref: "5", line: /reconnect|backoff|heartbeat|liveness probe|at-most-once/i, to: "3.5" },
  { ref: "5", line: /frame|per write/i, to: "3.1" },
  { ref: "5", file: /\/(system-channel)\.ts$/, to: "3.7" },
  { ref: "5", file: /\/(system-authorization)\.ts$/, to: "3.8" },
  { ref: "5", file: /\/(backoff|association)\.ts$/, to: "3.5" },
  // Reference §6: membership, and the identities it relies on.
  { ref: "6", file: /\/actor\/address\.ts$/, line: /restarted|different node/i, to: "2.2" },
  { ref: "6", file: /\/actor\/address\.ts$/, to: "2.1" },
  { ref: "6", line: /gossip authori[sz]ation|authori[sz]ation rules/i, to: "4.5" },
  { ref: "6", file: /\/gossip\/authorize\.ts$/, to: "4.5" },
  { ref: "6", line: /protocol authentication/i, to: "4.3" },
  {
    ref: "6",
    line: /leave request|make a node leave|leave itself|shared secret|requests come from members/i,
    to: "4.9",
  },
  { ref: "6", line: /leader actions/i, to: "4.7" },
  { ref: "6", file: /\/leader-actions\.ts$/, to: "4.7" },
  { ref: "6", line: /heartbeat|failure detector/i, to: "4.8" },
  { ref: "6", file: /\/failure-detector\.ts$/, to: "4.8" },
  { ref: "6", line: /digest|convergence|converged|leader/i, to: "4.6" },
  { ref: "6", file: /\/(gossip\/digest|convergence)\.ts$/, to: "4.6" },
  { ref: "6", line: /max_members|maxMembers/i, to: "4.5" },
  { ref: "6", file: /\/gossip\/merge\.ts$/, to: "4.5" },
  { ref: "6", line: /seed|starts Joining/i, to: "4.4" },
  { ref: "6", line: /ClusterStats|defaults of|names this class/i, to: "4.10" },
  { ref: "6", line: /status/i, to: "4.1" },
  { ref: "6", file: /\/cluster\/member\.ts$/, to: "4.1" },
];

/** Mentions of the reference notes without a section number, rewritten as whole phrases. */
const phrases: readonly (readonly [string, string])[] = [
  ["(REFERENCE LEASE_RETRY_INTERVAL)", "(the original's LEASE_RETRY_INTERVAL, docs/protocol.md §15)"],
  ["with the REFERENCE texts", "with the original's texts"],
  ["with the REFERENCE text", "with the original's text"],
  ["as REFERENCE's", "as the original's"],
];

const citation = /REFERENCE §(\d+(?:\.\d+)*)([–-]\d+(?:\.\d+)*)?((?:, §\d+(?:\.\d+)*)*)/g;
const bareMention = /\bREFERENCE\b/;
const sectionAfterMention = /\bREFERENCE\W{0,3}§/;
const scannedDirs = ["src", "test", "bench", "examples", "scripts"];
const scannedExtensions = [".ts", ".js", ".mjs", ".md"];
const skippedDirs = new Set(["node_modules", "results", ".git"]);
const self = "scripts/repoint-citations.ts";

interface Change {
  readonly file: string;
  readonly line: number;
  readonly from: string;
  readonly to: string;
}

interface Unmapped {
  readonly file: string;
  readonly line: number;
  readonly text: string;
}

function targetOf(ref: string, file: string, lineText: string): string | null {
  for (const rule of refinements) {
    if (rule.ref !== ref) continue;
    if (rule.file !== undefined && !rule.file.test(`/${file}`)) continue;
    if (rule.line !== undefined && !rule.line.test(lineText)) continue;
    return rule.to;
  }
  return sections[ref] ?? null;
}

/** The rewritten line, or null when a citation on it cannot be mapped (reported through `unmapped`). */
function rewriteLine(file: string, lineNumber: number, text: string, changes: Change[], unmapped: Unmapped[]): string {
  let failed = false;
  let out = text.replace(citation, (match: string, first: string, rangeEnd: string | undefined, more: string) => {
    if (rangeEnd !== undefined) {
      const key = `${first}${rangeEnd}`;
      const range = ranges[key];
      if (range === undefined) {
        failed = true;
        unmapped.push({ file, line: lineNumber, text: match });
        return match;
      }
      const replacement = `docs/protocol.md §${range}`;
      changes.push({ file, line: lineNumber, from: match, to: replacement });
      return replacement;
    }
    const refs = [first, ...more.split(", §").filter((part) => part.length > 0)];
    const outside = refs.length === 1 ? elsewhere[first] : undefined;
    if (outside !== undefined) {
      changes.push({ file, line: lineNumber, from: match, to: outside });
      return outside;
    }
    const targets: string[] = [];
    for (const ref of refs) {
      const target = targetOf(ref, file, text);
      if (target === null) {
        failed = true;
        unmapped.push({ file, line: lineNumber, text: `${match} (section ${ref})` });
        return match;
      }
      if (!targets.includes(target)) targets.push(target);
    }
    const replacement = `docs/protocol.md §${targets.join(", §")}`;
    changes.push({ file, line: lineNumber, from: match, to: replacement });
    return replacement;
  });
  if (failed) return text;
  for (const [phrase, replacement] of phrases) {
    if (!out.includes(phrase)) continue;
    out = out.split(phrase).join(replacement);
    changes.push({ file, line: lineNumber, from: phrase, to: replacement });
  }
  return out;
}

function filesUnder(root: string, dir: string, into: string[]): void {
  const path = join(root, dir);
  if (!existsSync(path)) return;
  for (const name of readdirSync(path).sort()) {
    if (skippedDirs.has(name)) continue;
    const child = join(dir, name);
    const stats = statSync(join(root, child));
    if (stats.isDirectory()) filesUnder(root, child, into);
    else if (scannedExtensions.some((ext) => name.endsWith(ext))) into.push(child.split(sep).join("/"));
  }
}

function scannedFiles(root: string): string[] {
  const files: string[] = [];
  for (const dir of scannedDirs) filesUnder(root, dir, files);
  for (const doc of ["README.md", "DEVELOPERS.md"]) if (existsSync(join(root, doc))) files.push(doc);
  const docs: string[] = [];
  filesUnder(root, "docs", docs);
  files.push(...docs.filter((f) => f.endsWith(".md") && f !== "docs/protocol.md"));
  return files.filter((f) => f !== self);
}

function main(argv: readonly string[]): number {
  const check = argv.includes("--check");
  const rootAt = argv.indexOf("--root");
  const root = rootAt >= 0 && argv[rootAt + 1] !== undefined ? argv[rootAt + 1]! : process.cwd();
  if (!existsSync(join(root, "docs", "protocol.md"))) {
    console.error(`${root} has no docs/protocol.md; run this from the repository root or pass --root`);
    return 2;
  }
  const changes: Change[] = [];
  const unmapped: Unmapped[] = [];
  const leftover: Unmapped[] = [];
  const rewritten = new Map<string, string>();
  for (const file of scannedFiles(root)) {
    const original = readFileSync(join(root, file), "utf8");
    if (!original.includes("REFERENCE")) continue;
    const lines = original.split("\n");
    const next = lines.map((text, i) => rewriteLine(file, i + 1, text, changes, unmapped));
    next.forEach((text, i) => {
      if (!bareMention.test(text) || unmapped.some((u) => u.file === file && u.line === i + 1)) return;
      // A section sign after the word is a citation in a form the pattern does not know (`§§3.5–3.8`): unmapped.
      if (sectionAfterMention.test(text)) unmapped.push({ file, line: i + 1, text: text.trim() });
      else leftover.push({ file, line: i + 1, text: text.trim() });
    });
    const result = next.join("\n");
    if (result !== original) rewritten.set(file, result);
  }
  for (const c of changes) console.log(`${c.file}:${c.line}: ${c.from} -> ${c.to}`);
  for (const l of leftover)
    console.log(`note: ${l.file}:${l.line}: a mention without a section, left as is: ${l.text}`);
  for (const u of unmapped) console.error(`UNMAPPED ${u.file}:${u.line}: ${u.text}`);
  console.log(
    `${changes.length} citation(s) ${check || unmapped.length > 0 ? "to rewrite" : "rewritten"} in ${rewritten.size} file(s); ` +
      `${unmapped.length} unmapped; ${leftover.length} mention(s) without a section left as is`,
  );
  if (unmapped.length > 0) {
    console.error("nothing written: add the unmapped sections to the table in scripts/repoint-citations.ts first");
    return 1;
  }
  if (!check) for (const [file, text] of rewritten) writeFileSync(join(root, file), text);
  return 0;
}

process.exitCode = main(process.argv.slice(2));
