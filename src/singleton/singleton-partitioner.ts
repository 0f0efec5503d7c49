import { ClusterShardingConfigurationError } from "../sharding/index.ts";

/** What stands behind a singleton's one shard. */
export type SingletonKind = "Behavior" | "EventSourced" | "DurableState";

/**
 * The identity every node must agree on for one singleton (docs/protocol.md §12). It is embedded in the partitioner's
 * configuration key, and that key travels in every envelope's settings key, so a node that disagrees on any part
 * (for example the message type) has its envelopes rejected instead of reaching the wrong entity.
 */
export interface SingletonBackingIdentity {
  readonly kind: SingletonKind;
  /** The persistence entity type's name; empty for an ordinary singleton. */
  readonly persistenceEntityType: string;
  /** The name of the singleton's message type (its runtime class name). */
  readonly messageType: string;
  /** The one entity id the singleton's shard routes (`"singleton"` for ordinary singletons). */
  readonly entityId: string;
  /** `singletonSettingsKey` of the singleton's settings. */
  readonly settingsKey: string;
  /** Lease duration and renewal interval in ms for persistent singletons; `null` for ordinary ones. */
  readonly lease: { readonly leaseDurationMs: number; readonly leaseRenewIntervalMs: number } | null;
}

/**
 * Encodes the identity as length-prefixed fields (`<length>:<text>` each), so that no choice of names can make two
 * different identities print the same; `|` (the sharding settings key's separator) is escaped.
 */
export function encodeBackingIdentity(identity: SingletonBackingIdentity): string {
  const lease =
    identity.lease === null ? "" : `${identity.lease.leaseDurationMs}/${identity.lease.leaseRenewIntervalMs}`;
  return [
    identity.kind,
    identity.persistenceEntityType,
    identity.messageType,
    identity.entityId,
    identity.settingsKey,
    lease,
  ]
    .map((field) => `${field.length}:${field}`)
    .join("")
    .replaceAll("%", "%25")
    .replaceAll("|", "%7C");
}

/**
 * The partitioner of a singleton's one-shard facade: its one entity id maps to shard 0, anything else is refused.
 * Shaped like the sharding layer's `EntityPartitioner` (`shardFor`, `configurationKey`).
 */
export class SingletonPartitioner {
  /** `SingletonPartitioner:` plus the encoded backing identity. */
  readonly configurationKey: string;

  constructor(readonly identity: SingletonBackingIdentity) {
    this.configurationKey = `SingletonPartitioner:${encodeBackingIdentity(identity)}`;
  }

  /**
   * Always shard 0 for the singleton's entity id.
   * @throws ClusterShardingConfigurationError for any other entity id
   */
  shardFor(entityType: string, entityId: string, _shardCount: number): number {
    if (entityId !== this.identity.entityId) {
      throw new ClusterShardingConfigurationError(
        `Singleton ${entityType} routes only entity id ${JSON.stringify(this.identity.entityId)}, not ${JSON.stringify(entityId)}`,
        "entityId",
      );
    }
    return 0;
  }
}
