/**
 * The management endpoint's projection routes (docs/operations.md, "Projections"): what runs where, and pause /
 * resume / rebuild-from-offset. A sharded projection (sharding.initProjection) is operated cluster-wide through its
 * control rows (sharding/persistent/projection-control.ts), so any node that initialised it can be asked; a
 * projection started with Projections.start on this node is operated on this node only, in memory. Everything from
 * the request is checked here: the name's length, the action, the query parameters and the offset's digits.
 */
import type { ActorSystem } from "../actor/index.ts";
import { errorText } from "../actor/untrusted.ts";
import { Database, type ProjectionStats, Projections } from "../persistence/index.ts";
import type { ClusterSharding } from "../sharding/index.ts";
import type { ProjectionSliceFigures, ShardedProjectionControl } from "../sharding/persistent/index.ts";
import { ManagementRequestError } from "./errors.ts";
import { clusterOf, shardingOf } from "./views.ts";

/** The projection operations an operator can ask for. */
export type ProjectionAction = "pause" | "resume" | "rebuild";

/** The sharding projection methods, present once `movie/sharding/persistent` is loaded. */
interface ProjectionMethods {
  projectionNames(): string[];
  projectionControl(name: string): Promise<ShardedProjectionControl>;
  pauseProjection(name: string): Promise<ShardedProjectionControl>;
  resumeProjection(name: string): Promise<ShardedProjectionControl>;
  rebuildProjection(name: string, fromOffset: number): Promise<ShardedProjectionControl>;
  projectionSliceReports(name: string, timeoutMs?: number): Promise<(ProjectionSliceFigures | null)[]>;
}

function refuse(status: number, code: string, message: string): never {
  throw new ManagementRequestError(status, code, message);
}

/** The sharding methods of projections on this node, or null when sharding or its persistent module is not loaded. */
function projectionMethods(system: ActorSystem): ProjectionMethods | null {
  const sharding: (ClusterSharding & Partial<ProjectionMethods>) | undefined = shardingOf(system);
  if (sharding === undefined || typeof sharding.projectionNames !== "function") return null;
  return sharding as ClusterSharding & ProjectionMethods;
}

function localRunners(system: ActorSystem): Projections | undefined {
  return system.hasExtension<Projections>({ key: "movie.persistence.projections", create: (s) => Projections.get(s) });
}

/** A projection name from a path segment. @throws ManagementRequestError 400 beyond 1..256 characters */
export function projectionNameOf(text: string): string {
  if (text.length === 0 || text.length > 256) {
    refuse(400, "InvalidProjectionName", "a projection name has 1 to 256 characters");
  }
  return text;
}

/**
 * Where one projection, or one slice of a sharded one, is and how it does, as this node sees it: the owner from the
 * sharding plan, the checkpoint and the operator's control from the database, the feed's latest offset, and the
 * runner's own figures (status, events/s, last error): read here for a slice this node runs, else asked of the owner
 * through sharding (`reportedBy: "owner"`). A slice whose owner did not answer has status "remote" (or "paused",
 * "unowned") and no rate or error.
 */
export interface ProjectionSliceView {
  readonly projection: string;
  /** The slice index, or null for a projection started with Projections.start on this node. */
  readonly slice: number | null;
  /** The checkpoint (and stats) name. */
  readonly name: string;
  readonly sharded: boolean;
  /** The owning node's address, or null when the slice has no owner in this node's plan. */
  readonly owner: string | null;
  /** Whether it runs on this node. */
  readonly local: boolean;
  /** Where the runner figures come from: this node, the owner (asked through sharding), or none (no answer). */
  readonly reportedBy: "this-node" | "owner" | null;
  /**
   * running; paused; failed (its last batch failed and it is retrying); starting, stopped or stale (fenced out) as
   * the runner says; remote (the owner did not answer); unowned (no owner in this node's plan).
   */
  readonly status: "running" | "paused" | "failed" | "starting" | "stopped" | "stale" | "remote" | "unowned";
  /** The committed checkpoint, or null before the first batch. */
  readonly checkpoint: number | null;
  /** The feed's latest offset. */
  readonly latestOffset: number;
  /** latestOffset − checkpoint (0 when caught up). */
  readonly lag: number;
  /** Events handled per second over the last 10 s (null unless it runs here; 0 in its first second). */
  readonly eventsPerSecond: number | null;
  readonly lastError: string | null;
  readonly lastErrorAtEpochMs: number | null;
  /** The operator's stored pause (sharded) or this runner's pause. */
  readonly paused: boolean;
  /** A rebuild asked for and not carried out yet. */
  readonly rebuildFrom: number | null;
}

