import {
  type ActorRef,
  type ActorSystem,
  askVia,
  type Cancellable,
  InvalidMessageError,
  type UniqueAddress,
} from "../../actor/index.ts";
import { DecodedMessage, MessageTooLargeError } from "../../remote/index.ts";
import { handoffTimeoutMs } from "../constants.ts";
import type { ShardMoveDecision } from "../coordinator/shard-move.ts";
import { asError, ShardHandoffInProgressError, ShardLeaseUnavailableError } from "../errors.ts";
import { attachTyped, type PayloadCodec, typedOf } from "../internal/codec.ts";
import {
  DirectBatch,
  DirectEnvelope,
  type ReceivedDirectBatch,
  ShardingControlAck,
  untyped,
  type WireMessage,
} from "../internal/messages.ts";
import type { ShardingProvider } from "../internal/provider.ts";
import type { AttemptOutcome } from "../internal/retry-barrier.ts";
import { settingsDigest } from "../internal/settings-digest.ts";
import type { ShardingMembership } from "../membership.ts";
import type { MutableShardingStats } from "../stats.ts";
import type { ShardingSpan, ShardingTracer } from "../tracing/sharding-tracer.ts";
import { DirectSendBatches, type PendingDirectBatch } from "./direct-batches.ts";
import {
  callerOwnDirect,
  callerRouteTarget,
  coordinatorRouteOwner,
  type Delivery,
  forwardEffect,
  localDeliveryType,
  type NodeEffect,
  type NodeInput,
  type NodeState,
  newNodeState,
  ownerDeliveryType,
  routedDirect,
  routeLocally,
  routeToTarget,
  step,
  type TypeState,
} from "./node-core.ts";
import { RelayedAskSender } from "./relayed-ask-sender.ts";
import { CallerRouteMemo, DirectAcceptMemo } from "./shortcut-memo.ts";

/** The name of the sharding daemon under `/system`, the same on every node. */
export const daemonName = "sharding";
const daemonRefCacheMax = 10_000;
/** How many distinct (sender, error) rejections of control messages are logged; later ones are only counted. */
const rejectionLogMax = 1_024;
/**
 * Most direct envelopes written as one batch (docs/protocol.md §8.8 "Batches"): past a few dozen the frame and turn
 * saved per envelope no longer show, while the owner's turn for the batch keeps growing.
 */
const directBatchEnvelopes = 64;

/**
 * Performs the node core's effects (node-core.ts) and feeds it its inputs: sockets through remoting (the daemons of
 * other nodes), timers through the actor system's scheduler, the local providers, the log. It decides nothing: every
 * protocol decision is the core's. Inputs are processed one at a time, in order; an outcome (a delivery's, a drain's)
 * is queued behind the effects of the step that caused it.
 */
export class NodeShell {
  readonly state: NodeState;
  private readonly queue: NodeInput[] = [];
  private running = false;
  private readonly timers = new Set<Cancellable>();
  private readonly daemonRefs = new Map<string, ActorRef<unknown>>();
  private readonly rejectionsLogged = new Set<string>();
  /** The input being processed, and the local caller's route input whose own call fails with `refusal`. */
  private current: NodeInput | null = null;
  private callerInput: NodeInput | null = null;
  private refusal: Error | null = null;
  /** The answer of the `moveShard` input being run. */
  private moveDecision: ShardMoveDecision | null = null;
  private readonly scheduler: ActorSystem["scheduler"];
  /** The clock of the step whose effects are being performed. */
  private stepNowMs = 0;
  /** Spans around sharded calls and deliveries (ClusterSharding.useTracer), or null: nothing traced. */
  tracer: ShardingTracer | null = null;
  /** The core's answers for direct routing's data path, kept while its state does not change (shortcut-memo.ts). */
  private readonly callerRoutes = new CallerRouteMemo();
  private readonly directAccepts = new DirectAcceptMemo();
  /** Direct envelopes decided and not written yet: written per owner at the end of the microtask, or sooner. */
  private readonly directBatches = new DirectSendBatches(
    directBatchEnvelopes,
    (batch) => this.writeDirect(batch),
    () => {
      if (!this.running) this.drainQueued();
    },
  );

