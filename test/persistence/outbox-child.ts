// Child process of the outbox kill -9 test: an OutboxDispatcher whose "reserve" handler applies each message to the
// receiver's stream (OperationId = outbox message id) and then acknowledges slowly, so that a kill lands between a
// receiver's commit and the row's completion.
import { OutboxDispatcher, PersistenceCodec } from "../../src/persistence/index.ts";
import { PostgresStore } from "../../src/persistence/postgres/index.ts";
import { reserveHandler } from "./outbox-receiver.ts";

const [url, schema] = process.argv.slice(2);
const store = await PostgresStore.connect({ connectionUri: url!, schema: schema!, poolSize: 4 });
new OutboxDispatcher({
  store,
  codec: new PersistenceCodec(),
  owner: "child",
  batchSize: 10,
  leaseMs: 1500,
  pollIntervalMs: 20,
  handlers: { reserve: reserveHandler(store, 100) },
}).start();
process.stdout.write("started\n");
