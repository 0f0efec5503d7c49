// The management HTTP API over real HTTP on three in-process nodes joined over loopback TCP: every read endpoint,
// the token-guarded writes, health, and an adversarial dictionary of requests that must each get a 4xx JSON error.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import {
  createManagementHandler,
  ManagementConfigurationError,
  type ManagementServer,
  startManagement,
} from "../../src/management/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { freePortAbove } from "../fixtures/free-port.ts";
import { DeliverOrder, OrderBehavior, OrderCommand } from "../sharding/fixtures/order.ts";
import {
  describeNodes,
  planSettled,
  recordingLogger,
  type ShardingNode,
  settled,
  startShardingNode,
  startShardingNodes,
  terminateAll,
} from "../sharding/fixtures/tcp-nodes.ts";
import { bodyJson, rawGet, rawRequest } from "./fixtures/raw-http.ts";

const token = "s3cret-token-for-tests-0123456789";
const log = recordingLogger();
let nodes: ShardingNode[] = [];
let servers: ManagementServer[] = [];

before(async () => {
  nodes = await startShardingNodes(3, [], log);
  for (const n of nodes) n.sharding.init("Order", OrderCommand, { shardCount: 32 }, (id) => new OrderBehavior(id));
  await eventually(() => nodes.every((n) => settled(n, 3)), { what: "3 nodes Up and converged" });
  await eventually(() => planSettled(nodes, "Order", { shardCount: 32 }), {
    what: "a balanced plan everywhere",
    describe: describeNodes(nodes, "Order"),
  });
  // Node 0 and 2 accept writes; node 1 has no token (writes disabled).
  servers = await Promise.all(
    nodes.map((n, i) => startManagement(n.system, { port: 0, ...(i === 1 ? {} : { token }) })),
  );
});
after(async () => {
  await Promise.all(servers.map((s) => s.close()));
  await terminateAll(nodes);
});

const port = (i: number): number => servers[i]!.address.port;

test("binds loopback on the port the OS picked, and the address is readable", () => {
  assert.equal(servers[0]!.address.host, "127.0.0.1");
  assert.ok(servers[0]!.address.port > 0);
  assert.equal(servers[0]!.url, `http://127.0.0.1:${servers[0]!.address.port}/`);
});

test("GET /cluster/members lists the three members with status, reachability, leader and convergence", async () => {
  const res = await rawGet(port(0), "/cluster/members");
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
  const body = bodyJson(res) as { converged: boolean; leader: string; members: Record<string, unknown>[] };
  assert.equal(body.converged, true);
  assert.equal(body.members.length, 3);
  const snapshot = nodes[0]!.cluster.snapshot();
  assert.equal(body.leader, snapshot.leader?.toString());
  for (const [i, m] of body.members.entries()) {
    assert.equal(m.address, snapshot.members[i]!.uniqueAddress.toString());
    assert.equal(m.status, "Up");
    assert.equal(m.reachable, true);
    assert.equal(m.uid, snapshot.members[i]!.uniqueAddress.uid);
  }
  assert.equal(body.members.filter((m) => m.self === true).length, 1);
});

test("GET /sharding/types and /shards show the plan, and /entities/:id the shard and owner", async () => {
  const order = nodes[0]!.sharding.entityRefFor("Order", "order-42");
  order.tell(new DeliverOrder("p1"));
  const owner = nodes[0]!.sharding.ownerFor("Order", "order-42");
  const shard = nodes[0]!.sharding.shardOf("Order", "order-42");
  const ownerNode = nodes.find((n) => n.cluster.selfAddress.equals(owner!))!;
  const ownerServer = servers[nodes.indexOf(ownerNode)]!;
  await eventually(() => ownerNode.sharding.localEntityCount === 1, { what: "order-42 activated on its owner" });

  const types = bodyJson(await rawGet(port(0), "/sharding/types")) as { types: Record<string, unknown>[] };
  assert.equal(types.types.length, 1);
  assert.equal(types.types[0]!.type, "Order");
  assert.equal(types.types[0]!.shardCount, 32);
  assert.equal(types.types[0]!.allocatedShards, 32);
  assert.equal(types.types[0]!.generation, nodes[0]!.sharding.planGeneration("Order"));

  const shards = bodyJson(await rawGet(ownerServer.address.port, "/sharding/types/Order/shards")) as {
    shards: { shard: number; owner: string; localEntities: number; inHandoff: boolean }[];
    planAuthor: string;
    coordinator: string;
  };
  assert.equal(shards.shards.length, 32);
  const plan = ownerNode.sharding.allocations("Order");
  for (const s of shards.shards) assert.equal(s.owner, plan.get(s.shard)?.toString());
  assert.equal(shards.shards[shard]!.localEntities, 1);
  assert.equal(shards.planAuthor, shards.coordinator);

  const one = bodyJson(await rawGet(port(0), `/sharding/types/Order/shards/${shard}`));
  assert.deepEqual([one.shard, one.owner], [shard, owner!.toString()]);

  const entity = bodyJson(await rawGet(port(0), "/sharding/types/Order/entities/order-42"));
  assert.deepEqual([entity.shard, entity.owner, entity.entityId], [shard, owner!.toString(), "order-42"]);
  // Percent-encoded ids are decoded: "a b/c" is one id.
  const encoded = bodyJson(await rawGet(port(0), "/sharding/types/Order/entities/a%20b%2Fc"));
  assert.equal(encoded.entityId, "a b/c");
  assert.equal(encoded.shard, nodes[0]!.sharding.shardOf("Order", "a b/c"));
});

