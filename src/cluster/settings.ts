import { Address } from "../actor/index.ts";
import { checkSettingKeys, type SettingsShapeOf } from "../actor/settings-keys.ts";
import { describe } from "../actor/untrusted.ts";
import { isAppVersion } from "./app-version.ts";
import { ClusterConfigurationError } from "./errors.ts";
import type { OnDowned } from "./events.ts";
import { maxMembersDefault } from "./gossip/merge.ts";
import { isRoleOrAuthor } from "./member.ts";

/** Options of `system.enableCluster`. Durations are milliseconds. */
export interface ClusterSettings {
  /**
   * Seed nodes as `host:port` (same actor-system name as this node) or `movie.tcp://system@host:port`. A node whose
   * list is empty or contains its own address starts Up and forms a cluster; others join through the seeds.
   * Default [].
   */
  seedNodes?: readonly string[];
  /** Roles of this node (non-empty, without whitespace or NUL; stored sorted and unique). Default []. */
  roles?: readonly string[];
  /**
   * The version of the application this node runs (1-64 letters, digits, `.`, `+`, `_`, `-`; `1.10.0` is newer than
   * `1.9.2`). While members of two versions host an entity type, sharding moves shards only onto members of the
   * newest and makes no voluntary rebalance, so a rolling update moves each shard once (docs/sharding.md, "Rolling updates").
   * Default: the `MOVIE_APP_VERSION` environment variable, else none (older than any version).
   */
  appVersion?: string;
  /** Name every cluster message carries; messages with another name are refused. Default "movie-cluster". */
  clusterName?: string;
  /** How often a joining node repeats its join to the seeds. Default 1,000 ms. */
  joinRetryInterval?: number;
  /** How often a member gossips its state. Default 1,000 ms. */
  gossipInterval?: number;
  /** How many peers get each gossip round. Default 3. */
  gossipFanout?: number;
  /** Capacity of the membership table, live records plus tombstones. Default 10,000. */
  maxMembers?: number;
  /** The heartbeat failure detector. */
  failureDetector?: {
    /** How often each peer is sent a heartbeat. Default 1,000 ms. */
    heartbeatInterval?: number;
    /** How long without a heartbeat ack before a peer is unreachable; must exceed the interval. Default 5,000 ms. */
    heartbeatTimeout?: number;
  };
  /** Default timeout of `leave()`, `awaitUp()` and `awaitRemoved()`. Default 10,000 ms for awaits, 60,000 for leave. */
  leaveTimeout?: number;
  /**
   * What this node does when it learns from its leader that it was downed while alive (its own record Down, or
   * Removed without a graceful leave). Either way a `SelfDowned` event is published first and sharding stops every
   * local entity; then `"terminate"` terminates the actor system (a supervisor restarts the process, which rejoins
   * with a new uid) and `"leave"` only stops this node's membership (no more gossip, heartbeats or joins) and keeps
   * the system running for the application to decide. Default `"terminate"`, as Akka's
   * `run-coordinated-shutdown-when-down = on`: a downed uid can never rejoin, so the process is of no further use
   * to the cluster, and a half-alive node is the more dangerous outcome.
   */
  onDowned?: OnDowned;
}

/** Every key of {@link ClusterSettings}, with the failure detector's own. */
const clusterSettingsShape = {
  seedNodes: true,
  roles: true,
  appVersion: true,
  clusterName: true,
  joinRetryInterval: true,
  gossipInterval: true,
  gossipFanout: true,
  maxMembers: true,
  failureDetector: { heartbeatInterval: true, heartbeatTimeout: true },
  leaveTimeout: true,
  onDowned: true,
} as const satisfies SettingsShapeOf<ClusterSettings>;

/** Settings with every default filled in and validated. */
export interface ResolvedClusterSettings {
  readonly seedNodes: readonly Address[];
  readonly roles: readonly string[];
  /** Undefined when the node declares no version. */
  readonly appVersion: string | undefined;
  readonly clusterName: string;
  readonly joinRetryIntervalMs: number;
  readonly gossipIntervalMs: number;
  readonly gossipFanout: number;
  readonly maxMembers: number;
  readonly heartbeatIntervalMs: number;
  readonly heartbeatTimeoutMs: number;
  readonly leaveTimeoutMs: number;
  readonly onDowned: OnDowned;
}

/** The defaults of docs/protocol.md §4.10. */
export const clusterDefaults = {
  clusterName: "movie-cluster",
  joinRetryIntervalMs: 1_000,
  gossipIntervalMs: 1_000,
  gossipFanout: 3,
  maxMembers: maxMembersDefault,
  heartbeatIntervalMs: 1_000,
  heartbeatTimeoutMs: 5_000,
  leaveTimeoutMs: 60_000,
  onDowned: "terminate",
} as const;

function duration(setting: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isFinite(value) || value <= 0) {
    throw new ClusterConfigurationError(setting, `${describe(value)} ms; use a finite number of milliseconds above 0`);
  }
  return value;
}

function count(setting: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || (value as number) < 1) {
    throw new ClusterConfigurationError(setting, `${describe(value)}; use an integer of 1 or more`);
  }
  return value as number;
}