  constructor(
    readonly system: ActorSystem,
    private readonly membership: ShardingMembership,
    private readonly codec: PayloadCodec,
    /** This node's `/system/sharding` actor. */
    readonly daemon: ActorRef<unknown>,
    counters: MutableShardingStats,
    readonly providers: ReadonlyMap<string, ShardingProvider>,
    /** Called when the core says this node was downed and sharding must stop. */
    private readonly stopRequested: () => void,
  ) {
    this.state = newNodeState(membership.selfAddress, counters);
    this.scheduler = system.scheduler;
  }

  get counters(): MutableShardingStats {
    return this.state.counters;
  }

  /** Runs `input` and everything it causes. Never throws. */
  run(input: NodeInput): void {
    if (this.running) {
      this.queue.push(input);
      return;
    }
    // The input itself, then what its effects queued (a routed message usually queues nothing): the queue is touched
    // only when it holds something (left over if an effect threw, those go first).
    let first: NodeInput | undefined = input;
    if (this.queue.length > 0) {
      this.queue.push(input);
      first = this.queue.shift()!;
    }
    this.drain(first);
  }

  /** Runs `first`, then every queued input, in order. */
  private drain(first: NodeInput): void {
    this.running = true;
    try {
      for (let next: NodeInput | undefined = first; next !== undefined; next = this.queue.shift()) {
        const snapshot = this.membership.snapshot();
        if (snapshot !== this.state.view.snapshot) step(this.state, { kind: "view", snapshot }, 0);
        this.current = next;
        // One clock reading per step, shared by the core and the provider deliveries it decides (an entity's last
        // activity).
        const nowMs = this.scheduler.now();
        this.stepNowMs = nowMs;
        const effects = step(this.state, next, nowMs)[1];
        for (let i = 0; i < effects.length; i++) this.perform(effects[i]!);
      }
    } finally {
      this.current = null;
      this.running = false;
    }
  }

  /**
   * Runs a local caller's envelope.
   * @throws the error its call fails with (no coordinator; a send refused synchronously, such as an oversize message)
   */
  route(delivery: Delivery, countsRemoteRoute: boolean): void {
    // The core's own answer first: when its route step would only hand the delivery to this node's provider (this
    // node coordinates and owns the shard, nothing held or moving), that step's state change is made and the delivery
    // performed as its `deliver` effect would be, without building the step (node-core.ts localDeliveryType).
    if (!this.running && this.queue.length === 0 && this.membership.snapshot() === this.state.view.snapshot) {
      const t = localDeliveryType(this.state, delivery);
      if (t !== null) {
        routeLocally(this.state, t);
        this.deliverRouted(t.name, delivery);
        return;
      }
    }
    const input: NodeInput = { kind: "route", delivery, countsRemoteRoute };
    const outer = this.callerInput;
    const outerRefusal = this.refusal;
    this.callerInput = input;
    this.refusal = null;
    try {
      // A member's caller: when the route step would only send the delivery on (to the coordinator, or with direct
      // routing to the owner under its grant), that is done without the step (node-core.ts callerRouteTarget). As
      // the step's own effect, so a send refused at once still fails this call.
      // Or, with direct routing, when this node owns the shard under its own grant and the step would deliver the
      // direct envelope here (node-core.ts callerOwnDirect).
      const idle = !this.running && this.queue.length === 0 && this.membership.snapshot() === this.state.view.snapshot;
      const target = idle ? callerRouteTarget(this.state, delivery) : null;
      const own = idle && target === null ? callerOwnDirect(this.state, delivery) : null;
      if (target !== null) this.forwardRouted(routeToTarget(this.state, target, delivery, countsRemoteRoute), input);
      else if (own !== null) {
        routedDirect(this.state, own);
        this.deliverRouted(own.t.name, own.delivery);
      } else this.run(input);
    } finally {
      this.callerInput = outer;
    }
    const refusal = this.refusal;
    this.refusal = outerRefusal;
    if (refusal !== null) throw refusal;
  }

