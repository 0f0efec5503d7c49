// A sharded exactly-once projection survives kill -9 of the node that runs it, mid-batch (real processes, real
// remoting, real PostgreSQL): the killed batch's read-model writes roll back with its checkpoint; the node is downed
// and a standby owner takes the projection's shard at a later epoch, resuming from the checkpoint, so every event is
// counted exactly once.
//
// "Mid-batch" is made certain, not sampled: a gate (a BEFORE INSERT trigger waiting on a lock the test holds) stops the
// handler's write of one chosen event after the first batch, so at the kill the batch's transaction is open (with the
// writes of any events before that one in the batch, and its FOR SHARE on the lease row) and cannot commit. Nothing
// here depends on how fast the machine is.
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { ActorSystem, silentLogger } from "../../../src/actor/index.ts";
import type { Cluster } from "../../../src/cluster/index.ts";
import { Database, OperationId, Projections } from "../../../src/persistence/index.ts";
import { ClusterSharding } from "../../../src/sharding/index.ts";
import "../../../src/sharding/persistent/index.ts";
import { eventually } from "../../fixtures/eventually.ts";
import { freshPostgresStore, rawClient, type WriteGate, writeGate } from "../../persistence/pg-fixture.ts";
import { upCount } from "../fixtures/tcp-nodes.ts";
import { countsProjection, countsProjectionSettings, countsTable } from "./fixtures/projection-counts.ts";
import { faultCluster } from "./fixtures/tally.ts";

