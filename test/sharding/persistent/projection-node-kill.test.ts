// A sharded exactly-once projection survives kill -9 of the node that runs it, mid-batch (real processes, real
// remoting, real PostgreSQL): the killed batch's read-model writes roll back with its checkpoint; the node is downed
// and a standby owner takes the projection's shard at the next epoch, resuming from the checkpoint, so every event is
// counted exactly once.
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
import { freshPostgresStore, rawClient } from "../../persistence/pg-fixture.ts";
import { countsProjection, countsProjectionSettings } from "./fixtures/projection-counts.ts";
import { faultCluster } from "./fixtures/tally.ts";

const secret = "projection-kill-secret";
const script = fileURLToPath(new URL("./fixtures/projection-node-process.ts", import.meta.url));
const pg = await freshPostgresStore("projection_node_kill");
const systems: ActorSystem[] = [];
let child: ChildProcess | null = null;
after(async () => {
  if (child !== null && child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
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

function upCount(cluster: Cluster): number {
  const s = cluster.snapshot();
  return s.converged && s.unreachable.length === 0 ? s.members.filter((m) => m.status === "Up").length : -1;
}

async function sql(text: string): Promise<Record<string, unknown>[]> {
  const raw = await rawClient(pg.url, pg.schema);
  try {
    return (await raw.query(text)).rows;
  } finally {
    await raw.end();
  }
}

const lease = async () => {
  const rows = await sql("SELECT owner, epoch FROM shard_lease WHERE entity_type = 'projection-counts'");
  assert.equal(rows.length, 1, "one slice, one lease row");
  return { owner: String(rows[0]!.owner), epoch: Number(rows[0]!.epoch) };
};

test("postgres: a sharded exactly-once projection whose node is killed with SIGKILL mid-batch resumes on another node and counts every event once", async () => {
  await sql("CREATE TABLE counts (id TEXT PRIMARY KEY, events BIGINT NOT NULL, last_seq BIGINT NOT NULL)");
  const entities = 10;
  const perEntity = 30;
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
  const checkpoint = async () => (await pg.store.loadProjectionOffset("counts")) ?? 0;

  // The seed has no "owner" role: the projection runs in the child process, with a standby owner in this one.
  const seed = await startNode(null, []);
  const lines: { kind: string; address?: string }[] = [];
  const owner = spawn(process.execPath, ["--import", "tsx", script, String(seed.port)], {
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, MOVIE_TEST_SECRET: secret, MOVIE_PG_URL: pg.url, MOVIE_PG_SCHEMA: pg.schema },
  });
  child = owner;
  createInterface({ input: owner.stdout! }).on("line", (line) => lines.push(JSON.parse(line)));
  await eventually(() => lines.some((l) => l.kind === "ready"), { what: "the owner process", timeoutMs: 20_000 });
  const ownerAddress = lines.find((l) => l.kind === "ready")!.address!;
  await eventually(() => upCount(seed.cluster) === 2, { what: "2 Up", timeoutMs: 20_000 });
  const standby = await startNode(seed.port, ["owner"]);
  await eventually(() => upCount(seed.cluster) === 3 && upCount(standby.cluster) === 3, {
    what: "3 Up",
    timeoutMs: 20_000,
  });

  // Kill it while a batch is open (its transaction has written rows that are not committed) after at least one commit.
  await eventually(
    async () =>
      (await checkpoint()) > 0 &&
      (
        await sql(
          "SELECT 1 FROM pg_stat_activity WHERE application_name = 'movie-projection-node' AND xact_start IS NOT NULL AND query LIKE '%counts%'",
        )
      ).length > 0,
    { what: "a batch in flight after a committed one", timeoutMs: 30_000, intervalMs: 2 },
  );
  const before = await lease();
  assert.equal(before.owner, ownerAddress, "the child process owns the projection's shard");
  assert.deepEqual(Projections.get(standby.system).stats, [], "the standby does not run it meanwhile");
  owner.kill("SIGKILL");
  await new Promise((resolve) => owner.once("exit", resolve));
  const atKill = await checkpoint();
  assert.ok(atKill < latest, `killed before the end (${atKill} < ${latest})`);
  // The read model holds exactly the events up to the committed checkpoint (after the dead backend rolls back).
  const feedUpTo = Number((await sql(`SELECT count(*) AS n FROM event_feed WHERE event_offset <= ${atKill}`))[0]!.n);
  await eventually(
    async () => Number((await sql("SELECT coalesce(sum(events), 0) AS n FROM counts"))[0]!.n) === feedUpTo,
    { what: "the killed batch's writes to roll back", describe: () => ({ atKill, feedUpTo }) },
  );

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
    timeoutMs: 60_000,
    describe: () => Projections.get(standby.system).stats,
  });
  const after = await lease();
  assert.equal(after.owner, standby.cluster.selfAddress.toString(), "the standby owns the shard now");
  assert.ok(after.epoch > before.epoch, `a later epoch (${before.epoch} then ${after.epoch})`);
  const stats = Projections.get(standby.system).stats;
  assert.deepEqual(
    stats.map((s) => [s.name, s.status, s.checkpoint]),
    [["counts", "running", latest]],
  );
  const rows = await sql("SELECT id, events, last_seq FROM counts ORDER BY id");
  assert.equal(rows.length, entities);
  for (const row of rows) {
    assert.equal(Number(row.events), perEntity, `${String(row.id)} counted every event once`);
    assert.equal(Number(row.last_seq), perEntity);
  }
});
