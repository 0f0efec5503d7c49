// The outbox end to end under kill -9 of the node that owns the senders (Order), the receivers (Stock) and runs a
// dispatcher, with real processes, real remoting and the real PostgreSQL: orders are placed without pause from the
// seed node; the owner process is killed mid-flow (orders committed whose messages are pending, reservations
// committed whose deliveries were never marked), downed, and a standby owner takes every shard at the next epoch
// while its own dispatcher delivers what remains, including the rows the dead dispatcher had claimed. Afterwards
// every placed order has exactly one reservation in the stock journal and nothing is parked.
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { ActorSystem, silentLogger } from "../../../src/actor/index.ts";
import type { Cluster } from "../../../src/cluster/index.ts";
import { Database, deliverThroughSharding, OutboxDispatcher } from "../../../src/persistence/index.ts";
import { ClusterSharding } from "../../../src/sharding/index.ts";
import { eventually } from "../../fixtures/eventually.ts";
import { freshPostgresStore, rawClient } from "../../persistence/pg-fixture.ts";
import { upCount } from "../fixtures/tcp-nodes.ts";
import {
  assertOneReservationPerOrder,
  leaseRowsOf,
  outboxKillSettings,
  placeOrdersContinuously,
  Reserved,
  registerOutboxOrderEntities,
  shardOutboxOrders,
} from "./fixtures/outbox-orders.ts";
import { faultCluster } from "./fixtures/tally.ts";

const secret = "outbox-kill-secret";
const script = fileURLToPath(new URL("./fixtures/outbox-node-process.ts", import.meta.url));
const pg = await freshPostgresStore("outbox_node_kill");
const systems: ActorSystem[] = [];
const dispatchers: OutboxDispatcher[] = [];
let child: ChildProcess | null = null;
after(async () => {
  if (child !== null && child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  for (const d of dispatchers) await d.stop();
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
  const sharding = ClusterSharding.get(system);
  shardOutboxOrders(sharding, registerOutboxOrderEntities(system), outboxKillSettings());
  return { system, cluster, sharding, port };
}

const count = async (sql: string): Promise<number> => {
  const raw = await rawClient(pg.url, pg.schema);
  try {
    return Number((await raw.query(sql)).rows[0].n);
  } finally {
    await raw.end();
  }
};

const leaseRows = () => leaseRowsOf(pg);

test("kill -9 of the node owning senders, receivers and a dispatcher: every placed order reserved exactly once", async () => {
  const seed = await startNode(null, []);
  const lines: { kind: string; address?: string }[] = [];
  const owner: ChildProcess = spawn(process.execPath, ["--import", "tsx", script, String(seed.port)], {
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, MOVIE_TEST_SECRET: secret, MOVIE_PG_URL: pg.url, MOVIE_PG_SCHEMA: pg.schema },
  });
  child = owner;
  createInterface({ input: owner.stdout! }).on("line", (line) => lines.push(JSON.parse(line)));
  await eventually(() => lines.some((l) => l.kind === "ready"), { what: "the owner process", timeoutMs: 20_000 });
  const ownerAddress = lines.find((l) => l.kind === "ready")!.address!;
  await eventually(() => upCount(seed.cluster) === 2, { what: "2 Up", timeoutMs: 20_000 });

  const orders = placeOrdersContinuously(seed.sharding);
  const placed = orders.placed;
  try {
    // The standby joins while the owner is alive; NoRebalance keeps the shards on the owner process.
    const standby = await startNode(seed.port, ["owner"]);
    await eventually(() => upCount(seed.cluster) === 3 && upCount(standby.cluster) === 3, {
      what: "3 Up",
      timeoutMs: 20_000,
    });
    const dispatcher = new OutboxDispatcher({
      store: pg.store,
      codec: Database.get(standby.system).codec,
      deliverToEntity: deliverThroughSharding(standby.sharding, Reserved, 2_000),
      handlers: { audit: async () => {} },
      owner: "dispatcher-standby",
      leases: () => standby.sharding.heldShardLeases(),
      leaseMs: 1_500,
      pollIntervalMs: 20,
      retry: { maxAttempts: 1_000, firstBackoffMs: 50, maxBackoffMs: 200 },
    });
    dispatchers.push(dispatcher);
    dispatcher.start();

    // Kill it mid-flow: reservations have been made, and messages of committed orders are still pending.
    const reservations = () => count("SELECT count(*) AS n FROM event_journal WHERE persistence_id LIKE 'Stock:%'");
    const pending = async () => (await pg.store.outboxCounts()).pending;
    let seen = { reservations: 0, pending: 0, senders: 0, receivers: 0 };
    let onOwner = new Map<string, { owner: string; epoch: number }>();
    await eventually(
      async () => {
        onOwner = new Map([...(await leaseRows())].filter(([, l]) => l.owner === ownerAddress));
        const shardsOf = (type: string) => [...onOwner.keys()].filter((k) => k.startsWith(`${type}/`)).length;
        seen = {
          reservations: await reservations(),
          pending: await pending(),
          senders: shardsOf("Order"),
          receivers: shardsOf("Stock"),
        };
        return seen.reservations >= 20 && seen.pending > 0 && seen.senders > 0 && seen.receivers > 0;
      },
      {
        what: "reservations made, messages pending, Order and Stock shards on the owner process",
        timeoutMs: 30_000,
        intervalMs: 2,
        describe: () => seen,
      },
    );
    owner.kill("SIGKILL");
    await new Promise((resolve) => owner.once("exit", resolve));
    const atKill = placed.size;

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
    await eventually(() => placed.size >= atKill + 20, {
      what: "orders placed again, on the standby",
      timeoutMs: 30_000,
      describe: () => [atKill, placed.size],
    });
    await orders.stop();
    await eventually(async () => (await pending()) === 0, {
      what: "every message delivered",
      timeoutMs: 30_000,
      describe: () => dispatcher.stats,
    });

    // Every shard the killed process owned is now the standby's, at a later epoch.
    const now = await leaseRows();
    for (const [key, was] of onOwner) {
      assert.equal(now.get(key)?.owner, standby.cluster.selfAddress.toString(), `${key} on the standby`);
      assert.ok(now.get(key)!.epoch > was.epoch, `${key}: epoch ${was.epoch} then ${now.get(key)!.epoch}`);
    }
  } finally {
    await orders.stop();
  }
  assert.deepEqual(await pg.store.parkedOutbox(10), [], "nothing parked");
  assert.deepEqual(await pg.store.outboxCounts(), {
    pending: 0,
    claimed: 0,
    retrying: 0,
    parked: 0,
    delivered: 2 * placed.size,
    oldestPendingAgeMs: null,
  });
  await assertOneReservationPerOrder(pg, placed);
});
