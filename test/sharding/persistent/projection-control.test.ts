// Operating a sharded projection cluster-wide (three in-process nodes over TCP, real PostgreSQL, the management
// endpoint over HTTP): a pause asked of the seed, which owns no slice, stops the owners; the slices stay paused when
// their owner leaves and the other owner takes them at the next lease epoch; a resume asked through ClusterSharding on
// that owner catches up; a rebuild from an offset, asked over HTTP, resets the read model past it and handles those
// events once more, each exactly once, and every slice's rebuild request is carried out once. Hostile requests get
// typed 4xx answers and change nothing.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { ActorSystem, silentLogger } from "../../../src/actor/index.ts";
import type { Cluster } from "../../../src/cluster/index.ts";
import { createManagementHandler, type ManagementServer, startManagement } from "../../../src/management/index.ts";
import { Database, type ExactlyOnceProjection, OperationId, Projections } from "../../../src/persistence/index.ts";
import { UnknownShardedProjectionError } from "../../../src/sharding/errors.ts";
import { ClusterSharding, LeastLoadedAllocation, RoleAwareAllocation } from "../../../src/sharding/index.ts";
import { projectionSliceOf } from "../../../src/sharding/persistent/index.ts";
import { eventually } from "../../fixtures/eventually.ts";
import { freshPostgresStore, rawClient } from "../../persistence/pg-fixture.ts";
import { faultCluster } from "./fixtures/tally.ts";

const pg = await freshPostgresStore("projection_control");
const systems: ActorSystem[] = [];
let server: ManagementServer | null = null;
after(async () => {
  await server?.close();
  await Promise.all(systems.map((s) => s.terminate()));
  await pg.dispose();
});

const slices = 2;
const routingName = "projection-tallies";
const sliceName = (i: number) => `tallies/slice-${i}-of-${slices}`;
const token = "projection-control-token-0123456789";

async function sql(text: string, params: unknown[] = []): Promise<Record<string, unknown>[]> {
  const raw = await rawClient(pg.url, pg.schema);
  try {
    return (await raw.query(text, params)).rows;
  } finally {
    await raw.end();
  }
}

/**
 * The read model (`seen`, one row per event, `times` counting applies) and a log of every apply that no reset
 * touches (`handled`), so a rebuild shows as a second apply of exactly the events past its offset.
 */
const definition: ExactlyOnceProjection = {
  name: "tallies",
  mode: "exactly-once",
  source: { entityTypes: ["Tally"] },
  batchSize: 10,
  pollIntervalMs: 50,
  handler: async (event, tx) => {
    await tx.query(
      `INSERT INTO seen (event_offset, persistence_id, times) VALUES ($1, $2, 1)
        ON CONFLICT (event_offset) DO UPDATE SET times = seen.times + 1`,
      [event.offset, event.persistenceId],
    );
    await tx.query(
      `INSERT INTO handled (event_offset, times) VALUES ($1, 1)
        ON CONFLICT (event_offset) DO UPDATE SET times = handled.times + 1`,
      [event.offset],
    );
  },
  reset: async (tx, rebuild) => {
    const ids = await tx.query("SELECT DISTINCT persistence_id FROM seen WHERE event_offset > $1", [
      rebuild.fromOffset,
    ]);
    const mine = ids.map((r) => String(r.persistence_id)).filter((id) => rebuild.owns(id));
    await tx.query("DELETE FROM seen WHERE event_offset > $1 AND persistence_id = ANY($2::text[])", [
      rebuild.fromOffset,
      mine,
    ]);
  },
};

interface Node {
  readonly name: string;
  readonly system: ActorSystem;
  readonly cluster: Cluster;
  readonly port: number;
}

async function startNode(name: string, seedPort: number | null, roles: string[]): Promise<Node> {
  const system = ActorSystem.create("movie", { logger: silentLogger });
  systems.push(system);
  const remoting = await system.enableRemoting({ host: "127.0.0.1", port: 0, secret: "projection-control" });
  const port = remoting.selfAddress.address.port!;
  const cluster = await system.enableCluster({ ...faultCluster, seedNodes: [`127.0.0.1:${seedPort ?? port}`], roles });
  await Database.get(system).use(pg.store);
  ClusterSharding.get(system).initProjection(definition, {
    slices,
    allocation: new RoleAwareAllocation(new LeastLoadedAllocation(), ["owner"]),
    leaseDuration: 2_000,
    leaseRenewInterval: 400,
    keepAliveInterval: 100,
  });
  return { name, system, cluster, port };
}