test("GET /stats, /persistence/leases and /health/* answer JSON; /metrics answers the text format", async () => {
  const stats = bodyJson(await rawGet(port(0), "/stats")) as {
    remoting: { framesIn: number };
    cluster: { gossipRounds: number };
    sharding: { routes: number };
    persistence: unknown;
  };
  assert.ok(stats.remoting.framesIn > 0);
  assert.ok(stats.cluster.gossipRounds > 0);
  assert.equal(typeof stats.sharding.routes, "number");
  assert.equal(stats.persistence, null);
  assert.deepEqual(bodyJson(await rawGet(port(0), "/persistence/leases")).types, []);
  const alive = await rawGet(port(0), "/health/alive");
  assert.equal(alive.status, 200);
  const ready = await rawGet(port(0), "/health/ready");
  assert.equal(ready.status, 200, ready.body);
  const checks = bodyJson(ready).checks as { check: string; ok: boolean }[];
  assert.deepEqual(
    checks.map((c) => [c.check, c.ok]),
    [
      ["up", true],
      ["converged", true],
      ["sharding:Order", true],
    ],
  );
  const metrics = await rawGet(port(0), "/metrics");
  assert.equal(metrics.status, 200);
  assert.match(metrics.headers.get("content-type") ?? "", /^text\/plain; version=0\.0\.4/);
  assert.match(metrics.body, /^movie_cluster_members\{status="Up"\} 3$/m);
});

test("/health/ready is 503 and says what is missing on a node that cannot join", async () => {
  const lonely = await startShardingNode(1, { settings: { seedNodes: ["127.0.0.1:1"] } });
  lonely.sharding.init("Order", OrderCommand, { shardCount: 32 }, (id) => new OrderBehavior(id));
  const server = await startManagement(lonely.system, { port: 0 });
  try {
    const res = await rawGet(server.address.port, "/health/ready");
    assert.equal(res.status, 503);
    const checks = bodyJson(res).checks as { check: string; ok: boolean; detail: string }[];
    const up = checks.find((c) => c.check === "up")!;
    assert.equal(up.ok, false);
    assert.match(up.detail, /Joining|Removed/);
    const order = checks.find((c) => c.check === "sharding:Order")!;
    assert.equal(order.ok, false);
    assert.match(order.detail, /no converged coordinator|no plan/);
    assert.equal((await rawGet(server.address.port, "/health/alive")).status, 200);
  } finally {
    await server.close();
    await lonely.system.terminate();
  }
});

