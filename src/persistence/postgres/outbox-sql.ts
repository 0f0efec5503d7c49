/** The PostgreSQL statements of the outbox (docs/outbox.md; the contract is in outbox-claim.ts). */
import { PARKED_UNTIL_MS } from "../outbox-claim.ts";

/**
 * A write's outbox rows, inside the write's transaction and only when the write wrote (not for a duplicate): one row
 * per element of the arrays $1 (message ids), $4 (destinations), $5 (manifests), $6 (payloads); $2 is the writer's
 * persistence id, $3 its operation id. A message id already present is skipped.
 */
export const INSERT_OUTBOX_SQL = `INSERT INTO persistence_outbox (message_id, persistence_id, operation_id, destination,
    manifest, payload)
  SELECT t.id, $2, $3, t.destination, t.manifest, t.payload
  FROM unnest($1::text[], $4::text[], $5::text[], $6::text[]) AS t(id, destination, manifest, payload)
  ON CONFLICT (message_id) DO NOTHING`;

/**
 * Claims the oldest deliverable rows for $1 (owner) for $2 ms, at most $3 of them. SKIP LOCKED: a row another claim is
 * taking right now is skipped, not waited for, so concurrent dispatchers split the backlog instead of queueing.
 */
export const CLAIM_OUTBOX_SQL = `UPDATE persistence_outbox o SET lease_owner = $1,
    lease_until_epoch_ms = movie_now_ms() + $2, attempts = o.attempts + 1
  FROM (SELECT outbox_offset FROM persistence_outbox
      WHERE NOT delivered AND lease_until_epoch_ms <= movie_now_ms()
      ORDER BY outbox_offset LIMIT $3 FOR UPDATE SKIP LOCKED) c
  WHERE o.outbox_offset = c.outbox_offset
  RETURNING o.outbox_offset, o.message_id, o.persistence_id, o.destination, o.manifest, o.payload, o.attempts`;

/** Marks the rows $1 (offsets) delivered, now on the database clock. */
export const COMPLETE_OUTBOX_SQL = `UPDATE persistence_outbox SET delivered = true, delivered_at = clock_timestamp(),
    lease_owner = NULL
  WHERE outbox_offset = ANY($1::bigint[]) AND NOT delivered`;

/**
 * Failed attempts, one per element of $1 (offsets), $2 (errors), $3 (park), $4 (retry after ms), of rows owner $5
 * still claims: the row is released, and claimable again after its delay, or never (parked: PARKED_UNTIL_MS).
 */
export const FAIL_OUTBOX_SQL = `UPDATE persistence_outbox o SET last_error = t.error, lease_owner = NULL,
    lease_until_epoch_ms = CASE WHEN t.park THEN ${PARKED_UNTIL_MS} ELSE movie_now_ms() + t.after_ms END
  FROM unnest($1::bigint[], $2::text[], $3::boolean[], $4::bigint[]) AS t(off, error, park, after_ms)
  WHERE o.outbox_offset = t.off AND o.lease_owner = $5 AND NOT o.delivered`;

/** Deletes rows delivered at least $1 ms ago. */
export const PURGE_OUTBOX_SQL = `DELETE FROM persistence_outbox
  WHERE delivered AND delivered_at <= clock_timestamp() - $1::bigint * interval '1 millisecond'`;

/** Row counts by state. */
export const OUTBOX_COUNTS_SQL = `SELECT
    count(*) FILTER (WHERE NOT delivered AND lease_until_epoch_ms <> ${PARKED_UNTIL_MS}) AS pending,
    count(*) FILTER (WHERE NOT delivered AND lease_until_epoch_ms = ${PARKED_UNTIL_MS}) AS parked,
    count(*) FILTER (WHERE delivered) AS delivered
  FROM persistence_outbox`;

/** The oldest $1 parked rows. */
export const PARKED_OUTBOX_SQL = `SELECT outbox_offset, message_id, persistence_id, attempts, last_error
  FROM persistence_outbox WHERE NOT delivered AND lease_until_epoch_ms = ${PARKED_UNTIL_MS}
  ORDER BY outbox_offset LIMIT $1`;