  /**
   * A local caller's untraced tell of `message` (encoded as `wire`) to `entityId` of `t`, in `shard`, when the core
   * would route it straight to the shard's owner (node-core.ts `callerRouteOf`: another node; `callerOwnDirectOf`:
   * this one, under its own grant; each remembered while the state does not change: shortcut-memo.ts). The direct
   * envelope is built at once, without the hop-0 envelope that {@link route} starts from, and joins its owner's batch
   * as the route step's `forward` effect would, or is delivered here as its `deliver` effect would. Returns false,
   * having done nothing, otherwise: the caller then routes the tell as any other.
   */
  tellDirect(
    t: TypeState,
    entityId: string,
    shard: number,
    wire: WireMessage,
    message: unknown,
    sender: ActorRef<unknown> | null,
  ): boolean {
    if (this.running || this.queue.length !== 0 || this.membership.snapshot() !== this.state.view.snapshot) {
      return false;
    }
    const { target, own } = this.callerRoutes.answer(this.state, t.name, shard);
    if (own !== null) {
      // This node's own grant (node-core.ts callerOwnDirectOf): the route step would deliver the direct envelope
      // here, as the owner's envelope step would accept it (the envelope's settings and shard are the type's own).
      const envelope = this.directEnvelope(t, entityId, shard, wire, message, own.route);
      routedDirect(this.state, own);
      this.deliverRouted(t.name, { envelope, sender });
      return true;
    }
    if (target === null) return false;
    const direct = target.direct;
    if (direct === null) return false;
    const envelope = this.directEnvelope(t, entityId, shard, wire, message, direct);
    routedDirect(this.state, target);
    this.running = true;
    try {
      this.directBatches.add(direct.owner, envelope, { envelope, sender });
    } finally {
      this.running = false;
    }
    this.drainQueued();
    return true;
  }

  /**
   * A caller's direct envelope of a tell: what `DirectEnvelope.of` makes of its hop-0 envelope (CallerRouter's), built
   * at once, its typed value attached. (Built here: the same construction moved into a static of DirectEnvelope
   * measured slower at the owner, 0.87 → 1.06 µs per tell, medians of nine alternating pairs; the cause was not found.)
   */
  private directEnvelope(
    t: TypeState,
    entityId: string,
    shard: number,
    wire: WireMessage,
    message: unknown,
    grant: { readonly generation: number; readonly coordinator: UniqueAddress },
  ): DirectEnvelope {
    const key = t.settings.key;
    const envelope = new DirectEnvelope(
      "User",
      t.name,
      entityId,
      shard,
      key,
      null,
      false,
      wire,
      0,
      null,
      grant.generation,
      grant.coordinator.uid,
      settingsDigest(key),
    );
    attachTyped(envelope, message);
    return envelope;
  }

  /**
   * Runs an envelope that arrived from another node (`origin`). The core's own answers first, as for a local caller
   * (`route`): when the coordinator's step would only send it on to its owner, or deliver it here, or the owner's step
   * would only deliver it here (a forwarded or a direct envelope), that is done without building the step
   * (node-core.ts coordinatorRouteOwner, ownerDeliveryType, directDeliveryType). `nowMs`, when given, is the
   * clock of a delivery taken without a step: the envelopes of one direct batch, which arrived together, share one
   * reading (an entity's last activity), instead of one per envelope.
   */
  receive(delivery: Delivery, origin: UniqueAddress | null, nowMs?: number): void {
    if (!this.running && this.queue.length === 0 && this.membership.snapshot() === this.state.view.snapshot) {
      const direct = this.directAccepts.accepts(this.state, delivery);
      if (direct !== null) {
        this.deliverRouted(direct.name, delivery, nowMs);
        return;
      }
      const owned = ownerDeliveryType(this.state, delivery, origin);
      if (owned !== null) {
        this.deliverRouted(owned.name, delivery, nowMs);
        return;
      }
      const routed = coordinatorRouteOwner(this.state, delivery, origin);
      if (routed !== null) {
        if (routed.owner.equals(this.state.self)) this.deliverRouted(routed.t.name, delivery, nowMs);
        else this.forwardRouted(forwardEffect(this.state, delivery, routed.owner));
        return;
      }
    }
    this.run({ kind: "envelope", delivery, origin });
  }