/** Rebalance requests refused before any node decides (so whichever node is the coordinator). */
function rebalanceRequests(): [string, string, number, string][] {
  const post = (target: string, auth = `authorization: Bearer ${token}\r\n`) =>
    `POST ${target} HTTP/1.1\r\n${auth}content-length: 0\r\n\r\n`;
  return [
    ["rebalance without a token", post("/sharding/types/Order/shards/1/rebalance", ""), 401, "Unauthorized"],
    ["rebalance with GET", "GET /sharding/types/Order/shards/1/rebalance HTTP/1.1\r\n\r\n", 405, "MethodNotAllowed"],
    ["rebalance of an unknown type", post("/sharding/types/Nope/shards/1/rebalance"), 404, "UnknownEntityType"],
    ["rebalance of a __proto__ type", post("/sharding/types/__proto__/shards/1/rebalance"), 404, "UnknownEntityType"],
    ["rebalance of shard 32 of 32", post("/sharding/types/Order/shards/32/rebalance"), 400, "ShardOutOfRange"],
    ["rebalance of shard -1", post("/sharding/types/Order/shards/-1/rebalance"), 400, "ShardOutOfRange"],
    ["rebalance of shard 0x1", post("/sharding/types/Order/shards/0x1/rebalance"), 400, "ShardOutOfRange"],
    ["rebalance of shard 01", post("/sharding/types/Order/shards/01/rebalance"), 400, "ShardOutOfRange"],
    [
      "rebalance to an unknown member",
      post("/sharding/types/Order/shards/1/rebalance?to=127.0.0.1:1"),
      404,
      "UnknownMember",
    ],
    ["rebalance to __proto__", post("/sharding/types/Order/shards/1/rebalance?to=__proto__"), 404, "UnknownMember"],
    ["rebalance to nobody", post("/sharding/types/Order/shards/1/rebalance?to="), 400, "InvalidTarget"],
    ["rebalance to two members", post("/sharding/types/Order/shards/1/rebalance?to=a&to=b"), 400, "UnknownParameter"],
    [
      "rebalance with another parameter",
      post("/sharding/types/Order/shards/1/rebalance?force=1"),
      400,
      "UnknownParameter",
    ],
    [
      "rebalance with a __proto__ parameter",
      post("/sharding/types/Order/shards/1/rebalance?__proto__=x"),
      400,
      "UnknownParameter",
    ],
    [
      "rebalance to bad percent-encoding",
      post("/sharding/types/Order/shards/1/rebalance?to=%E0%A4%A"),
      404,
      "UnknownMember",
    ],
    ["rebalance with a trailing segment", post("/sharding/types/Order/shards/1/rebalance/now"), 404, "NotFound"],
  ];
}

const protoBody = '{"__proto__":{"polluted":true},"a":1}';

