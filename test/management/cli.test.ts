// The `movie` CLI end to end: real processes (three cluster nodes, each with its management endpoint) and the CLI run
// as its own process per command, checking output, --json and exit codes, good input and bad.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { StableHashPartitioner } from "../../src/sharding/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { freePortAbove } from "../fixtures/free-port.ts";
import { postgresTestUrl, uniqueSchema } from "../persistence/pg-fixture.ts";
import { type OpsNode, startOpsCluster, startOpsNode, stopOpsCluster } from "./fixtures/ops-cluster.ts";
import { runCliInProcess } from "./fixtures/run-cli.ts";

const token = "cli-test-token-0123456789abcdef";
const bin = fileURLToPath(new URL("../../bin/movie.ts", import.meta.url));
let nodes: OpsNode[] = [];
/** Nodes a test started beyond the three (stopped with them). */
const extra: OpsNode[] = [];

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
const inProcess = (args: readonly string[], env: Record<string, string> = {}): Promise<Run> =>
  runCliInProcess(args, env);

const url = (i: number): string => nodes[i]!.ready.url;

/** The first port above `floor` that a loopback listener can bind (closed again before it is returned). */
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
after(() => stopOpsCluster([...nodes, ...extra]));

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
  for (const command of ["status", "members", "shards", "entity", "down", "leave", "rebalance", "metrics", "migrate"]) {
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

interface ShardsJson {
  coordinator: string;
  shards: { shard: number; owner: string; inHandoff: boolean }[];
}

test("rebalance moves a shard through the coordinator: --wait follows it, --to names the target, refusals exit 1", async () => {
  const view = json(await inProcess(["shards", "Order", "--all", "--json", "--url", url(0)])) as unknown as ShardsJson;
  const coordinator = nodes.findIndex((n) => n.ready.address === view.coordinator);
  assert.ok(coordinator >= 0, `coordinator ${view.coordinator}`);
  const loadsNow = async (): Promise<[string, number[]][]> => {
    const v = json(
      await inProcess(["shards", "Order", "--all", "--json", "--url", url(coordinator)]),
    ) as unknown as ShardsJson;
    const byOwner = new Map<string, number[]>(nodes.map((n) => [n.ready.address, []]));
    for (const s of v.shards) byOwner.get(s.owner)?.push(s.shard);
    return [...byOwner].sort((a, b) => b[1].length - a[1].length || (a[0] < b[0] ? -1 : 1));
  };
  // 16 shards on 3 nodes: 6, 5, 5. A shard of the busiest goes to the least-loaded member (lowest address on a tie).
  const before = await loadsNow();
  const shard = before[0]![1][0]!;
  const expectedTo = before
    .slice(1)
    .filter((e) => e[1].length === before[before.length - 1]![1].length)
    .map((e) => e[0])
    .sort()[0]!;
  const run = await movie(["rebalance", "Order", `${shard}`, "--wait", "--url", url(coordinator), "--token", token]);
  assert.equal(run.code, 0, run.stdout + run.stderr);
  const esc = (t: string) => t.replace(/[.#]/g, "\\$&");
  assert.match(
    run.stdout,
    new RegExp(`^Order shard ${shard}: moving from ${esc(before[0]![0])} to ${esc(expectedTo)}$`, "m"),
  );
  assert.match(run.stdout, new RegExp(`^Order shard ${shard} moved to ${esc(expectedTo)}$`, "m"));
  const after = json(
    await inProcess(["shards", "Order", "--all", "--json", "--url", url(coordinator)]),
  ) as unknown as ShardsJson;
  assert.equal(after.shards[shard]!.owner, expectedTo);

  // --to by host:port, --json: from the busiest owner to the least loaded.
  const now = await loadsNow();
  const target = nodes.find((n) => n.ready.address === now[now.length - 1]![0])!;
  const named = await inProcess(
    [
      "rebalance",
      "Order",
      `${now[0]![1][0]}`,
      "--to",
      target.ready.hostPort,
      "--wait",
      "--json",
      "--url",
      url(coordinator),
    ],
    { MOVIE_MANAGEMENT_TOKEN: token },
  );
  assert.equal(named.code, 0, named.stderr);
  assert.deepEqual([json(named).from, json(named).to, json(named).moved], [now[0]![0], target.ready.address, true]);

  const other = nodes.findIndex((_, i) => i !== coordinator);
  const final = await loadsNow();
  const least = final.at(-1)!;
  const most = final[0]![0];
  const cases: [string[], number, RegExp][] = [
    [
      ["rebalance", "Order", "1", "--url", url(other), "--token", token],
      1,
      /409 NotCoordinator: only the coordinator moves shards; send the request to the coordinator movie/,
    ],
    [["rebalance", "Order", "1", "--url", url(coordinator)], 1, /401 Unauthorized/],
    [["rebalance", "Order", "16", "--url", url(coordinator), "--token", token], 1, /400 ShardOutOfRange/],
    [["rebalance", "Nope", "1", "--url", url(coordinator), "--token", token], 1, /404 UnknownEntityType/],
    [
      ["rebalance", "Order", "1", "--to", "127.0.0.1:1", "--url", url(coordinator), "--token", token],
      1,
      /404 UnknownMember/,
    ],
    [
      ["rebalance", "Order", `${least[1][0]}`, "--to", least[0], "--url", url(coordinator), "--token", token],
      1,
      /409 AlreadyOwner/,
    ],
    [
      ["rebalance", "Order", `${least[1][0]}`, "--to", most, "--url", url(coordinator), "--token", token],
      1,
      /409 WouldBeUndone/,
    ],
    [["rebalance", "Order", "one", "--url", url(coordinator)], 2, /<shard> must be a shard number/],
    [["rebalance", "Order", "-1", "--url", url(coordinator)], 2, /<shard> must be a shard number|Unknown option/],
    [["rebalance", "Order"], 2, /expected <type> <shard>/],
    [["rebalance", "Order", "1", "--to"], 2, /argument missing/],
  ];
  for (const [args, code, pattern] of cases) {
    const r = await inProcess(args);
    assert.equal(r.code, code, `movie ${args.join(" ")}: ${r.stdout}${r.stderr}`);
    assert.match(`${r.stdout}${r.stderr}`, pattern, `movie ${args.join(" ")}`);
  }
});

test("down marks a member Down through the leader (exit 0), and is refused by a node that is not the leader", async () => {
  // The fourth node must not become the leader (the lowest address): the test downs it through the leader, and the
  // leader is looked up among the three. Give it a free port above theirs.
  const port = await freePortAbove(Math.max(...nodes.map((n) => Number(n.ready.hostPort.split(":").at(-1)))));
  const fourth = await startOpsNode("n4", nodes[0]!.ready.hostPort, {
    MOVIE_OPS_TOKEN: token,
    MOVIE_OPS_PORT: `${port}`,
  });
  extra.push(fourth);
  const members = async (i: number) =>
    json(await inProcess(["members", "--json", "--url", url(i)])) as {
      leader: string;
      members: { address: string; status: string }[];
    };
  let seen: unknown = null;
  await eventually(
    async () => {
      // Every node's view, not one: a node that has not seen the fourth yet answers 404 UnknownMember.
      const views = await Promise.all(nodes.map((_, i) => members(i)));
      seen = views[0];
      return views.every((m) => m.members.length === 4 && m.members.every((x) => x.status === "Up"));
    },
    { what: "the fourth node Up in every view", describe: () => seen, timeoutMs: 60_000, intervalMs: 200 },
  );
  const leader = nodes.findIndex((n) => n.ready.address === (seen as { leader: string }).leader);
  const notLeader = nodes.findIndex((_, i) => i !== leader);
  // Without a remoting secret only the leader may down (docs/protocol.md §4.9): the others refuse, saying why.
  const refused = await inProcess(["down", fourth.ready.hostPort, "--url", url(notLeader), "--token", token]);
  assert.equal(refused.code, 1, refused.stdout + refused.stderr);
  assert.match(refused.stderr, /409 Refused: .*shared secret/);
  const run = await movie(["down", fourth.ready.hostPort, "--url", url(leader), "--token", token, "--json"]);
  assert.equal(run.code, 0, run.stdout + run.stderr);
  assert.deepEqual(json(run), { accepted: true, action: "down", member: fourth.ready.address });
  await eventually(async () => !(await members(leader)).members.some((m) => m.address === fourth.ready.address), {
    what: "the downed member removed",
    timeoutMs: 30_000,
    intervalMs: 200,
  });
  // Its shards came back to the three; the cluster is ready again.
  await eventually(async () => (await inProcess(["status", "--url", url(leader)])).code === 0, {
    what: "movie status exits 0 again",
    timeoutMs: 30_000,
    intervalMs: 200,
  });
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
  // Every line before the last is a progress line. On a loaded host the leave can complete before the command's first
  // poll (seen in npm test at load 20): then "removed" is the only line. The stub endpoint of cli-timeouts.test.ts
  // pins the progress line of a member that stays.
  const progress = new RegExp(
    `^leaving ${nodes[victim]!.ready.address.replace(/[.#]/g, "\\$&")}: (Up|Leaving|Exiting), owns \\d+ shards?$`,
  );
  for (const line of lines.slice(0, -1)) assert.match(line, progress);
  if (lines.length === 1) console.log("# the leave completed before the first poll: no progress line");
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
