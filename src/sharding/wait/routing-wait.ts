import type { ActorRef, Cancellable, UniqueAddress } from "../../actor/index.ts";
import { InvalidMessageError } from "../../actor/index.ts";
import type { ShardingEnvelope } from "../coordinator/messages.ts";
import type { EntityTypeState } from "../entity-type-state.ts";
import { NoShardOwnerError } from "../errors.ts";
import type { Delivery } from "../routing/delivery.ts";
import type { ShardingContext } from "../sharding-context.ts";
import { type HeldAt, HeldDeliveries } from "./held-deliveries.ts";

/** How often held deliveries are retried while any are held, besides every membership change, ms. */
export const heldRetryIntervalMs = 25;
/** An ask's wait ends this much (at most) before its own timeout, so the caller gets the wait's reason. */
const askWaitMarginMaxMs = 100;

/** Runs the coordinator logic of this node on an envelope (the envelope router's hop-0 entry). */
export type LocalRoute = (state: EntityTypeState, envelope: ShardingEnvelope, sender: ActorRef<unknown> | null) => void;

/**
 * Wait, don't fail, while the routing authority is re-established (docs/zero-downtime.md). The seed's rule stands:
 * with no converged coordinator nothing is routed and no owner is guessed. But instead of failing a route at once,
 * this node holds it (per type and shard, FIFO, bounded by `heldTellsPerShard`; a tell until `heldTellTimeout`, an
 * ask until just before its own timeout) and routes it as soon as there is a coordinator, on every membership change
 * and every {@link heldRetryIntervalMs} while anything is held. A type whose `awaitCoordinator` setting is false is
 * never held (the immediate failure).
 *
 * HOOK CONTRACT (the only places other sharding code calls this; re-apply them by hand if those files move):
 * 1. Caller side (routing/caller-router.ts, every route/ask/activate/passivate): before choosing the coordinator,
 *    `ctx.wait?.callerEntry(state, shardId)`; when it returns a ref, the envelope is told to that ref (with the
 *    caller's sender, or an ask's reply actor through askVia) instead of to the coordinator. It returns null when
 *    the route may proceed as before (a coordinator exists and nothing for that shard is held).
 * 2. Coordinator side, first (routing/envelope-router.ts `handleEnvelope`, hop 0, after settings check and payload
 *    decode, before routing as coordinator): `if (ctx.wait?.holdBehind(state, delivery, builtHere)) return;` keeps
 *    per-shard order: while a shard holds anything, later envelopes for it queue behind.
 * 3. Every rejection (sharding-context.ts `reject`, first line): `if (this.wait?.holdRejected(d, error)) return;`
 *    holds a hop-0 delivery refused with NoShardOwnerError (no coordinator yet, this node not the coordinator, no
 *    plan of its own yet, no Up owner, a handoff aborted) instead of failing it; anything else is rejected as before.
 * 4. Wiring (cluster-sharding.ts): the constructor sets `ctx.wait = new RoutingWait(ctx, local route)` after the
 *    envelope router exists; `stop()` calls `ctx.wait?.stop()` before stopping the types.
 * A held delivery is routed again from the head of its shard's queue: to the coordinator's daemon when that is
 * another node, or through the local route (hook 2 and 3 then report "again" for it instead of holding it twice).
 */
export class RoutingWait {
  private readonly held = new Map<string, HeldDeliveries<Delivery>>();
  /** The delivery being routed again from the head of its queue, and whether it was refused again. */
  private retrying: { envelope: ShardingEnvelope; again: boolean } | null = null;
  private flushing = false;
  private timer: Cancellable | null = null;
  private readonly unsubscribe: () => void;

  constructor(
    private readonly ctx: ShardingContext,
    private readonly localRoute: LocalRoute,
  ) {
    this.unsubscribe = ctx.membership.subscribe(() => this.flush());
  }

