import {
  type ActorRef,
  type ActorSystem,
  type Address,
  type Cancellable,
  type Extension,
  type ExtensionId,
  typeNameOf,
  UniqueAddress,
} from "../actor/index.ts";
import { HandshakeError, MessageRegistry, type Remoting } from "../remote/index.ts";
import { ClusterDaemon, type ClusterInboundOrigin } from "./cluster-daemon.ts";
import { ClusterAwaitTimeoutError, ClusterConfigurationError } from "./errors.ts";
import { type ClusterEvent, diffSnapshots } from "./events.ts";
import { type Member, type MemberStatus, memberKey } from "./member.ts";
import {
  initialMembership,
  leaderOfState,
  type MembershipEffect,
  type MembershipInput,
  type MembershipState,
  snapshotOf,
  step,
} from "./membership.ts";
import { ClusterGossip, type ClusterMessage, clusterMessageClasses } from "./messages.ts";
import { type ResolvedClusterSettings, resolveClusterSettings } from "./settings.ts";
import type { ClusterSnapshot } from "./snapshot.ts";
import { type ClusterStats, emptyClusterStats } from "./stats.ts";

for (const type of clusterMessageClasses) MessageRegistry.register(type, { name: type.wireName });

/** The key the cluster extension is registered under. */
export const clusterExtensionKey = "movie.cluster";

/** Raised by `Cluster.get` before `enableCluster` has completed. */
export class ClusterNotEnabledError extends ClusterConfigurationError {
  override readonly name = "ClusterNotEnabledError";
  constructor(readonly systemName: string) {
    super(
      "get",
      `cluster membership is not enabled on system "${systemName}"; await system.enableCluster({ seedNodes }) first`,
    );
  }
}

interface Waiter {
  readonly done: (snapshot: ClusterSnapshot, state: MembershipState) => boolean;
  readonly resolve: () => void;
  readonly reject: (error: Error) => void;
  readonly timer: Cancellable;
}

const refCacheMax = 4_096;

/** How many distinct (category, sender) refusals are logged; later ones are only counted (bounded memory). */
const refusalLogMax = 1_024;
/** How long a probe from an unknown incarnation may precede the gossip that names it before it is logged as an alarm. */
const nonMemberGraceMs = 5_000;

/** Statuses whose incarnation counts as a cluster member for remote system messages (see `isAuthorizedPeer`). */
const authorizedStatuses = new Set<MemberStatus>(["Joining", "Up", "Leaving", "Exiting"]);

/**
 * Cluster membership of one actor system (an Extension; it stops before remoting). It runs the membership core
 * (`membership.ts`) behind the `/system/cluster` daemon: joins through the seeds, gossips, heartbeats every peer,
 * and reports what it sees as snapshots and events. Get it from `system.enableCluster(settings)` or
 * {@link Cluster.get}.
 */
export class Cluster implements Extension {
  /** This node's identity (remoting's address and uid). */
  readonly selfAddress: UniqueAddress;
  private state: MembershipState;
  private current: ClusterSnapshot;
  private readonly counters: ClusterStats = emptyClusterStats();
  private readonly listeners = new Set<(event: ClusterEvent) => void>();
  private readonly guards = new Map<string, (member: Member) => boolean>();
  private readonly timers = new Map<string, Cancellable>();
  private readonly waiters = new Set<Waiter>();
  private readonly refs = new Map<string, ActorRef<unknown>>();
  private readonly daemon: ActorRef<unknown>;
  private stopped = false;
  /** Set once this node learned it was downed; see `onDowned`. */
  private downed = false;
  private unsubscribeDialFailed: (() => void) | null = null;
  /** Unique-address strings of the members whose system messages remoting may accept. */
  private authorizedPeers: ReadonlySet<string> = new Set();
  /** Downed members the leader still tells they are Down; quarantined once that notice ends. */
  private readonly quarantineLater = new Map<string, UniqueAddress>();
  /** (category, sender) pairs already logged. */
  private readonly refusalsLogged = new Set<string>();
  private readonly departureReady = (member: Member): boolean => {
    for (const [name, guard] of this.guards) {
      try {
        if (guard(member) !== true) return false;
      } catch (error) {
        this.system.log.warn(
          { guard: name, member: String(member.uniqueAddress), error },
          "departure guard threw; counted as not ready",
        );
        return false;
      }
    }
    return true;
  };

