// Coordinated shutdown with real processes: SIGTERM to a node of a three-node cluster (the opt-in handler) makes it
// leave, hand its shards off (persistent leases released, not left to expire), be removed, and exit 0 — all well
// within the 15 s lease duration, which is what proves the leases were released rather than expired.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import pg from "pg";
import { ActorSystem, silentLogger } from "../../src/actor/index.ts";
import "../../src/cluster/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { postgresTestUrl, uniqueSchema } from "../persistence/pg-fixture.ts";
import { type OpsNode, startOpsCluster, stopOpsCluster } from "./fixtures/ops-cluster.ts";

const leaseDurationMs = 15_000;
let nodes: OpsNode[] = [];
let client: pg.Client;
const schema = uniqueSchema("graceful_shutdown");

async function getJson(url: string): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(url);
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

interface LeaseRow {
  shard_id: string;
  owner: string;
  epoch: string;
  live: boolean;
}
async function leaseRows(): Promise<LeaseRow[]> {
  const result = await client.query<LeaseRow>(
    `SELECT shard_id, owner, epoch, lease_until_epoch_ms > ${schema}.movie_now_ms() AS live
       FROM ${schema}.shard_lease WHERE entity_type = 'Ledger' ORDER BY shard_id`,
  );
  return result.rows;
}

before(async () => {
  const url = await postgresTestUrl();
  client = new pg.Client({ connectionString: url });
  await client.connect();
  nodes = await startOpsCluster(3, { MOVIE_OPS_PG_URL: url, MOVIE_OPS_PG_SCHEMA: schema, MOVIE_OPS_SIGTERM: "1" });
  let seen: unknown[] = [];
  await eventually(
    async () => {
      const answers = await Promise.all(nodes.map((n) => getJson(`${n.ready.url}health/ready`)));
      seen = answers.map((a) => a.body);
      return answers.every((r) => r.status === 200);
    },
    // Under the full suite (three files at once on two shared cores) three fresh processes need more than 30 s.
    { what: "every node ready", timeoutMs: 90_000, intervalMs: 200, describe: () => seen },
  );
});
after(async () => {
  await stopOpsCluster(nodes);
  await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await client.end();
});

let transfers: { old: LeaseRow; row: LeaseRow }[] = [];

