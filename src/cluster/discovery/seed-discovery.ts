/**
 * Seed discovery beyond a static list: a {@link SeedDiscovery} answers the `host:port` seeds it finds now, and
 * {@link enableClusterWithDiscovery} resolves them before joining and again every join retry while this node is
 * still Joining (a headless service's records fill in as pods start). When the answer names this node, the rule of
 * a static list would make every node form its own cluster; instead only the lowest `host:port` found keeps itself as
 * a seed (it forms the cluster) and every other node joins through the rest — the answers must therefore be complete
 * before the first node decides, which `minSeeds` (default 1) enforces.
 */
import type { ActorSystem } from "../../actor/index.ts";
import { errorText } from "../../actor/untrusted.ts";
import type { Cluster } from "../cluster.ts";
import { ClusterConfigurationError } from "../errors.ts";
import type { ClusterSettings } from "../settings.ts";

/** Finds seeds now: `host:port` strings (IPv6 hosts in brackets). May reject (the caller retries). */
export interface SeedDiscovery {
  /** The seeds as of now; called again while joining, so a changed DNS answer is picked up. */
  resolve(): Promise<readonly string[]>;
}

/** A fixed list (what `seedNodes` does), for tests and for composing. */
export class StaticSeedDiscovery implements SeedDiscovery {
  constructor(private readonly seeds: readonly string[]) {}
  /** The fixed list, copied. */
  resolve(): Promise<readonly string[]> {
    return Promise.resolve([...this.seeds]);
  }
}

/** Options of {@link enableClusterWithDiscovery}. */
export interface DiscoveryJoinOptions extends Omit<ClusterSettings, "seedNodes"> {
  readonly discovery: SeedDiscovery;
  /** Seeds an answer must hold before this node decides whether it forms the cluster (default 1). */
  readonly minSeeds?: number;
  /** How long to keep resolving before giving up on the first answer, ms (default 60,000). */
  readonly discoveryTimeout?: number;
}

/** `host:port` → a sort key that orders IPv4 numerically and ports numerically. */
function order(a: string, b: string): number {
  const key = (s: string): string => {
    const i = s.lastIndexOf(":");
    const host = s.slice(0, i).replace(/^\[|\]$/g, "");
    const v4 = /^(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(host);
    const h =
      v4 === null
        ? host
        : v4
            .slice(1)
            .map((x) => x.padStart(3, "0"))
            .join(".");
    return `${h}|${s.slice(i + 1).padStart(5, "0")}`;
  };
  const ka = key(a);
  const kb = key(b);
  return ka < kb ? -1 : ka > kb ? 1 : 0;
}

/**
 * The seeds this node joins through, from what discovery found: without itself, unless it is the lowest of the
 * answer (then the answer as it is, so the node forms the cluster). Sorted and unique.
 */
export function seedsFor(selfHostPort: string, found: readonly string[]): string[] {
  const unique = [...new Set(found)].sort(order);
  if (unique.length === 0) return [];
  if (unique[0] === selfHostPort) return unique;
  return unique.filter((s) => s !== selfHostPort);
}

/**
 * Resolves seeds through `options.discovery` (retrying every join-retry interval until an answer holds `minSeeds`),
 * enables cluster membership with them, and keeps re-resolving while this node is Joining.
 * @throws ClusterConfigurationError (rejects) when no answer came within `discoveryTimeout`, or for bad options
 */
export async function enableClusterWithDiscovery(system: ActorSystem, options: DiscoveryJoinOptions): Promise<Cluster> {
  const { discovery, minSeeds = 1, discoveryTimeout = 60_000, ...settings } = options;
  if (typeof discovery?.resolve !== "function") {
    throw new ClusterConfigurationError("discovery", "expected an object with resolve(): Promise<string[]>");
  }
  if (!Number.isSafeInteger(minSeeds) || minSeeds < 1) {
    throw new ClusterConfigurationError("minSeeds", "expected a whole number of 1 or more");
  }
  const self = system.address.hostPort;
  if (self === "") throw new ClusterConfigurationError("remoting", "seed discovery needs remoting enabled first");
  const retryMs = settings.joinRetryInterval ?? 1_000;
  const scheduler = system.scheduler;
  const pause = (ms: number) => new Promise<void>((resolve) => scheduler.scheduleOnce(ms, resolve));
  const started = scheduler.now();
  let lastProblem = "no answer yet";
  const lookup = async (): Promise<string[] | null> => {
    try {
      const found = await discovery.resolve();
      if (!Array.isArray(found) || !found.every((s) => typeof s === "string")) {
        lastProblem = "discovery answered something other than an array of strings";
        return null;
      }
      return [...found];
    } catch (error) {
      lastProblem = errorText(error);
      return null;
    }
  };
  let found: string[] | null = null;
  for (;;) {
    found = await lookup();
    if (found !== null && found.length >= minSeeds) break;
    if (found !== null) lastProblem = `${found.length} seeds found, ${minSeeds} needed`;
    if (scheduler.now() - started > discoveryTimeout) {
      throw new ClusterConfigurationError("discovery", `no seeds within ${discoveryTimeout} ms: ${lastProblem}`);
    }
    await pause(retryMs);
  }
  const cluster = await system.enableCluster({ ...settings, seedNodes: seedsFor(self, found) });
  system.log.info({ seeds: seedsFor(self, found), found }, "seed discovery: joining");
  // Re-resolve while Joining: a seed that was not up yet may be now, or the answer may have grown.
  const refresh = async (): Promise<void> => {
    while (cluster.selfStatus === "Joining" && !system.isTerminated) {
      await pause(retryMs);
      const again = await lookup();
      if (again !== null && again.length >= minSeeds && cluster.selfStatus === "Joining") {
        try {
          cluster.updateSeeds(seedsFor(self, again).filter((s) => s !== self));
        } catch (error) {
          system.log.warn(
            { error: errorText(error) },
            "seed discovery: an answer held an invalid seed; kept the last seeds",
          );
        }
      }
    }
  };
  void refresh();
  return cluster;
}
