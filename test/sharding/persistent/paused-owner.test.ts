// Fault test with a real OS process: the owner of a persistent shard is paused (SIGSTOP) for longer than its lease,
// downed through the cluster, and replaced by another node at epoch + 1; when it resumes (SIGCONT), its write under
// the old epoch fails with StaleShardOwnerError and commits nothing, and the new owner's history is intact.
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { ActorSystem, silentLogger } from "../../../src/actor/index.ts";
import type { Cluster } from "../../../src/cluster/index.ts";
import { Database, EventSourcing } from "../../../src/persistence/index.ts";
import { ClusterSharding, NoShardOwnerError } from "../../../src/sharding/index.ts";
import { initEventSourced } from "../../../src/sharding/persistent/index.ts";
import { eventually } from "../../fixtures/eventually.ts";
import { freshPostgresStore, rawClient } from "../../persistence/pg-fixture.ts";
import {
  AddPoints,
  faultCluster,
  GetTally,
  PointsAdded,
  TallyBehavior,
  TallyCommand,
  TallyReply,
  tallySettings,
} from "./fixtures/tally.ts";

const secret = "paused-owner-secret";
const script = fileURLToPath(new URL("./fixtures/owner-process.ts", import.meta.url));
const pg = await freshPostgresStore("paused_owner");
const systems: ActorSystem[] = [];
let child: ChildProcess | null = null;
after(async () => {
  if (child !== null && child.exitCode === null) {
    child.kill("SIGCONT");
    child.kill("SIGKILL");
  }
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
  Database.get(system).codec.register(PointsAdded);
  const tallies = EventSourcing.get(system).registerEntity(TallyBehavior, TallyCommand, () => new TallyBehavior(), {
    name: "Tally",
  });
  const sharding = ClusterSharding.get(system);
  initEventSourced(sharding, tallies, tallySettings());
  return { system, cluster, sharding, port };
}

interface Line {
  kind: string;
  address?: string;
  epoch?: number;
  ok?: boolean;
  error?: string;
}

function upCount(cluster: Cluster): number {
  const s = cluster.snapshot();
  return s.converged && s.unreachable.length === 0 ? s.members.filter((m) => m.status === "Up").length : -1;
}

test("a paused owner that resumes after its replacement commits nothing", async () => {
  const seed = await startNode(null, []);
  const lines: Line[] = [];
  child = spawn(process.execPath, ["--import", "tsx", script, String(seed.port)], {
    stdio: ["pipe", "pipe", "inherit"],
    env: { ...process.env, MOVIE_TEST_SECRET: secret, MOVIE_PG_URL: pg.url, MOVIE_PG_SCHEMA: pg.schema },
  });
  createInterface({ input: child.stdout! }).on("line", (line) => lines.push(JSON.parse(line) as Line));
  await eventually(() => lines.some((l) => l.kind === "ready"), { what: "the owner process", timeoutMs: 20_000 });
  const ownerAddress = lines.find((l) => l.kind === "ready")!.address!;
  await eventually(() => upCount(seed.cluster) === 2, { what: "2 Up", timeoutMs: 20_000 });

  const tally = seed.sharding.entityRefFor<TallyCommand>("Tally", "t-1");
  await eventually(
    async () => {
      try {
        return (await tally.ask(new AddPoints(5, "op-1"), TallyReply, 3_000)).total === 5;
      } catch {
        return false;
      }
    },
    { what: "the first command on the owner process", timeoutMs: 20_000 },
  );
  child.stdin!.write("capture t-1\n");
  await eventually(() => lines.some((l) => l.kind === "captured"), { what: "the captured entity" });
  assert.equal(lines.find((l) => l.kind === "captured")!.epoch, 1);

  const standby = await startNode(seed.port, ["owner"]);
  await eventually(() => upCount(seed.cluster) === 3 && upCount(standby.cluster) === 3, {
    what: "3 Up",
    timeoutMs: 20_000,
  });
  // A new coordinator may be elected by the join; once the plan is known again, NoRebalance has kept it in place.
  await eventually(() => seed.sharding.ownerFor("Tally", "t-1") !== null, { what: "the plan after the join" });
  assert.equal(seed.sharding.ownerFor("Tally", "t-1")?.toString(), ownerAddress, "NoRebalance keeps it in place");

  child.kill("SIGSTOP");
  await eventually(() => seed.cluster.snapshot().unreachable.some((u) => u.toString() === ownerAddress), {
    what: "the paused owner unreachable",
    timeoutMs: 20_000,
  });
  assert.throws(() => tally.tell(new AddPoints(1, "op-closed")), NoShardOwnerError, "routing fails closed");
  assert.equal(await seed.cluster.down(ownerAddress), true);
  await eventually(() => upCount(seed.cluster) === 2 && upCount(standby.cluster) === 2, {
    what: "the paused owner removed",
    timeoutMs: 20_000,
  });
  await eventually(
    async () => {
      try {
        const reply = await tally.ask(new GetTally(), TallyReply, 3_000);
        return reply.total === 5 && reply.epoch === 2;
      } catch {
        return false;
      }
    },
    { what: "recovery on the standby at epoch 2", timeoutMs: 20_000 },
  );
  assert.deepEqual(await tally.ask(new AddPoints(10, "op-2"), TallyReply, 5_000), new TallyReply(15, 2));

  child.kill("SIGCONT");
  child.stdin!.write("write op-stale\n");
  await eventually(() => lines.some((l) => l.kind === "write"), {
    what: "the resumed owner's write",
    timeoutMs: 20_000,
  });
  assert.deepEqual(
    lines.find((l) => l.kind === "write"),
    { kind: "write", ok: false, error: "StaleShardOwnerError" },
  );
  const client = await rawClient(pg.url, pg.schema);
  try {
    const journal = await client.query(
      "SELECT sequence_nr FROM event_journal WHERE persistence_id = 'Tally:t-1' ORDER BY sequence_nr",
    );
    assert.deepEqual(
      journal.rows.map((r) => Number(r.sequence_nr)),
      [1, 2],
      "op-1 and op-2 only",
    );
  } finally {
    await client.end();
  }
  assert.deepEqual(await tally.ask(new GetTally(), TallyReply, 5_000), new TallyReply(15, 2));
});