  /**
   * Delivers record `i` of a received direct batch (docs/protocol.md §8.8 "Batches") straight from the record, as
   * {@link receive} would deliver its envelope, when the record is a plain tell (no ask, no trace context, its payload
   * decoded as read) to a shard whose acceptance the memory holds (`DirectAcceptMemo.acceptsRecord`): the envelope is
   * then never built. Returns false, having done nothing, otherwise: the caller builds the envelope and passes it to
   * {@link receive}, which decides as for any envelope.
   */
  receiveRecord(
    batch: ReceivedDirectBatch,
    i: number,
    sender: ActorRef<unknown> | null,
    origin: UniqueAddress | null,
    nowMs: number,
  ): boolean {
    if (this.running || this.queue.length !== 0 || this.membership.snapshot() !== this.state.view.snapshot)
      return false;
    const r = batch.records[i]!;
    if (r.kind !== "User" || (r.askTimeoutMs !== null && r.askTimeoutMs !== undefined)) return false;
    if (r.traceparent !== null && r.traceparent !== undefined) return false;
    const payload = r.message?.payload;
    if (!(payload instanceof DecodedMessage)) return false;
    // The provider of the batch's type: the memory answers only for the type it kept, and that type is the one the
    // batch names (directDeliveryType looks it up by that name), so this is its provider.
    const provider = this.providers.get(batch.header.entityType);
    if (provider === undefined) return false;
    const t = this.directAccepts.acceptsRecord(this.state, batch, i, provider.liveShardOf(r.entityId));
    if (t === null) return false;
    // deliverRouted's course, with deliverOne's for a decoded tell (deliverTell).
    this.running = true;
    try {
      this.stepNowMs = nowMs;
      const outcome = this.deliverTell(provider, r.shardId, r.entityId, payload.value, r.senderless ? null : sender);
      if (outcome !== "delivered") this.undelivered(t.name, { envelope: batch.envelopeAt(i), sender, origin }, outcome);
    } finally {
      this.running = false;
    }
    this.drainQueued();
    return true;
  }

  /**
   * Runs an operator's shard move and returns the core's decision (the handoff, when allowed, is under way).
   * @throws Error when called from inside a step (an effect of this shell), where the decision cannot be waited for
   */
  moveShard(type: string, shard: number, to: UniqueAddress | null): ShardMoveDecision {
    if (this.running) throw new Error("a shard move cannot be requested from inside a sharding step");
    this.moveDecision = null;
    this.run({ kind: "moveShard", type, shard, to });
    const decision = this.moveDecision as ShardMoveDecision | null;
    this.moveDecision = null;
    if (decision === null) throw new Error("the sharding core did not answer the shard move");
    return decision;
  }

  /**
   * The caller's call fails with `error`: thrown to it while its route runs, else (queued behind others, or a held
   * delivery of an earlier call routed in the same step) its ask fails.
   */
  private refuse(delivery: Delivery, error: Error): void {
    const own = this.callerInput;
    if (this.current !== null && this.current === own && own.kind === "route" && own.delivery === delivery) {
      if (this.refusal === null) this.refusal = error;
    } else if (delivery.envelope.askTimeoutMs !== null) delivery.sender?.failAsk?.(error);
  }