function seed(text: unknown, systemName: string): Address {
  if (typeof text !== "string") {
    throw new ClusterConfigurationError("seedNodes", `${describe(text)} is not a string; use "host:port"`);
  }
  const hostPort = /^([^\s/@#:]+|\[[0-9a-fA-F:]+\]):(\d{1,5})$/.exec(text);
  let address: Address | null = null;
  if (hostPort !== null) {
    address = Address.tcp(systemName, hostPort[1]!, Number(hostPort[2]));
  } else {
    try {
      address = Address.parse(text);
    } catch {
      address = null;
    }
  }
  if (address === null || address.protocol !== Address.tcpProtocol || address.port === null) {
    throw new ClusterConfigurationError(
      "seedNodes",
      `"${text}" is not a seed address; use "host:port" or "movie.tcp://system@host:port"`,
    );
  }
  if (address.port < 1 || address.port > 65535) {
    throw new ClusterConfigurationError("seedNodes", `"${text}" has port ${address.port}; use 1-65535`);
  }
  return address;
}

/**
 * Validates `settings` and fills in the defaults; `systemName` completes `host:port` seeds.
 * @throws ClusterConfigurationError naming the first invalid setting
 * @throws UnknownSettingError for a key no setting has (e.g. `heartbeatInterval`, which is under `failureDetector`)
 */
export function resolveClusterSettings(settings: ClusterSettings, systemName: string): ResolvedClusterSettings {
  if (settings === null || typeof settings !== "object") {
    throw new ClusterConfigurationError("settings", 'expected an object such as { seedNodes: ["127.0.0.1:2551"] }');
  }
  checkSettingKeys("enableCluster", settings, clusterSettingsShape);
  const seeds = settings.seedNodes ?? [];
  if (!Array.isArray(seeds)) throw new ClusterConfigurationError("seedNodes", 'expected an array of "host:port"');
  const roles = settings.roles ?? [];
  // NUL too (it is not whitespace): every peer refuses a record with such a role (memberFromJSON), so the node could
  // never join.
  if (!Array.isArray(roles) || roles.some((r) => !isRoleOrAuthor(r) || /\s/.test(r))) {
    throw new ClusterConfigurationError("roles", "expected an array of non-empty role names without whitespace or NUL");
  }
  const appVersion = resolveAppVersion(settings.appVersion);
  const clusterName = settings.clusterName ?? clusterDefaults.clusterName;
  if (typeof clusterName !== "string" || !/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(clusterName)) {
    throw new ClusterConfigurationError(
      "clusterName",
      `${describe(clusterName)}; use 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit`,
    );
  }
  const detector = settings.failureDetector ?? {};
  if (typeof detector !== "object" || detector === null) {
    throw new ClusterConfigurationError("failureDetector", "expected { heartbeatInterval, heartbeatTimeout }");
  }
  const heartbeatIntervalMs = duration(
    "failureDetector.heartbeatInterval",
    detector.heartbeatInterval,
    clusterDefaults.heartbeatIntervalMs,
  );
  const heartbeatTimeoutMs = duration(
    "failureDetector.heartbeatTimeout",
    detector.heartbeatTimeout,
    clusterDefaults.heartbeatTimeoutMs,
  );
  if (heartbeatTimeoutMs <= heartbeatIntervalMs) {
    throw new ClusterConfigurationError(
      "failureDetector.heartbeatTimeout",
      `${heartbeatTimeoutMs} ms must be greater than heartbeatInterval ${heartbeatIntervalMs} ms`,
    );
  }
  const onDowned = settings.onDowned ?? clusterDefaults.onDowned;
  if (onDowned !== "leave" && onDowned !== "terminate") {
    throw new ClusterConfigurationError("onDowned", 'use "terminate" (the default) or "leave"');
  }
  return {
    onDowned,
    seedNodes: seeds.map((s) => seed(s, systemName)),
    roles: [...new Set(roles as string[])].sort(),
    appVersion,
    clusterName,
    joinRetryIntervalMs: duration("joinRetryInterval", settings.joinRetryInterval, clusterDefaults.joinRetryIntervalMs),
    gossipIntervalMs: duration("gossipInterval", settings.gossipInterval, clusterDefaults.gossipIntervalMs),
    gossipFanout: count("gossipFanout", settings.gossipFanout, clusterDefaults.gossipFanout),
    maxMembers: count("maxMembers", settings.maxMembers, clusterDefaults.maxMembers),
    heartbeatIntervalMs,
    heartbeatTimeoutMs,
    leaveTimeoutMs: duration("leaveTimeout", settings.leaveTimeout, clusterDefaults.leaveTimeoutMs),
  };
}

/**
 * The setting, else `MOVIE_APP_VERSION` (a deployment sets it per image without a code change), else none.
 * @throws ClusterConfigurationError when either is not a valid version
 */
function resolveAppVersion(setting: unknown): string | undefined {
  const rule = "use 1-64 letters, digits, '.', '+', '_' or '-', starting with a letter or digit, such as 1.4.2";
  if (setting !== undefined) {
    if (!isAppVersion(setting)) throw new ClusterConfigurationError("appVersion", `${describe(setting)}; ${rule}`);
    return setting;
  }
  const fromEnvironment = process.env.MOVIE_APP_VERSION;
  if (fromEnvironment === undefined || fromEnvironment === "") return undefined;
  if (!isAppVersion(fromEnvironment)) {
    throw new ClusterConfigurationError(
      "appVersion",
      `the environment variable MOVIE_APP_VERSION is ${describe(fromEnvironment)}; ${rule}`,
    );
  }
  return fromEnvironment;
}
