import { Histogram, latencyBucketsSeconds } from "../actor/index.ts";

/**
 * How long entity writes take, as seen by the entity (queueing in the group commit, retries and the round trip
 * included): `Database.get(system).writeLatency`. Every write is observed once it settles, committed or failed, since
 * a timeout is a latency too; recovery reads are not counted.
 */
export class WriteLatency {
  /** Seconds per event append of an event-sourced entity (`movie_persistence_append_duration_seconds`). */
  readonly append = new Histogram(latencyBucketsSeconds);
  /** Seconds per save or delete of a durable-state entity (`movie_persistence_save_duration_seconds`). */
  readonly save = new Histogram(latencyBucketsSeconds);
}
