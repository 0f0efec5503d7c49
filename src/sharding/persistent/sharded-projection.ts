/**
 * Projections run in the cluster: `sharding.initProjection(definition, { slices })` makes each slice of a projection
 * an entity of the projection's own routing name, alone in its shard, so one node at a time owns a slice through
 * sharding and its PostgreSQL shard lease, exactly like a persistent entity. The owning node runs the slice with that
 * lease as its fence: every checkpoint write checks it in the checkpoint's own transaction (for exactly-once, the
 * transaction that also holds the handler's writes), so an instance whose lease moved (a paused or partitioned old
 * owner) gets StaleShardOwnerError and commits nothing. Every node that called initProjection sends each slice a
 * keep-alive through sharding, so a slice is started wherever the coordinator places it, and again after a handoff
 * or a crash of its owner, from the slice's checkpoint.
 */
import {
  AbstractBehavior,
  type ActorContext,
  type ActorSystem,
  type Cancellable,
  type Extension,
  type ExtensionId,
} from "../../actor/index.ts";
import { checkSettingKeys } from "../../actor/settings-keys.ts";
import {
  Database,
  type FeedEvent,
  type Projection,
  ProjectionRunner,
  type ProjectionStats,
  Projections,
} from "../../persistence/index.ts";
import { MessageRegistry } from "../../remote/index.ts";
import type { ClusterSharding } from "../cluster-sharding.ts";
import { ClusterShardingConfigurationError } from "../errors.ts";
import { shardingHostOf } from "../internal/host.ts";
import type { ShardLeaseToken } from "../lease/lease-token.ts";
import { type ShardingSettingsOptions, shardingSettingsShape } from "../settings.ts";
import { initProvider } from "./init-persistent.ts";
import {
  checkSliceCount,
  ProjectionSlicePartitioner,
  projectionSliceName,
  projectionSliceOf,
} from "./projection-slices.ts";

/** The keep-alive every node sends each slice's entity; it starts the slice where the slice's shard is placed. */
export class KeepProjectionRunning {}
MessageRegistry.register(KeepProjectionRunning);

/**
 * Sent to each slice's entity after an operator changed the projection's control rows (projection-control.ts): the
 * owner reads them before its next batch rather than at its next poll. Only a hint: the rows are the decision, so a
 * lost hint (a handoff in between) delays nothing beyond one poll interval of the next owner, which reads them first.
 */
export class ProjectionControlChanged {}
MessageRegistry.register(ProjectionControlChanged);

/**
 * Asks a slice's entity for its runner's figures (`sharding.projectionSliceReports`, the management endpoint's
 * GET /projections on a node that does not own the slice): the owner answers a {@link ProjectionSliceReport}.
 */
export class ReportProjectionSlice {}
MessageRegistry.register(ReportProjectionSlice);

/** A slice owner's runner figures (ProjectionStats' operational part), its answer to ReportProjectionSlice. */
export class ProjectionSliceReport {
  constructor(
    readonly status: string,
    readonly checkpoint: number,
    readonly latestOffset: number,
    readonly eventsPerSecond: number,
    readonly consecutiveFailures: number,
    readonly lastError: string | null,
    readonly lastErrorAtEpochMs: number | null,
  ) {}
}
// Typed fields: a peer's report decodes to these types or is dropped (counted), never to another shape.
MessageRegistry.register(ProjectionSliceReport, {
  fields: {
    status: "string",
    checkpoint: "number",
    latestOffset: "number",
    eventsPerSecond: "number",
    consecutiveFailures: "number",
    lastError: "string?",
    lastErrorAtEpochMs: "number?",
  },
});

/** What a slice's entity receives. */
export type ProjectionSliceMessage = KeepProjectionRunning | ProjectionControlChanged | ReportProjectionSlice;

/**
 * Options of {@link initProjection}: the sharding settings of the projection's routing name (except `shardCount`
 * and `partitioner`: a projection has one shard per slice) plus the slice count, the routing name and the keep-alive
 * interval. Durations in milliseconds. Every node must pass the same values.
 */
export interface ShardedProjectionOptions extends Omit<ShardingSettingsOptions, "shardCount" | "partitioner"> {
  /**
   * Slices the projection is split into by persistence-id hash, 1..1024 (default 1): each has its own lease, owner
   * and checkpoint, and reads the whole source, handling its own persistence ids. The count is part of each slice's
   * checkpoint name: changing it starts new checkpoints (see docs/persistence-feed.md).
   */
  slices?: number;
  /** The sharding facade's name and the lease key's entity type; default `projection-<name>`. */
  routingName?: string;
  /**
   * How often this node sends each slice a keep-alive (default 1,000): the longest a slice stays unstarted after
   * its shard was placed, beyond the placement itself.
   */
  keepAliveInterval?: number;
}