function upCount(cluster: Cluster): number {
  const s = cluster.snapshot();
  return s.converged && s.unreachable.length === 0 ? s.members.filter((m) => m.status === "Up").length : -1;
}

let written = 0;
async function writeEvents(n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    const id = `Tally:${written % 10}`;
    await pg.store.appendEvents({
      persistenceId: id,
      expectedRevision: await pg.store.loadRevision(id),
      operationId: OperationId.random(),
      events: [{ manifest: "test.Added", payload: JSON.stringify({ n: written }) }],
    });
    written++;
  }
}

/** Slice index → [node name, status] of each runner of it on the given nodes. */
function runners(nodes: Node[]): Map<number, [string, string][]> {
  const on = new Map<number, [string, string][]>(Array.from({ length: slices }, (_, i) => [i, []]));
  for (const node of nodes) {
    for (const stats of Projections.get(node.system).stats) {
      for (let i = 0; i < slices; i++) {
        if (stats.name === sliceName(i) && stats.status !== "stopped" && stats.status !== "stale") {
          on.get(i)!.push([node.name, stats.status]);
        }
      }
    }
  }
  return on;
}

const statsOf = (node: Node, i: number) => Projections.get(node.system).get(sliceName(i))?.stats;
const checkpoints = async () =>
  Promise.all(Array.from({ length: slices }, (_, i) => pg.store.loadProjectionOffset(sliceName(i))));

async function caughtUp(): Promise<boolean> {
  const latest = await pg.store.latestOffset();
  return (await checkpoints()).every((c) => c === latest);
}

/** The read model: one row per Tally event, each applied once. */
async function readModelExact(): Promise<void> {
  const events = await sql("SELECT event_offset FROM event_feed WHERE entity_type = 'Tally' ORDER BY 1");
  const seen = await sql("SELECT event_offset, times FROM seen ORDER BY 1");
  assert.deepEqual(
    seen.map((r) => [Number(r.event_offset), Number(r.times)]),
    events.map((r) => [Number(r.event_offset), 1]),
    "every Tally event in the read model exactly once",
  );
}

async function leaseEpochs(): Promise<Map<number, { owner: string; epoch: number }>> {
  const rows = await sql("SELECT shard_id, owner, epoch FROM shard_lease WHERE entity_type = $1", [routingName]);
  return new Map(rows.map((r) => [Number(r.shard_id), { owner: String(r.owner), epoch: Number(r.epoch) }]));
}

