// One cluster node that runs a sharded exactly-once projection (2 slices) and an outbox dispatcher with the management
// endpoint: what docs/operations.md "Projections" and "Outbox" operate with curl and the movie command.
// Usage: MOVIE_MANAGEMENT_TOKEN=… node --import tsx examples/projection-node.ts <remotingPort> <managementPort>
// It uses the PostgreSQL of `npm start` (MOVIE_POSTGRES_URL, else the local server, else a throwaway one), in a schema
// of its own, appends 40 Order events, each with a message to the handler "invoice" (delivered) and every tenth also
// one to "warehouse", whose API is down (parked after three attempts), and runs until SIGTERM or SIGINT.
import { randomBytes } from "node:crypto";
import "../src/cluster/index.ts";
import { ActorSystem, ConsoleLogger } from "../src/index.ts";
import { startManagement } from "../src/management/index.ts";
import {
  Database,
  type ExactlyOnceProjection,
  JSON_MANIFEST,
  OperationId,
  OutboxDispatcher,
  type OutboxRecord,
  outboxMessageId,
} from "../src/persistence/index.ts";
import { PostgresStore } from "../src/persistence/postgres/index.ts";
import { ClusterSharding } from "../src/sharding/index.ts";
import "../src/sharding/persistent/index.ts";
import { chooseDemoPostgres } from "./support/postgres.ts";

const orderLines: ExactlyOnceProjection = {
  name: "order-lines",
  mode: "exactly-once",
  source: { entityTypes: ["Order"] },
  handler: async (event, tx) => {
    await tx.query("INSERT INTO order_lines (event_offset, persistence_id) VALUES ($1, $2)", [
      event.offset,
      event.persistenceId,
    ]);
  },
  reset: async (tx, rebuild) => {
    const rows = await tx.query("SELECT DISTINCT persistence_id FROM order_lines WHERE event_offset > $1", [
      rebuild.fromOffset,
    ]);
    const mine = rows.map((r) => String(r.persistence_id)).filter((id) => rebuild.owns(id));
    await tx.query("DELETE FROM order_lines WHERE event_offset > $1 AND persistence_id = ANY($2::text[])", [
      rebuild.fromOffset,
      mine,
    ]);
  },
};

const [remotingPort = "2551", managementPort = "8558"] = process.argv.slice(2);
const database = await chooseDemoPostgres();
const schema = `projection_node_${randomBytes(4).toString("hex")}`;
const store = await PostgresStore.connect({ connectionUri: database.url, schema });
const system = ActorSystem.create("shop", { logger: new ConsoleLogger("warn") });
const remoting = await system.enableRemoting({ host: "127.0.0.1", port: Number(remotingPort) });
await system.enableCluster({ seedNodes: [remoting.selfAddress.address.hostPort] });
await Database.get(system).use(store);
await store.pool.query("CREATE TABLE order_lines (event_offset BIGINT PRIMARY KEY, persistence_id TEXT NOT NULL)");
for (let i = 0; i < 40; i++) {
  const id = `Order:${i % 8}`;
  const operationId = OperationId.random().toString();
  const message = (handler: string, k: number): OutboxRecord => ({
    messageId: outboxMessageId(id, operationId, k),
    destination: { kind: "handler", handler },
    manifest: JSON_MANIFEST,
    payload: JSON.stringify({ line: i }),
  });
  await store.appendEvents({
    persistenceId: id,
    expectedRevision: await store.loadRevision(id),
    operationId,
    events: [{ manifest: "shop.LineAdded", payload: JSON.stringify({ line: i }) }],
    outbox: i % 10 === 9 ? [message("invoice", 0), message("warehouse", 1)] : [message("invoice", 0)],
  });
}
const dispatcher = new OutboxDispatcher({
  store,
  codec: Database.get(system).codec,
  handlers: {
    invoice: async () => {},
    warehouse: async () => {
      throw new Error("warehouse API answered 503");
    },
  },
  retry: { maxAttempts: 3, firstBackoffMs: 100 },
});
dispatcher.start();
ClusterSharding.get(system).initProjection(orderLines, { slices: 2 });
const token = process.env.MOVIE_MANAGEMENT_TOKEN;
const management = await startManagement(system, {
  port: Number(managementPort),
  ...(token === undefined ? {} : { token }),
});
// One node, nothing to hand off: stop, then drop the schema this run made.
const stop = async () => {
  await dispatcher.stop();
  await system.terminate();
  await store.pool.query(`DROP SCHEMA ${schema} CASCADE`).catch(() => {});
  await store.close();
  await database.stop();
  process.exit(0);
};
process.once("SIGTERM", () => void stop());
process.once("SIGINT", () => void stop());
console.log(`node ${remoting.selfAddress}: management ${management.url}, schema ${schema}`);