/** A projection owned through sharding, as seen from one node that called initProjection. */
export interface ShardedProjection {
  /** The projection's name. */
  readonly name: string;
  /** The routing name (default `projection-<name>`). */
  readonly routingName: string;
  /** The slice count. */
  readonly slices: number;
  /** Each slice's checkpoint (and stats) name, by slice index; the projection's name when there is one slice. */
  readonly sliceNames: readonly string[];
  /** The runners of the slices this node owns now, by slice index. */
  local(): ReadonlyMap<number, ProjectionRunner>;
  /** The stats of the slices this node runs now (they are also in `Projections.get(system).stats`). */
  readonly stats: ProjectionStats[];
  /**
   * Stops this node's keep-alives: a slice keeps running where it is until its shard moves. The system does it when
   * it terminates.
   */
  stopKeepAlive(): void;
}

/** The sharded projections of one system, so that the system's termination stops their keep-alive timers. */
export class ShardedProjections implements Extension {
  readonly byRoutingName = new Map<string, { definition: Projection; handle: ShardedProjection }>();

  /** The sharded projections of `system`. */
  static of(system: ActorSystem): ShardedProjections {
    return system.extension(shardedProjectionsId);
  }

  /** The handle of the projection called `name` initialised on this node, if any. */
  named(name: string): ShardedProjection | undefined {
    for (const { handle } of this.byRoutingName.values()) if (handle.name === name) return handle;
    return undefined;
  }

  async stop(): Promise<void> {
    for (const { handle } of this.byRoutingName.values()) handle.stopKeepAlive();
  }
}
const shardedProjectionsId: ExtensionId<ShardedProjections> = {
  key: "movie.sharded-projections",
  create: () => new ShardedProjections(),
};

/**
 * The entity actor of one slice on its owning node: runs the slice under the shard lease it was activated with and
 * lists it in the node's Projections stats. Stopping it (a handoff, a passivation, the system's termination) waits
 * for the batch in flight, so the lease is released only after that batch committed or rolled back under the old
 * epoch; when the slice is fenced out it stops itself, and the provider checks the lease at once.
 */
class ProjectionSliceOwner extends AbstractBehavior<ProjectionSliceMessage> {
  private runner: ProjectionRunner | null = null;
  private detach: () => void = () => {};

  constructor(
    private readonly start: () => ProjectionRunner,
    private readonly system: ActorSystem,
    private readonly onRunner: (runner: ProjectionRunner, running: boolean) => void,
  ) {
    super();
  }

  override preStart(context: ActorContext<ProjectionSliceMessage>): void {
    const runner = this.start();
    this.runner = runner;
    this.detach = Projections.get(this.system).attach(runner);
    this.onRunner(runner, true);
    // A fenced-out (or failed-to-start) runner ends its loop: look at it then rather than at the next keep-alive.
    void runner.done.then(() => context.self.tell(new KeepProjectionRunning()));
  }

  receive(message: ProjectionSliceMessage, context: ActorContext<ProjectionSliceMessage>): void {
    if (message instanceof ProjectionControlChanged) this.runner?.controlChanged();
    if (message instanceof ReportProjectionSlice && this.runner !== null) {
      const s = this.runner.stats;
      context.sender?.tell(
        new ProjectionSliceReport(
          s.status,
          s.checkpoint,
          s.latestOffset,
          s.eventsPerSecond,
          s.consecutiveFailures,
          s.lastError,
          s.lastErrorAtEpochMs,
        ),
      );
    }
    const status = this.runner?.status;
    if (status === "stale" || status === "stopped") context.stop(context.self);
  }

  override async postStop(): Promise<void> {
    const runner = this.runner;
    if (runner === null) return;
    this.runner = null;
    await runner.stop();
    this.onRunner(runner, false);
    this.detach();
  }
}

/**
 * Runs `definition` in the cluster, each slice owned by one node at a time through sharding with a shard lease (see
 * the module comment). Call it on every node that may own a slice, with the same definition and options; the
 * allocation settings (roles, strategy) choose the owners. Needs the PostgreSQL backend, as persistent entities do.
 * Calling it again on one node with the same definition returns the same handle.
 * @throws ClusterShardingConfigurationError for bad slices or keepAliveInterval, shardCount or partitioner given, a
 *   backend other than PostgreSQL, another definition under the same routing name on this node, or settings that
 *   differ from an earlier init of the same routing name
 * @throws UnknownSettingError for an option no setting has
 * @throws InvalidPersistenceRequestError for a malformed definition
 */
