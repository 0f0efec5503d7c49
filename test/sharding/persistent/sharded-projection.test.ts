// Projections run in the cluster (three in-process nodes over TCP, real PostgreSQL): sharding.initProjection with 3
// slices on every node; each slice runs on exactly one node, under its shard lease, from its own checkpoint. When an
// owner leaves, its slices resume on the other owner at the next epoch from their checkpoints, every event applied to
// the read model once (exactly-once mode); an instance holding the old lease commits nothing (StaleShardOwnerError),
// and neither does a running instance once its lease is taken from it; retention may not delete events a slice has
// not passed (ProjectionBehindRetentionError naming the slice), and deletes what every slice has.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { ActorSystem, RealScheduler, silentLogger } from "../../../src/actor/index.ts";
import type { Cluster } from "../../../src/cluster/index.ts";
import {
  Database,
  type ExactlyOnceProjection,
  OperationId,
  ProjectionBehindRetentionError,
  ProjectionRunner,
  Projections,
  StaleShardOwnerError,
} from "../../../src/persistence/index.ts";
import { ClusterSharding, LeastLoadedAllocation, RoleAwareAllocation } from "../../../src/sharding/index.ts";
import { projectionSliceOf, type ShardedProjection } from "../../../src/sharding/persistent/index.ts";
import { eventually } from "../../fixtures/eventually.ts";
import { freshPostgresStore, rawClient } from "../../persistence/pg-fixture.ts";
import { faultCluster } from "./fixtures/tally.ts";

const pg = await freshPostgresStore("sharded_projection");
const systems: ActorSystem[] = [];
after(async () => {
  await Promise.all(systems.map((s) => s.terminate()));
  await pg.dispose();
});

const slices = 3;
const routingName = "projection-items";
const sliceName = (i: number) => `items/slice-${i}-of-${slices}`;

async function sql(text: string, params: unknown[] = []): Promise<Record<string, unknown>[]> {
  const raw = await rawClient(pg.url, pg.schema);
  try {
    return (await raw.query(text, params)).rows;
  } finally {
    await raw.end();
  }
}

/** The projection as node `node` runs it: one statement per event, naming the node, so a double apply shows. */
function definition(node: string): ExactlyOnceProjection {
  return {
    name: "items",
    mode: "exactly-once",
    source: { entityTypes: ["Item"] },
    batchSize: 20,
    pollIntervalMs: 50,
    handler: async (event, tx) => {
      await tx.query(
        `INSERT INTO item_seen (event_offset, persistence_id, node, times) VALUES ($1, $2, $3, 1)
          ON CONFLICT (event_offset) DO UPDATE SET times = item_seen.times + 1`,
        [event.offset, event.persistenceId, node],
      );
    },
  };
}

interface Node {
  readonly name: string;
  readonly system: ActorSystem;
  readonly cluster: Cluster;
  readonly port: number;
  projection: ShardedProjection | null;
}

async function startNode(name: string, seedPort: number | null, roles: string[]): Promise<Node> {
  const system = ActorSystem.create("movie", { logger: silentLogger });
  systems.push(system);
  const remoting = await system.enableRemoting({ host: "127.0.0.1", port: 0, secret: "sharded-projection" });
  const port = remoting.selfAddress.address.port!;
  const cluster = await system.enableCluster({ ...faultCluster, seedNodes: [`127.0.0.1:${seedPort ?? port}`], roles });
  await Database.get(system).use(pg.store);
  return { name, system, cluster, port, projection: null };
}

function initProjection(node: Node): void {
  node.projection = ClusterSharding.get(node.system).initProjection(definition(node.name), {
    slices,
    // Only "owner" members run slices: the seed never does, so the leave below moves every slice of one node.
    allocation: new RoleAwareAllocation(new LeastLoadedAllocation(), ["owner"]),
    leaseDuration: 2_000,
    leaseRenewInterval: 400,
    keepAliveInterval: 100,
  });
}

