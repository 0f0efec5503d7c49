import type { ActorRef, ActorSystem, UniqueAddress } from "../actor/index.ts";
import type { PayloadCodec } from "./codec.ts";
import { acceptingCoordinator, electCoordinator, routingCoordinator } from "./coordinator/election.ts";
import type { EntityTypeState } from "./entity-type-state.ts";
import { ClusterShardingConfigurationError } from "./errors.ts";
import type { ShardingClusterSnapshot, ShardingMembership } from "./membership.ts";
import type { Delivery } from "./routing/delivery.ts";
import { type MutableShardingStats, zeroStats } from "./stats.ts";
import type { RoutingWait } from "./wait/routing-wait.ts";

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
  /** Holds routes while there is no coordinator (wait/routing-wait.ts, see its hook contract); set at wiring. */
  wait: RoutingWait | null = null;
  private readonly daemonRefs = new Map<string, ActorRef<unknown>>();
  // The coordinators of the last membership view seen. Every routed and every forwarded message needs them, and an
  // election scans all members (17 µs per message at 100 members on a slow host), while the view only changes with
  // membership: a cluster replaces its snapshot object on every change, so the object's identity says when to
  // elect again.
  private electedIn: ShardingClusterSnapshot | null = null;
  private elected: UniqueAddress | null = null;
  private routing: UniqueAddress | null = null;
  private accepting: UniqueAddress | null = null;
  /** The Up members of that view, by UniqueAddress text. */
  private upMembers = new Set<string>();

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

  /** {@link electCoordinator} of the current membership view. */
  electedCoordinator(): UniqueAddress | null {
    this.elect();
    return this.elected;
  }

  /** {@link routingCoordinator} of the current membership view: where this node routes, or null (fail closed). */
  routingCoordinator(): UniqueAddress | null {
    this.elect();
    return this.routing;
  }

  /** {@link acceptingCoordinator} of the current membership view: whose forwarded traffic this node accepts. */
  acceptingCoordinator(): UniqueAddress | null {
    this.elect();
    return this.accepting;
  }

  /** True when `node` is an Up member of the current membership view. */
  isUpMember(node: UniqueAddress): boolean {
    this.elect();
    return this.upMembers.has(node.toString());
  }

  private elect(): void {
    const snap = this.membership.snapshot();
    if (snap === this.electedIn) return;
    this.electedIn = snap;
    this.elected = electCoordinator(snap);
    this.routing = routingCoordinator(snap);
    this.accepting = acceptingCoordinator(snap);
    this.upMembers = new Set(snap.members.filter((m) => m.status === "Up").map((m) => m.uniqueAddress.toString()));
  }

  /** Rejects an accepted delivery: counted, and an ask fails with `error`; a tell is at most once, so only logged. */
  reject(d: Delivery, error: Error): void {
    // Zero-downtime hook 3 (wait/routing-wait.ts): a hop-0 NoShardOwnerError is held and routed again instead.
    if (this.wait?.holdRejected(d, error) === true) return;
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