  /** Hook 1: where a caller on this node hands `shard`'s envelope: the held queue, or null (route as before). */
  callerEntry(state: EntityTypeState, shard: number): ActorRef<unknown> | null {
    if (!state.provider.settings.awaitCoordinator || this.ctx.stopped) return null;
    const queue = this.held.get(state.provider.name);
    if (this.ctx.routingCoordinator() !== null && (queue === undefined || !queue.holds(shard))) return null;
    return new HeldEntryRef(this.ctx.daemon, (envelope, sender) => this.holdAtCaller(state, envelope, sender));
  }

  /** Hook 2: true when `d` was held behind earlier deliveries of its shard (routed later, in order). */
  holdBehind(state: EntityTypeState, d: Delivery, builtHere: boolean): boolean {
    if (this.retrying !== null || !state.provider.settings.awaitCoordinator) return false;
    const queue = this.held.get(state.provider.name);
    if (queue === undefined || !queue.holds(d.envelope.shardId)) return false;
    // Held unverified envelopes would skip the shard check when routed again locally: check it now.
    if (!builtHere) {
      const settings = state.provider.settings;
      const expected = settings.partitioner.shardFor(d.envelope.entityType, d.envelope.entityId, settings.shardCount);
      if (expected !== d.envelope.shardId) return false;
    }
    this.hold(state, d, "coordinator");
    return true;
  }

  /** Hook 3: true when the rejection of `d` with `error` was turned into a hold (or a retry's "not yet"). */
  holdRejected(d: Delivery, error: Error): boolean {
    if (!(error instanceof NoShardOwnerError) || d.envelope.hopCount !== 0 || this.ctx.stopped) return false;
    if (this.retrying !== null && this.retrying.envelope === d.envelope) {
      this.retrying.again = true;
      return true;
    }
    const state = this.ctx.types.get(d.envelope.entityType);
    if (state === undefined || !state.provider.settings.awaitCoordinator) return false;
    return this.hold(state, d, "coordinator", false);
  }

  /** Hook 4: refuses everything held (sharding stops). */
  stop(): void {
    this.unsubscribe();
    this.timer?.cancel();
    this.timer = null;
    for (const [name, queue] of this.held) {
      for (const entry of queue.clear()) {
        this.refuse(
          entry.delivery,
          NoShardOwnerError.afterWait(name, entry.delivery.envelope.shardId, "sharding stopped", []),
        );
      }
    }
    this.held.clear();
  }

  private holdAtCaller(state: EntityTypeState, envelope: ShardingEnvelope, sender: ActorRef<unknown> | null): void {
    const d: Delivery = { envelope, sender, typed: undefined };
    // A full queue refuses synchronously: a tell throws NoShardOwnerError at the caller, an ask rejects with it.
    if (!this.hold(state, d, "caller", false)) {
      this.ctx.counters.rejectedEnvelopes++;
      throw this.fullError(state, envelope.shardId);
    }
  }

  /**
   * Appends `d` to its shard's queue. When the queue is full: refuses it here (`refuseWhenFull`), or returns false
   * and leaves the refusal to the caller.
   */
  private hold(state: EntityTypeState, d: Delivery, heldAt: HeldAt, refuseWhenFull = true): boolean {
    const settings = state.provider.settings;
    let queue = this.held.get(state.provider.name);
    if (queue === undefined) {
      queue = new HeldDeliveries<Delivery>(settings.heldTellsPerShard);
      this.held.set(state.provider.name, queue);
    }
    const now = this.ctx.system.scheduler.now();
    const ask = d.envelope.askTimeoutMs;
    const waitMs =
      ask === null ? settings.heldTellTimeout : Math.max(1, ask - Math.min(askWaitMarginMaxMs, Math.floor(ask / 10)));
    if (!queue.hold(d.envelope.shardId, { delivery: d, heldAt, deadlineMs: now + waitMs })) {
      if (refuseWhenFull) this.refuse(d, this.fullError(state, d.envelope.shardId));
      else this.ctx.counters.heldRefused++;
      return false;
    }
    this.ctx.counters.heldDeliveries++;
    this.schedule();
    return true;
  }