function upCount(cluster: Cluster): number {
  const s = cluster.snapshot();
  return s.converged && s.unreachable.length === 0 ? s.members.filter((m) => m.status === "Up").length : -1;
}

let written = 0;
/** Appends `n` events spread over 12 Item entities, and one Other event (outside the source) every fourth. */
async function writeEvents(n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    const id = written % 4 === 3 ? `Other:${written % 5}` : `Item:${written % 12}`;
    await pg.store.appendEvents({
      persistenceId: id,
      expectedRevision: await pg.store.loadRevision(id),
      operationId: OperationId.random(),
      events: [{ manifest: "test.Added", payload: JSON.stringify({ n: written }) }],
    });
    written++;
  }
}

const itemEvents = async () =>
  Number((await sql("SELECT count(*) AS n FROM event_feed WHERE entity_type = 'Item'"))[0]!.n);
const readModel = async () => {
  const row = (await sql("SELECT count(*) AS events, coalesce(max(times), 0) AS max FROM item_seen"))[0]!;
  return { events: Number(row.events), maxTimes: Number(row.max) };
};

interface LeaseRow {
  readonly cluster: string;
  readonly owner: string;
  readonly epoch: number;
  readonly until: number;
}

/** Slice (shard) → its lease row. */
async function leases(): Promise<Map<number, LeaseRow>> {
  const rows = await sql(
    `SELECT shard_id, cluster_name, owner, epoch, lease_until_epoch_ms FROM shard_lease WHERE entity_type = $1
      ORDER BY shard_id`,
    [routingName],
  );
  return new Map(
    rows.map((r) => [
      Number(r.shard_id),
      {
        cluster: String(r.cluster_name),
        owner: String(r.owner),
        epoch: Number(r.epoch),
        until: Number(r.lease_until_epoch_ms),
      },
    ]),
  );
}

/** Slice index → the names of the nodes running it now (status running), from each node's Projections stats. */
function runningOn(nodes: Node[]): Map<number, string[]> {
  const on = new Map<number, string[]>(Array.from({ length: slices }, (_, i) => [i, []]));
  for (const node of nodes) {
    for (const stats of Projections.get(node.system).stats) {
      const i = Array.from({ length: slices }, (_, k) => k).find((k) => sliceName(k) === stats.name);
      if (i !== undefined && stats.status === "running") on.get(i)!.push(node.name);
    }
  }
  return on;
}

const statusOf = (runner: ProjectionRunner) => runner.status;

/** Every slice's checkpoint is the feed's latest offset. */
async function caughtUp(): Promise<boolean> {
  const latest = await pg.store.latestOffset();
  for (let i = 0; i < slices; i++) if ((await pg.store.loadProjectionOffset(sliceName(i))) !== latest) return false;
  return true;
}

