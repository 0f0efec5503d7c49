/** The PostgreSQL statements of the outbox (docs/outbox.md; the contract is in outbox-claim.ts). */
import { PARKED_UNTIL_MS } from "../outbox-claim.ts";

/** SQLSTATE raised by movie_outbox_written when the write it guards wrote nothing; the message is the outcome. */
export const OUTBOX_NOT_WRITTEN_SQLSTATE = "MV002";

/**
 * Migration 10's guard: passes the outcome of a write that wrote (status 0, see movie_outcome) and raises
 * OUTBOX_NOT_WRITTEN_SQLSTATE with the outcome otherwise, so that the outbox rows inserted by the same statement roll
 * back with it (a duplicate, a conflict, a stale fence).
 */
export const OUTBOX_GUARD_FUNCTION = `CREATE OR REPLACE FUNCTION movie_outbox_written(p_outcome bigint) RETURNS bigint
      LANGUAGE plpgsql AS $$
      BEGIN
        IF p_outcome < 0 OR p_outcome % 4 <> 0 THEN
          RAISE EXCEPTION USING ERRCODE = '${OUTBOX_NOT_WRITTEN_SQLSTATE}', MESSAGE = p_outcome::text;
        END IF;
        RETURN p_outcome;
      END $$`;

/**
 * A write with outbox messages as one statement: `call` (a write function's call, whose parameters $1 and $3 are the
 * persistence id and the operation id) guarded by movie_outbox_written, and the outbox rows in a data-modifying WITH,
 * one per element of the arrays $first .. $first+3 (message ids, destinations, manifests, payloads). One statement is
 * one implicit transaction: the rows commit with the write or not at all, and the feed lock the write takes is held
 * for no extra round trip. A message id already present is skipped.
 */
export function writeWithOutboxSql(call: string, first: number): string {
  const [ids, destinations, manifests, payloads] = [first, first + 1, first + 2, first + 3];
  return `WITH outbox AS (INSERT INTO persistence_outbox (message_id, persistence_id, operation_id, destination,
      manifest, payload)
    SELECT t.id, $1, $3, t.destination, t.manifest, t.payload
    FROM unnest($${ids}::text[], $${destinations}::text[], $${manifests}::text[], $${payloads}::text[])
      AS t(id, destination, manifest, payload)
    ON CONFLICT (message_id) DO NOTHING)
  SELECT movie_outbox_written(${call}) AS outcome`;
}

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

/**
 * Row counts by state (see OutboxCounts): a pending row is claimed while its claim lasts (an owner and a "not before"
 * time ahead), retrying when it had an attempt and is not claimed; and the oldest pending row's age in ms.
 */
export const OUTBOX_COUNTS_SQL = `SELECT
    count(*) FILTER (WHERE NOT delivered AND lease_until_epoch_ms <> ${PARKED_UNTIL_MS}) AS pending,
    count(*) FILTER (WHERE NOT delivered AND lease_until_epoch_ms <> ${PARKED_UNTIL_MS}
      AND lease_owner IS NOT NULL AND lease_until_epoch_ms > n.now_ms) AS claimed,
    count(*) FILTER (WHERE NOT delivered AND lease_until_epoch_ms <> ${PARKED_UNTIL_MS} AND attempts > 0
      AND NOT (lease_owner IS NOT NULL AND lease_until_epoch_ms > n.now_ms)) AS retrying,
    count(*) FILTER (WHERE NOT delivered AND lease_until_epoch_ms = ${PARKED_UNTIL_MS}) AS parked,
    count(*) FILTER (WHERE delivered) AS delivered,
    floor(extract(epoch FROM clock_timestamp()
      - min(created_at) FILTER (WHERE NOT delivered AND lease_until_epoch_ms <> ${PARKED_UNTIL_MS})) * 1000)
      AS oldest_pending_age_ms
  FROM persistence_outbox CROSS JOIN (SELECT movie_now_ms() AS now_ms) n`;

/** The oldest $1 parked rows. */
export const PARKED_OUTBOX_SQL = `SELECT outbox_offset, message_id, persistence_id, attempts, last_error
  FROM persistence_outbox WHERE NOT delivered AND lease_until_epoch_ms = ${PARKED_UNTIL_MS}
  ORDER BY outbox_offset LIMIT $1`;

/** Makes the parked rows $1 (offsets) claimable again, attempts reset. */
export const RETRY_PARKED_OUTBOX_SQL = `UPDATE persistence_outbox SET lease_until_epoch_ms = 0, attempts = 0
  WHERE outbox_offset = ANY($1::bigint[]) AND NOT delivered AND lease_until_epoch_ms = ${PARKED_UNTIL_MS}`;
