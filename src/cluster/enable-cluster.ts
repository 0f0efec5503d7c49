import { ActorSystem } from "../actor/index.ts";
import { Remoting } from "../remote/index.ts";
import { Cluster, clusterExtensionKey } from "./cluster.ts";
import { ClusterConfigurationError } from "./errors.ts";
import { watchSeedContact } from "./seed-contact.ts";
import { type ClusterSettings, resolveClusterSettings } from "./settings.ts";

declare module "../actor/actor-system.ts" {
  interface ActorSystem {
    /**
     * Starts cluster membership on this system: spawns `/system/cluster`, joins through the seed nodes (or forms a
     * cluster when the seed list is empty or names this node) and starts gossip and heartbeats. Needs remoting
     * first. Calling it again returns the same Cluster. A joining node waits for the first contact with its seeds
     * (at most twice the handshake timeout; a seed that is not up yet does not hold it): nodes of one cluster share
     * one actor-system name, and a seed that refuses this node for its system or cluster name fails the call.
     * @throws ClusterConfigurationError (rejects) for invalid settings, when remoting is not enabled, or when a seed
     *   runs an actor system of another name (or another cluster name); the cluster is stopped then
     * @throws UnknownSettingError (rejects) for a key no setting has
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
  const self = remoting.selfAddress.address;
  const contact = watchSeedContact(
    remoting,
    resolved.seedNodes.filter((seed) => !seed.equals(self)),
    this.name,
    this.scheduler,
    2 * remoting.settings.handshakeTimeoutMs,
  );
  const cluster = this.extension(Cluster.extensionId(resolved, remoting));
  try {
    await contact;
  } catch (error) {
    cluster.stop();
    throw error;
  }
  return cluster;
};