/** [what, request, expected status, expected error code (null: no JSON body expected)]. */
const hostile: [string, string | Buffer, number, string | null][] = [
  ["unknown path", "GET /nope HTTP/1.1\r\n\r\n", 404, "NotFound"],
  ["unknown type", "GET /sharding/types/Nope/shards HTTP/1.1\r\n\r\n", 404, "UnknownEntityType"],
  ["__proto__ type", "GET /sharding/types/__proto__/shards HTTP/1.1\r\n\r\n", 404, "UnknownEntityType"],
  ["constructor type", "GET /sharding/types/constructor/entities/x HTTP/1.1\r\n\r\n", 404, "UnknownEntityType"],
  ["bad percent-encoding", "GET /sharding/types/%E0%A4%A/shards HTTP/1.1\r\n\r\n", 400, "BadPercentEncoding"],
  [
    "lone surrogate in percent-encoding",
    "GET /sharding/types/Order/entities/%ED%A0%80 HTTP/1.1\r\n\r\n",
    400,
    "BadPercentEncoding",
  ],
  ["overlong UTF-8", "GET /sharding/types/%C0%AF/shards HTTP/1.1\r\n\r\n", 400, "BadPercentEncoding"],
  ["shard out of range", "GET /sharding/types/Order/shards/32 HTTP/1.1\r\n\r\n", 400, "ShardOutOfRange"],
  ["negative shard", "GET /sharding/types/Order/shards/-1 HTTP/1.1\r\n\r\n", 400, "ShardOutOfRange"],
  ["shard not a number", "GET /sharding/types/Order/shards/1e3 HTTP/1.1\r\n\r\n", 400, "ShardOutOfRange"],
  ["huge shard", `GET /sharding/types/Order/shards/${"9".repeat(400)} HTTP/1.1\r\n\r\n`, 400, "ShardOutOfRange"],
  ["wrong method on a read", "DELETE /cluster/members HTTP/1.1\r\n\r\n", 405, "MethodNotAllowed"],
  ["GET on a write", "GET /cluster/members/127.0.0.1:1/down HTTP/1.1\r\n\r\n", 405, "MethodNotAllowed"],
  [
    "write without a token",
    "POST /cluster/members/127.0.0.1:1/down HTTP/1.1\r\ncontent-length: 0\r\n\r\n",
    401,
    "Unauthorized",
  ],
  [
    "write with a bad token",
    `POST /cluster/members/127.0.0.1:1/down HTTP/1.1\r\nauthorization: Bearer ${"x".repeat(33)}\r\n\r\n`,
    401,
    "Unauthorized",
  ],
  [
    "write with a token prefix",
    `POST /cluster/members/127.0.0.1:1/down HTTP/1.1\r\nauthorization: Bearer ${token.slice(0, -1)}\r\n\r\n`,
    401,
    "Unauthorized",
  ],
  [
    "write with Basic auth",
    "POST /cluster/members/127.0.0.1:1/down HTTP/1.1\r\nauthorization: Basic Zm9vOmJhcg==\r\n\r\n",
    401,
    "Unauthorized",
  ],
  [
    "write with a huge token",
    `POST /cluster/members/127.0.0.1:1/down HTTP/1.1\r\nauthorization: Bearer ${"t".repeat(6000)}\r\n\r\n`,
    401,
    "Unauthorized",
  ],
  [
    "unknown member",
    `POST /cluster/members/127.0.0.1:1/down HTTP/1.1\r\nauthorization: Bearer ${token}\r\n\r\n`,
    404,
    "UnknownMember",
  ],
  [
    "malformed member",
    `POST /cluster/members/%00%FF%20/leave HTTP/1.1\r\nauthorization: Bearer ${token}\r\n\r\n`,
    400,
    "BadPercentEncoding",
  ],
  [
    "__proto__ member",
    `POST /cluster/members/__proto__/leave HTTP/1.1\r\nauthorization: Bearer ${token}\r\n\r\n`,
    404,
    "UnknownMember",
  ],
  [
    "body too large",
    `POST /cluster/members/x/down HTTP/1.1\r\ncontent-length: 100000\r\n\r\n${"a".repeat(2000)}`,
    413,
    "BodyTooLarge",
  ],
  [
    "chunked body too large",
    `POST /cluster/members/x/down HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n800\r\n${"a".repeat(2048)}\r\n0\r\n\r\n`,
    413,
    "BodyTooLarge",
  ],
  [
    "JSON body with __proto__ (ignored; still needs the token)",
    `POST /cluster/members/x/down HTTP/1.1\r\ncontent-type: application/json\r\ncontent-length: ${protoBody.length}\r\n\r\n${protoBody}`,
    401,
    "Unauthorized",
  ],
  ...rebalanceRequests(),
  // The operations views: query parameters are checked before anything is read (these nodes have no persistence).
  ["outbox limit negative", "GET /outbox?limit=-1 HTTP/1.1\r\n\r\n", 400, "InvalidLimit"],
  ["outbox limit too large", "GET /outbox?limit=1001 HTTP/1.1\r\n\r\n", 400, "InvalidLimit"],
  ["outbox limit not digits", "GET /outbox?limit=1e3 HTTP/1.1\r\n\r\n", 400, "InvalidLimit"],
  ["outbox limit huge", `GET /outbox?limit=${"9".repeat(400)} HTTP/1.1\r\n\r\n`, 400, "InvalidLimit"],
  ["outbox limit twice", "GET /outbox?limit=1&limit=2 HTTP/1.1\r\n\r\n", 400, "InvalidLimit"],
  ["outbox limit bad percent-encoding", "GET /outbox?limit=%E0%A4%A HTTP/1.1\r\n\r\n", 400, "InvalidLimit"],
  ["outbox __proto__ parameter", "GET /outbox?__proto__=1 HTTP/1.1\r\n\r\n", 400, "UnknownParameter"],
  ["outbox without persistence", "GET /outbox HTTP/1.1\r\n\r\n", 409, "PersistenceNotEnabled"],
  ["outbox with POST", "POST /outbox HTTP/1.1\r\ncontent-length: 0\r\n\r\n", 405, "MethodNotAllowed"],
  ["projections with a parameter", "GET /projections?constructor=1 HTTP/1.1\r\n\r\n", 400, "UnknownParameter"],
  ["one projection with a parameter", "GET /projections/x?limit=1 HTTP/1.1\r\n\r\n", 400, "UnknownParameter"],
  ["path too long", `GET /${"a".repeat(5000)} HTTP/1.1\r\n\r\n`, 414, "UriTooLong"],
  ["absolute-form target", "GET http://evil.example/cluster/members HTTP/1.1\r\n\r\n", 400, "BadRequestTarget"],
  ["headers too large", `GET /stats HTTP/1.1\r\nx-big: ${"h".repeat(20_000)}\r\n\r\n`, 431, null],
  ["not HTTP at all", Buffer.from([0x16, 0x03, 0x01, 0x00, 0xff, 0x0d, 0x0a, 0x0d, 0x0a]), 400, null],
];