test("SIGTERM: the node leaves, its shards and leases move at once, it is removed and exits 0", async (t) => {
  const activated = await nodes[0]!.process.request<{ activated: number }>({
    type: "activate",
    entityType: "Ledger",
    count: 24,
  });
  assert.equal(activated.activated, 24);
  const victim = nodes[2]!;
  let before: LeaseRow[] = [];
  await eventually(
    async () => {
      before = await leaseRows();
      // The third node gets its shards from a rebalance after it joins: wait for it too, or SIGTERM finds it idle.
      return before.length === 8 && before.every((r) => r.live) && before.some((r) => r.owner === victim.ready.address);
    },
    { what: "all 8 Ledger leases held, some by the victim", describe: () => before, intervalMs: 50 },
  );
  let held = before.filter((r) => r.owner === victim.ready.address);
  assert.ok(held.length > 0, `the victim holds leases: ${JSON.stringify(before)}`);

  // GET /persistence/leases on the victim lists the leases it keeps, as the lease table has them. Both are read again
  // on every try: the rebalance that gave the victim its shards may still move one, and a snapshot of the table taken
  // once named a lease the victim had already handed on (seen in a full run: the table's shard 7 never listed).
  let listed: unknown = null;
  await eventually(
    async () => {
      held = (await leaseRows()).filter((r) => r.owner === victim.ready.address && r.live);
      if (held.length === 0) return false;
      const view = (await getJson(`${victim.ready.url}persistence/leases`)).body as {
        owner: string;
        types: { type: string; leases: { shardId: number; phase: string; epoch: number | null }[] }[];
      };
      listed = view;
      const ledger = view.types.find((x) => x.type === "Ledger");
      return (
        view.owner === victim.ready.address &&
        view.types.every((x) => x.type === "Ledger") &&
        ledger !== undefined &&
        held.every((row) =>
          ledger.leases.some(
            (l) => l.shardId === Number(row.shard_id) && l.phase === "held" && l.epoch === Number(row.epoch),
          ),
        )
      );
    },
    { what: "the victim's leases listed with their epochs", describe: () => ({ listed, held }), intervalMs: 100 },
  );

  const started = Date.now();
  victim.process.process.kill("SIGTERM");
  await victim.process.whenExited();
  const exitedMs = Date.now() - started;
  assert.equal(victim.process.process.exitCode, 0, "exit 0: removed before the deadline");

  const survivor = nodes[0]!;
  // The victim exits once it learns of its removal, which any member that removed it may tell it (docs/protocol.md
  // §14.9): the survivor asked here may take another gossip round to remove it too.
  let members: { address: string; status: string }[] = [];
  await eventually(
    async () => {
      members = ((await getJson(`${survivor.ready.url}cluster/members`)).body as { members: typeof members }).members;
      return !members.some((m) => m.address === victim.ready.address);
    },
    { what: "the victim removed from the survivor's view", describe: () => members, intervalMs: 50, timeoutMs: 5_000 },
  );
  // Every lease the victim held was released on the way out: none is live under its name.
  const afterExit = await leaseRows();
  assert.deepEqual(
    afterExit.filter((r) => r.owner === victim.ready.address && r.live),
    [],
  );

  // The survivors take the victim's shards at once (an expired-only lease would hold them for 15 s).
  const again = await survivor.process.request<{ activated: number }>({
    type: "activate",
    entityType: "Ledger",
    count: 24,
  });
  assert.equal(again.activated, 24);
  let now: LeaseRow[] = [];
  await eventually(
    async () => {
      now = await leaseRows();
      return now.every((r) => r.live && r.owner !== victim.ready.address);
    },
    { what: "the victim's shards leased by survivors", describe: () => now, intervalMs: 50 },
  );
  const movedMs = Date.now() - started;
  transfers = held.map((old) => ({ old, row: now.find((r) => r.shard_id === old.shard_id)! }));
  t.diagnostic(`victim held ${held.length} leases; exited after ${exitedMs} ms; shards re-leased after ${movedMs} ms`);
  assert.ok(
    movedMs < leaseDurationMs,
    `shutdown ${exitedMs} ms, shards re-leased after ${movedMs} ms (< ${leaseDurationMs})`,
  );
});

// One transfer per shard: the epoch grows by exactly one. Two prepares granted together once cost a shard two
// epochs here (the first handoff's plan released the second's fresh lease; test/sharding/rules/prepare-retain-rules).
test("SIGTERM: each of the leaving node's shards changes owner exactly once (epoch + 1)", () => {
  assert.ok(transfers.length > 0, "the SIGTERM test recorded the victim's shards");
  for (const { old, row } of transfers) {
    assert.equal(Number(row.epoch), Number(old.epoch) + 1, `shard ${old.shard_id}: one ownership transfer`);
  }
});

test("system.shutdown() without a cluster terminates at once and reports that it did not leave; repeat calls share it", async () => {
  const system = ActorSystem.create("alone", { logger: silentLogger });
  const first = system.shutdown();
  assert.equal(system.shutdown(), first);
  const report = await first;
  assert.deepEqual([report.left, report.removed, report.reason], [false, false, "shutdown"]);
  assert.equal(system.isTerminated, true);
});

test("system.shutdown() of the last member terminates without waiting out the deadline", async () => {
  const system = ActorSystem.create("last", { logger: silentLogger });
  const remoting = await system.enableRemoting({ host: "127.0.0.1", port: 0 });
  const cluster = await system.enableCluster({ seedNodes: [remoting.selfAddress.address.hostPort] });
  await cluster.awaitUp();
  const report = await system.shutdown({ deadline: 20_000 });
  assert.deepEqual([report.left, report.removed], [false, false]);
  assert.ok(report.elapsedMs < 5_000, `${report.elapsedMs} ms`);
});
