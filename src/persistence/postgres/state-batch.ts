/**
 * Group commit of durable-state saves and deletes (issue 23): the writes that arrive while a statement is in flight
 * leave together in one statement, as one-event appends do (APPEND_BATCH_SQL), so that a durable-state command costs
 * what an event-sourced one costs. At most one write per persistence id per statement (GroupCommit's key).
 */
import type pg from "pg";

/**
 * A durable-state write on its way to the group commit: `values` are the parameters of `movie_write_state` in its
 * order (pid, expected, operation id, fingerprint, manifest, payload, deleted, then the five fence fields).
 */
export interface PendingState {
  readonly persistenceId: string;
  readonly expectedRevision: number;
  readonly values: readonly unknown[];
}

/** The single write: `movie_write_state`, the function every lone save and delete calls. */
export const WRITE_STATE_SQL = "SELECT movie_write_state($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) AS outcome";

/**
 * Many durable-state writes in one statement, one row of the arrays $1..$12 per write (movie_write_state's parameters
 * in its order). A row is written only when everything a lone write checks first holds: its fence (the lease row
 * locked FOR SHARE, read per row, so a transfer waits for the whole statement to commit), its operation id unknown,
 * and the stored revision the expected one (the UPDATE's condition, re-checked on the newest row version after a
 * wait; an insert at revision 0 that finds a row does nothing). Written rows record their operation id in the same
 * statement (a plain INSERT: a concurrent writer of the same id aborts the statement, and each write then goes alone).
 * RETURNING names the rows written; every other write (a stale fence, a retry, a conflict, a moved revision) asks
 * movie_write_state alone for exactly the answer a lone write gets.
 */
export const SAVE_STATES_SQL = `WITH t AS (
    SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[],
        $8::text[], $9::text[], $10::bigint[], $11::text[], $12::bigint[])
      AS t(pid, expected, op, fingerprint, manifest, payload, deleted, cluster, type, shard, owner, epoch)
    WHERE (t.owner IS NULL OR EXISTS (SELECT 1 FROM shard_lease l WHERE l.cluster_name = t.cluster
        AND l.entity_type = t.type AND l.shard_id = t.shard AND l.owner = t.owner AND l.epoch = t.epoch
        AND l.lease_until_epoch_ms > movie_now_ms() FOR SHARE))
      AND NOT EXISTS (SELECT 1 FROM state_operation o WHERE o.persistence_id = t.pid AND o.operation_id = t.op)),
  updated AS (
    UPDATE durable_state d SET revision = t.expected + 1, manifest = t.manifest, payload = t.payload,
        deleted = t.deleted, updated_at = now()
      FROM t WHERE t.expected > 0 AND d.persistence_id = t.pid AND d.revision = t.expected
      RETURNING d.persistence_id),
  inserted AS (
    INSERT INTO durable_state (persistence_id, revision, manifest, payload, deleted)
      SELECT t.pid, 1, t.manifest, t.payload, t.deleted FROM t WHERE t.expected = 0
      ON CONFLICT DO NOTHING
      RETURNING persistence_id),
  written AS (SELECT persistence_id FROM updated UNION ALL SELECT persistence_id FROM inserted)
  INSERT INTO state_operation (persistence_id, operation_id, fingerprint, revision)
    SELECT t.pid, t.op, t.fingerprint, t.expected + 1 FROM t JOIN written w ON w.persistence_id = t.pid
    RETURNING persistence_id`;

/**
 * Sends `batch` (two or more writes) as SAVE_STATES_SQL, rows in persistence-id order (two statements that share ids
 * lock them in one order); resolves with the ids written.
 */
export async function saveStates(pool: Pick<pg.Pool, "query">, batch: readonly PendingState[]): Promise<Set<string>> {
  const sorted = [...batch].sort((x, y) => (x.persistenceId < y.persistenceId ? -1 : 1));
  const width = sorted[0]!.values.length;
  const columns: unknown[][] = Array.from({ length: width }, () => new Array<unknown>(sorted.length));
  sorted.forEach((p, row) => {
    for (let c = 0; c < width; c++) columns[c]![row] = p.values[c];
  });
  const result = await pool.query({ name: "movie_save_states", text: SAVE_STATES_SQL, values: columns });
  return new Set(result.rows.map((r: { persistence_id: string }) => r.persistence_id));
}

/** The outcome code of a write that found the revision moved to `actual` (below 0; see decodeStateOutcome). */
export const revisionMoved = (actual: number): number => -1 - actual;

/** A write's outcome: `movie_outcome` (revision * 4 + status), or revisionMoved(actual). */
export function decodeStateOutcome(outcome: number): { status: number; revision: number } | { actual: number } {
  if (outcome < 0) return { actual: -1 - outcome };
  return { status: outcome % 4, revision: Math.floor(outcome / 4) };
}
