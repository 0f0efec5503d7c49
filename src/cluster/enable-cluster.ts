import { ActorSystem } from "../actor/index.ts";
import { Remoting } from "../remote/index.ts";
import { Cluster, clusterExtensionKey } from "./cluster.ts";
import { ClusterConfigurationError } from "./errors.ts";
import { type ClusterSettings, resolveClusterSettings } from "./settings.ts";

declare module "../actor/actor-system.ts" {
  interface ActorSystem {
    /**
     * Starts cluster membership on this system: spawns `/system/cluster`, joins through the seed nodes (or forms a
     * cluster when the seed list is empty or names this node) and starts gossip and heartbeats. Needs remoting
     * first. Calling it again returns the same Cluster.
     * @throws ClusterConfigurationError (rejects) for invalid settings or when remoting is not enabled
     */
    enableCluster(settings?: ClusterSettings): Promise<Cluster>;
  }
}

ActorSystem.prototype.enableCluster = async function enableCluster(
  this: ActorSystem,
  settings: ClusterSettings = {},
): Promise<Cluster> {
  const existing = this.hasExtension<Cluster>({ key: clusterExtensionKey, create: () => Cluster.get(this) });
  if (existing !== undefined) return existing;
  let remoting: Remoting;
  try {
    remoting = Remoting.get(this);
  } catch {
    throw new ClusterConfigurationError(
      "remoting",
      "cluster membership requires remoting; await system.enableRemoting({ host, port }) before enableCluster",
    );
  }
  const resolved = resolveClusterSettings(settings, this.name);
  return this.extension(Cluster.extensionId(resolved, remoting));
};