const secret = "projection-kill-secret";
const script = fileURLToPath(new URL("./fixtures/projection-node-process.ts", import.meta.url));
const pg = await freshPostgresStore("projection_node_kill");
// The child's connections carry this name, unique to this run, so a parallel test's statements never match.
const childApp = `projnode-${process.pid}`;
const systems: ActorSystem[] = [];
let child: ChildProcess | null = null;
let gate: WriteGate | null = null;
after(async () => {
  if (child !== null && child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  await gate?.dispose();
  await Promise.all(systems.map((s) => s.terminate()));
  await pg.dispose();
});

async function startNode(seedPort: number | null, roles: string[]) {
  const system = ActorSystem.create("movie", { logger: silentLogger });
  systems.push(system);
  const remoting = await system.enableRemoting({ host: "127.0.0.1", port: 0, secret });
  const port = remoting.selfAddress.address.port!;
  const cluster = await system.enableCluster({ ...faultCluster, seedNodes: [`127.0.0.1:${seedPort ?? port}`], roles });
  await Database.get(system).use(pg.store);
  ClusterSharding.get(system).initProjection(countsProjection, countsProjectionSettings());
  return { system, cluster, port };
}

async function sql(text: string, params: unknown[] = []): Promise<Record<string, unknown>[]> {
  const raw = await rawClient(pg.url, pg.schema);
  try {
    return (await raw.query(text, params)).rows;
  } finally {
    await raw.end();
  }
}

const leases = () => sql("SELECT owner, epoch FROM shard_lease WHERE entity_type = 'projection-counts'");
const checkpoint = async () => (await pg.store.loadProjectionOffset("counts")) ?? 0;
const counted = async () => Number((await sql("SELECT coalesce(sum(events), 0) AS n FROM counts"))[0]!.n);
const feedUpTo = async (offset: number) =>
  Number((await sql("SELECT count(*) AS n FROM event_feed WHERE event_offset <= $1", [offset]))[0]!.n);

test("postgres: a sharded exactly-once projection whose node is killed with SIGKILL mid-batch resumes on another node and counts every event once", async () => {
  await sql(countsTable);
  const entities = 10;
  const perEntity = 30;
  // The gated event: Acct:0's 20th, appended after 190 others. The events are appended once the cluster has formed and
  // the child runs the projection, so the batch stops at the gate moments before the kill: held longer, it would hold
  // the lease row (every fenced batch locks it FOR SHARE) past the lease's renewal, and the owner would lose the shard.
  gate = await writeGate(pg.url, pg.schema, "counts_gate", [
    { table: "counts", event: "INSERT", when: "NEW.id = 'Acct:0' AND NEW.last_seq = 20" },
  ]);
  const held = gate;
  await held.shut();

  // The seed has no "owner" role: the projection runs in the child process, with a standby owner in this one.
  const seed = await startNode(null, []);
  const lines: { kind: string; address?: string }[] = [];
  const owner = spawn(process.execPath, ["--import", "tsx", script, String(seed.port)], {
    stdio: ["ignore", "pipe", "inherit"],
    env: {
      ...process.env,
      MOVIE_TEST_SECRET: secret,
      MOVIE_PG_URL: pg.url,
      MOVIE_PG_SCHEMA: pg.schema,
      MOVIE_PG_APP: childApp,
    },
  });
  child = owner;
  createInterface({ input: owner.stdout! }).on("line", (line) => lines.push(JSON.parse(line)));
  await eventually(() => lines.some((l) => l.kind === "ready"), { what: "the owner process", timeoutMs: 30_000 });
  const ownerAddress = lines.find((l) => l.kind === "ready")!.address!;
  await eventually(() => upCount(seed.cluster) === 2, { what: "2 Up", timeoutMs: 30_000 });
  // The shard is the child's before the standby joins, so the allocation cannot pick the standby.
  await eventually(async () => (await leases()).some((l) => l.owner === ownerAddress), {
    what: "the child process to own the projection's shard",
    timeoutMs: 30_000,
    describe: () => lines,
  });
  const standby = await startNode(seed.port, ["owner"]);
  await eventually(() => upCount(seed.cluster) === 3 && upCount(standby.cluster) === 3, {
    what: "3 Up",
    timeoutMs: 30_000,
  });

  const before = (await leases())[0]!;
  assert.equal(before.owner, ownerAddress, "the child process owns the projection's shard");
  for (let i = 0; i < perEntity; i++) {
    await Promise.all(
      Array.from({ length: entities }, (_, e) =>
        pg.store.appendEvents({
          persistenceId: `Acct:${e}`,
          expectedRevision: i,
          operationId: OperationId.random(),
          events: [{ manifest: "m", payload: "{}" }],
        }),
      ),
    );
  }
  const latest = await pg.store.latestOffset();

  // The child's batch waits at the gate, inside its transaction, and stays there: a state, not a moment.
  await eventually(() => held.waiting(childApp, "%INSERT INTO counts%", ["advisory"]), {
    what: "the child's batch held at the gated event",
    timeoutMs: 30_000,
    describe: () => lines,
  });
  owner.kill("SIGKILL");
  await new Promise((resolve) => owner.once("exit", resolve));
  // Its batch is still held (the gate is shut), so what is committed now is what was committed at the kill.
  const gatedOffset = Number(
    (await sql("SELECT event_offset FROM event_feed WHERE persistence_id = 'Acct:0' AND sequence_nr = 20"))[0]!
      .event_offset,
  );
  const atKill = await checkpoint();
  assert.ok(atKill > 0 && atKill < gatedOffset, `a batch committed, the held one not (${atKill} < ${gatedOffset})`);
  assert.equal(await counted(), await feedUpTo(atKill), "the held batch's writes are not visible");
  assert.deepEqual(Projections.get(standby.system).stats, [], "the standby did not run it meanwhile");
  let seen: unknown = null;
  // Let the dead process's held statement go: its backend finds the client gone and rolls the batch back.
  await held.open();
  await eventually(
    async () => {
      seen = await sql("SELECT state, wait_event, query FROM pg_stat_activity WHERE application_name = $1", [childApp]);
      return (seen as unknown[]).length === 0;
    },
    {
      what: "the killed process's sessions to end",
      describe: () => seen,
    },
  );
  assert.equal(await checkpoint(), atKill, "the killed batch did not move the checkpoint");
  assert.equal(await counted(), await feedUpTo(atKill), "the killed batch's writes rolled back with it");

  const gone = (c: Cluster) =>
    !c.snapshot().members.some((m) => m.uniqueAddress.toString() === ownerAddress && m.status !== "Down");
  await eventually(
    async () => {
      if (gone(seed.cluster)) return true;
      seed.cluster.down(ownerAddress);
      return gone(seed.cluster);
    },
    { what: "the down to take effect", timeoutMs: 20_000 },
  );
  await eventually(async () => (await checkpoint()) === latest, {
    what: "the standby to resume the projection and catch up",
    timeoutMs: 30_000,
    describe: () => Projections.get(standby.system).stats,
  });
  const now = (await leases())[0]!;
  assert.equal(now.owner, standby.cluster.selfAddress.toString(), "the standby owns the shard now");
  assert.ok(Number(now.epoch) > Number(before.epoch), `a later epoch (${before.epoch} then ${now.epoch})`);
  assert.deepEqual(
    Projections.get(standby.system).stats.map((s) => [s.name, s.status, s.checkpoint]),
    [["counts", "running", latest]],
  );
  const rows = await sql("SELECT id, events, last_seq FROM counts ORDER BY id");
  assert.equal(rows.length, entities);
  for (const row of rows) {
    assert.equal(Number(row.events), perEntity, `${String(row.id)} counted every event once`);
    assert.equal(Number(row.last_seq), perEntity);
  }
});