for (const [what, request, status, code] of hostile) {
  test(`hostile request refused: ${what} → ${status}`, async () => {
    const text =
      typeof request === "string"
        ? request.replace("HTTP/1.1\r\n", "HTTP/1.1\r\nhost: x\r\nconnection: close\r\n")
        : request;
    const res = await rawRequest(port(0), text);
    assert.equal(res.status, status, `${what}: ${res.body.slice(0, 300)}`);
    if (code !== null) {
      const body = bodyJson(res);
      assert.equal(body.error, code);
      assert.equal(typeof body.message, "string");
    }
  });
}

test("after the hostile dictionary the server still answers and nothing was polluted", async () => {
  assert.equal(({} as Record<string, unknown>).polluted, undefined);
  assert.equal((await rawGet(port(0), "/cluster/members")).status, 200);
  const metrics = await rawGet(port(0), "/metrics");
  assert.match(metrics.body, /^movie_management_unauthorized_total [1-9]\d*$/m);
});

test("writes are refused with 403 on a server started without a token", async () => {
  const target = nodes[2]!.cluster.selfAddress.address.hostPort;
  const res = await rawGet(port(1), `/cluster/members/${target}/leave`, [`authorization: Bearer ${token}`], "POST");
  assert.equal(res.status, 403);
  assert.equal(bodyJson(res).error, "WritesDisabled");
  assert.equal(nodes[2]!.cluster.selfStatus, "Up");
});

test("a node cannot down itself through its own endpoint", async () => {
  const self = nodes[0]!.cluster.selfAddress.toString();
  const res = await rawGet(
    port(0),
    `/cluster/members/${encodeURIComponent(self)}/down`,
    [`authorization: Bearer ${token}`],
    "POST",
  );
  assert.equal(res.status, 409);
  assert.equal(bodyJson(res).error, "CannotDownSelf");
});

/** Shards per owner address in `node`'s plan of Order. */
function loads(node: ShardingNode): Map<string, number[]> {
  const out = new Map<string, number[]>();
  for (const [shard, owner] of node.sharding.allocations("Order")) {
    out.set(owner.toString(), [...(out.get(owner.toString()) ?? []), shard]);
  }
  return out;
}

