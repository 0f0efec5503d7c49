/**
 * Errors raised by cluster sharding (docs/protocol.md §16.1). Each has a stable `name` (it is also what a remote caller sees
 * as `RemoteAskError.remoteClass`) and carries the fields a caller acts on. Messages start with the original
 * implementation's text and then say what to do.
 */

/**
 * A sharding setting is invalid, two nodes or two `init` calls disagree on settings, or an envelope or control
 * message was not authorized. `field` names the offending setting when there is one.
 */
export class ClusterShardingConfigurationError extends Error {
  override readonly name = "ClusterShardingConfigurationError";
  constructor(
    message: string,
    /** The setting or envelope field at fault, or null when the error is about authorization or state. */
    readonly field: string | null = null,
  ) {
    super(message);
  }

  /** True when `error` is (or, after remoting, was) a ClusterShardingConfigurationError. */
  static is(error: unknown): error is ClusterShardingConfigurationError {
    return error instanceof ClusterShardingConfigurationError;
  }
}

/**
 * No owner can take the message: no converged coordinator (entityType "cluster", shardId -1), a member is
 * unreachable (`unreachableMember` names it), the shard has no eligible owner, or a handoff aborted.
 */
export class NoShardOwnerError extends Error {
  override readonly name = "NoShardOwnerError";
  constructor(
    readonly entityType: string,
    readonly shardId: number,
    /** The unreachable member (UniqueAddress text) that keeps the cluster from a coordinator, when that is the reason. */
    readonly unreachableMember: string | null = null,
  ) {
    super(
      unreachableMember !== null
        ? `No eligible owner for ${entityType} shard ${shardId}; member ${unreachableMember} is unreachable, so the cluster has no coordinator: ` +
            "wait until it is reachable again, or down it (`movie down <address>` or POST /cluster/members/:address/down) if it failed"
        : `No eligible owner for ${entityType} shard ${shardId}; ` +
            (shardId < 0
              ? "the cluster has no converged coordinator (not converged or a member is unreachable): retry later or down the unreachable member"
              : "retry once an eligible member is Up and has registered the entity type"),
    );
  }

  /** The error used while there is no converged coordinator. */
  static noCoordinator(): NoShardOwnerError {
    return new NoShardOwnerError("cluster", -1);
  }

  /** The error used when `member` (UniqueAddress text) is unreachable and so no coordinator can be elected. */
  static unreachable(member: string): NoShardOwnerError {
    return new NoShardOwnerError("cluster", -1, member);
  }
}

/** A persistent shard's lease is held by another owner (or cannot be taken yet); delivery is retried in its window. */
export class ShardLeaseUnavailableError extends Error {
  override readonly name = "ShardLeaseUnavailableError";
  constructor(
    readonly entityType: string,
    readonly shardId: number,
  ) {
    super(
      `Persistent shard ${entityType}/${shardId} is fenced by another owner; it becomes available when the other lease expires`,
    );
  }
}

/**
 * The owner refused a delivery sent to it directly (docs/protocol.md §8.8): it does not own the shard under the grant
 * the sender named (the shard moved, is draining, or the coordinator changed). Nothing was delivered; the sending
 * node routes the shard's next messages through the coordinator.
 */
export class DirectDeliveryRefusedError extends Error {
  override readonly name = "DirectDeliveryRefusedError";
  constructor(
    readonly entityType: string,
    readonly shardId: number,
    /** Why, for logs and tests: "routing", "coordinator", "owner", "generation" or "draining". */
    readonly reason: string,
  ) {
    super(
      `Shard ${entityType}/${shardId} refused a direct delivery (${reason}); the sender falls back to the coordinator`,
    );
  }
}

/** The shard is draining on its previous owner during a handoff; new local activations wait behind the barrier. */
export class ShardHandoffInProgressError extends Error {
  override readonly name = "ShardHandoffInProgressError";
  constructor(
    readonly entityType: string,
    readonly shardId: number,
  ) {
    super(`Shard ${entityType}/${shardId} is draining on its previous owner; retry after the handoff completes`);
  }
}

/**
 * The owner refused a message because the entities of its shard already hold `capacity` messages not yet started
 * (the `shardMailboxCapacity` setting). Nothing was delivered: retry later, or send less to this shard.
 */
export class ShardMailboxOverflowError extends Error {
  override readonly name = "ShardMailboxOverflowError";
  constructor(
    readonly entityType: string,
    readonly shardId: number,
    /** The shard's bound, in messages. */
    readonly capacity: number,
  ) {
    super(
      `Shard ${entityType}/${shardId} already holds ${capacity} messages not yet processed (shardMailboxCapacity); ` +
        "the message was not delivered: retry later or send less to this shard",
    );
  }
}

/** A sharded entity ref was sent a system message other than STOP. */
export class UnsupportedSystemMessageError extends Error {
  override readonly name = "UnsupportedSystemMessageError";
  constructor(readonly messageKind: string) {
    super(`Sharded entity references only support Stop (got ${messageKind}); send STOP to passivate`);
  }
}

/** `error` itself when it is an Error, else an Error carrying its text (user code may throw anything). */
export function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}

/**
 * A projection operation named a projection this node has not initialised with `sharding.initProjection` (the node
 * needs its definition to know its slices): ask a node that runs it, or init it here.
 */
export class UnknownShardedProjectionError extends Error {
  override readonly name = "UnknownShardedProjectionError";
  constructor(readonly projectionName: string) {
    super(
      `No sharded projection named ${JSON.stringify(projectionName.slice(0, 256))} was initialised on this node; call sharding.initProjection for it here, or ask a node that did`,
    );
  }
}