  /** A caller's entry to this node's routing for `askVia`: `tell` runs the route synchronously. */
  entry(countsRemoteRoute: boolean): ActorRef<unknown> {
    const daemon = this.daemon;
    return {
      get path() {
        return daemon.path;
      },
      tell: (message: unknown, sender?: ActorRef<unknown> | null) => {
        this.route({ envelope: message as Delivery["envelope"], sender: sender ?? null }, countsRemoteRoute);
      },
      ask: <R>() => Promise.reject<R>(new InvalidMessageError("use askVia")),
      sendSystem: () => undefined,
    };
  }

  /** Cancels every timer (sharding stopped). */
  cancelTimers(): void {
    for (const timer of this.timers) timer.cancel();
    this.timers.clear();
  }

  // One ref per node incarnation (docs/protocol.md §2.2): a remote ref binds the uid it first reaches, so a restarted node at
  // the same address (new uid) gets a new entry instead of a ref that fails fast.
  private daemonOf(node: { readonly address: unknown; toString(): string }): ActorRef<unknown> {
    const key = node.toString();
    let ref = this.daemonRefs.get(key);
    if (ref === undefined) {
      if (this.daemonRefs.size >= daemonRefCacheMax) this.daemonRefs.clear();
      ref = this.system.actorSelection(`${String(node.address)}/system/${daemonName}`);
      this.daemonRefs.set(key, ref);
    }
    return ref;
  }

