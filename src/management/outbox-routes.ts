/**
 * The management endpoint's outbox view (docs/operations.md, "Outbox"): the outbox rows by state, the oldest pending
 * row's age and the oldest parked messages with their last error, read from the database the node's persistence uses
 * (PersistenceStore.outboxCounts and parkedOutbox: the figures are the whole database's, the same from every node).
 * The only query parameter, `limit`, is checked here: one, digits only, 0 to {@link parkedLimitMax}.
 */
import type { ActorSystem } from "../actor/index.ts";
import { errorText } from "../actor/untrusted.ts";
import { Database, type OutboxCounts, type ParkedOutboxRow } from "../persistence/index.ts";
import { ManagementRequestError } from "./errors.ts";

/** Parked messages listed when the request names no limit. */
export const parkedLimitDefault = 20;
/** The most parked messages one request lists. */
export const parkedLimitMax = 1_000;

/** `GET /outbox`. */
export interface OutboxView {
  readonly backend: string;
  readonly counts: OutboxCounts;
  /** The limit the list was read with. */
  readonly parkedLimit: number;
  /** The oldest parked messages (at most parkedLimit), with the error of their last attempt. */
  readonly parked: readonly ParkedOutboxRow[];
}

function refuse(status: number, code: string, message: string): never {
  throw new ManagementRequestError(status, code, message);
}

/**
 * The parked-list limit of `?limit=N`, the only parameter `GET /outbox` takes.
 * @throws ManagementRequestError 400 for any other parameter, a repeated limit, or one that is not 0..parkedLimitMax
 */
export function parkedLimitOf(query: URLSearchParams): number {
  for (const key of query.keys()) {
    if (key !== "limit") refuse(400, "UnknownParameter", "the only query parameter of /outbox is limit=<count>");
  }
  const limits = query.getAll("limit");
  if (limits.length === 0) return parkedLimitDefault;
  if (limits.length > 1) refuse(400, "InvalidLimit", "give limit at most once");
  const text = limits[0]!;
  const limit = /^(0|[1-9][0-9]{0,3})$/.test(text) ? Number(text) : -1;
  if (limit < 0 || limit > parkedLimitMax) {
    refuse(400, "InvalidLimit", `limit must be a whole number from 0 to ${parkedLimitMax}`);
  }
  return limit;
}

/** The Database extension when persistence is in use on `system`, else undefined (never creates it). */
function databaseOf(system: ActorSystem): Database | undefined {
  return system.hasExtension<Database>({ key: "movie.persistence.database", create: (s) => Database.get(s) });
}

/** The outbox counts, or null when persistence is not in use here or the store cannot answer now (for /metrics). */
export async function outboxCountsOrNull(system: ActorSystem): Promise<OutboxCounts | null> {
  const database = databaseOf(system);
  if (database === undefined) return null;
  try {
    return await database.store.outboxCounts();
  } catch {
    return null;
  }
}

/**
 * `GET /outbox[?limit=N]`.
 * @throws ManagementRequestError 409 when persistence is not in use on this node, 503 when the store fails
 */
export async function outboxView(system: ActorSystem, limit: number): Promise<OutboxView> {
  const database = databaseOf(system);
  if (database === undefined) {
    return refuse(409, "PersistenceNotEnabled", "persistence is not in use on this node, so it has no outbox to show");
  }
  try {
    const store = database.store;
    const counts = await store.outboxCounts();
    const parked = limit === 0 || counts.parked === 0 ? [] : await store.parkedOutbox(limit);
    return { backend: store.backendName, counts, parkedLimit: limit, parked };
  } catch (error) {
    return refuse(503, "StoreUnavailable", `the outbox could not be read: ${errorText(error).slice(0, 300)}`);
  }
}
