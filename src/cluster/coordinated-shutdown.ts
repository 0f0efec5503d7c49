/**
 * Coordinated shutdown: `await system.shutdown()` leaves the cluster gracefully — the leader marks this node Leaving,
 * sharding's departure guard holds it there until every shard it owned has been handed off (persistent shards drain
 * and release their leases, so the next owner takes them at once instead of after expiry), then it is Exiting and
 * Removed — and only then terminates the actor system. A deadline bounds the wait (what a Kubernetes pod's
 * termination grace period allows); past it the system terminates anyway and the report says so.
 * `handleSigterm(system)` runs it on SIGTERM.
 */
import { ActorSystem } from "../actor/index.ts";
import { errorText } from "../actor/untrusted.ts";
import { Cluster, clusterExtensionKey } from "./cluster.ts";
import { ClusterAwaitTimeoutError } from "./errors.ts";

/** Options of {@link ActorSystem.shutdown}. */
export interface ShutdownOptions {
  /** How long to wait for this node to be Removed before terminating anyway, in ms (default 30,000). */
  readonly deadline?: number;
  /** Why, for the log (default "shutdown"). */
  readonly reason?: string;
}

/** What a coordinated shutdown did. */
export interface ShutdownReport {
  /** True when this node was a cluster member and asked to leave. */
  readonly left: boolean;
  /** True when it was Removed before the deadline (its shards handed off); false when the deadline cut the wait. */
  readonly removed: boolean;
  /** Wall time from the call to the end of termination, ms. */
  readonly elapsedMs: number;
  readonly reason: string;
}

declare module "../actor/actor-system.ts" {
  interface ActorSystem {
    /**
     * Coordinated shutdown: leave the cluster (shards handed off, persistent leases released), wait until Removed or
     * the deadline, then terminate. Calling it again returns the same Promise. Never rejects.
     */
    shutdown(options?: ShutdownOptions): Promise<ShutdownReport>;
  }
}

const running = new WeakMap<ActorSystem, Promise<ShutdownReport>>();
const deadlineDefaultMs = 30_000;

ActorSystem.prototype.shutdown = function shutdown(this: ActorSystem, options: ShutdownOptions = {}) {
  const existing = running.get(this);
  if (existing !== undefined) return existing;
  const done = coordinatedShutdown(this, options);
  running.set(this, done);
  return done;
};

async function coordinatedShutdown(system: ActorSystem, options: ShutdownOptions): Promise<ShutdownReport> {
  const started = system.scheduler.now();
  const reason = typeof options.reason === "string" ? options.reason.slice(0, 200) : "shutdown";
  const deadline = options.deadline;
  const deadlineMs =
    typeof deadline === "number" && Number.isFinite(deadline) && deadline >= 0 ? deadline : deadlineDefaultMs;
  const cluster = system.hasExtension<Cluster>({ key: clusterExtensionKey, create: () => Cluster.get(system) });
  let left = false;
  let removed = false;
  if (cluster !== undefined && !system.isTerminated) {
    const status = cluster.selfStatus;
    const others = cluster.snapshot().members.filter((m) => !m.uniqueAddress.equals(cluster.selfAddress)).length;
    if (status === "Removed") removed = true;
    else if (others === 0) {
      // The last member has nobody to hand its shards to: leaving would only wait out the deadline.
      system.log.info(
        { node: cluster.selfAddress.toString(), reason },
        "coordinated shutdown: last member, not leaving",
      );
    } else if (status !== "Down") {
      left = true;
      system.log.info(
        { node: cluster.selfAddress.toString(), reason, deadlineMs },
        "coordinated shutdown: leaving the cluster",
      );
      try {
        await cluster.leave(cluster.selfAddress, Math.max(1, deadlineMs));
        removed = true;
      } catch (error) {
        system.log.warn(
          {
            node: cluster.selfAddress.toString(),
            reason,
            error: errorText(error),
            status: error instanceof ClusterAwaitTimeoutError ? error.currentStatus : cluster.selfStatus,
          },
          "coordinated shutdown: not removed before the deadline; terminating anyway (shards not handed off fail over through the leader)",
        );
      }
    }
  }
  await system.terminate();
  const report = { left, removed, elapsedMs: system.scheduler.now() - started, reason };
  system.log.info({ ...report }, "coordinated shutdown: terminated");
  return report;
}

/**
 * Runs `system.shutdown(options)` on the first SIGTERM (a second SIGTERM exits at once), then exits the process with
 * code 0 when the node was removed in time, 1 when the deadline cut the wait (unless `exit` is false). Opt-in: the
 * library never installs signal handlers by itself. Returns the function that removes the handler.
 */
export function handleSigterm(
  system: ActorSystem,
  options: ShutdownOptions & { readonly exit?: boolean } = {},
): () => void {
  let shuttingDown = false;
  const onSignal = (): void => {
    if (shuttingDown) {
      process.exit(1);
    }
    shuttingDown = true;
    void system.shutdown({ reason: "SIGTERM", ...options }).then((report) => {
      if (options.exit !== false) process.exit(report.removed || !report.left ? 0 : 1);
    });
  };
  process.on("SIGTERM", onSignal);
  return () => {
    process.off("SIGTERM", onSignal);
  };
}
