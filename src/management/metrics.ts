/**
 * `GET /metrics`: every counter and gauge of one node in the Prometheus text format. Counters keep their stats
 * names in snake case with `_total` (`routes` → `movie_sharding_routes_total`); breakdowns become one family with a
 * label (`movie_remote_rejected_total{reason="oversize"}`); byte counts carry the unit (`movie_remote_sent_bytes_total`).
 */
import type { ActorSystem } from "../actor/index.ts";
import type { ClusterStats } from "../cluster/index.ts";
import type { OutboxCounts } from "../persistence/index.ts";
import type { RemotingStats } from "../remote/index.ts";
import { remotingId } from "../remote/index.ts";
import type { ShardingStats } from "../sharding/index.ts";
import { Exposition } from "./exposition.ts";
import type { OperatorLog } from "./operator-log.ts";
import { clusterOf, membersByStatus, persistenceHistograms, persistenceStats, shardingOf } from "./views.ts";

/** `framesIn` → `frames_in`. */
export function snakeCase(name: string): string {
  return name.replace(/([a-z0-9])([A-Z])/g, "$1_$2").toLowerCase();
}

/** Renamed counters: the unit last, and in/out said as received/sent. */
const remoteNames: Partial<Record<keyof RemotingStats, string>> = {
  framesIn: "frames_received",
  framesOut: "frames_sent",
  bytesIn: "received_bytes",
  bytesOut: "sent_bytes",
  droppedAtShutdownBytes: "dropped_at_shutdown_bytes",
};
const clusterNames: Partial<Record<keyof ClusterStats, string>> = { gossipBytesSent: "gossip_sent_bytes" };

function counters(
  out: Exposition,
  prefix: string,
  layer: string,
  stats: object,
  renames: Readonly<Record<string, string>>,
  skip: ReadonlySet<string>,
): void {
  for (const [key, value] of Object.entries(stats)) {
    if (typeof value !== "number" || skip.has(key)) continue;
    out.counter(`${prefix}_${renames[key] ?? snakeCase(key)}_total`, `${layer} stats.${key}`, value);
  }
}

function breakdown(out: Exposition, name: string, help: string, label: string, values: object): void {
  for (const [key, value] of Object.entries(values)) {
    if (typeof value === "number") out.counter(name, help, value, [[label, key]]);
  }
}

/** What the metrics read asynchronously beforehand (a database query), passed in so collecting stays synchronous. */
export interface MetricsInputs {
  /** The outbox's rows by state (the whole database's), or null when not in use or not readable now. */
  readonly outbox?: OutboxCounts | null;
}

/** The exposition text of `system`'s metrics now. */
export function renderMetrics(
  system: ActorSystem,
  operatorLog: OperatorLog | null,
  inputs: MetricsInputs = {},
): string {
  return collectMetrics(system, operatorLog, inputs).render();
}

