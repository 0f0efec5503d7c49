// The soak's projection workload (docs/soak.md, "Projection and outbox"): a sharded exactly-once projection of every
// SoakList event into a read model in the same database, and the table it writes. Shared by the nodes (which run it),
// the harness (which creates the table and reads it back) and the checker's documentation of what it compares.
import type { ExactlyOnceProjection } from "../../src/persistence/index.ts";
import { soakListType } from "./settings.ts";

/** The projection's name; its slices' checkpoints are `soak-lists/slice-<i>-of-<n>`. */
export const soakProjectionName = "soak-lists";
/** Slices: each a shard of its own with its own lease, owner and checkpoint. */
export const soakProjectionSlices = 4;

/**
 * The read model: one row per list event, keyed by its persistence id and sequence number, with the value and how
 * many times a committed batch applied it (`times`): anything but 1 is a double (or lost) apply.
 */
export const soakReadModelTable = `CREATE TABLE IF NOT EXISTS soak_read_model (persistence_id TEXT NOT NULL,
  sequence_nr BIGINT NOT NULL, event_offset BIGINT NOT NULL, value TEXT NULL, times INT NOT NULL,
  PRIMARY KEY (persistence_id, sequence_nr))`;

export const soakListProjection: ExactlyOnceProjection = {
  name: soakProjectionName,
  mode: "exactly-once",
  source: { entityTypes: [soakListType] },
  batchSize: 50,
  pollIntervalMs: 200,
  handler: async (event, tx) => {
    let value: string | null = null;
    try {
      const parsed = JSON.parse(event.payload) as { value?: unknown };
      value = typeof parsed.value === "string" ? parsed.value : null;
    } catch {
      value = null;
    }
    await tx.query(
      `INSERT INTO soak_read_model AS r (persistence_id, sequence_nr, event_offset, value, times)
        VALUES ($1, $2, $3, $4, 1)
        ON CONFLICT (persistence_id, sequence_nr) DO UPDATE SET times = r.times + 1`,
      [event.persistenceId, event.sequenceNr, event.offset, value],
    );
  },
};
