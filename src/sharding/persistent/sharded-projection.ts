/**
 * Projections run in the cluster: `sharding.initProjection(definition)` makes a projection a sharded entity of its own
 * routing name with one shard, so one node at a time owns it through sharding and its PostgreSQL shard lease, exactly
 * like a persistent entity. The owning node runs the projection with that lease as its fence: every checkpoint write
 * checks it in the checkpoint's own transaction, so an instance whose lease moved (a paused or partitioned old owner)
 * gets StaleShardOwnerError and commits nothing. Every node sends the projection a keep-alive through sharding, so it
 * is started wherever the coordinator places it, and again after a handoff or a crash of its owner.
 */
import {
  AbstractBehavior,
  type ActorContext,
  type Cancellable,
  type Extension,
  type ExtensionId,
} from "../../actor/index.ts";
import { checkSettingKeys } from "../../actor/settings-keys.ts";
import { Database } from "../../persistence/database.ts";
import { type Projection, ProjectionRunner, type ProjectionStats } from "../../persistence/projection.ts";
import { MessageRegistry } from "../../remote/index.ts";
import type { ClusterSharding } from "../cluster-sharding.ts";
import { ClusterShardingConfigurationError } from "../errors.ts";
import { shardingSettingsShape } from "../settings.ts";
import { initProvider, type PersistentShardingOptions } from "./init-persistent.ts";

/** The keep-alive a node sends the projection's entity; it starts the projection where it is placed. */
export class KeepProjectionRunning {}
MessageRegistry.register(KeepProjectionRunning);

/**
 * Options of {@link initProjection}: the sharding settings (the projection is one shard, so shardCount is always 1)
 * plus the keep-alive interval.
 */
export interface ShardedProjectionOptions extends PersistentShardingOptions {
  /**
   * How often this node sends the keep-alive, in milliseconds (default 1,000): the longest a projection stays
   * unstarted after its owner changed, beyond the handoff itself.
   */
  keepAliveIntervalMs?: number;
}

/** A projection owned through sharding; one per node that called initProjection. */
export interface ShardedProjection {
  /** The routing name (default `projection-<name>`). */
  readonly routingName: string;
  /** The projection's runner on this node while this node owns it, else null. */
  readonly local: ProjectionRunner | null;
  /** The local runner's stats while this node owns it, else null. */
  readonly stats: ProjectionStats | null;
  /**
   * Stops this node's keep-alive (the projection keeps running where it is until its shard moves); done by the system
   * when it terminates.
   */
  stopKeepAlive(): void;
}

/**
 * The entity actor of a projection on its owning node: runs the projection under the shard lease it was activated
 * with; stops the projection (waiting for its batch in flight) when the shard is handed off, and stops itself when
 * the projection was fenced out, so that the next keep-alive starts it again under the current lease.
 */
class ProjectionOwner extends AbstractBehavior<KeepProjectionRunning> {
  private runner: ProjectionRunner | null = null;

  constructor(
    private readonly start: () => ProjectionRunner,
    private readonly onRunner: (runner: ProjectionRunner | null) => void,
  ) {
    super();
  }

  override preStart(): void {
    this.runner = this.start();
    this.onRunner(this.runner);
  }

  receive(_message: KeepProjectionRunning, context: ActorContext<KeepProjectionRunning>): void {
    const status = this.runner?.status;
    if (status === "stale" || status === "stopped") context.stop(context.self);
  }

  override async postStop(): Promise<void> {
    const runner = this.runner;
    this.runner = null;
    this.onRunner(null);
    // The lease is released only after this returns: the batch in flight commits (or not) under the old epoch first.
    await runner?.stop();
  }
}

/**
 * Runs `definition` in the cluster, owned by one node at a time through sharding with a shard lease (see the module
 * comment). Call it on every node that may own the projection, with the same definition and options. Needs the
 * PostgreSQL backend (as persistent entities do).
 * @throws ClusterShardingConfigurationError for a bad keepAliveIntervalMs, a backend other than PostgreSQL, or
 *   settings that differ from an earlier init of the same routing name
 * @throws InvalidPersistenceRequestError for a malformed definition
 */
export function initProjection(
  sharding: ClusterSharding,
  definition: Projection,
  options: ShardedProjectionOptions = {},
): ShardedProjection {
  checkSettingKeys("initProjection", options, {
    ...shardingSettingsShape,
    routingName: true,
    keepAliveIntervalMs: true,
  });
  const { keepAliveIntervalMs = 1_000, routingName = `projection-${definition?.name}`, ...settings } = options;
  if (!Number.isSafeInteger(keepAliveIntervalMs) || keepAliveIntervalMs < 1 || keepAliveIntervalMs > 600_000) {
    throw new ClusterShardingConfigurationError(
      "keepAliveIntervalMs must be whole milliseconds 1..600000",
      "keepAliveIntervalMs",
    );
  }
  const system = sharding.host.system;
  // Checks the definition now, on the caller's stack, rather than in the entity on some node later.
  ProjectionRunner.check(definition);
  let local: ProjectionRunner | null = null;
  initProvider(sharding, {
    routingName,
    kind: "projection",
    entityTypeName: routingName,
    messageTypeName: KeepProjectionRunning.name,
    options: { ...settings, shardCount: 1 },
    behaviorFor: (_entityId, fence) => () =>
      new ProjectionOwner(
        () => ProjectionRunner.start(definition, Database.get(system).store, system.scheduler, { fence }),
        (runner) => {
          local = runner;
        },
      ),
  });
  let timer: Cancellable | null = null;
  let stopped = false;
  const keepAlives = system.extension(keepAlivesId);
  const stopKeepAlive = () => {
    stopped = true;
    timer?.cancel();
    keepAlives.stops.delete(stopKeepAlive);
  };
  keepAlives.stops.add(stopKeepAlive);
  const keepAlive = () => {
    if (stopped) return;
    try {
      sharding.entityRefFor<KeepProjectionRunning>(routingName, "0").tell(new KeepProjectionRunning());
    } catch {
      // No owner can be reached right now (no coordinator, the owner unreachable): the next keep-alive tries again.
    }
    timer = system.scheduler.scheduleOnce(keepAliveIntervalMs, keepAlive);
  };
  keepAlive();
  return {
    routingName,
    get local() {
      return local;
    },
    get stats() {
      return local?.stats ?? null;
    },
    stopKeepAlive,
  };
}
