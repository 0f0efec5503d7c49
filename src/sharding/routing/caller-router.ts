import {
  type ActorRef,
  type AskOptions,
  askVia,
  type Class,
  InvalidArgumentError,
  InvalidMessageError,
  requireDurationMs,
  Stop,
  type SystemMessage,
  typeNameOf,
  type UniqueAddress,
} from "../../actor/index.ts";
import { isWellFormedText } from "../../remote/codec.ts";
import { attachTyped } from "../codec.ts";
import { type EnvelopeKind, ShardingControlAck, ShardingEnvelope } from "../coordinator/messages.ts";
import type { EntityRouter } from "../entity-ref.ts";
import type { EntityTypeState } from "../entity-type-state.ts";
import { NoShardOwnerError, UnsupportedSystemMessageError } from "../errors.ts";
import type { ShardingContext } from "../sharding-context.ts";
import type { EnvelopeRouter } from "./envelope-router.ts";
import { LocalCoordinatorEntry } from "./local-coordinator-entry.ts";

/**
 * The caller side of routing (REFERENCE §3.6), behind every `ShardedEntityRef`: builds the envelope (shard,
 * settings key, payload encoded once) and hands it to the coordinator, run synchronously when that is this node or
 * sent to the coordinator's daemon; with no coordinator it fails closed.
 */
export class CallerRouter implements EntityRouter {
  constructor(
    private readonly ctx: ShardingContext,
    private readonly envelopes: EnvelopeRouter,
  ) {}

  /** Behind `ClusterSharding.activate`: an Activate envelope through the coordinator, answered by its owner. */
  activate(entityType: string, entityId: string, timeoutMs: number): Promise<ShardingControlAck> {
    try {
      const state = this.ctx.requireType(entityType);
      requireDurationMs("activate timeout", timeoutMs);
      const envelope = this.envelopeFor(state, "Activate", entityId, null, timeoutMs);
      return askVia(this.ctx.system, this.targetFor(state, envelope), envelope, ShardingControlAck, timeoutMs);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** Behind `ShardedEntityRef.tell`. */
  route(entityType: string, entityId: string, message: unknown, sender: ActorRef<unknown> | null): void {
    this.ctx.counters.routes++;
    if (message === undefined || message === null) throw new InvalidMessageError("tell needs a message value");
    const state = this.ctx.requireType(entityType);
    const envelope = this.envelopeFor(state, "User", entityId, message, null);
    this.targetFor(state, envelope).tell(envelope, sender);
  }

  /** Behind `ShardedEntityRef.ask`. */
  routeAsk<R>(
    entityType: string,
    entityId: string,
    message: unknown,
    replyType: Class<R>,
    timeoutMs: number,
    options?: AskOptions,
  ): Promise<R> {
    try {
      this.ctx.counters.routes++;
      if (message === undefined || message === null) throw new InvalidMessageError("ask needs a message value");
      requireDurationMs("ask timeout", timeoutMs);
      const state = this.ctx.requireType(entityType);
      const envelope = this.envelopeFor(state, "User", entityId, message, timeoutMs);
      return askVia(this.ctx.system, this.targetFor(state, envelope), envelope, replyType, timeoutMs, options);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** Behind `ShardedEntityRef.sendSystem`. */
  passivate(entityType: string, entityId: string, message: SystemMessage): void {
    if (!(message instanceof Stop)) throw new UnsupportedSystemMessageError(typeNameOf(message));
    const state = this.ctx.requireType(entityType);
    this.ctx.counters.passivationRequests++;
    const envelope = this.envelopeFor(state, "Passivate", entityId, null, null);
    // REFERENCE §7: remoteRoutes counts routes and activations sent to a remote coordinator, not passivations.
    this.targetFor(state, envelope, false).tell(envelope, null);
  }

  private envelopeFor(
    state: EntityTypeState,
    kind: EnvelopeKind,
    entityId: string,
    message: unknown,
    askTimeoutMs: number | null,
  ): ShardingEnvelope {
    requireEntityId(entityId);
    const settings = state.provider.settings;
    const shardId = settings.partitioner.shardFor(state.provider.name, entityId, settings.shardCount);
    const wire = kind === "User" ? this.ctx.codec.encode(message) : null;
    const envelope = new ShardingEnvelope(
      kind,
      state.provider.name,
      entityId,
      shardId,
      settings.key,
      0,
      null,
      askTimeoutMs,
      false,
      wire,
    );
    if (kind === "User") attachTyped(envelope, message);
    return envelope;
  }

  /**
   * Where this caller hands `envelope`. Zero-downtime hook 1 (wait/routing-wait.ts): the held queue while there is
   * no coordinator or the shard already holds earlier deliveries; else the coordinator (or fail closed).
   */
  private targetFor(state: EntityTypeState, envelope: ShardingEnvelope, countsRemoteRoute = true): ActorRef<unknown> {
    const held = this.ctx.wait?.callerEntry(state, envelope.shardId) ?? null;
    if (held !== null) return held;
    return this.entryRef(this.coordinatorOrThrow(), state, countsRemoteRoute);
  }

  private coordinatorOrThrow(): UniqueAddress {
    const coordinator = this.ctx.routingCoordinator();
    if (coordinator === null) {
      this.ctx.counters.rejectedEnvelopes++;
      throw NoShardOwnerError.noCoordinator();
    }
    return coordinator;
  }

  /** Where a caller hands its envelope: the local coordinator logic, or the remote coordinator's daemon. */
  private entryRef(coordinator: UniqueAddress, state: EntityTypeState, countsRemoteRoute = true): ActorRef<unknown> {
    if (!coordinator.equals(this.ctx.self)) {
      if (countsRemoteRoute) this.ctx.counters.remoteRoutes++;
      return this.ctx.daemonOf(coordinator);
    }
    return new LocalCoordinatorEntry(this.ctx.daemon, (envelope, sender) =>
      this.envelopes.handleEnvelope(state, envelope as ShardingEnvelope, sender, null, true),
    );
  }
}

/**
 * Refuses an entity id no node could host: an empty one, or one with a lone surrogate (its UTF-8, which the wire,
 * the stable hash and the entity's actor name all use, cannot represent it).
 * @throws InvalidArgumentError
 */
export function requireEntityId(entityId: string): void {
  if (typeof entityId !== "string" || entityId.length === 0) {
    throw new InvalidArgumentError("entity id", "entity id must not be empty");
  }
  if (!isWellFormedText(entityId)) {
    throw new InvalidArgumentError(
      "entity id",
      "entity id must be well-formed Unicode (it has a lone surrogate); build ids from whole characters",
    );
  }
}
