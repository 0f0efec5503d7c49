/**
 * Which remote system messages a node applies (docs/protocol.md §3.8): a pure decision on the message kind, the root of the
 * recipient's path and whether the sending peer is authorized (a cluster member once the cluster is enabled). The
 * receive path counts and logs every refusal; nothing refused reaches an actor.
 *
 * - `/temp/*` (ask reply actors) and any root other than `/user` and `/system` accept nothing from a peer.
 * - STOP and DrainAndStop never reach `/system/*` (remoting, cluster and sharding daemons are this node's own
 *   business); to `/user/*` they need an authorized peer and `remoteStop: "allow"`.
 * - Watch and Unwatch (remote DeathWatch) need an authorized peer, for `/user/*` and `/system/*` alike.
 * - Terminated is the watched side's answer to a watch this node sent: accepted for any watcher under `/user` or
 *   `/system` (the caller checks that the terminated actor lives on the sending peer, and drops a Terminated for a
 *   watch it no longer holds).
 */

/** Whether peers may STOP or DrainAndStop this node's `/user` actors (`enableRemoting({ remoteStop })`). */
export type RemoteStopPolicy = "allow" | "deny";

/** The system message kinds that cross the wire (the `sys` field of a system frame). */
export type RemoteSystemKind = "stop" | "drain" | "watch" | "unwatch" | "terminated";

/**
 * Why a remote system message was refused: `protectedPath` (its recipient is a reply actor or a system actor that
 * peers may not stop), `notMember` (the peer is not authorized, e.g. not a cluster member), `stopDenied`
 * (`remoteStop: "deny"`), `foreignRef` (the watcher or terminated actor it names does not live on the sending peer).
 */
export type SystemRefusal = "protectedPath" | "notMember" | "stopDenied" | "foreignRef";

/** The refusal for a `kind` message to a path whose first element is `root`, or null when it may be applied. */
export function authorizeSystemMessage(
  kind: RemoteSystemKind,
  root: string,
  peerAuthorized: boolean,
  policy: RemoteStopPolicy,
): SystemRefusal | null {
  if (root !== "user" && root !== "system") return "protectedPath";
  switch (kind) {
    case "terminated":
      return null;
    case "watch":
    case "unwatch":
      return peerAuthorized ? null : "notMember";
    case "stop":
    case "drain":
      if (root === "system") return "protectedPath";
      if (!peerAuthorized) return "notMember";
      return policy === "allow" ? null : "stopDenied";
  }
}
