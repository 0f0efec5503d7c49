/**
 * The global event feed (docs/protocol.md §13.1 QueryEvents): every committed event has an offset, a whole number that grows
 * in commit order across all persistence ids. Offsets are assigned at the tail of the append transaction under the
 * feed lock, which the transaction holds until it commits, so a reader that sees offset n also sees every committed
 * offset below n. Offsets can have gaps (an append that rolled back after taking its offsets, a sequence cache lost
 * in a crash); a gap is never filled later, so a reader simply continues after the last offset it saw.
 */

import { describe } from "../actor/untrusted.ts";
import { CorruptPersistentRecordError, InvalidPersistenceRequestError } from "./errors.ts";
import type { ShardLeaseToken } from "./lease.ts";
import { checkPersistenceId, checkStoredEvent } from "./store.ts";

/** A page request of the feed: events with offset above `afterOffset`, oldest first, optionally filtered. */
export interface EventQuery {
  /** Events with a larger offset (default 0: from the start). */
  readonly afterOffset?: number;
  /** Most events returned, 1..1000 (default 100). */
  readonly limit?: number;
  /** Only events of these entity types (the persistence id's prefix before ":"). */
  readonly entityTypes?: readonly string[];
  /** Only the events of this persistence id. */
  readonly persistenceId?: string;
  /** Only events carrying this tag. */
  readonly tag?: string;
}

/** The filter of a feed query, without position and page size (the source of a stream or projection). */
export type EventFilter = Omit<EventQuery, "afterOffset" | "limit">;

/** A validated {@link EventQuery}; the backends share it. */
export interface CheckedEventQuery {
  readonly afterOffset: number;
  readonly limit: number;
  readonly entityTypes: readonly string[] | null;
  readonly persistenceId: string | null;
  readonly tag: string | null;
}

/** One event of the feed. */
export interface FeedEvent {
  /** Its global offset. */
  readonly offset: number;
  readonly persistenceId: string;
  /** The persistence id's prefix before ":" (the registered entity type name). */
  readonly entityType: string;
  readonly sequenceNr: number;
  readonly manifest: string;
  readonly payload: string;
  /** The tags the behaviour set on it (empty when none). */
  readonly tags: readonly string[];
}

/** A page of the feed. */
export interface EventPage {
  readonly events: readonly FeedEvent[];
  /** The offset to ask after next: the last event's offset, or the query's `afterOffset` for an empty page. */
  readonly nextOffset: number;
  /** True when the page is full (more matching events may follow at once). */
  readonly hasMore: boolean;
}

/** Most tags on one event. */
export const MAX_TAGS_PER_EVENT = 32;
/** Most characters of one tag. */
export const MAX_TAG_LENGTH = 256;
const MAX_ENTITY_TYPES = 64;

/** The entity type of a persistence id: its prefix before the first ":" (the whole id when it has none). */
export function entityTypeOf(persistenceId: string): string {
  const colon = persistenceId.indexOf(":");
  return colon < 0 ? persistenceId : persistenceId.slice(0, colon);
}

/**
 * Validates a tag list (the behaviour's `tagsFor`, or an EventRecord's `tags`).
 * @throws InvalidPersistenceRequestError naming the offending value
 */
export function checkTags(field: string, tags: unknown): readonly string[] {
  if (tags === undefined || tags === null) return [];
  if (!Array.isArray(tags)) throw new InvalidPersistenceRequestError(field, `${describe(tags)}; expected an array`);
  if (tags.length > MAX_TAGS_PER_EVENT) {
    throw new InvalidPersistenceRequestError(field, `${tags.length} tags; at most ${MAX_TAGS_PER_EVENT} per event`);
  }
  for (const tag of tags) checkTag(field, tag);
  // Duplicates would collide in the tag index; one copy carries the meaning.
  return tags.length < 2 ? (tags as string[]) : [...new Set(tags as string[])];
}

function checkTag(field: string, tag: unknown): string {
  if (typeof tag !== "string" || tag.length === 0 || tag.length > MAX_TAG_LENGTH) {
    throw new InvalidPersistenceRequestError(
      field,
      `${describe(tag)}; a tag is a non-empty string of at most ${MAX_TAG_LENGTH} characters`,
    );
  }
  return tag;
}

