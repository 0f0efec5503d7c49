/**
 * Cluster-wide operations of a sharded projection: pause, resume and rebuild-from-offset, asked of any node that
 * called initProjection and obeyed by whichever node owns each slice, now or after a handoff or restart.
 *
 * The decision is a row per slice in projection_control (PersistenceStore.setProjectionControl), written by the node
 * asked: it holds no lease and needs none, since it only records the operator's request. The owner reads the row
 * before its first batch, every poll interval and at once when told (ProjectionControlChanged, a hint through
 * sharding); it follows the pause, and carries out a rebuild in one transaction fenced by its shard lease that runs
 * the definition's reset, moves the checkpoint and clears the request (completesRebuildFrom). So a rebuild happens
 * exactly once however often the owner changes, and a stale owner can neither apply it nor lose it.
 */
import type { ActorSystem } from "../../actor/index.ts";
import {
  checkProjectionControlChange,
  Database,
  type ProjectionControl,
  type ProjectionControlChange,
} from "../../persistence/index.ts";
import type { ClusterSharding } from "../cluster-sharding.ts";
import { UnknownShardedProjectionError } from "../errors.ts";
import { shardingHostOf } from "../internal/host.ts";
import {
  ProjectionControlChanged,
  type ProjectionSliceMessage,
  ProjectionSliceReport,
  ReportProjectionSlice,
  ShardedProjections,
} from "./sharded-projection.ts";

/** One slice's control and checkpoint as stored. */
export interface ProjectionSliceControl extends ProjectionControl {
  /** The slice index. */
  readonly slice: number;
  /** The slice's checkpoint (and stats) name. */
  readonly name: string;
  /** Its stored checkpoint, or null before its first batch. */
  readonly checkpoint: number | null;
}

/** The stored control of every slice of a sharded projection. */
export interface ShardedProjectionControl {
  readonly name: string;
  readonly routingName: string;
  readonly slices: readonly ProjectionSliceControl[];
}

function handleOf(system: ActorSystem, name: string) {
  const handle = typeof name === "string" ? ShardedProjections.of(system).named(name) : undefined;
  if (handle === undefined) throw new UnknownShardedProjectionError(typeof name === "string" ? name : "");
  return handle;
}

/** The names of the sharded projections initialised on this node, sorted. */
export function shardedProjectionNames(sharding: ClusterSharding): string[] {
  return [...ShardedProjections.of(shardingHostOf(sharding).system).byRoutingName.values()]
    .map((e) => e.handle.name)
    .sort();
}

/**
 * Reads every slice's control and checkpoint of projection `name`.
 * @throws UnknownShardedProjectionError when this node did not initialise it
 */
export async function readProjectionControl(
  sharding: ClusterSharding,
  name: string,
): Promise<ShardedProjectionControl> {
  const system = shardingHostOf(sharding).system;
  const handle = handleOf(system, name);
  const store = Database.get(system).store;
  const slices: ProjectionSliceControl[] = [];
  for (const [slice, sliceName] of handle.sliceNames.entries()) {
    const control = await store.loadProjectionControl(sliceName);
    slices.push({ slice, name: sliceName, ...control, checkpoint: await store.loadProjectionOffset(sliceName) });
  }
  return { name: handle.name, routingName: handle.routingName, slices };
}

/**
 * Records `change` in every slice's control row, then tells each slice's owner to read it; resolves with the stored
 * control once every row is written (the owners obey within a poll interval; their stats show it).
 * @throws UnknownShardedProjectionError when this node did not initialise it
 * @throws InvalidPersistenceRequestError for a malformed change
 */
export async function changeProjectionControl(
  sharding: ClusterSharding,
  name: string,
  change: ProjectionControlChange,
): Promise<ShardedProjectionControl> {
  const system = shardingHostOf(sharding).system;
  const handle = handleOf(system, name);
  // Checked before any row is written: a bad change must not reach some slices and not others.
  const checked = checkProjectionControlChange(change);
  const store = Database.get(system).store;
  for (const sliceName of handle.sliceNames) await store.setProjectionControl(sliceName, checked);
  for (let i = 0; i < handle.slices; i++) {
    try {
      sharding.entityRefFor<ProjectionSliceMessage>(handle.routingName, String(i)).tell(new ProjectionControlChanged());
    } catch {
      // No owner reachable now: the row is the decision, and the next owner reads it before its first batch.
    }
  }
  return readProjectionControl(sharding, name);
}

/** A slice owner's figures as {@link readProjectionSliceReports} returns them, checked. */
export interface ProjectionSliceFigures {
  /** The owner's runner status (starting, running, paused, stopped, stale). */
  readonly status: "starting" | "running" | "paused" | "stopped" | "stale";
  readonly checkpoint: number;
  readonly latestOffset: number;
  readonly eventsPerSecond: number;
  readonly consecutiveFailures: number;
  readonly lastError: string | null;
  readonly lastErrorAtEpochMs: number | null;
}

const statuses = new Set(["starting", "running", "paused", "stopped", "stale"]);
const whole = (v: number): boolean => Number.isSafeInteger(v) && v >= 0;

/** A peer's report, checked (its fields are typed on the wire; the values are checked here), or null. */
export function figuresOf(report: ProjectionSliceReport): ProjectionSliceFigures | null {
  const { status, checkpoint, latestOffset, eventsPerSecond, consecutiveFailures, lastError, lastErrorAtEpochMs } =
    report;
  if (!statuses.has(status) || !whole(checkpoint) || !whole(latestOffset) || !whole(consecutiveFailures)) return null;
  if (!Number.isFinite(eventsPerSecond) || eventsPerSecond < 0) return null;
  if (lastErrorAtEpochMs !== null && !whole(lastErrorAtEpochMs)) return null;
  return {
    status: status as ProjectionSliceFigures["status"],
    checkpoint,
    latestOffset,
    eventsPerSecond,
    consecutiveFailures,
    lastError: lastError === null ? null : lastError.slice(0, 1_000),
    lastErrorAtEpochMs,
  };
}

/**
 * Asks each slice's owner for its runner's figures (status, rate, last error), through sharding, all at once: by
 * slice index, null for a slice with no owner in this node's plan, whose owner did not answer within `timeoutMs`, or
 * whose answer did not check out.
 * @throws UnknownShardedProjectionError when this node did not initialise it
 */
export async function readProjectionSliceReports(
  sharding: ClusterSharding,
  name: string,
  timeoutMs = 2_000,
): Promise<(ProjectionSliceFigures | null)[]> {
  const handle = handleOf(shardingHostOf(sharding).system, name);
  return Promise.all(
    Array.from({ length: handle.slices }, async (_, i) => {
      if (sharding.ownerFor(handle.routingName, String(i)) === null) return null;
      try {
        const report = await sharding
          .entityRefFor<ProjectionSliceMessage>(handle.routingName, String(i))
          .ask(new ReportProjectionSlice(), ProjectionSliceReport, timeoutMs);
        return figuresOf(report);
      } catch {
        return null;
      }
    }),
  );
}
