/**
 * The lease statements for many shards at once (issue 23: lease upkeep that grows with the nodes, not the shards).
 * Each row is checked exactly as the single statements in postgres-store.ts check it (owner, epoch, expiry on the
 * database clock, read per row), but the rows are first locked with SKIP LOCKED: a lease row that a fenced write
 * holds FOR SHARE (or another transaction is changing) is left out rather than waited for, so that one statement
 * holding many row locks can never close a lock cycle with a group-committed append or save (which lock their own
 * lease rows in another order). The client sends each row left out on its own, with the single statement, which
 * waits for the lock exactly as before; a row that fails its check is therefore also asked once more on its own, so
 * every row gets the single statement's answer.
 */

/** The rows to renew: $1 cluster names, $2 entity types, $3 shard ids, $4 owners, $5 epochs; $6 the duration. */
export const RENEW_LEASES_SQL = `WITH t AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::bigint[])
      AS t(cluster, type, shard, owner, epoch)),
  k AS (
    SELECT l.cluster_name, l.entity_type, l.shard_id FROM shard_lease l
      JOIN t ON l.cluster_name = t.cluster AND l.entity_type = t.type AND l.shard_id = t.shard
      WHERE l.owner = t.owner AND l.epoch = t.epoch AND l.lease_until_epoch_ms > movie_now_ms()
      ORDER BY l.cluster_name, l.entity_type, l.shard_id
      FOR NO KEY UPDATE OF l SKIP LOCKED)
  UPDATE shard_lease l SET lease_until_epoch_ms = movie_now_ms() + $6, updated_at = now()
    FROM k WHERE l.cluster_name = k.cluster_name AND l.entity_type = k.entity_type AND l.shard_id = k.shard_id
    RETURNING l.cluster_name, l.entity_type, l.shard_id, l.owner, l.epoch, l.lease_until_epoch_ms`;

/**
 * The rows to acquire for one owner: $1 cluster names, $2 entity types, $3 shard ids; $4 the owner, $5 the duration.
 * An existing row this owner may take (expired, or already its own) is locked FOR UPDATE (SKIP LOCKED: the mode that
 * conflicts with a projection batch's FOR KEY SHARE as well as an entity write's FOR SHARE, so a row with any fenced
 * write in flight goes to the single statement, which waits) and updated as the single acquire's DO UPDATE branch
 * updates it (the same epoch rule); a missing row is inserted at epoch 1, in key order so
 * that two nodes inserting overlapping keys wait for each other in one order. A row that is neither (held by another
 * owner, or locked) is not returned.
 */
export const ACQUIRE_LEASES_SQL = `WITH t AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[]) AS t(cluster, type, shard)),
  k AS (
    SELECT l.cluster_name, l.entity_type, l.shard_id FROM shard_lease l
      JOIN t ON l.cluster_name = t.cluster AND l.entity_type = t.type AND l.shard_id = t.shard
      WHERE l.lease_until_epoch_ms <= movie_now_ms() OR l.owner = $4
      ORDER BY l.cluster_name, l.entity_type, l.shard_id
      FOR UPDATE OF l SKIP LOCKED),
  taken AS (
    UPDATE shard_lease l SET
        epoch = CASE WHEN l.owner = $4 AND l.lease_until_epoch_ms > movie_now_ms() THEN l.epoch ELSE l.epoch + 1 END,
        owner = $4, lease_until_epoch_ms = movie_now_ms() + $5, updated_at = now()
      FROM k WHERE l.cluster_name = k.cluster_name AND l.entity_type = k.entity_type AND l.shard_id = k.shard_id
      RETURNING l.cluster_name, l.entity_type, l.shard_id, l.owner, l.epoch, l.lease_until_epoch_ms),
  created AS (
    INSERT INTO shard_lease AS l (cluster_name, entity_type, shard_id, owner, epoch, lease_until_epoch_ms)
      SELECT t.cluster, t.type, t.shard, $4, 1, movie_now_ms() + $5 FROM t
        WHERE NOT EXISTS (SELECT 1 FROM shard_lease e WHERE e.cluster_name = t.cluster AND e.entity_type = t.type
          AND e.shard_id = t.shard)
        ORDER BY t.cluster, t.type, t.shard
      ON CONFLICT DO NOTHING
      RETURNING l.cluster_name, l.entity_type, l.shard_id, l.owner, l.epoch, l.lease_until_epoch_ms)
  SELECT * FROM taken UNION ALL SELECT * FROM created`;

/** The most rows one batch statement carries; longer lists go as several statements. */
export const LEASE_BATCH_MAX_ROWS = 1_000;
