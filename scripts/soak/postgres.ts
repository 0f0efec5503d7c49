// The soak's PostgreSQL, chosen as `npm start` chooses (examples/support/postgres.ts): MOVIE_POSTGRES_URL, else the
// local server on 127.0.0.1:5432, else a throwaway server. Only a throwaway server is ever restarted by a fault; the
// shared server is only ever cut off through the harness's own proxy.
import pg from "pg";
import { defaultLocalUrl, maskUrl } from "../../examples/support/postgres.ts";
import { type PrivatePostgres, startPrivatePostgres } from "../../test/fixtures/private-postgres.ts";

export interface SoakPostgres {
  readonly url: string;
  readonly description: string;
  /** The throwaway server the harness owns (restartable), or null for a shared one. */
  readonly owned: PrivatePostgres | null;
  stop(): Promise<void>;
}

async function answers(url: string): Promise<string | null> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1_000 });
  client.on("error", () => undefined);
  try {
    await client.connect();
    await client.query("SELECT 1");
    return null;
  } catch (error) {
    return error instanceof Error ? error.message : "unknown error";
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** `given` when set (a test's server), else MOVIE_POSTGRES_URL, else the local server, else a throwaway one. */
export async function chooseSoakPostgres(given?: string): Promise<SoakPostgres> {
  if (given !== undefined) return { url: given, description: maskUrl(given), owned: null, stop: async () => {} };
  const fromEnv = process.env.MOVIE_POSTGRES_URL?.trim();
  if (fromEnv !== undefined && fromEnv.length > 0) {
    return { url: fromEnv, description: `MOVIE_POSTGRES_URL (${maskUrl(fromEnv)})`, owned: null, stop: async () => {} };
  }
  const probe = process.env.MOVIE_DEMO_SKIP_LOCAL === "1" ? "skipped" : await answers(defaultLocalUrl);
  if (probe === null) {
    return {
      url: defaultLocalUrl,
      description: `local server (${defaultLocalUrl})`,
      owned: null,
      stop: async () => {},
    };
  }
  const server = await startPrivatePostgres();
  return {
    url: server.url,
    description: `throwaway server (${server.via}) on 127.0.0.1:${server.port} (local server: ${probe})`,
    owned: server,
    stop: () => server.stop(),
  };
}