  private perform(effect: NodeEffect): void {
    switch (effect.kind) {
      case "forward":
        // A direct envelope waits for its owner's batch; anything else goes after every batch decided before it.
        if (effect.envelope instanceof DirectEnvelope) {
          this.directBatches.add(effect.to, effect.envelope, effect.delivery);
          return;
        }
        this.directBatches.flush();
        try {
          this.daemonOf(effect.to).tell(effect.envelope, effect.delivery.sender);
        } catch (error) {
          // A send can refuse synchronously (MessageTooLargeError, …): the caller's own call fails with it; a
          // forwarded one (possibly inside a handoff flush) is rejected alone, the rest still go.
          // A relayed envelope (hop 0 naming its relay, docs/protocol.md §8.7) is not the caller's own call here.
          if (effect.envelope.hopCount === 0 && effect.envelope.coordinator === null) {
            this.refuse(effect.delivery, asError(error));
          } else this.queue.push({ kind: "sendFailed", delivery: effect.delivery, error: asError(error) });
        }
        return;
      case "send":
        this.directBatches.flush();
        try {
          this.daemonOf(effect.to).tell(effect.message, this.daemon);
        } catch (error) {
          this.queue.push({ kind: "controlSendFailed", type: effect.type, peer: effect.to, error: asError(error) });
        }
        return;
      case "ask": {
        this.directBatches.flush();
        const { type, shard, token, step: answered } = effect;
        askVia(this.system, this.daemonOf(effect.to), effect.message, ShardingControlAck, handoffTimeoutMs).then(
          () => this.run({ kind: "handoffReply", type, shard, token, step: answered, error: null }),
          (error: unknown) =>
            this.run({ kind: "handoffReply", type, shard, token, step: answered, error: asError(error) }),
        );
        return;
      }
      case "deliver": {
        const provider = this.providers.get(effect.type);
        if (provider === undefined) return;
        // Allocated only once a delivery was not delivered, or for a retry batch: the hot path (a routed tell delivered
        // at once) builds no outcome list and costs no second step.
        let outcomes: AttemptOutcome[] | null = null;
        const deliveries = effect.deliveries;
        for (let i = 0; i < deliveries.length; i++) {
          const outcome = this.deliverOne(provider, deliveries[i]!);
          if (outcome !== "delivered" && outcomes === null) outcomes = new Array<AttemptOutcome>(i).fill("delivered");
          outcomes?.push(outcome);
          if (outcome === "lease" || outcome === "handoff") break;
        }
        // The core asks for the outcomes of a fresh batch only when one was not delivered; a retry batch always reports.
        if (outcomes === null) {
          if (!effect.retry) return;
          outcomes = new Array<AttemptOutcome>(deliveries.length).fill("delivered");
        }
        this.queue.push({
          kind: "delivered",
          type: effect.type,
          shard: effect.shard,
          retry: effect.retry,
          deliveries: effect.deliveries,
          outcomes,
        });
        return;
      }
      case "reject": {
        const d = effect.delivery;
        if (d.envelope.askTimeoutMs !== null) d.sender?.failAsk?.(effect.error);
        else
          this.system.log.debug?.(
            { error: effect.error.message, type: d.envelope.entityType },
            "sharded tell rejected",
          );
        return;
      }
      case "refuse":
        this.refuse(effect.delivery, effect.error);
        return;
      case "refused": {
        effect.replyTo?.failAsk?.(effect.error);
        // Once per sender and error: a peer repeating a refused message must not write a log line per message.
        const key = `${effect.origin?.toString() ?? "local"} ${effect.error.name}: ${effect.error.message.slice(0, 200)}`;
        if (!this.rejectionsLogged.has(key) && this.rejectionsLogged.size < rejectionLogMax) {
          this.rejectionsLogged.add(key);
          this.system.log.warn(
            { error: effect.error.message, origin: effect.origin?.toString() },
            "sharding daemon rejected a message (logged once per sender and error; stats.rejectedEnvelopes counts every one)",
          );
        }
        return;
      }
      case "ack":
        this.directBatches.flush();
        if (effect.error === null) effect.replyTo?.tell(new ShardingControlAck(true));
        else effect.replyTo?.failAsk?.(effect.error);
        return;
      case "drainShard": {
        const { type, shard } = effect;
        const provider = this.providers.get(type);
        if (provider === undefined) return;
        provider.drainShard(shard).then(
          () => this.run({ kind: "drained", type, shard, error: null }),
          (error: unknown) => this.run({ kind: "drained", type, shard, error: asError(error) }),
        );
        return;
      }
      case "prepareShard": {
        const { type, shard, coordinator, waiter } = effect;
        const provider = this.providers.get(type);
        if (provider === undefined) return;
        provider.prepareShard(shard).then(
          () => this.run({ kind: "prepared", type, shard, coordinator, waiter, error: null }),
          (error: unknown) => this.run({ kind: "prepared", type, shard, coordinator, waiter, error: asError(error) }),
        );
        return;
      }
      case "retainShards":
        this.providers.get(effect.type)?.retainShards(effect.shards);
        return;
      case "suspendOwnership":
        this.providers.get(effect.type)?.suspendOwnership(effect.release);
        return;
      case "passivateIdle": {
        const provider = this.providers.get(effect.type);
        if (provider === undefined) return;
        try {
          const passivated = provider.passivateIdle(this.system.scheduler.now(), effect.idleTimeoutMs);
          this.queue.push({ kind: "idleSwept", type: effect.type, passivated, error: null });
        } catch (error) {
          this.queue.push({ kind: "idleSwept", type: effect.type, passivated: 0, error: asError(error) });
        }
        return;
      }
      case "schedule": {
        const timer = effect.timer;
        const handle: Cancellable = this.system.scheduler.scheduleOnce(effect.afterMs, () => {
          this.timers.delete(handle);
          this.run({ kind: "timer", timer });
        });
        this.timers.add(handle);
        return;
      }
      case "log":
        this.system.log[effect.level]?.(effect.fields, effect.message);
        return;
      case "stopSharding":
        this.stopRequested();
        return;
      case "shardMoveDecided":
        this.moveDecision = effect.decision;
        return;
    }
  }

