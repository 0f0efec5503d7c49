/** Errors raised by cluster membership. Each has a stable `name` and carries the fields a caller acts on. */

/** A cluster setting or call that cannot work as given (docs/protocol.md §4.10 names this class for all of them). */
export class ClusterConfigurationError extends Error {
  override readonly name: string = "ClusterConfigurationError";
  constructor(
    /** The setting or operation at fault, e.g. `gossipInterval` or `down`. */
    readonly setting: string,
    detail: string,
  ) {
    super(`Cluster ${setting}: ${detail}`);
  }
}

/** `awaitUp`, `awaitRemoved` or `leave` did not see the awaited status in time. */
export class ClusterAwaitTimeoutError extends ClusterConfigurationError {
  override readonly name = "ClusterAwaitTimeoutError";
  constructor(
    /** The status that was awaited. */
    readonly awaitedStatus: string,
    readonly timeoutMs: number,
    /** The node's own status when the wait gave up. */
    readonly currentStatus: string,
  ) {
    super(
      "await",
      `this node did not become ${awaitedStatus} within ${timeoutMs} ms (it is ${currentStatus}); check that a seed node is reachable and the leader converges, or raise the timeout`,
    );
  }
}

/** A cluster wire message that does not have the expected shape; the message is dropped and counted. */
export class InvalidClusterMessageError extends Error {
  override readonly name = "InvalidClusterMessageError";
  constructor(
    /** The wire type, e.g. `movie.cluster.gossip.v1`. */
    readonly messageType: string,
    readonly detail: string,
  ) {
    super(`Invalid ${messageType} message: ${detail}; both nodes must run compatible Movie versions`);
  }
}