test("each slice runs on one node; an owner leaves and its slices resume elsewhere, every event applied once; a stale instance commits nothing", async () => {
  await sql(
    "CREATE TABLE item_seen (event_offset BIGINT PRIMARY KEY, persistence_id TEXT NOT NULL, node TEXT NOT NULL, times INT NOT NULL)",
  );
  await writeEvents(60);
  const seed = await startNode("seed", null, []);
  const b = await startNode("b", seed.port, ["owner"]);
  const c = await startNode("c", seed.port, ["owner"]);
  const nodes = [seed, b, c];
  await eventually(() => nodes.every((n) => upCount(n.cluster) === 3), { what: "3 Up", timeoutMs: 20_000 });
  for (const node of nodes) initProjection(node);

  await eventually(async () => (await caughtUp()) && [...runningOn(nodes).values()].every((on) => on.length === 1), {
    what: "every slice running on one node and caught up",
    timeoutMs: 20_000,
    describe: () => Object.fromEntries(runningOn(nodes)),
  });
  assert.deepEqual(await readModel(), { events: await itemEvents(), maxTimes: 1 }, "every Item event applied once");
  const first = await leases();
  assert.equal(first.size, slices, "one lease per slice");
  const owners = runningOn(nodes);
  for (const [i, on] of owners) {
    assert.notEqual(on[0], "seed", "the seed has no owner role");
    const node = nodes.find((n) => n.name === on[0])!;
    assert.equal(first.get(i)!.owner, node.cluster.selfAddress.toString(), `slice ${i}'s lease is its runner's`);
    assert.deepEqual([...node.projection!.local().keys()].includes(i), true);
  }
  // Each row was written by the slice that owns its persistence id, on the node that ran that slice then.
  for (const row of await sql("SELECT persistence_id, node FROM item_seen")) {
    const slice = projectionSliceOf(String(row.persistence_id), slices);
    assert.equal(row.node, owners.get(slice)![0], `${String(row.persistence_id)} handled by slice ${slice}'s node`);
  }

  // The node owning slice 0 leaves while events keep coming: its slices move to the other owner.
  const leaver = nodes.find((n) => n.name === owners.get(0)![0])!;
  const stayer = leaver === b ? c : b;
  const leaverSlices = [...owners].filter(([, on]) => on[0] === leaver.name).map(([i]) => i);
  const writing = writeEvents(60);
  await leaver.cluster.leave();
  await writing;
  await eventually(
    async () => (await caughtUp()) && leaverSlices.every((i) => runningOn(nodes).get(i)![0] === stayer.name),
    {
      what: "the leaver's slices running on the other owner and caught up",
      timeoutMs: 30_000,
      describe: () => Object.fromEntries(runningOn(nodes)),
    },
  );
  const moved = await leases();
  for (const i of leaverSlices) {
    assert.equal(moved.get(i)!.owner, stayer.cluster.selfAddress.toString(), `slice ${i} on ${stayer.name}`);
    assert.equal(moved.get(i)!.epoch, first.get(i)!.epoch + 1, `slice ${i} handed off once: the next epoch`);
  }
  for (const [i, on] of runningOn(nodes))
    assert.deepEqual(on, [stayer.name], `slice ${i} runs on ${stayer.name} alone`);
  assert.deepEqual(await readModel(), { events: await itemEvents(), maxTimes: 1 }, "every Item event applied once");

  // An instance still holding the leaver's lease of slice 0 (a paused old owner that resumes) commits nothing.
  const old = first.get(0)!;
  const staleToken = {
    key: { clusterName: old.cluster, entityType: routingName, shardId: 0 },
    owner: old.owner,
    epoch: old.epoch,
    leaseUntilEpochMs: old.until,
  };
  const checkpointBefore = await pg.store.loadProjectionOffset(sliceName(0));
  const stale = ProjectionRunner.start(
    { ...definition("stale"), name: sliceName(0), startOffset: 0 },
    pg.store,
    new RealScheduler(),
    {
      fence: staleToken,
    },
  );
  await writeEvents(12);
  await eventually(() => stale.status === "stale", {
    what: "the old lease's instance fenced out",
    describe: () => stale.stats,
  });
  assert.match(stale.stats.lastError ?? "", /StaleShardOwnerError/);
  await assert.rejects(() => pg.store.saveProjectionOffset(sliceName(0), 1_000_000, staleToken), StaleShardOwnerError);
  await eventually(caughtUp, { what: "the live owner applies the new events" });
  assert.ok((await pg.store.loadProjectionOffset(sliceName(0)))! > checkpointBefore!, "the live owner moved on");
  assert.deepEqual(
    await sql("SELECT event_offset FROM item_seen WHERE node = 'stale'"),
    [],
    "no row of the stale instance",
  );
  assert.deepEqual(await readModel(), { events: await itemEvents(), maxTimes: 1 }, "still once each");

  // Slice 1's lease is taken from its owner behind its back (as a new owner would after the owner was cut off): the
  // running instance, bound to its epoch by sharding, commits nothing more. Whichever notices first ends it: its next
  // batch (StaleShardOwnerError, status "stale") or the lease keeper's renewal, which stops the slice's entity.
  // The UPDATE waits for a batch in flight (it holds the lease row FOR SHARE), so what is in the table now is all.
  const runner = stayer.projection!.local().get(1)!;
  assert.equal(runner.stats.status, "running");
  await sql(
    `UPDATE shard_lease SET owner = 'intruder', epoch = epoch + 1, lease_until_epoch_ms = movie_now_ms() + 600000
      WHERE entity_type = $1 AND shard_id = 1`,
    [routingName],
  );
  const appliedBefore = await sql("SELECT event_offset FROM item_seen ORDER BY 1");
  const sliceOneCheckpoint = await pg.store.loadProjectionOffset(sliceName(1));
  await writeEvents(24);
  await eventually(() => runner.status === "stale" || runner.status === "stopped", {
    what: "slice 1's instance fenced out",
    describe: () => runner.stats,
  });
  // Read through a function: assert.equal above narrowed the status it was given.
  if (statusOf(runner) === "stale") assert.match(runner.stats.lastError ?? "", /StaleShardOwnerError/);
  assert.equal(
    await pg.store.loadProjectionOffset(sliceName(1)),
    sliceOneCheckpoint,
    "slice 1's checkpoint did not move",
  );
  const appliedAfter = await sql("SELECT event_offset, persistence_id FROM item_seen ORDER BY 1");
  const newSlice1 = appliedAfter.filter(
    (r) =>
      !appliedBefore.some((b) => b.event_offset === r.event_offset) &&
      projectionSliceOf(String(r.persistence_id), slices) === 1,
  );
  assert.deepEqual(newSlice1, [], "nothing of slice 1 applied under the taken lease");
  // The slice's entity stopped itself once fenced out: no node runs slice 1 while the intruder holds its lease.
  await eventually(() => runningOn(nodes).get(1)!.length === 0, {
    what: "slice 1 stopped",
    describe: () => Object.fromEntries(runningOn(nodes)),
  });

  // Retention waits for the slowest slice: slice 1, stopped behind the 24 new events, names itself; events every
  // slice has passed are deleted.
  const behind = (
    await sql(
      `SELECT persistence_id, max(sequence_nr) AS seq FROM event_feed WHERE event_offset > $1 AND entity_type = 'Item'
        GROUP BY persistence_id ORDER BY persistence_id`,
      [sliceOneCheckpoint],
    )
  ).find((r) => projectionSliceOf(String(r.persistence_id), slices) === 1);
  assert.ok(behind !== undefined, "slice 1 has events after its checkpoint");
  const behindId = String(behind.persistence_id);
  const behindSeq = Number(behind.seq);
  await pg.store.saveSnapshot(behindId, { sequenceNr: behindSeq, manifest: "s", payload: "{}" });
  await assert.rejects(
    () => pg.store.deleteEventsTo(behindId, behindSeq),
    (e: unknown) =>
      e instanceof ProjectionBehindRetentionError &&
      e.projectionName === sliceName(1) &&
      e.checkpointOffset === sliceOneCheckpoint,
  );
  const passed = (
    await sql(
      `SELECT persistence_id, max(sequence_nr) AS seq FROM event_feed WHERE event_offset <= $1
        GROUP BY persistence_id ORDER BY persistence_id LIMIT 1`,
      [sliceOneCheckpoint],
    )
  )[0]!;
  const passedId = String(passed.persistence_id);
  const passedSeq = Number(passed.seq);
  await pg.store.saveSnapshot(passedId, { sequenceNr: passedSeq, manifest: "s", payload: "{}" });
  assert.equal(
    (await pg.store.deleteEventsTo(passedId, passedSeq)).deletedEvents,
    passedSeq,
    "every slice passed them",
  );
  for (const node of nodes) node.projection?.stopKeepAlive();
});