  /**
   * Writes one owner's batch of direct envelopes: as one `DirectBatch` frame when it holds two or more, else the
   * envelope alone. A batch that cannot be sent whole (too large for one frame, say) is written envelope by envelope,
   * so each send that fails goes back to the core alone, as a single direct envelope's would.
   */
  private writeDirect(batch: PendingDirectBatch): void {
    const { envelopes, deliveries, sender } = batch;
    let daemon: ActorRef<unknown>;
    try {
      daemon = this.daemonOf(batch.to);
    } catch (error) {
      for (let i = 0; i < deliveries.length; i++) {
        this.queue.push({ kind: "sendFailed", delivery: deliveries[i]!, error: asError(error) });
      }
      return;
    }
    if (envelopes.length > 1 && batch.headerFits) {
      try {
        daemon.tell(new DirectBatch(envelopes, true), sender);
        this.state.counters.directBatches++;
        return;
      } catch (error) {
        // Too large for one frame is expected now and then; anything else is not, but costs no envelope either.
        if (!(error instanceof MessageTooLargeError)) {
          this.system.log.warn(
            { error: asError(error).message, envelopes: envelopes.length },
            "a direct batch could not be sent; its envelopes are sent one by one",
          );
        }
      }
    }
    for (let i = 0; i < envelopes.length; i++) {
      try {
        daemon.tell(envelopes[i], sender);
      } catch (error) {
        this.queue.push({ kind: "sendFailed", delivery: deliveries[i]!, error: asError(error) });
      }
    }
  }

  /**
   * The `deliver` effect of a one-delivery route step that {@link route} took without the step: performed alike (an
   * outcome other than delivered goes back to the core as `delivered`, and what the delivery queued runs after it).
   */
  private deliverRouted(type: string, delivery: Delivery, nowMs?: number): void {
    const provider = this.providers.get(type);
    if (provider === undefined) return;
    this.running = true;
    try {
      this.stepNowMs = nowMs ?? this.scheduler.now();
      const outcome = this.deliverOne(provider, delivery);
      if (outcome !== "delivered") this.undelivered(type, delivery, outcome);
    } finally {
      this.running = false;
    }
    this.drainQueued();
  }

  /**
   * Queues, for the core, a delivery of `type` that a shortcut performed and that was not delivered: the `delivered`
   * input its step's `deliver` effect would have given.
   */
  private undelivered(type: string, delivery: Delivery, outcome: AttemptOutcome): void {
    const shard = delivery.envelope.shardId;
    this.queue.push({ kind: "delivered", type, shard, retry: false, deliveries: [delivery], outcomes: [outcome] });
  }

  /** Runs what a shortcut queued for the core (a refused send, an undelivered delivery), if anything. */
  private drainQueued(): void {
    const next = this.queue.shift();
    if (next !== undefined) this.drain(next);
  }

  /**
   * Performs a `forward` effect decided outside a step (receive, or a caller's route: `input`, so that a send refused
   * at once fails that call as it would in the step), then runs what it queued (a refused send).
   */
  private forwardRouted(effect: Extract<NodeEffect, { kind: "forward" }>, input: NodeInput | null = null): void {
    this.running = true;
    this.current = input;
    try {
      this.perform(effect);
    } finally {
      this.current = null;
      this.running = false;
    }
    this.drainQueued();
  }

  /**
   * A traced delivery to the entity: the owner's span, a child of the caller's, around the hand-over to the entity's
   * mailbox (docs/operations.md "Traces"). A tracer that throws costs the span, not the delivery.
   */
  private deliverTraced(
    tracer: ShardingTracer,
    traceparent: string,
    provider: ShardingProvider,
    d: Delivery,
    value: unknown,
    sender: ActorRef<unknown> | null,
  ): void {
    const { envelope } = d;
    let span: ShardingSpan | null = null;
    try {
      span = tracer.startDelivery(traceparent, envelope.askTimeoutMs === null ? "tell" : "ask", envelope);
    } catch (error) {
      this.system.log.warn({ error: asError(error).message }, "sharding tracer failed to start a delivery span");
    }
    try {
      this.deliverUser(provider, d, value, sender);
    } catch (error) {
      endSpan(span, error);
      throw error;
    }
    endSpan(span, undefined);
  }