  private constructor(
    /** The system this cluster serves. */
    readonly system: ActorSystem,
    /** The validated settings. */
    readonly settings: ResolvedClusterSettings,
    private readonly remoting: Remoting,
  ) {
    this.selfAddress = remoting.selfAddress;
    this.state = initialMembership(
      {
        self: this.selfAddress,
        clusterName: settings.clusterName,
        seeds: settings.seedNodes,
        roles: settings.roles,
        ...(settings.appVersion === undefined ? {} : { appVersion: settings.appVersion }),
        gossipFanout: settings.gossipFanout,
        maxMembers: settings.maxMembers,
        heartbeatTimeoutMs: settings.heartbeatTimeoutMs,
        remoteDownAllowed: this.secretConfigured,
      },
      system.scheduler.now(),
    );
    this.current = snapshotOf(this.state);
    this.daemon = system.spawnSystemActor(() => new ClusterDaemon(this), "cluster");
  }

  /** @internal Creates and starts the extension; use `system.enableCluster`. */
  static extensionId(settings: ResolvedClusterSettings, remoting: Remoting): ExtensionId<Cluster> {
    return {
      key: clusterExtensionKey,
      create: (system) => {
        const cluster = new Cluster(system, settings, remoting);
        cluster.start();
        return cluster;
      },
    };
  }

  /**
   * The cluster of `system`.
   * @throws ClusterNotEnabledError when `system.enableCluster` has not completed
   */
  static get(system: ActorSystem): Cluster {
    const cluster = system.hasExtension<Cluster>({
      key: clusterExtensionKey,
      create: () => {
        throw new ClusterNotEnabledError(system.name);
      },
    });
    if (cluster === undefined) throw new ClusterNotEnabledError(system.name);
    return cluster;
  }

  private get secretConfigured(): boolean {
    return this.remoting.settings.secret !== null;
  }

  private start(): void {
    const loop = (kind: "join-tick" | "gossip-tick" | "heartbeat-tick", intervalMs: number) => {
      const run = () => {
        if (this.stopped) return;
        this.apply({ kind });
        this.timers.set(kind, this.system.scheduler.scheduleOnce(intervalMs, run));
      };
      this.timers.set(kind, this.system.scheduler.scheduleOnce(intervalMs, run));
    };
    // Once the cluster runs, remote system messages to /user/* are accepted from members only.
    this.remoting.setPeerAuthorizer((peer) => this.isAuthorizedPeer(peer));
    // A member that refuses this incarnation as quarantined has downed it: the gossip saying so may never arrive (this
    // node was partitioned while it happened), so the refusal is the news (the core checks the refuser is a member).
    this.unsubscribeDialFailed = this.remoting.onDialFailed((address, error) => {
      if (this.stopped || !(error instanceof HandshakeError) || !error.byPeer || error.reason !== "quarantined") return;
      this.apply({ kind: "refused-as-gone", by: address });
    });
    // Join at once rather than after a full retry interval: startup time is what a user waits for.
    this.apply({ kind: "join-tick" });
    loop("join-tick", this.settings.joinRetryIntervalMs);
    loop("gossip-tick", this.settings.gossipIntervalMs);
    loop("heartbeat-tick", this.settings.heartbeatIntervalMs);
  }

  /** A copy of the counters (a snapshot: later refusals do not change it). */
  get stats(): ClusterStats {
    return {
      ...this.counters,
      gossipRejected: { ...this.counters.gossipRejected },
      subscribers: this.listeners.size,
    };
  }

  /** What this node sees now: members (not Removed), unreachable set, leader, convergence, own status. */
  snapshot(): ClusterSnapshot {
    return this.current;
  }

  /**
   * True when `peer` (address and uid) is a member here with status Joining, Up, Leaving or Exiting: a Down or
   * Removed incarnation, an unknown one, or any peer once this node itself was downed, is not. O(1); this is the
   * predicate remoting asks before applying a remote system message to a user actor.
   */
  isAuthorizedPeer(peer: UniqueAddress): boolean {
    return !this.downed && this.authorizedPeers.has(peer.toString());
  }

  /** This node's own status. */
  get selfStatus(): MemberStatus {
    return this.current.selfStatus;
  }

  /**
   * Calls `listener` with a `CurrentClusterState` event at once, then with every change this node observes, in
   * order. A listener that throws is logged and kept. Returns the unsubscribe function.
   */
  subscribe(listener: (event: ClusterEvent) => void): () => void {
    this.deliver(listener, { type: "CurrentClusterState", snapshot: this.current });
    this.listeners.add(listener);
    return () => {
      this.listeners.delete(listener);
    };
  }

  /**
   * Registers a departure guard: while this node is the leader, a Leaving member moves to Exiting only when every
   * guard returns true for it. A guard must not block; one that throws counts as "not ready". Same name replaces.
   */
  registerDepartureGuard(name: string, guard: (member: Member) => boolean): void {
    this.guards.set(name, guard);
  }

