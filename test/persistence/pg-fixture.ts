// Finds the PostgreSQL server for tests and gives each test run its own schema (dropped afterwards).
import { randomBytes } from "node:crypto";
import pg from "pg";
import { PostgresStore, type PostgresStoreOptions } from "../../src/persistence/postgres/index.ts";

const defaultUrl = "postgres://postgres@127.0.0.1:5432/test";

/** The test server URL: MOVIE_POSTGRES_TEST_URL, else the local server; fails loudly when unreachable. */
export async function postgresTestUrl(): Promise<string> {
  const url = process.env.MOVIE_POSTGRES_TEST_URL ?? defaultUrl;
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  try {
    await client.connect();
    await client.query("SELECT 1");
  } catch (error) {
    throw new Error(
      `PostgreSQL tests need a server: set MOVIE_POSTGRES_TEST_URL=postgres://user@host:port/db or run one on ${defaultUrl} (${(error as Error).message})`,
    );
  } finally {
    await client.end().catch(() => {});
  }
  return url;
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