/** Every metric of `system` now, as an {@link Exposition} (rendered as text, or read as data by OpenTelemetry). */
export function collectMetrics(
  system: ActorSystem,
  operatorLog: OperatorLog | null,
  inputs: MetricsInputs = {},
): Exposition {
  const out = new Exposition();
  out.gauge("movie_actor_pending_asks", "Asks waiting for a reply on this node", system.pendingAskCount);
  out.counter("movie_actor_dead_letters_total", "Messages published as dead letters", system.deadLetterCount);
  out.counter(
    "movie_actor_mailbox_overflows_total",
    "Messages refused because a bounded mailbox was full",
    system.mailboxOverflowCount,
  );

  const remoting = system.hasExtension(remotingId)?.stats;
  if (remoting !== undefined) {
    counters(out, "movie_remote", "remoting", remoting, remoteNames, new Set());
    breakdown(
      out,
      "movie_remote_rejected_total",
      "Inbound frames or envelopes refused, by reason",
      "reason",
      remoting.rejected,
    );
    breakdown(
      out,
      "movie_remote_internal_errors_total",
      "Connections closed by an unexpected error, by error name",
      "error",
      remoting.internalErrors,
    );
  }

  const cluster = clusterOf(system);
  if (cluster !== undefined) {
    const stats = cluster.stats;
    counters(out, "movie_cluster", "cluster", stats, clusterNames, new Set(["subscribers", "selfDowned"]));
    breakdown(out, "movie_cluster_gossip_rejected_total", "Gossip refused, by reason", "reason", stats.gossipRejected);
    out.gauge("movie_cluster_subscribers", "Cluster event subscribers", stats.subscribers);
    out.gauge("movie_cluster_self_downed", "1 once this node learnt it was downed", stats.selfDowned);
    const snapshot = cluster.snapshot();
    for (const [status, n] of membersByStatus(snapshot)) {
      out.gauge("movie_cluster_members", "Members this node sees, by status", n, [["status", status]]);
    }
    out.gauge(
      "movie_cluster_unreachable_members",
      "Members this node sees as unreachable",
      snapshot.unreachable.length,
    );
    out.gauge(
      "movie_cluster_converged",
      "1 when membership has converged in this node's view",
      snapshot.converged ? 1 : 0,
    );
    out.gauge("movie_cluster_is_leader", "1 when this node is the leader by its own view", cluster.isLeader ? 1 : 0);
  }

  const sharding = shardingOf(system);
  if (sharding !== undefined) {
    const stats: ShardingStats = sharding.stats;
    counters(out, "movie_sharding", "sharding", stats, {}, new Set());
    breakdown(
      out,
      "movie_sharding_malformed_envelopes_total",
      "Sharding envelopes that could not be decoded, by reason",
      "reason",
      stats.malformedEnvelopes,
    );
    out.gauge("movie_sharding_handoffs_in_progress", "Handoffs this node drives now", sharding.handoffsInProgress);
    out.gauge(
      "movie_sharding_daemon_mailbox_size",
      "Messages waiting in the mailbox of this node's sharding daemon",
      sharding.daemonMailboxSize,
    );
    for (const name of sharding.entityTypeNames) {
      const view = sharding.inspect(name);
      const type: [string, string] = ["type", name];
      let local = 0;
      for (const n of view.localEntities.values()) local += n;
      let owned = 0;
      const self = clusterOf(system)?.snapshot().self;
      if (self !== undefined) for (const owner of view.allocations.values()) if (owner.equals(self)) owned++;
      out.gauge("movie_sharding_shards", "Shards of the type", view.shardCount, [type]);
      out.gauge("movie_sharding_allocated_shards", "Shards with an owner in this node's plan", view.allocations.size, [
        type,
      ]);
      out.gauge("movie_sharding_local_shards", "Shards this node owns in its plan", owned, [type]);
      out.gauge("movie_sharding_local_entities", "Live entity actors of the type on this node", local, [type]);
      out.gauge("movie_sharding_plan_generation", "Generation of this node's plan", view.generation, [type]);
      out.histogram(
        "movie_sharding_handoff_duration_seconds",
        "Seconds from start to completion of the handoffs this node drove as coordinator",
        sharding.handoffDuration(name),
        [type],
        "s",
      );
      out.gauge(
        "movie_sharding_type_handoffs_in_progress",
        "Handoffs of the type this node drives",
        view.handoffs.length,
        [type],
      );
      if (view.leases !== null) {
        const held = view.leases.filter((l) => l.phase === "held").length;
        out.gauge("movie_sharding_leases_held", "Shard leases this node holds", held, [type]);
        let maxEpoch = 0;
        for (const l of view.leases) if (l.epoch !== null && l.epoch > maxEpoch) maxEpoch = l.epoch;
        out.gauge("movie_sharding_lease_epoch_max", "Highest lease epoch this node holds", maxEpoch, [type]);
      }
    }
  }

  const persistence = persistenceStats(system);
  if (persistence !== null) {
    if (persistence.resilience !== null) {
      counters(out, "movie_persistence", "persistence resilience", persistence.resilience, {}, new Set());
    }
    if (persistence.groupCommit !== null) {
      const g = persistence.groupCommit;
      counters(
        out,
        "movie_persistence_group_commit",
        "persistence group commit",
        g,
        {},
        new Set(["largestBatch", "waiting"]),
      );
      if (g.largestBatch !== undefined) {
        out.gauge("movie_persistence_group_commit_largest_batch", "Most appends one statement carried", g.largestBatch);
      }
      if (g.waiting !== undefined) {
        out.gauge("movie_persistence_group_commit_waiting", "Appends waiting for a statement", g.waiting);
      }
    }
  }

  if (persistence !== null) {
    for (const p of persistence.projections) {
      const name: [string, string] = ["projection", p.name];
      out.gauge(
        "movie_projection_checkpoint_offset",
        "Committed checkpoint of a projection running here",
        p.checkpoint,
        [name],
      );
      out.gauge(
        "movie_projection_latest_offset",
        "The feed's latest offset as the projection last saw it",
        p.latestOffset,
        [name],
      );
      out.gauge("movie_projection_lag_events", "Feed offsets between the latest and the checkpoint", p.lag, [name]);
      out.gauge(
        "movie_projection_events_per_second",
        "Events handled per second over the last 10 s (0 in the projection's first second)",
        p.eventsPerSecond,
        [name],
      );
      out.counter(
        "movie_projection_processed_events_total",
        "Events handled since this instance started",
        p.processed,
        [name],
      );
      out.counter("movie_projection_failures_total", "Batches that failed and were retried", p.failures, [name]);
      out.gauge(
        "movie_projection_consecutive_failures",
        "Failures since the last committed batch (above 0: failing and retrying)",
        p.consecutiveFailures,
        [name],
      );
      out.gauge("movie_projection_paused", "1 while the projection is paused", p.status === "paused" ? 1 : 0, [name]);
      if (p.lastErrorAtEpochMs !== null) {
        out.gauge(
          "movie_projection_last_error_timestamp_seconds",
          "When the projection last failed (Unix time)",
          p.lastErrorAtEpochMs / 1000,
          [name],
        );
      }
    }
  }

  const outbox = inputs.outbox ?? null;
  if (outbox !== null) {
    for (const state of ["pending", "claimed", "retrying", "parked", "delivered"] as const) {
      out.gauge(
        "movie_outbox_messages",
        "Outbox rows in the database by state (pending includes claimed and retrying; the same from every node)",
        outbox[state],
        [["state", state]],
      );
    }
    out.gauge(
      "movie_outbox_oldest_pending_age_seconds",
      "Age of the oldest pending outbox row (0 with no backlog)",
      (outbox.oldestPendingAgeMs ?? 0) / 1000,
    );
  }

  const histograms = persistenceHistograms(system);
  if (histograms !== null) {
    out.histogram(
      "movie_persistence_append_duration_seconds",
      "Seconds per event append of an event-sourced entity, committed or failed",
      histograms.append,
      [],
      "s",
    );
    out.histogram(
      "movie_persistence_save_duration_seconds",
      "Seconds per save or delete of a durable-state entity, committed or failed",
      histograms.save,
      [],
      "s",
    );
    for (const [kind, h] of histograms.batchSize) {
      out.histogram(
        "movie_persistence_group_commit_batch_size",
        "Writes per group-commit statement, by kind (append: one-event appends; state: durable-state writes)",
        h,
        [["kind", kind]],
      );
    }
  }

  if (operatorLog !== null) {
    out.counter("movie_management_operator_actions_total", "Write requests carried out", operatorLog.accepted);
    out.counter(
      "movie_management_unauthorized_total",
      "Write requests refused for a missing or bad token",
      operatorLog.unauthorized,
    );
    out.counter(
      "movie_management_bad_requests_total",
      "Requests refused as malformed (4xx other than auth)",
      operatorLog.badRequests,
    );
  }
  return out;
}