export function initProjection(
  sharding: ClusterSharding,
  definition: Projection,
  options: ShardedProjectionOptions = {},
): ShardedProjection {
  for (const field of ["shardCount", "partitioner"] as const) {
    if (options !== null && typeof options === "object" && field in options) {
      throw new ClusterShardingConfigurationError(
        `a projection has one shard per slice; set slices instead of ${field}`,
        field,
      );
    }
  }
  checkSettingKeys("initProjection", options, {
    ...shardingSettingsShape,
    routingName: true,
    slices: true,
    keepAliveInterval: true,
  });
  const { keepAliveInterval = 1_000, slices: sliceOption = 1, routingName: routingOption, ...settings } = options;
  const slices = checkSliceCount(sliceOption);
  if (!Number.isSafeInteger(keepAliveInterval) || keepAliveInterval < 1 || keepAliveInterval > 600_000) {
    throw new ClusterShardingConfigurationError(
      `keepAliveInterval must be whole milliseconds 1..600000 (got ${String(keepAliveInterval)})`,
      "keepAliveInterval",
    );
  }
  // The definition is checked here, on the caller's stack, rather than in an entity on some node later; the longest
  // slice name too, since the slice suffix counts against the checkpoint name's length.
  ProjectionRunner.check(definition);
  const sliceNames = Array.from({ length: slices }, (_, i) => projectionSliceName(definition.name, i, slices));
  ProjectionRunner.check({ ...definition, name: sliceNames[slices - 1]! });
  const routingName = routingOption ?? `projection-${definition.name}`;
  const system = shardingHostOf(sharding).system;
  const registry = system.extension(shardedProjectionsId);
  const existing = registry.byRoutingName.get(routingName);
  if (existing !== undefined && existing.definition !== definition) {
    throw new ClusterShardingConfigurationError(
      `${routingName} already runs another projection definition on this node; use one routing name per projection`,
      "definition",
    );
  }
  const local = new Map<number, ProjectionRunner>();
  const startSlice = (index: number, fence: ShardLeaseToken): ProjectionRunner => {
    const owns = slices === 1 ? null : (persistenceId: string) => projectionSliceOf(persistenceId, slices) === index;
    const only = owns === null ? null : (event: FeedEvent) => owns(event.persistenceId);
    // The operator's pause and rebuild live in the slice's control row: every owner, after a handoff or a restart,
    // follows them from its first batch on (projection-control.ts).
    return ProjectionRunner.start(
      { ...definition, name: sliceNames[index]! },
      Database.get(system).store,
      system.scheduler,
      { fence, only, owns, durableControl: true },
    );
  };
  // Checks the backend and the settings against an earlier init, also when this node already has the handle.
  initProvider(sharding, {
    routingName,
    kind: "projection",
    entityTypeName: routingName,
    messageTypeName: KeepProjectionRunning.name,
    options: { ...settings, shardCount: slices, partitioner: new ProjectionSlicePartitioner() },
    behaviorFor: (entityId, fence) => () => {
      // Entity ids other than the slice indexes never come from this module; such an entity runs nothing.
      const index = /^(0|[1-9][0-9]*)$/.test(entityId) ? Number(entityId) : -1;
      if (index < 0 || index >= slices || fence.key.shardId !== index) return new IdleSlice();
      return new ProjectionSliceOwner(
        () => startSlice(index, fence),
        system,
        (runner, running) => {
          if (running) local.set(index, runner);
          else if (local.get(index) === runner) local.delete(index);
        },
      );
    },
  });
  if (existing !== undefined) return existing.handle;

  let timer: Cancellable | null = null;
  let stopped = false;
  const keepAlive = () => {
    if (stopped) return;
    for (let i = 0; i < slices; i++) {
      try {
        sharding.entityRefFor<KeepProjectionRunning>(routingName, String(i)).tell(new KeepProjectionRunning());
      } catch {
        // No owner can be reached right now (no coordinator yet, the system terminating): the next round tries again.
      }
    }
    timer = system.scheduler.scheduleOnce(keepAliveInterval, keepAlive);
  };
  const handle: ShardedProjection = {
    name: definition.name,
    routingName,
    slices,
    sliceNames,
    local: () => new Map(local),
    get stats() {
      return [...local.entries()].sort(([a], [b]) => a - b).map(([, runner]) => runner.stats);
    },
    stopKeepAlive: () => {
      stopped = true;
      timer?.cancel();
    },
  };
  registry.byRoutingName.set(routingName, { definition, handle });
  keepAlive();
  return handle;
}

/** The entity of an id that is no slice (sent by someone else): accepts keep-alives and does nothing. */
class IdleSlice extends AbstractBehavior<ProjectionSliceMessage> {
  receive(): void {}
}