test("POST rebalance moves one shard through the coordinator's handoff, to the least-loaded member or a named one", async () => {
  const coordinator = nodes.find((n) => n.sharding.inspect("Order").coordinator?.equals(n.cluster.selfAddress))!;
  assert.ok(coordinator !== undefined, "a coordinator");
  // A server with a token on the coordinator, whichever node that is (node 1's own server has none).
  const server = await startManagement(coordinator.system, { port: 0, token });
  const post = (path: string) =>
    rawGet(server.address.port, path, [`authorization: Bearer ${token}`, "user-agent: rebalance-test"], "POST");
  const planEverywhere = (shard: number, owner: string) =>
    eventually(() => nodes.every((n) => n.sharding.allocations("Order").get(shard)?.toString() === owner), {
      what: `shard ${shard} owned by ${owner} in every plan`,
      describe: describeNodes(nodes, "Order"),
    });
  try {
    // 32 shards on 3 nodes: 11, 11, 10. A shard of a most-loaded owner goes to the least-loaded member.
    const before = [...loads(coordinator)].sort((x, y) => y[1].length - x[1].length);
    const [busiest, busiestShards] = before[0]!;
    const [idlest] = before[before.length - 1]!;
    const shard = busiestShards[0]!;
    const res = await post(`/sharding/types/Order/shards/${shard}/rebalance`);
    assert.equal(res.status, 202, res.body);
    const body = bodyJson(res);
    assert.deepEqual(
      [body.accepted, body.action, body.type, body.shard, body.from, body.to, body.followUpMoves],
      [true, "rebalance", "Order", shard, busiest, idlest, []],
    );
    await planEverywhere(shard, idlest);
    await eventually(() => !coordinator.sharding.handoffInProgress("Order", shard), { what: "the handoff over" });

    // Named: from the owner with the most shards to the one with the fewest, by host:port.
    const now = [...loads(coordinator)].sort((x, y) => y[1].length - x[1].length);
    const from = now[0]!;
    const to = now[now.length - 1]![0];
    const toNode = nodes.find((n) => n.cluster.selfAddress.toString() === to)!;
    const named = await post(
      `/sharding/types/Order/shards/${from[1][0]}/rebalance?to=${toNode.cluster.selfAddress.address.hostPort}`,
    );
    assert.equal(named.status, 202, named.body);
    assert.equal(bodyJson(named).to, to);
    await planEverywhere(from[1][0]!, to);

    // Refusals that need the plan: the owner itself, and a move the rebalance policy would undo at once.
    const owned = [...loads(coordinator)].sort((x, y) => x[1].length - y[1].length);
    const [least, leastShards] = owned[0]!;
    const most = owned[owned.length - 1]![0];
    const self = await post(`/sharding/types/Order/shards/${leastShards[0]}/rebalance?to=${encodeURIComponent(least)}`);
    assert.deepEqual([self.status, bodyJson(self).error], [409, "AlreadyOwner"]);
    const undone = await post(
      `/sharding/types/Order/shards/${leastShards[0]}/rebalance?to=${encodeURIComponent(most)}`,
    );
    assert.deepEqual([undone.status, bodyJson(undone).error], [409, "WouldBeUndone"], undone.body);
    assert.equal(coordinator.sharding.allocations("Order").get(leastShards[0]!)?.toString(), least, "not moved");

    // Every write is in the operator log with its outcome.
    const actions = bodyJson(await rawGet(server.address.port, "/operator-actions")).actions as Record<
      string,
      unknown
    >[];
    assert.deepEqual(
      actions.map((a) => [a.action, a.outcome]),
      [
        ["rebalance", "accepted"],
        ["rebalance", "accepted"],
        ["rebalance", "AlreadyOwner"],
        ["rebalance", "WouldBeUndone"],
      ],
    );
    assert.equal(actions[0]!.target, `Order/${shard} to ${idlest}`);
    assert.equal(actions[0]!.userAgent, "rebalance-test");
  } finally {
    await server.close();
  }
  // A node that is not the coordinator refuses and names it.
  const other = nodes.findIndex((n, i) => i !== 1 && n !== coordinator);
  const refused = await rawGet(
    port(other),
    "/sharding/types/Order/shards/3/rebalance",
    [`authorization: Bearer ${token}`],
    "POST",
  );
  assert.equal(refused.status, 409, refused.body);
  assert.deepEqual(
    [bodyJson(refused).error, bodyJson(refused).coordinator],
    ["NotCoordinator", coordinator.cluster.selfAddress.toString()],
  );
  // Without a token on the server, rebalance is disabled like every write.
  const disabled = await rawGet(
    port(1),
    "/sharding/types/Order/shards/3/rebalance",
    [`authorization: Bearer ${token}`],
    "POST",
  );
  assert.deepEqual([disabled.status, bodyJson(disabled).error], [403, "WritesDisabled"]);
});

test("POST down with the token on the leader marks a member Down, and it is removed; the action is logged", async () => {
  // Above every other port: the leader (lowest address) stays one of the three whose servers this test has.
  const extra = await startShardingNode(nodes[0]!.port, {
    logger: log,
    port: await freePortAbove(Math.max(...nodes.map((n) => n.port))),
  });
  try {
    await eventually(() => [...nodes, extra].every((n) => settled(n, 4)), { what: "a fourth member Up everywhere" });
    const leader = nodes.findIndex((n) => n.cluster.isLeader);
    // The leader's own server when it has a token, else one started for this test.
    const server = leader === 1 ? await startManagement(nodes[1]!.system, { port: 0, token }) : servers[leader]!;
    try {
      const target = extra.cluster.selfAddress;
      const res = await rawGet(
        server.address.port,
        `/cluster/members/${encodeURIComponent(`${target.address.system}@${target.address.hostPort}`)}/down`,
        [`authorization: Bearer ${token}`],
        "POST",
      );
      assert.equal(res.status, 202, res.body);
      assert.deepEqual(bodyJson(res), { accepted: true, action: "down", member: target.toString() });
      await eventually(
        () => nodes.every((n) => !n.cluster.snapshot().members.some((m) => m.uniqueAddress.equals(target))),
        {
          what: "the downed member removed everywhere",
        },
      );
      const actions = bodyJson(await rawGet(server.address.port, "/operator-actions")).actions as Record<
        string,
        unknown
      >[];
      assert.deepEqual(
        [actions.at(-1)!.action, actions.at(-1)!.target, actions.at(-1)!.outcome],
        ["down", target.toString(), "accepted"],
      );
      // Down again: it is not a member any more.
      const again = await rawGet(
        server.address.port,
        `/cluster/members/${encodeURIComponent(target.toString())}/down`,
        [`authorization: Bearer ${token}`],
        "POST",
      );
      assert.deepEqual([again.status, bodyJson(again).error], [404, "UnknownMember"]);
    } finally {
      if (server !== servers[leader]) await server.close();
    }
  } finally {
    await extra.system.terminate();
  }
  await eventually(() => planSettled(nodes, "Order", { shardCount: 32 }), {
    what: "a settled plan again",
    describe: describeNodes(nodes, "Order"),
  });
});

