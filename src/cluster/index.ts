/**
 * Cluster membership: `import { Cluster } from "movie/cluster"`, then `await system.enableCluster({ seedNodes })`
 * after `system.enableRemoting(...)`. Gossip membership with digest-acknowledged convergence, a heartbeat failure
 * detector, a leader that promotes joiners and completes departures, graceful leave, explicit down, and events.
 */
import "../remote/index.ts";
import "./enable-cluster.ts";
import "./coordinated-shutdown.ts";

// Membership speaks in UniqueAddress (member records, down, events), so it is exported here as well as from "movie".
export { Address, UniqueAddress } from "../actor/index.ts";

export { compareAppVersions, isAppVersion } from "./app-version.ts";
export { Cluster, ClusterNotEnabledError, clusterExtensionKey } from "./cluster.ts";
export { isConverged, leaderOf } from "./convergence.ts";
export { handleSigterm, type ShutdownOptions, type ShutdownReport } from "./coordinated-shutdown.ts";
export { DnsSeedDiscovery, type DnsSeedDiscoveryOptions } from "./discovery/dns-seed-discovery.ts";
export {
  type DiscoveryJoinOptions,
  enableClusterWithDiscovery,
  type SeedDiscovery,
  StaticSeedDiscovery,
  seedsFor,
} from "./discovery/seed-discovery.ts";
export { ClusterAwaitTimeoutError, ClusterConfigurationError, InvalidClusterMessageError } from "./errors.ts";
export { type ClusterEvent, type ClusterEventType, diffSnapshots, type OnDowned } from "./events.ts";
export type { DetectorState, PeerObservation } from "./failure-detector.ts";
export {
  type AuthorizedGossip,
  admitsGossipFrom,
  authorizeGossip,
  decideGossip,
  type GossipDecision,
  type GossipRejection,
  gossipRejections,
} from "./gossip/authorize.ts";
export { membershipDigest } from "./gossip/digest.ts";
export { compareRecords, type MemberMap, type MergeResult, maxMembersDefault, mergeMembers } from "./gossip/merge.ts";
export { type LeaderActionsResult, leaderActions } from "./leader-actions.ts";
export {
  isMemberStatus,
  type Member,
  type MemberJSON,
  type MemberStatus,
  memberStatuses,
  statusPrecedence,
} from "./member.ts";
export {
  authenticate,
  type DownNotice,
  downNoticeRounds,
  initialMembership,
  type MembershipConfig,
  type MembershipEffect,
  type MembershipInput,
  type MembershipState,
  type StepContext,
  snapshotOf,
  step,
} from "./membership.ts";
export {
  ClusterDown,
  ClusterGossip,
  ClusterGossipAck,
  ClusterHeartbeat,
  ClusterHeartbeatAck,
  ClusterJoin,
  ClusterLeave,
  type ClusterMessage,
  ClusterWelcome,
  clusterMessageClasses,
} from "./messages.ts";
export {
  type ClusterSettings,
  clusterDefaults,
  type ResolvedClusterSettings,
  resolveClusterSettings,
} from "./settings.ts";
export type { ClusterSnapshot } from "./snapshot.ts";
export { type ClusterStatName, type ClusterStats, emptyClusterStats } from "./stats.ts";
