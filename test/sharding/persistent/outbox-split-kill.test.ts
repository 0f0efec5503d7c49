// The outbox end to end with the sender and the receiver on separate nodes, each its own OS process, killed one after
// the other with SIGKILL (real remoting, the real PostgreSQL). Orders (the senders, durable state) live on one process,
// which also runs a dispatcher; the stock entities (the receivers, event-sourced) on another; orders are placed without
// pause from the seed node. First the receiver's process dies while deliveries to it are in flight, some of them
// committed there but not yet acknowledged; then the sender's process dies while its dispatcher holds claimed rows
// whose reservations already committed. A standby node takes the shards of each at the next epoch and its dispatcher
// delivers the rest. Afterwards every placed order has exactly one reservation and nothing is parked.
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { ActorSystem, type Logger, silentLogger } from "../../../src/actor/index.ts";
import type { Cluster } from "../../../src/cluster/index.ts";
import { Database, deliverThroughSharding, OutboxDispatcher } from "../../../src/persistence/index.ts";
import { ClusterSharding } from "../../../src/sharding/index.ts";
import { CapturingLogger } from "../../actor/support.ts";
import { eventually } from "../../fixtures/eventually.ts";
import { freshPostgresStore, rawClient } from "../../persistence/pg-fixture.ts";
import { upCount } from "../fixtures/tcp-nodes.ts";
import {
  assertOneReservationPerOrder,
  leaseRowsOf,
  outboxSplitSettings,
  placeOrdersContinuously,
  Reserved,
  registerOutboxOrderEntities,
  shardOutboxOrders,
  splitDispatcherSettings,
} from "./fixtures/outbox-orders.ts";
import { faultCluster } from "./fixtures/tally.ts";

const secret = "outbox-split-kill-secret";
const script = fileURLToPath(new URL("./fixtures/outbox-node-process.ts", import.meta.url));
const pg = await freshPostgresStore("outbox_split_kill");
const systems: ActorSystem[] = [];
const dispatchers: OutboxDispatcher[] = [];
const children: ChildProcess[] = [];
after(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  for (const d of dispatchers) await d.stop();
  await Promise.all(systems.map((s) => s.terminate()));
  await pg.dispose();
});

async function startNode(seedPort: number | null, roles: string[], logger: Logger = silentLogger) {
  const system = ActorSystem.create("movie", { logger });
  systems.push(system);
  const remoting = await system.enableRemoting({ host: "127.0.0.1", port: 0, secret });
  const port = remoting.selfAddress.address.port!;
  const cluster = await system.enableCluster({ ...faultCluster, seedNodes: [`127.0.0.1:${seedPort ?? port}`], roles });
  await Database.get(system).use(pg.store);
  const sharding = ClusterSharding.get(system);
  const settings = outboxSplitSettings();
  shardOutboxOrders(sharding, registerOutboxOrderEntities(system), settings.orders, settings.stock);
  return { system, cluster, sharding, port };
}

/** A node in its own process with `role`; resolves with its address once it is ready. */
function spawnNode(seedPort: number, role: "sender" | "receiver", dispatcher: boolean) {
  const child = spawn(
    process.execPath,
    ["--import", "tsx", script, String(seedPort), role, dispatcher ? "dispatcher" : "none"],
    {
      stdio: ["ignore", "pipe", "inherit"],
      env: { ...process.env, MOVIE_TEST_SECRET: secret, MOVIE_PG_URL: pg.url, MOVIE_PG_SCHEMA: pg.schema },
    },
  );
  children.push(child);
  const ready = new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const parsed = JSON.parse(line) as { kind: string; address: string };
      if (parsed.kind === "ready") resolve(parsed.address);
    });
    child.once("exit", (code, signal) => reject(new Error(`the ${role} process exited (${code ?? signal})`)));
  });
  return { child, ready };
}

async function kill(child: ChildProcess): Promise<void> {
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill("SIGKILL");
  await exited;
}

async function sql(text: string, params: unknown[] = []): Promise<Record<string, unknown>[]> {
  const raw = await rawClient(pg.url, pg.schema);
  try {
    return (await raw.query(text, params)).rows;
  } finally {
    await raw.end();
  }
}

const leaseRows = () => leaseRowsOf(pg);

/**
 * Outbox rows to Stock that a dispatcher has claimed (`claimedBy`, or any) and not completed although the reservation
 * committed: the receiver's journal holds the message id as an operation id. A redelivery of one is a duplicate.
 */
