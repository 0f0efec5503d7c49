// Child process of the SQLite kill -9 projection test: runs the exactly-once "counts" projection (one upsert per
// event, the same read model as projection-counts.ts in SQLite's dialect) on the given SQLite file until it is killed.
// With a gate argument "<persistenceId>:<sequenceNr>", the handler writes that event's row, prints "held" and never
// returns: the batch's transaction stays open, its writes uncommitted, until the test kills the process.
import { RealScheduler } from "../../src/actor/index.ts";
import { ProjectionRunner } from "../../src/persistence/index.ts";
import { SqliteStore } from "../../src/persistence/sqlite/index.ts";
import { countsProjection } from "../sharding/persistent/fixtures/projection-counts.ts";

const [dbPath, gate = ""] = process.argv.slice(2);
const store = SqliteStore.open({ dbPath: dbPath! });
ProjectionRunner.start(
  {
    ...countsProjection,
    handler: async (event, tx) => {
      await tx.query(
        `INSERT INTO counts (id, events, last_seq) VALUES (?, 1, ?)
          ON CONFLICT (id) DO UPDATE SET events = counts.events + 1, last_seq = excluded.last_seq`,
        [event.persistenceId, event.sequenceNr],
      );
      if (`${event.persistenceId}:${event.sequenceNr}` === gate) {
        process.stdout.write("held\n");
        await new Promise<never>(() => {});
      }
    },
  },
  store,
  new RealScheduler(),
);
process.stdout.write("started\n");
