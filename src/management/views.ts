/**
 * What the management endpoint shows, as plain JSON values built from the public inspection APIs of cluster
 * membership, sharding, remoting and persistence. Names that come from users (entity types) or peers (addresses,
 * roles) only ever appear as values in arrays, never as object keys, so a type called `__proto__` cannot change an
 * object's prototype on either side of the wire.
 */
import { type ActorSystem, Histogram, type ReadonlyHistogram, type UniqueAddress } from "../actor/index.ts";
import {
  Cluster,
  type ClusterSnapshot,
  type ClusterStats,
  clusterExtensionKey,
  type Member,
  memberStatuses,
} from "../cluster/index.ts";
import { Database, type ProjectionStats, Projections } from "../persistence/index.ts";
import { type RemotingStats, remotingId } from "../remote/index.ts";
import { ClusterSharding, type ShardingStats, type ShardingTypeInspection } from "../sharding/index.ts";

/** One member as this node sees it. */
export interface MemberView {
  readonly address: string;
  readonly hostPort: string;
  readonly uid: string;
  readonly status: string;
  readonly roles: readonly string[];
  /** The application version the member declares, or null (see `enableCluster({ appVersion })`). */
  readonly appVersion: string | null;
  readonly upNumber: number;
  readonly reachable: boolean;
  readonly leader: boolean;
  readonly self: boolean;
}

/** `GET /cluster/members`. */
export interface MembersView {
  readonly self: string;
  readonly selfStatus: string;
  readonly leader: string | null;
  readonly converged: boolean;
  readonly members: readonly MemberView[];
}

/** One shard of `GET /sharding/types/:type/shards`. */
export interface ShardView {
  readonly shard: number;
  readonly owner: string | null;
  readonly inHandoff: boolean;
  /** Live entities of the shard on this node (0 when another node owns it). */
  readonly localEntities: number;
}

/** `GET /sharding/types/:type/shards`. */
export interface TypeShardsView {
  readonly type: string;
  readonly shardCount: number;
  readonly generation: number;
  readonly planAuthor: string | null;
  readonly coordinator: string | null;
  readonly handoffs: readonly number[];
  readonly shards: readonly ShardView[];
}

/** One entry of `GET /sharding/types`. */
export interface TypeSummaryView {
  readonly type: string;
  readonly shardCount: number;
  readonly generation: number;
  readonly planAuthor: string | null;
  readonly allocatedShards: number;
  readonly handoffsInProgress: number;
  readonly localEntities: number;
  readonly persistent: boolean;
  /** Owner address → shard count, as `[owner, count]` pairs sorted by owner. */
  readonly shardsPerOwner: readonly (readonly [string, number])[];
}

/** The cluster extension when membership is enabled, else undefined (never creates it). */
export function clusterOf(system: ActorSystem): Cluster | undefined {
  return system.hasExtension<Cluster>({ key: clusterExtensionKey, create: () => Cluster.get(system) });
}

/** The sharding extension when it was started, else undefined (never creates it). */
export function shardingOf(system: ActorSystem): ClusterSharding | undefined {
  return ClusterSharding.find(system);
}

function memberView(member: Member, snapshot: ClusterSnapshot): MemberView {
  const a = member.uniqueAddress;
  return {
    address: a.toString(),
    hostPort: a.address.hostPort,
    uid: a.uid,
    status: member.status,
    roles: [...member.roles],
    appVersion: member.appVersion ?? null,
    upNumber: member.upNumber,
    reachable: !snapshot.unreachable.some((u) => u.equals(a)),
    leader: snapshot.leader?.equals(a) === true,
    self: snapshot.self.equals(a),
  };
}

/** `GET /cluster/members` from a cluster snapshot. */
export function membersView(snapshot: ClusterSnapshot): MembersView {
  return {
    self: snapshot.self.toString(),
    selfStatus: snapshot.selfStatus,
    leader: snapshot.leader?.toString() ?? null,
    converged: snapshot.converged,
    members: snapshot.members.map((m) => memberView(m, snapshot)),
  };
}

/** Counts of members by status (every status present, 0 when none). */
export function membersByStatus(snapshot: ClusterSnapshot): [string, number][] {
  return memberStatuses.map((s) => [s, snapshot.members.filter((m) => m.status === s).length]);
}

const text = (a: UniqueAddress | null): string | null => (a === null ? null : a.toString());

function sum(values: Iterable<number>): number {
  let n = 0;
  for (const v of values) n += v;
  return n;
}

/** One entry of `GET /sharding/types`. */
export function typeSummary(view: ShardingTypeInspection): TypeSummaryView {
  const perOwner = new Map<string, number>();
  for (const owner of view.allocations.values()) {
    const key = owner.toString();
    perOwner.set(key, (perOwner.get(key) ?? 0) + 1);
  }
  return {
    type: view.name,
    shardCount: view.shardCount,
    generation: view.generation,
    planAuthor: text(view.planAuthor),
    allocatedShards: view.allocations.size,
    handoffsInProgress: view.handoffs.length,
    localEntities: sum(view.localEntities.values()),
    persistent: view.leases !== null,
    shardsPerOwner: [...perOwner].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)),
  };
}

