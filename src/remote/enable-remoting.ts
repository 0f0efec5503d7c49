import { ActorSystem } from "../actor/index.ts";
import { Remoting, remotingId } from "./remoting.ts";
import type { RemotingSettings } from "./settings.ts";

declare module "../actor/actor-system.ts" {
  interface ActorSystem {
    /**
     * Starts TCP remoting for this system: binds `host:port` (port 0 picks a free one), gives the node a fresh
     * UniqueAddress, and makes `movie.tcp://` paths of other nodes resolvable. Calling it again returns the same
     * Remoting.
     * @throws InvalidArgumentError for invalid settings; rejects with the listen error (e.g. EADDRINUSE)
     */
    enableRemoting(settings: RemotingSettings): Promise<Remoting>;
  }
}

const starting = new WeakMap<ActorSystem, Promise<Remoting>>();

ActorSystem.prototype.enableRemoting = function enableRemoting(
  this: ActorSystem,
  settings: RemotingSettings,
): Promise<Remoting> {
  const existing = this.hasExtension(remotingId);
  if (existing !== undefined) return Promise.resolve(existing);
  let pending = starting.get(this);
  if (pending === undefined) {
    pending = Remoting.start(this, settings).finally(() => starting.delete(this));
    starting.set(this, pending);
  }
  return pending;
};