  /** Removes the departure guard called `name` (no-op when absent). */
  unregisterDepartureGuard(name: string): void {
    this.guards.delete(name);
  }

  /**
   * Leaves gracefully: asks the leader to mark `address` (default this node) Leaving, repeating the request every
   * gossip round, and resolves once that member is Removed in this node's view. Only the leader can make another
   * node leave (a leave request names its sender, docs/protocol.md §4.9).
   * @throws ClusterConfigurationError (rejects) for another node when this one is not the leader, or once this node
   * was downed; ClusterAwaitTimeoutError after `timeoutMs` (default `leaveTimeout`, 60,000 ms)
   */
  leave(address: UniqueAddress | string = this.selfAddress, timeoutMs = this.settings.leaveTimeoutMs): Promise<void> {
    let target: UniqueAddress;
    try {
      target = typeof address === "string" ? UniqueAddress.parse(address) : address;
      if (!target.equals(this.selfAddress) && !this.isLeader) {
        // docs/protocol.md §4.9: a leave request is valid only when its target is its sender.
        throw new ClusterConfigurationError(
          "leave",
          "only the leader or the node itself can make a node leave; invoke leave on that node or on the leader",
        );
      }
    } catch (error) {
      return Promise.reject(error);
    }
    if (this.downed) {
      return Promise.reject(
        new ClusterConfigurationError("leave", "this node was downed and is out of the cluster; restart it to rejoin"),
      );
    }
    const key = target.toString();
    const removed = (_: ClusterSnapshot, state: MembershipState) => state.members.get(key)?.status === "Removed";
    if (removed(this.current, this.state)) return Promise.resolve();
    this.apply({ kind: "leave", target });
    return this.await(removed, timeoutMs, "Removed", target);
  }

  /**
   * Marks `address` Down through the leader (here when this node leads, else sent to the leader), which then removes
   * it; works when the target is unreachable. Returns false for this node itself, a member that is not known, or
   * when this node was downed itself.
   * @throws ClusterConfigurationError when this node is not the leader and remoting has no shared secret (docs/protocol.md §4.9)
   */
  down(address: UniqueAddress | string): boolean {
    const target = typeof address === "string" ? UniqueAddress.parse(address) : address;
    if (target.equals(this.selfAddress) || this.downed) return false;
    if (!this.isLeader && !this.secretConfigured) {
      throw new ClusterConfigurationError(
        "down",
        "remote manual downing requires a remoting shared secret; invoke down on the leader otherwise",
      );
    }
    return this.apply({ kind: "down", target }) === true;
  }

  /**
   * Replaces the seeds a Joining node sends its joins to (seed discovery re-resolving while joining); ignored once
   * this node is a member. Returns true when applied.
   * @throws ClusterConfigurationError for a seed that is not `host:port` or `movie.tcp://system@host:port`
   */
  updateSeeds(seeds: readonly string[]): boolean {
    const resolved = resolveClusterSettings({ seedNodes: seeds }, this.selfAddress.address.system).seedNodes;
    if (this.selfStatus !== "Joining") return false;
    this.apply({ kind: "seeds", seeds: resolved });
    return true;
  }

  /**
   * Resolves when this node is Up.
   * @throws ClusterAwaitTimeoutError (rejects) after `timeoutMs` (default 10,000)
   */
  awaitUp(timeoutMs = 10_000): Promise<void> {
    return this.await((s) => s.selfStatus === "Up", timeoutMs, "Up", this.selfAddress);
  }

  /**
   * Resolves when this node is Removed.
   * @throws ClusterAwaitTimeoutError (rejects) after `timeoutMs` (default 10,000)
   */
  awaitRemoved(timeoutMs = 10_000): Promise<void> {
    return this.await((s) => s.selfStatus === "Removed", timeoutMs, "Removed", this.selfAddress);
  }

  /** True when this node is the leader by its own view. */
  get isLeader(): boolean {
    return this.current.leader?.equals(this.selfAddress) === true;
  }

