// Child process of the kill -9 projection test: runs the exactly-once "counts" projection against the given schema
// until it is killed. Each handler statement sleeps a little, so a batch is in flight most of the time.
import { RealScheduler } from "../../src/actor/index.ts";
import { ProjectionRunner } from "../../src/persistence/index.ts";
import { PostgresStore } from "../../src/persistence/postgres/index.ts";

const [url, schema] = process.argv.slice(2);
const store = await PostgresStore.connect({ connectionUri: url!, schema: schema!, poolSize: 2 });
ProjectionRunner.start(
  {
    name: "counts",
    mode: "exactly-once",
    batchSize: 50,
    pollIntervalMs: 50,
    handler: async (event, tx) => {
      await tx.query(
        `INSERT INTO counts AS c (id, events, last_seq) VALUES ($1, 1, $2)
          ON CONFLICT (id) DO UPDATE SET events = c.events + 1, last_seq = EXCLUDED.last_seq`,
        [event.persistenceId, event.sequenceNr],
      );
      await tx.query("SELECT pg_sleep(0.002)");
    },
  },
  store,
  new RealScheduler(),
);
process.stdout.write("started\n");
