// Exit code 4 of the `movie` CLI: `leave --wait` and `rebalance --wait` that run out of time. A real cluster finishes
// both within seconds (cli.test.ts), so these run against a stub endpoint over real HTTP whose member never leaves and
// whose shard never moves; the progress line and the final message are checked too.
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";
import { exitCodes } from "../../src/management/cli.ts";
import { type CliRun, runCliInProcess } from "./fixtures/run-cli.ts";

const member = "movie.tcp://ops@127.0.0.1:2553#stuck";
const other = "movie.tcp://ops@127.0.0.1:2551#other";
let server: Server;
let url = "";
const requests: string[] = [];

/** The stub's answer to one request: [status, JSON body]. */
function reply(method: string | undefined, path: string | undefined): [number, unknown] {
  if (method === "POST" && path === `/cluster/members/${encodeURIComponent("127.0.0.1:2553")}/leave`) {
    return [202, { accepted: true, action: "leave", member }];
  }
  if (path === "/cluster/members") {
    return [
      200,
      {
        self: other,
        leader: other,
        converged: true,
        members: [{ address: member, hostPort: "127.0.0.1:2553", status: "Leaving", roles: [], reachable: true }],
      },
    ];
  }
  if (path === "/sharding/types") return [200, { types: [{ type: "Order", shardsPerOwner: [[member, 3]] }] }];
  if (method === "POST" && path === "/sharding/types/Order/shards/4/rebalance") {
    return [202, { accepted: true, shard: 4, from: member, to: other, followUpMoves: [] }];
  }
  if (path === "/sharding/types/Order/shards/4") return [200, { shard: 4, owner: member, inHandoff: true }];
  return [404, { error: "NotFound", message: "stub" }];
}

function answer(req: IncomingMessage, res: ServerResponse): void {
  requests.push(`${req.method} ${req.url}`);
  const [status, body] = reply(req.method, req.url);
  res.writeHead(status, { "content-type": "application/json" });
  res.end(JSON.stringify(body));
}

before(async () => {
  server = createServer(answer);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
after(() => new Promise<void>((resolve) => server.close(() => resolve())));

const cli = (args: readonly string[]): Promise<CliRun> =>
  runCliInProcess(args, { MOVIE_MANAGEMENT_TOKEN: "stub-token-0123456789" });

test("leave --wait exits 4 when the member is not removed in time, after one progress line", async () => {
  // 1.5 s: room for more than one poll even when a loaded host answers the stub slowly (at 600 ms the first poll's
  // answer once came too late for any progress line).
  const run = await cli(["leave", "127.0.0.1:2553", "--wait", "--timeout", "1500", "--url", url]);
  assert.equal(run.code, exitCodes.timeout, run.stdout + run.stderr);
  assert.equal(run.stdout, `leaving ${member}: Leaving, owns 3 shards\n`, "one line: the state never changed");
  assert.match(run.stderr, /was not removed within 1500 ms \(last: Leaving, 3 shards\)/);
  assert.ok(requests.filter((r) => r === "GET /cluster/members").length >= 2, "it polled");
});

test("rebalance --wait exits 4 when the shard does not reach its target in time", async () => {
  const run = await cli(["rebalance", "Order", "4", "--wait", "--timeout", "600", "--url", url]);
  assert.equal(run.code, exitCodes.timeout, run.stdout + run.stderr);
  assert.equal(run.stdout, `Order shard 4: moving from ${member} to ${other}\n`);
  assert.match(run.stderr, /did not reach .* within 600 ms \(owner .*#stuck, in handoff\)/);
});

test("a request the endpoint accepts but never answers is a timeout (exit 4) that says so, not 'cannot reach'", async () => {
  const silent = createServer(() => {
    // Never answers: a stuck node.
  });
  await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
  try {
    const silentUrl = `http://127.0.0.1:${(silent.address() as AddressInfo).port}`;
    const run = await cli(["status", "--timeout", "300", "--url", silentUrl]);
    assert.equal(run.code, exitCodes.timeout, run.stdout + run.stderr);
    assert.match(run.stderr, /did not answer GET \/\S+ within 300 ms; the node may be overloaded/);
    assert.doesNotMatch(run.stderr, /an object|cannot reach/);
  } finally {
    silent.closeAllConnections();
    await new Promise<void>((resolve) => silent.close(() => resolve()));
  }
});