  /** Stops timers and fails pending waits. Runs when the system terminates (before remoting stops). */
  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    this.remoting.setPeerAuthorizer(null);
    this.halt();
    this.listeners.clear();
  }

  /** Stops timers and fails pending waits (the cluster is done on this node). */
  private halt(): void {
    this.unsubscribeDialFailed?.();
    this.unsubscribeDialFailed = null;
    for (const timer of this.timers.values()) timer.cancel();
    this.timers.clear();
    for (const waiter of this.waiters) {
      waiter.timer.cancel();
      waiter.reject(
        new ClusterConfigurationError(
          "stop",
          this.downed
            ? "this node was downed by its leader before the awaited status; restart it to rejoin"
            : "the actor system terminated before the awaited status",
        ),
      );
    }
    this.waiters.clear();
  }

  // ---- inbound (from the daemon) ----

  /** @internal */
  receiveInbound(message: ClusterMessage, from: ClusterInboundOrigin): void {
    if (this.stopped || this.downed) return;
    try {
      this.apply({ kind: "message", origin: from.origin, senderPath: from.senderPath, message });
    } catch (error) {
      this.counters.protocolRejections++;
      this.system.log.warn({ error, from: String(from.origin) }, "cluster message could not be handled; dropped");
    }
  }

  /** @internal */
  rejectForeign(message: unknown, from: ClusterInboundOrigin): void {
    this.counters.protocolRejections++;
    this.system.log.debug(
      { type: typeNameOf(message), from: String(from.origin) },
      "message at /system/cluster is not part of the cluster protocol; dropped",
    );
  }

  // ---- internals ----

  private apply(input: MembershipInput): boolean | null {
    const before = this.state;
    const [next, effects] = step(before, input, this.system.scheduler.now(), { departureReady: this.departureReady });
    this.state = next;
    let outcome: boolean | null = null;
    let selfDowned: Extract<MembershipEffect, { kind: "self-downed" }> | null = null;
    for (const effect of effects) {
      switch (effect.kind) {
        case "send":
          this.send(effect.to, effect.message);
          break;
        case "count":
          this.counters[effect.stat]++;
          break;
        case "outcome":
          outcome = effect.accepted;
          break;
        case "reject":
          if (effect.from !== undefined && effect.category !== undefined) {
            this.logRefusalOnce(effect.category, effect.from, effect.reason);
          } else {
            this.system.log.debug({ node: String(this.selfAddress), reason: effect.reason }, "cluster message refused");
          }
          break;
        case "gossip-rejected":
          this.counters.gossipRejected[effect.reason] += effect.count;
          this.logRefusalOnce(`gossip.${effect.reason}`, effect.from, effect.detail);
          break;
        case "self-downed":
          selfDowned = effect;
          break;
      }
    }
    if (
      next.members !== before.members ||
      next.detector !== before.detector ||
      next.acks !== before.acks ||
      next.digest !== before.digest
    ) {
      this.publish();
    }
    for (const [key, peer] of this.quarantineLater) {
      if (this.state.downNotice.has(key)) continue;
      this.quarantineLater.delete(key);
      this.remoting.quarantine(peer);
    }
    if (selfDowned !== null) this.onSelfDowned(selfDowned.status, selfDowned.by);
    return outcome;
  }

  /**
   * Logs a refusal at warn level once per category and sender (the counters count every one), remembering at most
   * {@link refusalLogMax} pairs so a flood of forged senders cannot grow memory.
   */
  private logRefusalOnce(category: string, from: UniqueAddress, reason: string): void {
    const key = `${category} ${from}`;
    if (this.refusalsLogged.has(key) || this.refusalsLogged.size >= refusalLogMax) return;
    this.refusalsLogged.add(key);
    const context = { node: this.selfAddress.toString(), from: from.toString(), category, reason };
    if (category !== "nonMember") {
      this.system.log.warn(
        context,
        "cluster refused a message from this sender (logged once per sender and reason; see cluster stats)",
      );
      return;
    }
    // A heartbeat or ack from an unknown incarnation is routine while a cluster forms: a member that learnt of this
    // node from the leader probes it before this node has the gossip naming that member (about 2 joins in 5 warned).
    // It is an alarm only if the sender is still unknown after the grace period.
    this.system.scheduler.scheduleOnce(nonMemberGraceMs, () => {
      if (this.stopped || this.state.members.has(from.toString())) return;
      this.system.log.warn(
        { ...context, graceMs: nonMemberGraceMs },
        "cluster refused a message from this sender, still not a member after the grace period (logged once per sender and reason; see cluster stats)",
      );
    });
  }

  /** This node was downed by its leader: publish `SelfDowned` (sharding stops its entities), then `onDowned`. */
  private onSelfDowned(status: MemberStatus, by: string): void {
    if (this.downed || this.stopped) return;
    this.downed = true;
    this.counters.selfDowned = 1;
    const action = this.settings.onDowned;
    const member = this.state.members.get(this.selfAddress.toString())!;
    this.system.log.warn(
      { node: this.selfAddress.toString(), status, by, onDowned: action },
      action === "terminate"
        ? "this node was downed by the cluster leader: stopping its entities and terminating the actor system (onDowned: terminate); restart it to rejoin with a new uid"
        : "this node was downed by the cluster leader: stopping its entities and its membership, the actor system keeps running (onDowned: leave); restart it to rejoin with a new uid",
    );
    for (const listener of this.listeners) this.deliver(listener, { type: "SelfDowned", member, action });
    // No more gossip, heartbeats or joins from this incarnation: the cluster has let it go.
    this.halt();
    if (action === "terminate") {
      this.system.terminate().catch((error: unknown) => {
        this.system.log.warn({ error }, "terminating the actor system after being downed failed");
      });
    }
  }

  private send(to: Address, message: ClusterMessage): void {
    const uid = "to" in message ? message.to.slice(message.to.lastIndexOf("#") + 1) : null;
    const key = `${to}#${uid ?? ""}`;
    let ref = this.refs.get(key);
    if (ref === undefined) {
      if (this.refs.size >= refCacheMax) this.refs.clear();
      // A message without a recipient uid (join to a seed, leave/down to a leader) must reach whichever incarnation
      // listens there now: a ref bound to the first one reached would fail fast forever after that process restarts.
      ref = this.remoting.refFor(`${to}/system/cluster`, uid ?? { anyIncarnation: true });
      this.refs.set(key, ref);
    }
    if (message instanceof ClusterGossip) this.counters.gossipBytesSent += Buffer.byteLength(JSON.stringify(message));
    ref.tell(message, this.daemon);
  }

  private publish(): void {
    const next = snapshotOf(this.state);
    const events = diffSnapshots(this.current, next);
    this.current = next;
    const peers = new Set<string>();
    for (const [key, m] of this.state.members) if (authorizedStatuses.has(m.status)) peers.add(key);
    peers.delete(this.selfAddress.toString());
    this.authorizedPeers = peers;
    for (const event of events) {
      if (
        (event.type === "MemberDowned" || event.type === "MemberRemoved") &&
        !event.member.uniqueAddress.equals(this.selfAddress)
      ) {
        this.retire(event.member, event.type === "MemberDowned" ? "Down" : event.previousStatus);
      }
      for (const listener of this.listeners) this.deliver(listener, event);
    }
    for (const waiter of [...this.waiters]) {
      if (waiter.done(next, this.state)) {
        this.waiters.delete(waiter);
        waiter.timer.cancel();
        waiter.resolve();
      }
    }
  }

  /**
   * Another member became Down or Removed (`from` is the status it had before Removed, or "Down"). That is the only
   * thing that retires an incarnation in remoting: its successor on the same host:port may then be admitted even
   * while the old process is still connected (incarnation-gone). A downed one (not a graceful Exiting → Removed) is
   * also quarantined so nothing from it is trusted again; the leader first finishes telling it (downNotice), over
   * the association it still has.
   */
  private retire(member: Member, from: MemberStatus): void {
    const peer = member.uniqueAddress;
    this.remoting.markIncarnationGone(peer);
    // A graceful departure (Leaving/Exiting → Removed) is not quarantined: the leaver still gets its final gossip.
    if (from === "Leaving" || from === "Exiting" || (from === "Down" && member.status === "Removed")) return;
    const key = memberKey(member);
    if (this.state.downNotice.has(key)) this.quarantineLater.set(key, peer);
    else this.remoting.quarantine(peer);
  }

  private deliver(listener: (event: ClusterEvent) => void, event: ClusterEvent): void {
    try {
      listener(event);
    } catch (error) {
      this.system.log.warn({ error, event: event.type }, "cluster event listener threw; it stays subscribed");
    }
  }

  private await(
    done: (snapshot: ClusterSnapshot, state: MembershipState) => boolean,
    timeoutMs: number,
    awaited: MemberStatus,
    target: UniqueAddress,
  ): Promise<void> {
    if (done(this.current, this.state)) return Promise.resolve();
    if (this.stopped) {
      return Promise.reject(new ClusterConfigurationError("await", "the cluster extension has stopped"));
    }
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = {
        done,
        resolve,
        reject,
        timer: this.system.scheduler.scheduleOnce(timeoutMs, () => {
          this.waiters.delete(waiter);
          const status = this.state.members.get(target.toString())?.status ?? "unknown";
          reject(new ClusterAwaitTimeoutError(awaited, timeoutMs, status));
        }),
      };
      this.waiters.add(waiter);
    });
  }

  /** @internal The leader by this node's view (for tests and diagnostics). */
  get leader(): UniqueAddress | null {
    return leaderOfState(this.state);
  }
}
