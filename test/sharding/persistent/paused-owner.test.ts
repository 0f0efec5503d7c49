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
type Pg = Awaited<ReturnType<typeof freshPostgresStore>>;
const cleanups: (() => Promise<void>)[] = [];
after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

async function startNode(pg: Pg, systems: ActorSystem[], seedPort: number | null, roles: string[]) {
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

/** A seed node (no owner role), the owner in its own process, then a standby owner; the shard is on the process. */
async function ownerScenario(label: string) {
  const pg = await freshPostgresStore(label);
  const systems: ActorSystem[] = [];
  const lines: Line[] = [];
  const seed = await startNode(pg, systems, null, []);
  const child: ChildProcess = spawn(process.execPath, ["--import", "tsx", script, String(seed.port)], {
    stdio: ["pipe", "pipe", "inherit"],
    env: { ...process.env, MOVIE_TEST_SECRET: secret, MOVIE_PG_URL: pg.url, MOVIE_PG_SCHEMA: pg.schema },
  });
  cleanups.push(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGCONT");
      child.kill("SIGKILL");
    }
    await Promise.all(systems.map((x) => x.terminate()));
    await pg.dispose();
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
  const standby = await startNode(pg, systems, seed.port, ["owner"]);
  await eventually(() => upCount(seed.cluster) === 3 && upCount(standby.cluster) === 3, {
    what: "3 Up",
    timeoutMs: 20_000,
  });
  // A new coordinator may be elected by the join; once the plan is known again, NoRebalance has kept it in place.
  await eventually(() => seed.sharding.ownerFor("Tally", "t-1") !== null, { what: "the plan after the join" });
  assert.equal(seed.sharding.ownerFor("Tally", "t-1")?.toString(), ownerAddress, "NoRebalance keeps it in place");
  return { pg, lines, seed, standby, child, ownerAddress, tally };
}

/** After the owner stopped answering: fail closed, down it, and see the standby recover the entity at epoch 2. */
async function downAndRecover(s: Awaited<ReturnType<typeof ownerScenario>>) {
  const { seed, standby, ownerAddress, tally } = s;
  const sees = (c: Cluster) => c.snapshot().unreachable.some((u) => u.toString() === ownerAddress);
  await eventually(() => sees(seed.cluster) && sees(standby.cluster), {
    what: "the owner unreachable on both survivors (so the leader is one of them)",
    timeoutMs: 20_000,
  });
  assert.throws(() => tally.tell(new AddPoints(1, "op-closed")), NoShardOwnerError, "routing fails closed");
  // The operator downs it through a survivor (forwarded to the leader), repeating until membership shows it gone.
  const gone = (c: Cluster) =>
    !c.snapshot().members.some((m) => m.uniqueAddress.toString() === ownerAddress && m.status !== "Down");
  await eventually(
    async () => {
      if (gone(seed.cluster)) return true;
      await seed.cluster.down(ownerAddress);
      return gone(seed.cluster);
    },
    { what: "the down to take effect", timeoutMs: 20_000 },
  );
  await eventually(() => upCount(seed.cluster) === 2 && upCount(standby.cluster) === 2, {
    what: "the owner removed",
    timeoutMs: 20_000,
    describe: () =>
      [seed.cluster, standby.cluster].map((c) => {
        const v = c.snapshot();
        return {
          converged: v.converged,
          unreachable: v.unreachable.map(String),
          members: v.members.map((m) => `${m.uniqueAddress.address.port}:${m.status}`),
        };
      }),
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
}

async function journalOf(pg: Pg): Promise<number[]> {
  const client = await rawClient(pg.url, pg.schema);
  try {
    const journal = await client.query(
      "SELECT sequence_nr FROM event_journal WHERE persistence_id = 'Tally:t-1' ORDER BY sequence_nr",
    );
    return journal.rows.map((r) => Number(r.sequence_nr));
  } finally {
    await client.end();
  }
}

test("a paused owner that resumes after its replacement commits nothing", async () => {
  const s = await ownerScenario("paused_owner");
  s.child.kill("SIGSTOP");
  await downAndRecover(s);
  s.child.kill("SIGCONT");
  s.child.stdin!.write("write op-stale\n");
  await eventually(() => s.lines.some((l) => l.kind === "write"), {
    what: "the resumed owner's write",
    timeoutMs: 20_000,
  });
  assert.deepEqual(
    s.lines.find((l) => l.kind === "write"),
    { kind: "write", ok: false, error: "StaleShardOwnerError" },
  );
  assert.deepEqual(await journalOf(s.pg), [1, 2], "op-1 and op-2 only");
  assert.deepEqual(await s.tally.ask(new GetTally(), TallyReply, 5_000), new TallyReply(15, 2));
});

test("a killed owner: fail closed while unreachable, then after down and lease expiry the entity recovers", async () => {
  const s = await ownerScenario("killed_owner");
  s.child.kill("SIGKILL");
  await downAndRecover(s);
  assert.deepEqual(await journalOf(s.pg), [1, 2]);
});
