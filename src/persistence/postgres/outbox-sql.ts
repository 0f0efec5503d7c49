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
 * Migration 15: claims follow shard ownership (outbox-claim.ts). Each row records the shard lease key its sender wrote
 * it under (the write's fence; all three NULL for an unfenced write and for every row written before this migration,
 * which any claimer that wants rows without a shard may take, so an upgrade strands nothing) and the epoch of its
 * current claim. The columns are added NULL (no rewrite of existing rows). A claim reads each held shard's oldest
 * undelivered rows through persistence_outbox_shard_claim_idx, and rows without a shard through a partial index of
 * their own, which replaces migration 10's claim index (every undelivered row) so that a row costs one claim index
 * entry, not two.
 */
export const outboxShardClaimsMigration: readonly string[] = [
  "ALTER TABLE persistence_outbox ADD COLUMN IF NOT EXISTS sender_cluster TEXT NULL",
  "ALTER TABLE persistence_outbox ADD COLUMN IF NOT EXISTS sender_type TEXT NULL",
  "ALTER TABLE persistence_outbox ADD COLUMN IF NOT EXISTS sender_shard BIGINT NULL",
  "ALTER TABLE persistence_outbox ADD COLUMN IF NOT EXISTS claim_epoch BIGINT NULL",
  `CREATE INDEX IF NOT EXISTS persistence_outbox_shard_claim_idx
      ON persistence_outbox (sender_type, sender_shard, outbox_offset) WHERE NOT delivered`,
  `CREATE INDEX IF NOT EXISTS persistence_outbox_unsharded_claim_idx ON persistence_outbox (outbox_offset)
      WHERE NOT delivered AND sender_shard IS NULL`,
  "DROP INDEX IF EXISTS persistence_outbox_claim_idx",
];

/**
 * A write with outbox messages as one statement: `call` (a write function's call, whose parameters $1 and $3 are the
 * persistence id and the operation id) guarded by movie_outbox_written, and the outbox rows in a data-modifying WITH,
 * one per element of the arrays $first .. $first+3 (message ids, destinations, manifests, payloads), each recording
 * the write's shard ($first+4 .. $first+6: cluster, entity type, shard id of its fence; null unfenced). One statement
 * is one implicit transaction: the rows commit with the write or not at all, and the feed lock the write takes is
 * held for no extra round trip. A message id already present is skipped.
 */
export function writeWithOutboxSql(call: string, first: number): string {
  const [ids, destinations, manifests, payloads] = [first, first + 1, first + 2, first + 3];
  const [cluster, type, shard] = [first + 4, first + 5, first + 6];
  return `WITH outbox AS (INSERT INTO persistence_outbox (message_id, persistence_id, operation_id, destination,
      manifest, payload, sender_cluster, sender_type, sender_shard)
    SELECT t.id, $1, $3, t.destination, t.manifest, t.payload, $${cluster}::text, $${type}::text, $${shard}::bigint
    FROM unnest($${ids}::text[], $${destinations}::text[], $${manifests}::text[], $${payloads}::text[])
      AS t(id, destination, manifest, payload)
    ON CONFLICT (message_id) DO NOTHING)
  SELECT movie_outbox_written(${call}) AS outcome`;
}

/**
 * A claim (outbox-claim.ts) as one statement. $1 owner, $2 lease ms, $3 limit; the presented shard leases as the
 * arrays $4 (cluster names), $5 (entity types), $6 (shard ids), $7 (lease owners), $8 (epochs); $9 whether rows
 * without a shard are wanted. `held` keeps the leases the lease table confirms (this owner and epoch, unexpired on
 * the database clock; no lock: a claim under a lease that moves on meanwhile is overtaken by the next owner's claim
 * and its settle refused). Per held lease the oldest claimable rows of its shard come from the shard's index (at most
 * $3 each: deliverable now, or still claimed under an older epoch), beside the oldest claimable rows without a shard;
 * the oldest $3 of them are locked (SKIP LOCKED: a row another claim is taking right now is skipped, not waited for,
 * and the locking re-checks a row that changed since the statement began) and claimed, recording the epoch. The
 * result also names (as `held_lease`, 1-based) each presented lease that was current; its other rows are the claimed
 * ones.
 */
