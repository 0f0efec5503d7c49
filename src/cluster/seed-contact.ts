import type { Address, Scheduler } from "../actor/index.ts";
import { HandshakeError, type Remoting } from "../remote/index.ts";
import { ClusterConfigurationError } from "./errors.ts";

/**
 * The first contact of a joining node with its seeds, which `enableCluster` awaits so that a seed of another actor
 * system (or another cluster name) fails `enableCluster` instead of leaving the node Joining forever behind repeated
 * handshake warnings. Nodes of one cluster share one actor-system name: a `host:port` seed means a node named like
 * this one. Settles when every seed answered a handshake or failed to connect (a seed not started yet is fine: the
 * node keeps joining), or after `timeoutMs`; rejects on the first seed that refused the handshake for its name.
 * Subscribe before the cluster dials (it joins at once when it starts).
 */
export function watchSeedContact(
  remoting: Remoting,
  seeds: readonly Address[],
  systemName: string,
  scheduler: Scheduler,
  timeoutMs: number,
): Promise<void> {
  // A seed this node is already connected to needs no new handshake (and none would be reported).
  const pending = new Set(seeds.map((s) => s.hostPort).filter((hp) => remoting.peerInfo(hp)?.state !== "up"));
  if (pending.size === 0) return Promise.resolve();
  return new Promise<void>((resolve, reject) => {
    const done = (error: ClusterConfigurationError | null) => {
      unsubscribeConnected();
      unsubscribeFailed();
      timer.cancel();
      if (error === null) resolve();
      else reject(error);
    };
    const settled = (hostPort: string) => {
      pending.delete(hostPort);
      if (pending.size === 0) done(null);
    };
    const unsubscribeConnected = remoting.subscribe((event) => {
      if (event.kind === "connected" && pending.has(event.peer.address.hostPort)) settled(event.peer.address.hostPort);
    });
    const unsubscribeFailed = remoting.onDialFailed((address, error) => {
      if (!pending.has(address.hostPort)) return;
      if (error instanceof HandshakeError && (error.reason === "systemName" || error.reason === "clusterName")) {
        const rule =
          error.reason === "systemName"
            ? `nodes of one cluster share one actor-system name, and a "host:port" seed means a node named "${systemName}"; create every node with ActorSystem.create("${systemName}") (or name this one as the seed's)`
            : "nodes of one cluster use the same clusterName in enableRemoting and enableCluster";
        done(
          new ClusterConfigurationError(
            "seedNodes",
            `seed ${address.hostPort} refused to join: ${error.message}; ${rule}`,
          ),
        );
        return;
      }
      settled(address.hostPort);
    });
    const timer = scheduler.scheduleOnce(timeoutMs, () => done(null));
  });
}
