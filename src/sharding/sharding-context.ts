import type { ActorRef, ActorSystem, UniqueAddress } from "../actor/index.ts";
import type { PayloadCodec } from "./codec.ts";
import type { EntityTypeState } from "./entity-type-state.ts";
import { ClusterShardingConfigurationError } from "./errors.ts";
import type { ShardingMembership } from "./membership.ts";
import type { Delivery } from "./routing/delivery.ts";
import { type MutableShardingStats, zeroStats } from "./stats.ts";

/** The name of the sharding daemon under `/system`, the same on every node. */
export const daemonName = "sharding";
const daemonRefCacheMax = 10_000;

/**
 * What every part of sharding on this node shares: its identity, actor system, membership view and codec, the
 * registered types, the counters, the daemon and the refs to other nodes' daemons, and whether sharding stopped.
 */
export class ShardingContext {
  readonly types = new Map<string, EntityTypeState>();
  readonly counters: MutableShardingStats = zeroStats();
  readonly self: UniqueAddress;
  /** Set once by `ClusterSharding.stop`; timers and late replies check it and do nothing more. */
  stopped = false;
  private readonly daemonRefs = new Map<string, ActorRef<unknown>>();

  constructor(
    readonly system: ActorSystem,
    readonly membership: ShardingMembership,
    readonly codec: PayloadCodec,
    /** This node's `/system/sharding` actor. */
    readonly daemon: ActorRef<unknown>,
  ) {
    this.self = membership.selfAddress;
  }

  // One ref per node incarnation (REFERENCE §5): a remote ref binds the uid it first reaches, so a restarted node at
  // the same address (new uid) gets a new entry instead of a ref that fails fast.
  daemonOf(node: UniqueAddress): ActorRef<unknown> {
    const key = node.toString();
    let ref = this.daemonRefs.get(key);
    if (ref === undefined) {
      if (this.daemonRefs.size >= daemonRefCacheMax) this.daemonRefs.clear();
      ref = this.system.actorSelection(`${node.address}/system/${daemonName}`);
      this.daemonRefs.set(key, ref);
    }
    return ref;
  }

  /** Rejects an accepted delivery: counted, and an ask fails with `error`; a tell is at most once, so only logged. */
  reject(d: Delivery, error: Error): void {
    this.counters.rejectedEnvelopes++;
    if (d.envelope.askTimeoutMs !== null) d.sender?.failAsk?.(error);
    else this.system.log.debug?.({ error: error.message, type: d.envelope.entityType }, "sharded tell rejected");
  }

  /** @throws ClusterShardingConfigurationError when no type `name` is registered on this node */
  requireType(name: string): EntityTypeState {
    const state = this.types.get(name);
    if (state === undefined) {
      throw new ClusterShardingConfigurationError(
        `Entity type ${name} is not registered on this node; call sharding.init("${name}", …) first`,
      );
    }
    return state;
  }
}
