// Child process for the "two processes migrating at once" test: connects (which migrates) and reports.
import { PostgresStore } from "../../src/persistence/postgres/index.ts";

const [url, schema] = process.argv.slice(2);
const store = await PostgresStore.connect({ connectionUri: url!, schema: schema!, poolSize: 1 });
await store.close();
process.stdout.write("migrated\n");