const committedUnacknowledged = (claimedBy: string | null) =>
  sql(
    `SELECT o.outbox_offset, o.message_id FROM persistence_outbox o
      WHERE NOT o.delivered AND o.lease_owner IS NOT NULL AND ($1::text IS NULL OR o.lease_owner = $1)
        AND o.destination::json->>'entityType' = 'Stock'
        AND EXISTS (SELECT 1 FROM event_journal j WHERE j.persistence_id = 'Stock:' || (o.destination::json->>'entityId')
          AND j.operation_id = o.message_id)`,
    [claimedBy],
  );

const reservations = async () =>
  Number((await sql("SELECT count(*) AS n FROM event_journal WHERE persistence_id LIKE 'Stock:%'"))[0]!.n);

/**
 * Freezes `child` (SIGSTOP) and keeps it frozen when `ready()` holds of the database then; otherwise lets it run on
 * (SIGCONT) and answers false, for `eventually` to try again. A frozen process changes nothing, so what `ready` saw is
 * what the SIGKILL that follows interrupts.
 */
async function frozenWhen(child: ChildProcess, ready: () => Promise<boolean>): Promise<boolean> {
  child.kill("SIGSTOP");
  if (await ready()) return true;
  child.kill("SIGCONT");
  return false;
}

test("sender and receiver on separate processes, each killed with SIGKILL: every placed order reserved exactly once", async (t) => {
  const seed = await startNode(null, []);
  const sender = spawnNode(seed.port, "sender", true);
  const receiver = spawnNode(seed.port, "receiver", false);
  const [senderAddress, receiverAddress] = await Promise.all([sender.ready, receiver.ready]);
  await eventually(() => upCount(seed.cluster) === 3, { what: "3 Up", timeoutMs: 20_000 });

  const orders = placeOrdersContinuously(seed.sharding);
  const placed = orders.placed;
  const shardsOn = (leases: Map<string, { owner: string }>, type: string, address: string) =>
    [...leases].filter(([k, l]) => k.startsWith(`${type}/`) && l.owner === address).map(([k]) => k);
  const downed = async (address: string) => {
    const gone = (c: Cluster) =>
      !c.snapshot().members.some((m) => m.uniqueAddress.toString() === address && m.status !== "Down");
    await eventually(
      async () => {
        if (!gone(seed.cluster)) seed.cluster.down(address);
        return gone(seed.cluster);
      },
      { what: `the down of ${address} to take effect`, timeoutMs: 20_000 },
    );
  };
  try {
    let leases = await leaseRows();
    await eventually(
      async () => {
        leases = await leaseRows();
        return (
          shardsOn(leases, "Order", senderAddress).length > 0 &&
          shardsOn(leases, "Stock", receiverAddress).length > 0 &&
          (await reservations()) >= 10
        );
      },
      { what: "Order shards on the sender, Stock shards on the receiver, reservations made", timeoutMs: 30_000 },
    );
    // The standby joins while both are alive (NoRebalance keeps their shards where they are) and dispatches too.
    const standbyLog = new CapturingLogger();
    const standby = await startNode(seed.port, ["sender", "receiver"], standbyLog);
    const standbyAddress = standby.cluster.selfAddress.toString();
    await eventually(() => upCount(seed.cluster) === 4 && upCount(standby.cluster) === 4, {
      what: "4 Up",
      timeoutMs: 20_000,
    });
    const dispatcher = new OutboxDispatcher({
      store: pg.store,
      codec: Database.get(standby.system).codec,
      deliverToEntity: deliverThroughSharding(standby.sharding, Reserved, 2_500),
      handlers: { audit: async () => {} },
      owner: "dispatcher-standby",
      leases: () => standby.sharding.heldShardLeases(),
      ...splitDispatcherSettings,
    });
    dispatchers.push(dispatcher);
    dispatcher.start();

    // 1. The receiver dies with deliveries in flight: reservations it committed whose rows no dispatcher completed.
    let inFlight: Record<string, unknown>[] = [];
    await eventually(
      () =>
        frozenWhen(receiver.child, async () => {
          inFlight = await committedUnacknowledged(null);
          return inFlight.length > 0;
        }),
      { what: "a reservation committed on the receiver but not acknowledged", timeoutMs: 30_000, intervalMs: 2 },
    );
    const atReceiverKill = await leaseRows();
    const receiverShards = shardsOn(atReceiverKill, "Stock", receiverAddress);
    await kill(receiver.child);
    await downed(receiverAddress);
    const afterReceiver = placed.size;
    await eventually(
      async () => {
        leases = await leaseRows();
        return (
          receiverShards.every((k) => leases.get(k)?.owner === standbyAddress) && placed.size >= afterReceiver + 15
        );
      },
      {
        what: "the receiver's Stock shards on the standby, and orders placed since",
        timeoutMs: 30_000,
        describe: () => ({ leases: [...leases], placed: placed.size, afterReceiver }),
      },
    );

    // 2. The sender dies with its dispatcher holding claimed rows whose reservations committed (on the standby now).
    const senderDispatcher = `dispatcher-${senderAddress}`;
    let claimed: Record<string, unknown>[] = [];
    await eventually(
      () =>
        frozenWhen(sender.child, async () => {
          claimed = await committedUnacknowledged(senderDispatcher);
          return claimed.length > 0;
        }),
      {
        what: "rows claimed by the sender's dispatcher whose reservations committed",
        timeoutMs: 30_000,
        intervalMs: 2,
      },
    );
    const atSenderKill = await leaseRows();
    const senderShards = shardsOn(atSenderKill, "Order", senderAddress);
    await kill(sender.child);
    await downed(senderAddress);
    const afterSender = placed.size;
    await eventually(() => placed.size >= afterSender + 15, {
      what: "orders placed again, on the standby",
      timeoutMs: 30_000,
      describe: () => [afterSender, placed.size],
    });
    await orders.stop();
    let undelivered: Record<string, unknown>[] = [];
    await eventually(
      async () => {
        undelivered = await sql(
          `SELECT destination, attempts, lease_owner, last_error FROM persistence_outbox WHERE NOT delivered
            ORDER BY outbox_offset LIMIT 3`,
        );
        return undelivered.length === 0;
      },
      {
        what: "every message delivered",
        timeoutMs: 30_000,
        describe: () => ({
          dispatcher: dispatcher.stats,
          undelivered,
          stock: standby.sharding.inspect("Stock"),
          allocations: [...standby.sharding.allocations("Stock")].map(([k, a]) => `${k}: ${a}`),
          standby: standbyAddress,
          log: (() => {
            const counts = new Map<string, number>();
            for (const r of standbyLog.records) {
              if (r.level === "debug") continue;
              const c = r.context as { type?: string; shard?: number; error?: string };
              const key = `${r.level} ${r.message} ${c.type ?? ""}/${c.shard ?? ""} ${String(c.error ?? "").slice(0, 100)}`;
              counts.set(key, (counts.get(key) ?? 0) + 1);
            }
            return [...counts];
          })(),
        }),
      },
    );

    // Every shard the killed processes owned is now the standby's, at a later epoch.
    const now = await leaseRows();
    for (const [key, was] of [
      ...receiverShards.map((k) => [k, atReceiverKill.get(k)!] as const),
      ...senderShards.map((k) => [k, atSenderKill.get(k)!] as const),
    ]) {
      assert.equal(now.get(key)?.owner, standbyAddress, `${key} on the standby`);
      assert.ok(now.get(key)!.epoch > was.epoch, `${key}: epoch ${was.epoch} then ${now.get(key)!.epoch}`);
    }
    // The deliveries interrupted by the kills completed; the dead dispatcher's claimed rows were made again by
    // another (a frozen, then killed, process completes nothing), and their receivers took them as duplicates.
    const rows = async (list: Record<string, unknown>[]) =>
      sql("SELECT outbox_offset, delivered, attempts FROM persistence_outbox WHERE outbox_offset = ANY($1::bigint[])", [
        list.map((r) => Number(r.outbox_offset)),
      ]);
    for (const r of await rows(inFlight)) assert.equal(r.delivered, true, `row ${r.outbox_offset}`);
    const redone = await rows(claimed);
    assert.equal(redone.length, claimed.length);
    for (const r of redone) {
      assert.ok(r.delivered === true && Number(r.attempts) >= 2, `row ${r.outbox_offset}: ${JSON.stringify(r)}`);
    }
    t.diagnostic(
      `placed ${placed.size}; committed, unacknowledged at the receiver's kill ${inFlight.length}; claimed by the ` +
        `sender's dispatcher with the reservation committed at its kill ${claimed.length}`,
    );
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