/**
 * Validates a feed query and fills in the defaults.
 * @throws InvalidPersistenceRequestError naming the field
 */
export function checkEventQuery(query: EventQuery | undefined): CheckedEventQuery {
  const q = query ?? {};
  if (typeof q !== "object") throw new InvalidPersistenceRequestError("query", `${describe(q)}; expected an object`);
  const afterOffset = q.afterOffset ?? 0;
  if (!Number.isSafeInteger(afterOffset) || afterOffset < 0) {
    throw new InvalidPersistenceRequestError("afterOffset", `${describe(afterOffset)}; expected a whole number ≥ 0`);
  }
  const limit = q.limit ?? 100;
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > 1000) {
    throw new InvalidPersistenceRequestError("limit", `${describe(limit)}; expected a whole number 1..1000`);
  }
  let entityTypes: string[] | null = null;
  if (q.entityTypes !== undefined) {
    if (!Array.isArray(q.entityTypes) || q.entityTypes.length === 0 || q.entityTypes.length > MAX_ENTITY_TYPES) {
      throw new InvalidPersistenceRequestError(
        "entityTypes",
        `${describe(q.entityTypes)}; expected 1..${MAX_ENTITY_TYPES} type names`,
      );
    }
    entityTypes = (q.entityTypes as unknown[]).map((t) => {
      if (typeof t !== "string" || t.length === 0 || t.includes(":")) {
        throw new InvalidPersistenceRequestError("entityTypes", `${describe(t)} is not an entity type name`);
      }
      return t;
    });
  }
  const persistenceId = q.persistenceId === undefined ? null : checkPersistenceId(q.persistenceId);
  const tag = q.tag === undefined ? null : checkTag("tag", q.tag);
  return { afterOffset, limit, entityTypes, persistenceId, tag };
}

/** The page for `events` read with `query` (at most `limit` of them). */
export function feedPage(query: CheckedEventQuery, events: FeedEvent[]): EventPage {
  const last = events[events.length - 1];
  return { events, nextOffset: last?.offset ?? query.afterOffset, hasMore: events.length === query.limit };
}

/** Whether `event` matches the filter of `query` (the memory backend filters this way; SQL does it in the query). */
export function matchesQuery(query: CheckedEventQuery, event: FeedEvent): boolean {
  if (query.persistenceId !== null && event.persistenceId !== query.persistenceId) return false;
  if (query.entityTypes !== null && !query.entityTypes.includes(event.entityType)) return false;
  if (query.tag !== null && !event.tags.includes(query.tag)) return false;
  return true;
}

/**
 * Validates a feed row read back from a store.
 * @throws CorruptPersistentRecordError naming the persistence id and sequence number
 */
export function checkFeedRow(
  offset: unknown,
  persistenceId: unknown,
  entityType: unknown,
  sequenceNr: unknown,
  manifest: unknown,
  payload: unknown,
  tags: unknown,
): FeedEvent {
  const pid = typeof persistenceId === "string" ? persistenceId : describe(persistenceId);
  const seq = Number(sequenceNr);
  const off = Number(offset);
  if (!Number.isSafeInteger(off) || off < 1) {
    throw new CorruptPersistentRecordError(pid, seq, `feed offset ${describe(offset)} is not a whole number`);
  }
  if (typeof persistenceId !== "string" || typeof entityType !== "string") {
    throw new CorruptPersistentRecordError(pid, seq, "feed row has no persistence id or entity type");
  }
  const event = checkStoredEvent(persistenceId, seq, manifest, payload);
  const tagList = tags === null || tags === undefined ? [] : tags;
  if (!Array.isArray(tagList) || tagList.some((t) => typeof t !== "string")) {
    throw new CorruptPersistentRecordError(pid, seq, "feed tags are not a list of strings");
  }
  return {
    offset: off,
    persistenceId,
    entityType,
    sequenceNr: event.sequenceNr,
    manifest: event.manifest,
    payload: event.payload,
    tags: tagList as string[],
  };
}