/** One shard of a type. */
export function shardView(view: ShardingTypeInspection, shard: number): ShardView {
  return {
    shard,
    owner: text(view.allocations.get(shard) ?? null),
    inHandoff: view.handoffs.includes(shard),
    localEntities: view.localEntities.get(shard) ?? 0,
  };
}

/** `GET /sharding/types/:type/shards`: every shard, ascending. */
export function typeShardsView(view: ShardingTypeInspection): TypeShardsView {
  const shards: ShardView[] = [];
  const handoffs = new Set(view.handoffs);
  for (let shard = 0; shard < view.shardCount; shard++) {
    shards.push({
      shard,
      owner: text(view.allocations.get(shard) ?? null),
      inHandoff: handoffs.has(shard),
      localEntities: view.localEntities.get(shard) ?? 0,
    });
  }
  return {
    type: view.name,
    shardCount: view.shardCount,
    generation: view.generation,
    planAuthor: text(view.planAuthor),
    coordinator: text(view.coordinator),
    handoffs: [...view.handoffs],
    shards,
  };
}

/** Persistence counters of the store in use, when its backend keeps any (PostgreSQL does). */
export interface PersistenceStatsView {
  readonly backend: string;
  readonly resilience: Readonly<Record<string, number>> | null;
  readonly groupCommit: Readonly<Record<string, number>> | null;
  /**
   * The projections running on this node (Projections.get(system).stats: lag, events/s, last error, status), the
   * slices of sharded projections this node owns among them; empty when none runs here.
   */
  readonly projections: readonly ProjectionStats[];
}

/** The persistence extension's store counters, or null when persistence was never used on this system. */
export function persistenceStats(system: ActorSystem): PersistenceStatsView | null {
  const database = system.hasExtension<Database>({ key: "movie.persistence.database", create: (s) => Database.get(s) });
  if (database === undefined) return null;
  const store: object = database.store;
  return {
    backend: database.backendName,
    resilience: numericRecord(store, "resilienceStats"),
    groupCommit: numericRecord(store, "groupCommitStats"),
    projections:
      system.hasExtension<Projections>({ key: "movie.persistence.projections", create: (s) => Projections.get(s) })
        ?.stats ?? [],
  };
}

/** The persistence histograms of `system`, or null when persistence was never used on it. */
export interface PersistenceHistograms {
  readonly append: ReadonlyHistogram;
  readonly save: ReadonlyHistogram;
  /** Items per group-commit statement, by kind of write, when the store in use groups writes (PostgreSQL does). */
  readonly batchSize: readonly (readonly [kind: "append" | "state", histogram: ReadonlyHistogram])[];
}

/** The write latency histograms of `system`'s Database and the group-commit batch sizes of its store. */
export function persistenceHistograms(system: ActorSystem): PersistenceHistograms | null {
  const database = system.hasExtension<Database>({ key: "movie.persistence.database", create: (s) => Database.get(s) });
  if (database === undefined) return null;
  const store: object = database.store;
  const batchSize: (readonly ["append" | "state", ReadonlyHistogram])[] = [];
  // Duck-typed like the counters above: a backend without a group commit has no such getter.
  for (const [kind, getter] of [
    ["append", "groupCommitBatchSize"],
    ["state", "stateGroupCommitBatchSize"],
  ] as const) {
    const value: unknown = getter in store ? (store as Record<string, unknown>)[getter] : undefined;
    if (value instanceof Histogram) batchSize.push([kind, value]);
  }
  return { append: database.writeLatency.append, save: database.writeLatency.save, batchSize };
}

/** The numeric fields of `store[getter]` when the store has such a getter (a backend's own counters). */
function numericRecord(store: object, getter: string): Record<string, number> | null {
  if (!(getter in store)) return null;
  const value: unknown = (store as Record<string, unknown>)[getter];
  if (typeof value !== "object" || value === null) return null;
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(value)) if (typeof v === "number") out[k] = v;
  return out;
}

/** `GET /stats`: every counter this node keeps, by layer (null for a layer that is not enabled). */
export interface StatsView {
  readonly actor: { readonly deadLetters: number; readonly mailboxOverflows: number; readonly pendingAsks: number };
  readonly remoting: RemotingStats | null;
  readonly cluster: ClusterStats | null;
  readonly sharding: ShardingStats | null;
  readonly persistence: PersistenceStatsView | null;
}

/** Every counter of `system`. */
export function statsView(system: ActorSystem): StatsView {
  return {
    actor: {
      deadLetters: system.deadLetterCount,
      mailboxOverflows: system.mailboxOverflowCount,
      pendingAsks: system.pendingAskCount,
    },
    remoting: system.hasExtension(remotingId)?.stats ?? null,
    cluster: clusterOf(system)?.stats ?? null,
    sharding: shardingOf(system)?.stats ?? null,
    persistence: persistenceStats(system),
  };
}
