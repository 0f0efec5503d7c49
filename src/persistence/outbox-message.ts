/**
 * Outbox messages (docs/outbox.md): what a write carries to be sent after it commits. An append or a durable-state
 * save may carry `outbox` records; the store writes them in the same transaction as the events (or the state), after
 * the same fence check, so a stale owner's messages never exist. The message id is derived from the writing
 * operation, so a retried write (same OperationId) names the same messages and a receiver keyed by the id sees one.
 */
import { createHash } from "node:crypto";
import { describe } from "../actor/untrusted.ts";
import { InvalidPersistenceRequestError } from "./errors.ts";

/** Where an outbox message goes: one sharded entity, or a handler registered by name with the dispatcher. */
export type OutboxDestination =
  | { readonly kind: "entity"; readonly entityType: string; readonly entityId: string }
  | { readonly kind: "handler"; readonly handler: string };

/** One outbox message as stored: its id, destination, and the codec's manifest and JSON payload of the message. */
export interface OutboxRecord {
  readonly messageId: string;
  readonly destination: OutboxDestination;
  readonly manifest: string;
  readonly payload: string;
}

/** At most this many outbox messages per write. */
export const MAX_OUTBOX_MESSAGES_PER_WRITE = 1000;
/** Bound of an entity type, entity id or handler name in a destination. */
export const MAX_DESTINATION_PART_LENGTH = 256;
/** Bound of a message id (it doubles as the receiver's OperationId, itself at most 200 characters). */
export const MAX_OUTBOX_MESSAGE_ID_LENGTH = 200;

/**
 * The id of the `index`-th outbox message of operation `operationId` on `persistenceId`: `ob-` and 32 hex digits of a
 * SHA-256, so it fits an OperationId whatever the lengths of its inputs, and a retry of the write names it again.
 */
export function outboxMessageId(persistenceId: string, operationId: string, index: number): string {
  const digest = createHash("sha256")
    .update(`movie:outbox:v1\n${persistenceId.length}:${persistenceId}\n${operationId.length}:${operationId}\n${index}`)
    .digest("hex");
  return `ob-${digest.slice(0, 32)}`;
}

const part = (field: string, value: unknown): string => {
  if (typeof value !== "string" || value.length === 0 || value.length > MAX_DESTINATION_PART_LENGTH) {
    throw new InvalidPersistenceRequestError(
      field,
      `${describe(value)}; expected a non-empty string of at most ${MAX_DESTINATION_PART_LENGTH} characters`,
    );
  }
  return value;
};

/**
 * Validates a destination (a fresh object: no caller-owned fields survive).
 * @throws InvalidPersistenceRequestError
 */
export function checkDestination(field: string, value: unknown): OutboxDestination {
  if (value === null || typeof value !== "object") {
    throw new InvalidPersistenceRequestError(
      field,
      "expected { kind: 'entity', entityType, entityId } or { kind: 'handler', handler }",
    );
  }
  const d = value as Record<string, unknown>;
  if (d.kind === "entity") {
    return {
      kind: "entity",
      entityType: part(`${field}.entityType`, d.entityType),
      entityId: part(`${field}.entityId`, d.entityId),
    };
  }
  if (d.kind === "handler") return { kind: "handler", handler: part(`${field}.handler`, d.handler) };
  throw new InvalidPersistenceRequestError(`${field}.kind`, `${describe(d.kind)}; expected "entity" or "handler"`);
}

/**
 * Validates the outbox records of a write (none when absent).
 * @throws InvalidPersistenceRequestError
 */
export function checkOutbox(value: unknown): readonly OutboxRecord[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) throw new InvalidPersistenceRequestError("outbox", "expected an array of outbox records");
  if (value.length > MAX_OUTBOX_MESSAGES_PER_WRITE) {
    throw new InvalidPersistenceRequestError(
      "outbox",
      `${value.length} messages; at most ${MAX_OUTBOX_MESSAGES_PER_WRITE} per write`,
    );
  }
  const ids = new Set<string>();
  return value.map((record: unknown, i) => {
    const field = `outbox[${i}]`;
    if (record === null || typeof record !== "object") {
      throw new InvalidPersistenceRequestError(field, "expected { messageId, destination, manifest, payload }");
    }
    const r = record as Record<string, unknown>;
    const messageId = r.messageId;
    if (typeof messageId !== "string" || messageId.length === 0 || messageId.length > MAX_OUTBOX_MESSAGE_ID_LENGTH) {
      throw new InvalidPersistenceRequestError(
        `${field}.messageId`,
        `${describe(messageId)}; expected a non-empty string of at most ${MAX_OUTBOX_MESSAGE_ID_LENGTH} characters`,
      );
    }
    if (ids.has(messageId))
      throw new InvalidPersistenceRequestError(`${field}.messageId`, `${messageId} appears twice`);
    ids.add(messageId);
    if (typeof r.manifest !== "string" || r.manifest.length === 0) {
      throw new InvalidPersistenceRequestError(`${field}.manifest`, "must be a non-empty string");
    }
    if (typeof r.payload !== "string") {
      throw new InvalidPersistenceRequestError(`${field}.payload`, "must be a string (JSON text)");
    }
    return {
      messageId,
      destination: checkDestination(`${field}.destination`, r.destination),
      manifest: r.manifest,
      payload: r.payload,
    };
  });
}

/** The destination as stored (the `destination` column): JSON with fixed keys. */
export function encodeDestination(destination: OutboxDestination): string {
  return destination.kind === "entity"
    ? JSON.stringify({ kind: "entity", entityType: destination.entityType, entityId: destination.entityId })
    : JSON.stringify({ kind: "handler", handler: destination.handler });
}

/** The destination of a stored row, or a reason it is unreadable (the row is then parked, not delivered). */
export function decodeDestination(text: unknown): OutboxDestination | { readonly unreadable: string } {
  if (typeof text !== "string") return { unreadable: "the destination column is not text" };
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return { unreadable: `the destination ${describe(text)} is not JSON` };
  }
  try {
    return checkDestination("destination", json);
  } catch (error) {
    return { unreadable: (error as Error).message };
  }
}

/**
 * A message a command handler sends through the outbox (`effect.thenSend(...)`): the message itself, or a function
 * that builds it from its outbox message id (so the receiving command can carry the id as its OperationId).
 */
export interface OutboxSend {
  /** Where it goes. */
  readonly destination: OutboxDestination;
  /** The message (when `build` is null). */
  readonly message: unknown;
  /** Builds the message from its outbox message id, or null. */
  readonly build: ((messageId: string) => unknown) | null;
}

/** The destination of a message to entity `entityId` of `entityType` (a type name or a registered type). */
export function entityDestination(entityType: string | { readonly name: string }, entityId: string): OutboxDestination {
  const typeName = typeof entityType === "string" ? entityType : entityType?.name;
  return checkDestination("destination", { kind: "entity", entityType: typeName, entityId });
}

/**
 * The outbox records of one write: message ids from the writer's persistence id and operation id, messages through
 * `encode` (the persistence codec).
 * @throws UnknownManifestError for a message of an unregistered class
 */
export function outboxRecords(
  persistenceId: string,
  operationId: string,
  sends: readonly OutboxSend[],
  encode: (message: unknown) => { manifest: string; payload: string },
): OutboxRecord[] {
  return sends.map((send, i) => {
    const messageId = outboxMessageId(persistenceId, operationId, i);
    const { manifest, payload } = encode(send.build === null ? send.message : send.build(messageId));
    return { messageId, destination: send.destination, manifest, payload };
  });
}