export const CLAIM_OUTBOX_SQL = `WITH held AS MATERIALIZED (
    SELECT t.i, t.cluster, t.type, t.shard, t.epoch
    FROM unnest($4::text[], $5::text[], $6::bigint[], $7::text[], $8::bigint[]) WITH ORDINALITY
      AS t(cluster, type, shard, owner, epoch, i)
    WHERE EXISTS (SELECT 1 FROM shard_lease l WHERE l.cluster_name = t.cluster AND l.entity_type = t.type
      AND l.shard_id = t.shard AND l.owner = t.owner AND l.epoch = t.epoch AND l.lease_until_epoch_ms > movie_now_ms())),
  candidates AS (
    SELECT c.outbox_offset, c.epoch FROM (
      SELECT s.outbox_offset, h.epoch FROM held h CROSS JOIN LATERAL (
        SELECT p.outbox_offset FROM persistence_outbox p
        WHERE p.sender_type = h.type AND p.sender_shard = h.shard AND NOT p.delivered AND p.sender_cluster = h.cluster
          AND (p.lease_until_epoch_ms <= movie_now_ms() OR (p.lease_owner IS NOT NULL AND p.claim_epoch < h.epoch))
        ORDER BY p.outbox_offset LIMIT $3) s
      UNION ALL
      SELECT u.outbox_offset, NULL::bigint FROM (
        SELECT p.outbox_offset FROM persistence_outbox p
        WHERE $9::boolean AND p.sender_shard IS NULL AND NOT p.delivered AND p.lease_until_epoch_ms <= movie_now_ms()
        ORDER BY p.outbox_offset LIMIT $3) u
    ) c ORDER BY c.outbox_offset LIMIT $3),
  locked AS (
    SELECT p.outbox_offset, c.epoch FROM persistence_outbox p JOIN candidates c ON p.outbox_offset = c.outbox_offset
    WHERE NOT p.delivered
      AND (p.lease_until_epoch_ms <= movie_now_ms() OR (p.lease_owner IS NOT NULL AND p.claim_epoch < c.epoch))
    FOR UPDATE OF p SKIP LOCKED),
  claimed AS (
    UPDATE persistence_outbox o SET lease_owner = $1, lease_until_epoch_ms = movie_now_ms() + $2,
        attempts = o.attempts + 1, claim_epoch = k.epoch
    FROM locked k WHERE o.outbox_offset = k.outbox_offset
    RETURNING o.outbox_offset, o.message_id, o.persistence_id, o.destination, o.manifest, o.payload, o.attempts,
      o.sender_cluster, o.sender_type, o.sender_shard, o.claim_epoch)
  SELECT c.*, NULL::bigint AS held_lease FROM claimed c
  UNION ALL
  SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, h.i FROM held h`;

/**
 * Whether the claim of row `o` under epoch `epoch` still stands (a settle's fence): a row without a shard always; a
 * sharded one while it is still claimed under that epoch and its shard's lease is at that epoch, unexpired. The lease
 * row is locked FOR SHARE, as a fenced write locks it, so a transfer waits for the settle to commit.
 */
const claimCurrent = (epoch: string) => `(o.sender_shard IS NULL OR (o.claim_epoch = ${epoch}
      AND EXISTS (SELECT 1 FROM shard_lease l WHERE l.cluster_name = o.sender_cluster AND l.entity_type = o.sender_type
        AND l.shard_id = o.sender_shard AND l.epoch = ${epoch} AND l.lease_until_epoch_ms > movie_now_ms() FOR SHARE)))`;

/**
 * Marks the rows $1 (offsets) claimed under $2 (epochs, null for rows without a shard) delivered, now on the database
 * clock, where their claim is current (claimCurrent); `settled` counts them, `stale` the undelivered ones whose claim
 * is not.
 */
export const COMPLETE_OUTBOX_SQL = `WITH t AS MATERIALIZED (
    SELECT t.off, ${claimCurrent("t.epoch")} AS current
    FROM unnest($1::bigint[], $2::bigint[]) AS t(off, epoch) JOIN persistence_outbox o ON o.outbox_offset = t.off
    WHERE NOT o.delivered),
  done AS (UPDATE persistence_outbox o SET delivered = true, delivered_at = clock_timestamp(), lease_owner = NULL
    FROM t WHERE o.outbox_offset = t.off AND t.current AND NOT o.delivered RETURNING 1)
  SELECT (SELECT count(*) FROM done) AS settled, (SELECT count(*) FROM t WHERE NOT t.current) AS stale`;

/**
 * Failed attempts, one per element of $1 (offsets), $2 (errors), $3 (park), $4 (retry after ms), $6 (claim epochs),
 * of rows owner $5 still claims under a current claim (claimCurrent): the row is released, and claimable again after
 * its delay, or never (parked: PARKED_UNTIL_MS). `settled` counts them, `stale` the undelivered ones whose claim is
 * not current.
 */
export const FAIL_OUTBOX_SQL = `WITH t AS MATERIALIZED (
    SELECT t.off, t.error, t.park, t.after_ms, ${claimCurrent("t.epoch")} AS current
    FROM unnest($1::bigint[], $2::text[], $3::boolean[], $4::bigint[], $6::bigint[]) AS t(off, error, park, after_ms, epoch)
      JOIN persistence_outbox o ON o.outbox_offset = t.off
    WHERE NOT o.delivered),
  failed AS (UPDATE persistence_outbox o SET last_error = t.error, lease_owner = NULL,
      lease_until_epoch_ms = CASE WHEN t.park THEN ${PARKED_UNTIL_MS} ELSE movie_now_ms() + t.after_ms END
    FROM t WHERE o.outbox_offset = t.off AND t.current AND o.lease_owner = $5 AND NOT o.delivered RETURNING 1)
  SELECT (SELECT count(*) FROM failed) AS settled, (SELECT count(*) FROM t WHERE NOT t.current) AS stale`;

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