test("POST leave with the token makes a member leave; the action is logged and listed with who and when", async () => {
  const leader = nodes.findIndex((n) => n.cluster.isLeader);
  assert.ok(leader >= 0);
  const server = leader === 1 ? null : servers[leader]!;
  // The leader can make any node leave; a node can always make itself leave. Use a server with a token.
  const via = server === null ? 0 : leader;
  const victim =
    via === 0
      ? leader === 1
        ? 0
        : nodes.findIndex((_, i) => i !== leader && i !== 1)
      : nodes.findIndex((_, i) => i !== leader && i !== 1);
  const target = nodes[victim]!.cluster.selfAddress;
  const res = await rawGet(
    port(via),
    `/cluster/members/${target.address.hostPort}/leave`,
    [`authorization: Bearer ${token}`, "user-agent: ops-test"],
    "POST",
  );
  assert.equal(res.status, 202, res.body);
  assert.deepEqual(bodyJson(res), { accepted: true, action: "leave", member: target.toString() });
  const survivor = nodes.find((_, i) => i !== victim)!;
  await eventually(() => !survivor.cluster.snapshot().members.some((m) => m.uniqueAddress.equals(target)), {
    what: "the member removed",
    describe: describeNodes(nodes, "Order"),
    timeoutMs: 20_000,
  });
  const actions = bodyJson(await rawGet(port(via), "/operator-actions")).actions as Record<string, unknown>[];
  const last = actions[actions.length - 1]!;
  assert.equal(last.action, "leave");
  assert.equal(last.target, target.toString());
  assert.equal(last.outcome, "accepted");
  assert.equal(last.userAgent, "ops-test");
  assert.match(String(last.remote), /^127\.0\.0\.1:\d+$/);
  assert.equal(typeof last.atEpochMs, "number");
  assert.ok(
    log.warnings.some(
      (w) => w.message === "management: operator action" && (w.context as { action?: string }).action === "leave",
    ),
  );
});

test("the fetch-style handler answers a Request without any server, and refuses bad options", async () => {
  // The leave test above removed one node (its sharding stopped): mount the handler on one still Up.
  const up = nodes.find((n) => n.cluster.selfStatus === "Up")!;
  const handler = createManagementHandler(up.system, { token });
  const res = await handler.handle(new Request("http://mounted.example/sharding/types/Order/shards/0"));
  assert.equal(res.status, 200);
  assert.equal(((await res.json()) as { shard: number }).shard, 0);
  const refused = await handler.handle(
    new Request("http://mounted.example/cluster/members/x/leave", { method: "POST" }),
  );
  assert.equal(refused.status, 401);
  assert.equal(refused.headers.get("www-authenticate"), 'Bearer realm="movie"');
  assert.throws(() => createManagementHandler(nodes[0]!.system, { token: "short" }), ManagementConfigurationError);
  assert.throws(
    () => createManagementHandler(nodes[0]!.system, { dashboardIntervalMs: Number.NaN }),
    ManagementConfigurationError,
  );
  await assert.rejects(startManagement(nodes[0]!.system, { port: 70_000 }), ManagementConfigurationError);
  await assert.rejects(startManagement(nodes[0]!.system, { port: servers[0]!.address.port }), /EADDRINUSE/);
});