/** The runner status as the management view reports it. */
function localStatus(stats: Pick<ProjectionStats, "status" | "consecutiveFailures">): ProjectionSliceView["status"] {
  if (stats.status === "running" && stats.consecutiveFailures > 0) return "failed";
  return stats.status;
}

/** Every projection and slice known on this node (sharded ones first, by name and slice), read now. */
export async function projectionSlices(system: ActorSystem): Promise<ProjectionSliceView[]> {
  const methods = projectionMethods(system);
  const runners = localRunners(system);
  const names = methods?.projectionNames() ?? [];
  if (names.length === 0 && (runners?.stats.length ?? 0) === 0) return [];
  const latest = await Database.get(system).store.latestOffset();
  const self = clusterOf(system)?.selfAddress.toString() ?? null;
  const sharding = shardingOf(system);
  const out: ProjectionSliceView[] = [];
  const shardedNames = new Set<string>();
  for (const name of names) {
    const control = await methods!.projectionControl(name);
    const localStats = control.slices.map((slice) => {
      const stats = runners?.get(slice.name)?.stats;
      return stats !== undefined && stats.status !== "stopped" && stats.status !== "stale" ? stats : null;
    });
    // Only the slices that run elsewhere are asked of their owners.
    const reports = localStats.every((s) => s !== null)
      ? control.slices.map(() => null)
      : await methods!.projectionSliceReports(name).catch(() => control.slices.map(() => null));
    for (const [i, slice] of control.slices.entries()) {
      shardedNames.add(slice.name);
      const owner = sharding?.ownerFor(control.routingName, String(slice.slice))?.toString() ?? null;
      const stats = localStats[i] ?? null;
      const figures = stats ?? reports[i] ?? null;
      const checkpoint = stats !== null ? stats.checkpoint : slice.checkpoint;
      out.push({
        projection: control.name,
        slice: slice.slice,
        name: slice.name,
        sharded: true,
        owner: stats !== null ? (self ?? owner) : owner,
        local: stats !== null,
        reportedBy: stats !== null ? "this-node" : figures !== null ? "owner" : null,
        status:
          figures !== null ? localStatus(figures) : slice.paused ? "paused" : owner === null ? "unowned" : "remote",
        checkpoint,
        latestOffset: Math.max(latest, checkpoint ?? 0),
        lag: Math.max(0, latest - (checkpoint ?? 0)),
        eventsPerSecond: figures?.eventsPerSecond ?? null,
        lastError: figures?.lastError ?? null,
        lastErrorAtEpochMs: figures?.lastErrorAtEpochMs ?? null,
        paused: slice.paused,
        rebuildFrom: slice.rebuildFrom,
      });
    }
  }
  for (const stats of runners?.stats ?? []) {
    if (shardedNames.has(stats.name)) continue;
    out.push({
      projection: stats.name,
      slice: null,
      name: stats.name,
      sharded: false,
      owner: self,
      local: true,
      reportedBy: "this-node",
      status: localStatus(stats),
      checkpoint: stats.checkpoint,
      latestOffset: Math.max(latest, stats.checkpoint),
      lag: Math.max(0, latest - stats.checkpoint),
      eventsPerSecond: stats.eventsPerSecond,
      lastError: stats.lastError,
      lastErrorAtEpochMs: stats.lastErrorAtEpochMs,
      paused: stats.status === "paused",
      rebuildFrom: stats.pendingRebuildFrom,
    });
  }
  return out;
}

/**
 * `GET /projections`: the sharded projections initialised here (stored control), the runners on this node, and
 * every projection and slice with its owner, status, lag, rate and last error (`slices`).
 */
