// Child process of the standalone kill -9 projection test: runs the exactly-once "counts" projection (no cluster, no
// fence) against the given schema until it is killed; its connections carry the given application name.
import { RealScheduler } from "../../src/actor/index.ts";
import { ProjectionRunner } from "../../src/persistence/index.ts";
import { PostgresStore } from "../../src/persistence/postgres/index.ts";
import { countsProjection } from "../sharding/persistent/fixtures/projection-counts.ts";

const [url, schema, applicationName] = process.argv.slice(2);
const store = await PostgresStore.connect({ connectionUri: url!, schema: schema!, poolSize: 2, applicationName });
ProjectionRunner.start(countsProjection, store, new RealScheduler());
process.stdout.write("started\n");