/**
 * The handle an exactly-once projection handler writes through: statements in the same database transaction as the
 * projection's checkpoint. Parameters are `$1, $2, …` on PostgreSQL and `?` on SQLite; rows come back as objects.
 */
export interface ProjectionTransaction {
  /** The backend the statements run on. */
  readonly backend: "memory" | "sqlite" | "postgres";
  /** Runs one statement inside the checkpoint's transaction and resolves its rows (none for a write). */
  query(sql: string, params?: readonly unknown[]): Promise<Record<string, unknown>[]>;
}

/** A batch of an exactly-once projection: the checkpoint moves from `expectedOffset` to `newOffset` with its writes. */
export interface ProjectionBatchRequest {
  readonly name: string;
  /** Where the checkpoint must be (0 for a projection without one); otherwise ProjectionCheckpointConflictError. */
  readonly expectedOffset: number;
  readonly newOffset: number;
  /** The shard lease the instance runs under; a stale one commits nothing (StaleShardOwnerError). */
  readonly fence?: ShardLeaseToken | null;
  /**
   * The operator's rebuild request this batch carries out (ProjectionControl.rebuildFrom): the control row must still
   * ask for this offset, and the request is cleared in the batch's transaction, so a rebuild is applied once however
   * often its owner crashes or hands the projection off; otherwise ProjectionRebuildSupersededError, nothing committed.
   */
  readonly completesRebuildFrom?: number | null;
}

/**
 * An operator's standing instructions to a projection, stored in the database (projection_control) so that they hold
 * wherever and whenever the projection runs: a sharded slice's next owner, after a handoff or a restart, reads them
 * before its first batch (docs/persistence-feed.md, "Operating projections").
 */
export interface ProjectionControl {
  /** Handle no events until resumed; the checkpoint stays where it is. */
  readonly paused: boolean;
  /** A rebuild not yet carried out: move the checkpoint to this offset (after the definition's reset); else null. */
  readonly rebuildFrom: number | null;
}

/** A change of {@link ProjectionControl}: the fields given are set, the others kept. */
export interface ProjectionControlChange {
  readonly paused?: boolean;
  readonly rebuildFrom?: number | null;
}

/** The control of a projection that has no row: running, no rebuild asked. */
export const defaultProjectionControl: ProjectionControl = { paused: false, rebuildFrom: null };

/**
 * Validates a control change (from an operator, possibly over HTTP: total on any value).
 * @throws InvalidPersistenceRequestError naming the field
 */
export function checkProjectionControlChange(change: unknown): ProjectionControlChange {
  if (change === null || typeof change !== "object") {
    throw new InvalidPersistenceRequestError("control change", `${describe(change)}; expected an object`);
  }
  const { paused, rebuildFrom } = change as Record<string, unknown>;
  if (paused !== undefined && typeof paused !== "boolean") {
    throw new InvalidPersistenceRequestError("paused", `${describe(paused)}; expected true or false`);
  }
  if (rebuildFrom !== undefined && rebuildFrom !== null) checkOffset("rebuildFrom", rebuildFrom);
  const out: { paused?: boolean; rebuildFrom?: number | null } = {};
  if (paused !== undefined) out.paused = paused;
  if (rebuildFrom !== undefined) out.rebuildFrom = rebuildFrom as number | null;
  return out;
}

/**
 * Validates a projection name (the checkpoint's key).
 * @throws InvalidPersistenceRequestError
 */
export function checkProjectionName(name: unknown): string {
  if (typeof name !== "string" || name.length === 0 || name.length > 256) {
    throw new InvalidPersistenceRequestError("projection name", `${describe(name)}; expected 1..256 characters`);
  }
  return name;
}

/**
 * Validates a checkpoint offset.
 * @throws InvalidPersistenceRequestError
 */
export function checkOffset(field: string, offset: unknown): number {
  if (typeof offset !== "number" || !Number.isSafeInteger(offset) || offset < 0) {
    throw new InvalidPersistenceRequestError(field, `${describe(offset)}; expected a whole number ≥ 0`);
  }
  return offset;
}