test("pause, handoff while paused, resume and rebuild-from-offset of a sharded projection, asked of any node", async () => {
  await sql("CREATE TABLE seen (event_offset BIGINT PRIMARY KEY, persistence_id TEXT NOT NULL, times INT NOT NULL)");
  await sql("CREATE TABLE handled (event_offset BIGINT PRIMARY KEY, times INT NOT NULL)");
  await writeEvents(30);
  const seed = await startNode("seed", null, []);
  const b = await startNode("b", seed.port, ["owner"]);
  const c = await startNode("c", seed.port, ["owner"]);
  const nodes = [seed, b, c];
  await eventually(() => nodes.every((n) => upCount(n.cluster) === 3), { what: "3 Up", timeoutMs: 20_000 });
  server = await startManagement(seed.system, { port: 0, token });
  const base = server.url.replace(/\/$/, "");
  const http = async (method: string, path: string, auth = true) => {
    const response = await fetch(`${base}${path}`, {
      method,
      headers: auth ? { authorization: `Bearer ${token}` } : {},
    });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };

  await eventually(async () => (await caughtUp()) && [...runners(nodes).values()].every((on) => on.length === 1), {
    what: "each slice running on one owner, caught up",
    timeoutMs: 20_000,
    describe: () => [...runners(nodes)],
  });
  await readModelExact();

  // Pause, asked over HTTP of the seed, which owns no slice.
  const paused = await http("POST", "/projections/tallies/pause");
  assert.equal(paused.status, 202, JSON.stringify(paused.body));
  assert.equal(paused.body.scope, "cluster");
  assert.deepEqual(
    (paused.body.slices as { paused: boolean }[]).map((s) => s.paused),
    [true, true],
  );
  await eventually(() => [...runners(nodes).values()].every((on) => on.length === 1 && on[0]![1] === "paused"), {
    what: "every owner paused",
    describe: () => [...runners(nodes)],
  });
  const pausedAt = await checkpoints();
  await writeEvents(20);
  const latestWhilePaused = await pg.store.latestOffset();
  const owners = new Map([...runners(nodes)].map(([i, on]) => [i, nodes.find((n) => n.name === on[0]![0])!]));
  // Each paused owner has looked at the feed since the new events (it refreshes the latest offset while paused).
  await eventually(() => [...owners].every(([i, node]) => (statsOf(node, i)?.latestOffset ?? 0) >= latestWhilePaused), {
    what: "the paused owners saw the new events",
    describe: () => [...owners].map(([i, n]) => statsOf(n, i)),
  });
  assert.deepEqual(await checkpoints(), pausedAt, "no checkpoint moved while paused");
  for (const [i, node] of owners) assert.ok(statsOf(node, i)!.lag > 0, `slice ${i} shows its lag`);

  // The owner of slice 0 leaves: its slices go to the other owner, at the next epoch, and stay paused.
  const before = await leaseEpochs();
  const leaver = owners.get(0)!;
  const stayer = leaver === b ? c : b;
  const moving = [...owners].filter(([, n]) => n === leaver).map(([i]) => i);
  await leaver.cluster.leave();
  await eventually(() => moving.every((i) => statsOf(stayer, i)?.status === "paused"), {
    what: "the leaver's slices started paused on the other owner",
    timeoutMs: 30_000,
    describe: () => [...runners(nodes)],
  });
  const after = await leaseEpochs();
  for (const i of moving) {
    assert.equal(after.get(i)!.owner, stayer.cluster.selfAddress.toString());
    assert.equal(after.get(i)!.epoch, before.get(i)!.epoch + 1, `slice ${i} at the next epoch`);
  }
  await writeEvents(10);
  const latestAfterHandoff = await pg.store.latestOffset();
  await eventually(() => moving.every((i) => (statsOf(stayer, i)?.latestOffset ?? 0) >= latestAfterHandoff), {
    what: "the new owner saw the new events",
    describe: () => moving.map((i) => statsOf(stayer, i)),
  });
  assert.deepEqual(await checkpoints(), pausedAt, "still no checkpoint moved after the handoff");

  // Resume through ClusterSharding on the remaining owner: every slice catches up, each event applied once.
  const resumed = await ClusterSharding.get(stayer.system).resumeProjection("tallies");
  assert.deepEqual(
    resumed.slices.map((s) => s.paused),
    [false, false],
  );
  await eventually(caughtUp, {
    what: "caught up after the resume",
    timeoutMs: 20_000,
    describe: () => [...runners(nodes)],
  });
  await readModelExact();
  const handledOnce = await sql("SELECT count(*) AS n FROM handled WHERE times <> 1");
  assert.equal(Number(handledOnce[0]!.n), 0, "no event handled twice before the rebuild");

  // Rebuild from offset 25, asked over HTTP of the seed; more events arrive meanwhile.
  const from = 25;
  const rebuilt = await http("POST", `/projections/tallies/rebuild?from=${from}`);
  assert.equal(rebuilt.status, 202, JSON.stringify(rebuilt.body));
  await writeEvents(10);
  await eventually(
    async () =>
      (await caughtUp()) &&
      (await ClusterSharding.get(seed.system).projectionControl("tallies")).slices.every((s) => s.rebuildFrom === null),
    { what: "the rebuild carried out and caught up", timeoutMs: 20_000, describe: () => [...runners(nodes)] },
  );
  await readModelExact();
  const handled = await sql("SELECT event_offset, times FROM handled ORDER BY 1");
  const tally = await sql("SELECT event_offset FROM event_feed WHERE entity_type = 'Tally' ORDER BY 1");
  const latestBeforeRebuild = Number(tally[tally.length - 11]!.event_offset);
  assert.deepEqual(
    handled.map((r) => [Number(r.event_offset), Number(r.times)]),
    tally.map((r) => {
      const offset = Number(r.event_offset);
      // Past `from` and committed before the rebuild: handled, reset, handled again. After it: once.
      return [offset, offset > from && offset <= latestBeforeRebuild ? 2 : 1];
    }),
    "the events past the rebuild offset handled exactly once more",
  );
  for (const row of await sql("SELECT DISTINCT persistence_id FROM seen")) {
    assert.ok(projectionSliceOf(String(row.persistence_id), slices) < slices);
  }

  // Hostile and mistaken requests: typed 4xx, counted, nothing changed.
  const refusalsBefore = server.handler.operatorLog.badRequests;
  const controlBefore = await ClusterSharding.get(seed.system).projectionControl("tallies");
  const cases: [string, string, boolean, number, string][] = [
    ["POST", "/projections/tallies/pause", false, 401, "Unauthorized"],
    ["POST", "/projections/tallies/pause?x=1", true, 400, "UnknownParameter"],
    ["POST", "/projections/tallies/rebuild", true, 400, "InvalidOffset"],
    ["POST", "/projections/tallies/rebuild?from=-1", true, 400, "InvalidOffset"],
    ["POST", "/projections/tallies/rebuild?from=1e3", true, 400, "InvalidOffset"],
    ["POST", "/projections/tallies/rebuild?from=99999999999999999", true, 400, "InvalidOffset"],
    ["POST", "/projections/tallies/rebuild?from=1&from=2", true, 400, "InvalidOffset"],
    ["POST", "/projections/tallies/rebuild?from=01", true, 400, "InvalidOffset"],
    ["POST", "/projections/tallies/rebuild?from=1&to=2", true, 400, "UnknownParameter"],
    ["POST", "/projections/nope/pause", true, 404, "UnknownProjection"],
    ["POST", `/projections/${"x".repeat(300)}/pause`, true, 400, "InvalidProjectionName"],
    ["POST", "/projections/%E0%A4%A/pause", true, 400, "BadPercentEncoding"],
    ["GET", "/projections/tallies/pause", true, 405, "MethodNotAllowed"],
    ["POST", "/projections", true, 405, "MethodNotAllowed"],
    ["GET", "/projections/nope", true, 404, "UnknownProjection"],
    ["GET", "/projections?x=1", true, 400, "UnknownParameter"],
    ["GET", "/projections/tallies?limit=5", true, 400, "UnknownParameter"],
  ];
  for (const [method, path, auth, status, code] of cases) {
    const answer = await http(method, path, auth);
    assert.deepEqual([answer.status, answer.body.error], [status, code], `${method} ${path}`);
  }
  assert.equal(server.handler.operatorLog.badRequests, refusalsBefore + cases.length - 1, "each refusal counted");
  assert.deepEqual(await ClusterSharding.get(seed.system).projectionControl("tallies"), controlBefore);
  await assert.rejects(() => ClusterSharding.get(seed.system).pauseProjection("nope"), UnknownShardedProjectionError);
  await assert.rejects(
    () => ClusterSharding.get(seed.system).rebuildProjection("tallies", null as unknown as number),
    /fromOffset/,
  );

  // The listing: stored control per slice, and what runs here (the seed runs nothing).
  const listing = await http("GET", "/projections");
  assert.equal(listing.status, 200);
  assert.deepEqual(
    (listing.body.sharded as { name: string; slices: { paused: boolean; checkpoint: number }[] }[]).map((p) => [
      p.name,
      p.slices.map((s) => [s.paused, s.checkpoint]),
    ]),
    [["tallies", (await checkpoints()).map((cp) => [false, cp])]],
  );
  assert.deepEqual(listing.body.running, []);
  // Per slice: the owner from the plan, the stored checkpoint and the lag, and the runner's figures asked of the owner
  // through sharding (the seed runs no slice).
  const latest = await pg.store.latestOffset();
  const stayerAddress = stayer.cluster.selfAddress.toString();
  type Slice = Record<string, unknown>;
  const pick = (s: Slice) => [s.projection, s.slice, s.owner, s.local, s.status, s.checkpoint, s.latestOffset, s.lag];
  assert.deepEqual(
    (listing.body.slices as Slice[]).map((s) => [...pick(s), s.reportedBy, typeof s.eventsPerSecond, s.lastError]),
    [0, 1].map((i) => ["tallies", i, stayerAddress, false, "running", latest, latest, 0, "owner", "number", null]),
  );
  // The same figures in process, through ClusterSharding on the seed.
  const reports = await ClusterSharding.get(seed.system).projectionSliceReports("tallies");
  assert.deepEqual(
    reports.map((r) => r?.status),
    ["running", "running"],
  );
  const onOwner = createManagementHandler(stayer.system);
  const owned = (await (await onOwner.handle(new Request("http://owner.example/projections"))).json()) as {
    slices: Slice[];
  };
  assert.deepEqual(
    owned.slices.map(pick),
    [0, 1].map((i) => ["tallies", i, stayerAddress, true, "running", latest, latest, 0]),
  );
  for (const s of owned.slices) assert.equal(typeof s.eventsPerSecond, "number");
  const actions = server.handler.operatorLog.actions.map((a) => [a.action, a.target, a.outcome]);
  assert.deepEqual(actions.slice(0, 2), [
    ["projection-pause", "tallies", "accepted"],
    ["projection-rebuild", `tallies from ${from}`, "accepted"],
  ]);
});