  private fullError(state: EntityTypeState, shard: number): NoShardOwnerError {
    return NoShardOwnerError.afterWait(
      state.provider.name,
      shard,
      `refused: ${state.provider.settings.heldTellsPerShard} deliveries for this shard already wait (heldTellsPerShard)`,
      this.unreachable(),
    );
  }

  private schedule(): void {
    if (this.timer !== null || this.ctx.stopped) return;
    this.timer = this.ctx.system.scheduler.scheduleOnce(heldRetryIntervalMs, () => {
      this.timer = null;
      this.flush();
    });
  }

  /** Refuses expired entries, then routes every shard's queue from its head while a coordinator takes them. */
  flush(): void {
    if (this.flushing || this.ctx.stopped || this.held.size === 0) return;
    this.flushing = true;
    try {
      const now = this.ctx.system.scheduler.now();
      for (const [name, queue] of this.held) {
        for (const { shard, entry } of queue.expire(now)) {
          this.ctx.counters.heldExpired++;
          this.refuse(
            entry.delivery,
            NoShardOwnerError.afterWait(name, shard, "after waiting for a coordinator", this.unreachable()),
          );
        }
        const state = this.ctx.types.get(name);
        if (state === undefined) continue;
        for (const shard of queue.heldShards()) if (!this.flushShard(state, queue, shard)) break;
      }
      for (const [name, queue] of this.held) if (queue.size === 0) this.held.delete(name);
    } finally {
      this.flushing = false;
    }
    if (this.held.size > 0) this.schedule();
  }

  /** Routes `shard`'s queue from the head; false when no coordinator takes anything now (stop trying this type). */
  private flushShard(state: EntityTypeState, queue: HeldDeliveries<Delivery>, shard: number): boolean {
    for (let entry = queue.head(shard); entry !== undefined; entry = queue.head(shard)) {
      const target = this.targetFor(entry.heldAt);
      if (target === null) return false;
      const { envelope, sender } = entry.delivery;
      if (target.equals(this.ctx.self)) {
        const retry = { envelope, again: false };
        this.retrying = retry;
        try {
          this.localRoute(state, envelope, sender);
        } finally {
          this.retrying = null;
        }
        if (retry.again) return true;
      } else {
        if (entry.heldAt === "caller") this.ctx.counters.remoteRoutes++;
        this.ctx.daemonOf(target).tell(envelope, sender);
      }
      queue.shift(shard);
    }
    return true;
  }

  /**
   * Where a held delivery goes now: a caller's to the coordinator it may route through (null while this node is not
   * Up or there is none); one held as coordinator to the elected coordinator (this node, or the one it hands over to
   * when it is leaving), null while there is none.
   */
  private targetFor(heldAt: HeldAt): UniqueAddress | null {
    return heldAt === "caller" ? this.ctx.routingCoordinator() : this.ctx.electedCoordinator();
  }

  private unreachable(): string[] {
    return this.ctx.membership.snapshot().unreachable.map((u) => u.toString());
  }

  /** Counts and fails `d` without the rejection hook (which would hold it again). */
  private refuse(d: Delivery, error: Error): void {
    this.ctx.counters.rejectedEnvelopes++;
    if (d.envelope.askTimeoutMs !== null) d.sender?.failAsk?.(error);
    else
      this.ctx.system.log.debug?.({ error: error.message, type: d.envelope.entityType }, "held sharded tell refused");
  }
}

/** The ref a caller tells while its route is held: `tell` appends the envelope to the held queue. */
class HeldEntryRef implements ActorRef<unknown> {
  constructor(
    private readonly daemon: ActorRef<unknown>,
    private readonly hold: (envelope: ShardingEnvelope, sender: ActorRef<unknown> | null) => void,
  ) {}
  get path() {
    return this.daemon.path;
  }
  tell(message: unknown, sender?: ActorRef<unknown> | null): void {
    this.hold(message as ShardingEnvelope, sender ?? null);
  }
  ask<R>(): Promise<R> {
    return Promise.reject(new InvalidMessageError("use askVia"));
  }
  sendSystem(): void {}
}
