// The `movie` CLI end to end: real processes (three cluster nodes, each with its management endpoint) and the CLI run
// as its own process per command, checking output, --json and exit codes, good input and bad.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { runCli } from "../../src/management/cli.ts";
import { StableHashPartitioner } from "../../src/sharding/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { postgresTestUrl, uniqueSchema } from "../persistence/pg-fixture.ts";
import { type OpsNode, startOpsCluster, stopOpsCluster } from "./fixtures/ops-cluster.ts";

const token = "cli-test-token-0123456789abcdef";
const bin = fileURLToPath(new URL("../../bin/movie.ts", import.meta.url));
let nodes: OpsNode[] = [];

interface Run {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `movie args…` as a process; env adds to (and `undefined` removes from) the parent's environment. */
function movie(args: readonly string[], env: NodeJS.ProcessEnv = {}): Promise<Run> {
  return new Promise((resolve) => {
    const childEnv = { ...process.env, ...env };
    delete childEnv.MOVIE_MANAGEMENT_URL;
    delete childEnv.MOVIE_MANAGEMENT_TOKEN;
    Object.assign(childEnv, env);
    execFile(
      process.execPath,
      ["--import", "tsx", bin, ...args],
      { env: childEnv, timeout: 60_000 },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === "number" ? error.code : -1;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

/**
 * Runs the CLI in this process (same code, same HTTP to the node processes): a CLI process costs a second or more,
 * and the file must finish within the runner's 120 s on a loaded machine. The commands whose process behaviour
 * matters (exit codes, status, leave --wait, migrate --apply, an unreachable endpoint) run as real processes.
 */
async function inProcess(args: readonly string[], env: Record<string, string> = {}): Promise<Run> {
  let stdout = "";
  let stderr = "";
  const code = await runCli(args, {
    stdout: (t) => {
      stdout += t;
    },
    stderr: (t) => {
      stderr += t;
    },
    env,
    isTTY: false,
  });
  return { code, stdout, stderr };
}

const url = (i: number): string => nodes[i]!.ready.url;
const json = (run: Run): Record<string, unknown> => {
  try {
    return JSON.parse(run.stdout) as Record<string, unknown>;
  } catch {
    throw new Error(`not JSON (exit ${run.code}): ${run.stdout}${run.stderr}`);
  }
};

before(async () => {
  nodes = await startOpsCluster(3, { MOVIE_OPS_TOKEN: token });
  await eventually(async () => (await inProcess(["status", "--url", url(0), "--json"])).code === 0, {
    what: "movie status exits 0 (ready)",
    timeoutMs: 30_000,
    intervalMs: 200,
  });
});
after(() => stopOpsCluster(nodes));

test("status: members, readiness and the plan; --json for scripts, exit 0 when ready", async () => {
  const run = await movie(["status", "--url", url(1), "--json"]);
  assert.equal(run.code, 0, run.stderr);
  const body = json(run) as {
    members: { members: unknown[] };
    ready: { ready: boolean };
    types: { type: string; allocatedShards: number }[];
  };
  assert.equal(body.members.members.length, 3);
  assert.equal(body.ready.ready, true);
  assert.deepEqual(
    body.types.map((t) => [t.type, t.allocatedShards]),
    [["Order", 16]],
  );
  const human = await inProcess(["status"], { MOVIE_MANAGEMENT_URL: url(1) });
  assert.equal(human.code, 0);
  assert.match(human.stdout, /converged, ready/);
  assert.match(human.stdout, /^Order\s+16\s+16\s+/m);
});

test("members prints a table of the three Up members; --json the same data", async () => {
  const run = await inProcess(["members", "--url", url(0)]);
  assert.equal(run.code, 0, run.stderr);
  const lines = run.stdout.trim().split("\n");
  assert.match(lines[0]!, /^ADDRESS\s+STATUS\s+REACHABLE\s+ROLES\s+VERSION\s+LEADER$/);
  assert.equal(lines.length, 4);
  for (const n of nodes) assert.ok(run.stdout.includes(n.ready.address), `${n.ready.address} listed`);
  assert.equal(lines.filter((l) => /\sUp\s+yes\s/.test(l)).length, 3);
  assert.ok(!run.stdout.includes("\u001b["), "no colour when stdout is not a terminal");
  const data = json(await inProcess(["members", "--url", url(0), "--json"])) as { members: { status: string }[] };
  assert.deepEqual(
    data.members.map((m) => m.status),
    ["Up", "Up", "Up"],
  );
});

test("shards <type> and entity <type> <id> show the plan and where an entity lives", async () => {
  const shards = await inProcess(["shards", "Order", "--url", url(2)]);
  assert.equal(shards.code, 0, shards.stderr);
  assert.match(shards.stdout, /^OWNER\s+SHARDS\s+COUNT$/m);
  const counts = [...shards.stdout.matchAll(/\s(\d+)$/gm)].map((m) => Number(m[1]));
  assert.equal(
    counts.reduce((a, b) => a + b, 0),
    16,
  );
  const all = json(await inProcess(["shards", "Order", "--all", "--json", "--url", url(2)])) as { shards: unknown[] };
  assert.equal(all.shards.length, 16);
  const entity = json(await inProcess(["entity", "Order", "order 42/ü", "--json", "--url", url(0)])) as {
    shard: number;
    owner: string;
  };
  assert.equal(entity.shard, new StableHashPartitioner().shardFor("Order", "order 42/ü", 16));
  assert.ok(nodes.some((n) => n.ready.address === entity.owner));
});

test("bad input: exit 2 for usage, 1 for a refusal (naming it), 3 when the endpoint cannot be reached", async () => {
  const cases: [string[], number, RegExp][] = [
    [[], 2, /usage: movie <command>/],
    [["nope"], 2, /unknown command "nope"/],
    [["shards"], 2, /expected <type>/],
    [["members", "--bogus"], 2, /Unknown option '--bogus'/],
    [["members", "--url", "ftp://x"], 2, /not an http\(s\) URL/],
    [["leave", "x", "--timeout", "-5", "--url", url(0)], 2, /--timeout/],
    [["shards", "NoSuchType", "--url", url(0)], 1, /404 UnknownEntityType/],
    [["shards", "__proto__", "--url", url(0)], 1, /404 UnknownEntityType/],
    [["down", "127.0.0.1:1", "--url", url(0)], 1, /401 Unauthorized/],
    [["down", "127.0.0.1:1", "--url", url(0), "--token", "wrong-token-wrong-token"], 1, /401 Unauthorized/],
    [["down", "127.0.0.1:1", "--url", url(0), "--token", token], 1, /404 UnknownMember/],
    [["members", "--url", "http://127.0.0.1:9"], 3, /cannot reach the management endpoint/],
    [["migrate", "--apply", "--url", "http://x"], 2, /needs --url postgres:/],
    [["migrate"], 2, /exactly one of --print and --apply/],
  ];
  for (const [args, code, pattern] of cases) {
    // Usage errors never touch the network: run those in this process (a CLI process costs about a second).
    const run = code === 3 ? await movie(args) : await inProcess(args);
    assert.equal(run.code, code, `movie ${args.join(" ")}: ${run.stdout}${run.stderr}`);
    assert.match(`${run.stdout}${run.stderr}`, pattern, `movie ${args.join(" ")}`);
  }
});

test("--help on every command exits 0 with its usage", async () => {
  assert.equal((await movie(["leave", "--help"])).code, 0);
  for (const command of ["status", "members", "shards", "entity", "down", "leave", "metrics", "migrate"]) {
    const run = await inProcess([command, "--help"]);
    assert.equal(run.code, 0);
    assert.match(run.stdout, new RegExp(`usage: movie ${command}`));
  }
});

test("metrics prints the Prometheus text", async () => {
  const run = await inProcess(["metrics", "--url", url(0)]);
  assert.equal(run.code, 0);
  assert.match(run.stdout, /^movie_cluster_members\{status="Up"\} 3$/m);
});

test("migrate --print lists versions with checksums; --apply migrates a fresh schema", async () => {
  const printed = await inProcess(["migrate", "--print"]);
  assert.equal(printed.code, 0);
  assert.match(printed.stdout, /^-- 1 core-persistence-schema checksum [0-9a-f]{64}$/m);
  assert.match(printed.stdout, /CREATE TABLE/);
  const dbUrl = await postgresTestUrl();
  const schema = uniqueSchema("cli_migrate");
  const client = new pg.Client({ connectionString: dbUrl });
  await client.connect();
  try {
    const applied = await movie(["migrate", "--apply", "--url", dbUrl, "--schema", schema, "--json"]);
    assert.equal(applied.code, 0, applied.stderr);
    const rows = await client.query(`SELECT version, checksum FROM ${schema}.movie_schema_migration ORDER BY version`);
    const listed = (json(applied) as { applied: { version: number; checksum: string }[] }).applied;
    assert.deepEqual(
      rows.rows.map((r: { version: number; checksum: string }) => [r.version, r.checksum]),
      listed.map((m) => [m.version, m.checksum]),
    );
  } finally {
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await client.end();
  }
});

test("leave --wait follows the member's shards with a progress line until it is removed", async () => {
  const members = json(await inProcess(["members", "--url", url(0), "--json"])) as { leader: string };
  const leader = nodes.findIndex((n) => n.ready.address === members.leader);
  const victim = nodes.findIndex((_, i) => i !== leader);
  const run = await movie([
    "leave",
    nodes[victim]!.ready.hostPort,
    "--wait",
    "--timeout",
    "30000",
    "--url",
    url(leader),
    "--token",
    token,
  ]);
  assert.equal(run.code, 0, run.stdout + run.stderr);
  const lines = run.stdout.trim().split("\n");
  assert.match(
    lines[0]!,
    new RegExp(
      `^leaving ${nodes[victim]!.ready.address.replace(/[.#]/g, "\\$&")}: (Up|Leaving|Exiting), owns \\d+ shards?$`,
    ),
  );
  assert.match(lines[lines.length - 1]!, /removed; its shards moved to the other members$/);
  const after = json(await inProcess(["members", "--url", url(leader), "--json"])) as {
    members: { address: string }[];
  };
  assert.equal(after.members.length, 2);
  const shards = json(await inProcess(["shards", "Order", "--all", "--json", "--url", url(leader)])) as {
    shards: { owner: string }[];
  };
  assert.ok(shards.shards.every((s) => s.owner !== nodes[victim]!.ready.address));
});