export async function projectionsView(system: ActorSystem): Promise<Record<string, unknown>> {
  const methods = projectionMethods(system);
  const sharded: ShardedProjectionControl[] = [];
  for (const name of methods?.projectionNames() ?? []) sharded.push(await methods!.projectionControl(name));
  return { sharded, running: localRunners(system)?.stats ?? [], slices: await projectionSlices(system) };
}

/** `GET /projections/:name`. @throws ManagementRequestError 404 for a projection unknown here */
export async function projectionView(system: ActorSystem, name: string): Promise<Record<string, unknown>> {
  const methods = projectionMethods(system);
  const running: ProjectionStats[] = (localRunners(system)?.stats ?? []).filter(
    (s) => s.name === name || s.name.startsWith(`${name}/slice-`),
  );
  const slices = async () => (await projectionSlices(system)).filter((s) => s.projection === name);
  if (methods?.projectionNames().includes(name)) {
    return { ...(await methods.projectionControl(name)), sharded: true, running, slices: await slices() };
  }
  if (running.length > 0) return { name, sharded: false, running, slices: await slices() };
  return unknown(name);
}

/** Refuses any query parameter (a read that takes none). @throws ManagementRequestError 400 */
export function noParameters(query: URLSearchParams, what: string): void {
  for (const _ of query.keys()) refuse(400, "UnknownParameter", `${what} takes no query parameters`);
}

function unknown(name: string): never {
  return refuse(
    404,
    "UnknownProjection",
    `no projection ${JSON.stringify(name.slice(0, 100))} runs or was initialised on this node; GET /projections lists them`,
  );
}

/**
 * The rebuild offset of `?from=N`, the only parameter a rebuild takes (pause and resume take none).
 * @throws ManagementRequestError 400 for any other parameter, a repeated or missing `from`, or not a whole number
 */
export function actionOffset(action: ProjectionAction, query: URLSearchParams): number | null {
  const keys = [...query.keys()];
  if (action !== "rebuild") {
    if (keys.length > 0) refuse(400, "UnknownParameter", `${action} takes no query parameters`);
    return null;
  }
  if (keys.some((k) => k !== "from"))
    refuse(400, "UnknownParameter", "the only query parameter of a rebuild is from=<offset>");
  const from = query.getAll("from");
  if (from.length !== 1) refuse(400, "InvalidOffset", "a rebuild needs exactly one from=<offset>");
  const text = from[0]!;
  const offset = /^(0|[1-9][0-9]{0,15})$/.test(text) ? Number(text) : -1;
  if (!Number.isSafeInteger(offset) || offset < 0) {
    refuse(400, "InvalidOffset", "from must be a feed offset: a whole number from 0 to 2^53 - 1");
  }
  return offset;
}

/**
 * Carries out `action` on projection `name`: cluster-wide for a sharded projection initialised here, else on this
 * node's runner of that name. Returns the audit target and the 202 body.
 * @throws ManagementRequestError 404 for a projection unknown here, 409 when the store refuses
 */
export async function projectionAction(
  system: ActorSystem,
  name: string,
  action: ProjectionAction,
  offset: number | null,
): Promise<{ readonly target: string; readonly body: Record<string, unknown> }> {
  const target = `${name}${offset === null ? "" : ` from ${offset}`}`;
  const methods = projectionMethods(system);
  if (methods?.projectionNames().includes(name)) {
    let control: ShardedProjectionControl;
    try {
      control =
        action === "pause"
          ? await methods.pauseProjection(name)
          : action === "resume"
            ? await methods.resumeProjection(name)
            : await methods.rebuildProjection(name, offset!);
    } catch (error) {
      return refuse(409, "ProjectionControlFailed", errorText(error));
    }
    return { target, body: { accepted: true, action, scope: "cluster", ...control } };
  }
  const runner = localRunners(system)?.get(name);
  if (runner === undefined) return unknown(name);
  if (action === "pause") runner.pause();
  else if (action === "resume") runner.resume();
  else {
    // Resolves once the checkpoint moved; a rebuild that fails (a store error) is in the runner's lastError.
    runner.rebuildFrom(offset!).catch(() => {});
  }
  return { target, body: { accepted: true, action, scope: "node", name, stats: runner.stats } };
}