  /** The user message to its entity (a relayed ask gets the owner's own timeout, see below). */
  private deliverUser(provider: ShardingProvider, d: Delivery, value: unknown, sender: ActorRef<unknown> | null): void {
    const { envelope } = d;
    // A relayed or direct ask (hop 1 or 2) that fails or times out at the entity is a rejection (docs/protocol.md §16.2 "failed relayed asks");
    // the asker hears straight from the owner, so the owner is where it is counted.
    if (sender !== null && envelope.hopCount >= 1 && envelope.askTimeoutMs !== null) {
      const relayed = new RelayedAskSender(sender, this.state.counters);
      provider.deliver(envelope.shardId, envelope.entityId, value, relayed, this.stepNowMs);
      // Armed only once delivered: a delivery refused into the retry barrier is retried with a new wrapper.
      relayed.armTimeout(this.system.timeouts, envelope.askTimeoutMs);
    } else provider.deliver(envelope.shardId, envelope.entityId, value, sender, this.stepNowMs);
  }

  /**
   * One delivery into the provider: the payload decoded here, once (a malformed one is refused and counted), the shard
   * authorized (a persistent provider takes its lease), then the entity's message, activation or passivation.
   */
  private deliverOne(provider: ShardingProvider, d: Delivery): AttemptOutcome {
    const { envelope } = d;
    const counters = this.state.counters;
    try {
      let value: unknown;
      if (envelope.kind === "User") {
        const typed = typedOf(envelope);
        if (typed !== untyped) value = typed;
        else {
          const wire = envelope.message!;
          try {
            value = this.codec.decode(wire);
          } catch (error) {
            counters.malformedEnvelopes.payload++;
            return { error: asError(error) };
          }
          // A retry from the barrier must not decode again. A payload decoded as its frame was read (a direct or
          // forwarded envelope here) costs nothing to read again: it is not attached, which would allocate and change
          // the envelope's shape on every delivery.
          if (!(wire.payload instanceof DecodedMessage)) attachTyped(envelope, value);
        }
      }
      provider.authorizeShard(envelope.shardId);
      switch (envelope.kind) {
        case "User": {
          const sender = envelope.senderless ? null : d.sender;
          const tracer = this.tracer;
          if (tracer !== null && envelope.traceparent !== null) {
            this.deliverTraced(tracer, envelope.traceparent, provider, d, value, sender);
          } else this.deliverUser(provider, d, value, sender);
          break;
        }
        case "Activate": {
          const created = provider.activate(envelope.shardId, envelope.entityId, this.stepNowMs);
          d.sender?.tell(new ShardingControlAck(created));
          break;
        }
        case "Passivate":
          if (provider.passivate(envelope.entityId)) counters.explicitPassivations++;
          break;
      }
      return "delivered";
    } catch (error) {
      return outcomeOfError(error);
    }
  }

  /** {@link deliverOne} of a tell whose payload is `value`, to `sender` (null when senderless), without a trace. */
  private deliverTell(
    provider: ShardingProvider,
    shard: number,
    entityId: string,
    value: unknown,
    sender: ActorRef<unknown> | null,
  ): AttemptOutcome {
    try {
      provider.authorizeShard(shard);
      provider.deliver(shard, entityId, value, sender, this.stepNowMs);
      return "delivered";
    } catch (error) {
      return outcomeOfError(error);
    }
  }
}

/** The outcome of a delivery that threw `error`: the lease or a handoff retries it (the barrier), the rest fails it. */
function outcomeOfError(error: unknown): AttemptOutcome {
  if (error instanceof ShardLeaseUnavailableError) return "lease";
  if (error instanceof ShardHandoffInProgressError) return "handoff";
  return { error: asError(error) };
}

/** Ends `span` (if one was started), swallowing a tracer's own failure. */
export function endSpan(span: ShardingSpan | null, error: unknown): void {
  if (span === null) return;
  try {
    span.end(error);
  } catch {
    // A tracer that throws on end loses that span; the call it traced has already completed.
  }
}
