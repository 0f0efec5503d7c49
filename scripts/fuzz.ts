// Long fuzz run against a node in another process: `npm run fuzz -- --frames 1000000 --seed N [--secret S]
// [--minutes M] [--huge-bytes B]`. Prints a progress line every few seconds and a final table; exits 1 on a finding.
// The generator, dictionary and checks are the ones test/remote/fuzz.test.ts runs (test/fuzz/).
import { parseArgs } from "node:util";
import { seedOfDate } from "../test/fixtures/prng.ts";
import { runCampaign, startTarget } from "../test/fuzz/harness.ts";

const { values } = parseArgs({
  options: {
    frames: { type: "string", default: "100000" },
    seed: { type: "string" },
    secret: { type: "string" },
    minutes: { type: "string", default: "10" },
    "huge-bytes": { type: "string", default: String(3 * 1024 * 1024) },
    batch: { type: "string", default: "32" },
    stride: { type: "string", default: "1" },
    pre: { type: "string" },
    "skip-pre": { type: "string", default: "0" },
    "skip-post": { type: "string", default: "0" },
  },
});
const seed = values.seed === undefined ? seedOfDate(new Date()) : Number(values.seed) >>> 0;
const frames = Number(values.frames);
const secret = values.secret ?? null;
console.log(`fuzz: seed ${seed}, ${frames} frames, secret ${secret === null ? "none" : "set"}`);

const target = await startTarget({ secret, maxFrameBytes: 4 * 1024 * 1024 });
const result = await runCampaign(target, {
  seed,
  frames,
  batch: Number(values.batch),
  preHandshake: values.pre === undefined ? Math.max(40, Math.floor(frames / 500)) : Number(values.pre),
  hostileServer: Math.max(40, Math.floor(frames / 1000)),
  hugeBytes: Number(values["huge-bytes"]),
  hugeChance: 0.002,
  askEvery: 50,
  sweepStride: Number(values.stride),
  skipPre: Number(values["skip-pre"]),
  skipPost: Number(values["skip-post"]),
  budgetMs: Number(values.minutes) * 60_000,
  progress: (line) => console.log(line),
});
const { totals, findings, closes, final } = result;
const s = final.stats;
const rows: [string, string | number][] = [
  ["seed", seed],
  ["frames after handshake", totals.frames],
  ["bytes", totals.bytes],
  ["batches", totals.batches],
  ["connections", totals.connections],
  ["before-handshake connections", totals.preHandshake],
  ["hostile-server connections", totals.hostileServer],
  ["well-behaved asks answered", totals.wellBehavedAsks],
  ["connections the node closed mid-batch", totals.unexpectedCloses],
  ["node framesIn", s.framesIn],
  ["node delivered / dead letters", `${s.delivered} / ${s.deadLetters}`],
  ["node rejected", JSON.stringify(s.rejected)],
  ["node internal errors (guard) by name", JSON.stringify(s.internalErrors ?? {})],
  ["node handshakes ok / failed", `${s.handshakesOk} / ${s.handshakesFailed}`],
  ["node idle timeouts / unencodable", `${s.idleTimeouts} / ${s.unencodable}`],
  [
    "echo pings / replied / replies refused",
    `${final.echo.pings} / ${final.echo.replied} / ${JSON.stringify(final.echo.replyFailed)}`,
  ],
  ["node rss MiB", Math.round(final.memory.rss / 1048576)],
  ["node exited", target.node.exited ? "YES" : "no"],
  ["findings", findings.length],
  ["sweep position (pre / post)", `${result.position.pre} / ${result.position.post}`],
];
for (const [k, v] of rows) console.log(`${k.padEnd(40)} ${v}`);
console.log(`frames by kind: ${JSON.stringify(totals.byKind)}`);
for (const c of closes.slice(0, 5)) console.log(`closed mid-batch after: ${c.frames.slice(-3).join(" | ")}`);
for (const f of findings) {
  console.log(`FINDING ${f.what}: ${f.detail.slice(0, 2000)}`);
  console.log(`  last frames: ${f.frames.slice(-5).join(" | ")}`);
}
await target.node.shutdown(10_000);
process.exit(findings.length === 0 ? 0 : 1);
