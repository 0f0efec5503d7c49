import type { UniqueAddress } from "../actor/index.ts";
import type { Member, MemberStatus } from "./member.ts";
import type { ClusterSnapshot } from "./snapshot.ts";

/**
 * A membership change as seen by this node. A subscriber first gets `CurrentClusterState`, then one event per
 * effective change, in the order this node observed them.
 */
export type ClusterEvent =
  | { readonly type: "CurrentClusterState"; readonly snapshot: ClusterSnapshot }
  | { readonly type: "MemberJoined"; readonly member: Member }
  | { readonly type: "MemberUp"; readonly member: Member }
  | { readonly type: "MemberLeft"; readonly member: Member }
  | { readonly type: "MemberExited"; readonly member: Member }
  | { readonly type: "MemberDowned"; readonly member: Member }
  | { readonly type: "MemberRemoved"; readonly member: Member; readonly previousStatus: MemberStatus }
  | { readonly type: "UnreachableMember"; readonly member: Member }
  | { readonly type: "ReachableMember"; readonly member: Member }
  | { readonly type: "LeaderChanged"; readonly leader: UniqueAddress | null }
  | { readonly type: "ConvergenceChanged"; readonly converged: boolean }
  /**
   * This node learned from its leader that it was downed (or removed without leaving): it is out of the cluster
   * for good. Published after the `MemberDowned`/`MemberRemoved` of itself, before the `onDowned` action runs.
   */
  | { readonly type: "SelfDowned"; readonly member: Member; readonly action: OnDowned };

/** What a node does once it learns it was downed: see `ClusterSettings.onDowned`. */
export type OnDowned = "leave" | "terminate";

/** The `type` of every cluster event. */
export type ClusterEventType = ClusterEvent["type"];

const eventForStatus = {
  Joining: "MemberJoined",
  Up: "MemberUp",
  Leaving: "MemberLeft",
  Exiting: "MemberExited",
  Down: "MemberDowned",
} as const;

/**
 * The events that lead from `prev` to `next`: status changes (one event for the status reached), removals, then
 * reachability changes, then leader and convergence changes. Nothing is emitted for no effective change.
 */
export function diffSnapshots(prev: ClusterSnapshot, next: ClusterSnapshot): ClusterEvent[] {
  const events: ClusterEvent[] = [];
  const before = new Map(prev.members.map((m) => [m.uniqueAddress.toString(), m]));
  const after = new Map(next.members.map((m) => [m.uniqueAddress.toString(), m]));
  for (const [key, m] of after) {
    const old = before.get(key);
    if (old !== undefined && old.status === m.status) continue;
    if (m.status === "Removed") continue;
    events.push({ type: eventForStatus[m.status], member: m });
  }
  for (const [key, old] of before) {
    if (!after.has(key)) {
      events.push({ type: "MemberRemoved", member: { ...old, status: "Removed" }, previousStatus: old.status });
    }
  }
  const wasUnreachable = new Set(prev.unreachable.map(String));
  const isUnreachable = new Set(next.unreachable.map(String));
  for (const key of isUnreachable) {
    const m = after.get(key);
    if (!wasUnreachable.has(key) && m !== undefined) events.push({ type: "UnreachableMember", member: m });
  }
  for (const key of wasUnreachable) {
    const m = after.get(key);
    if (!isUnreachable.has(key) && m !== undefined) events.push({ type: "ReachableMember", member: m });
  }
  const leaderBefore = prev.leader === null ? null : prev.leader.toString();
  const leaderAfter = next.leader === null ? null : next.leader.toString();
  if (leaderBefore !== leaderAfter) events.push({ type: "LeaderChanged", leader: next.leader });
  if (prev.converged !== next.converged) events.push({ type: "ConvergenceChanged", converged: next.converged });
  return events;
}
