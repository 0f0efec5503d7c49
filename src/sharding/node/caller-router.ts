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
} from "../../actor/index.ts";
import { isWellFormedText } from "../../actor/untrusted.ts";
import type { EntityRouteMemo, EntityRouter } from "../entity-ref.ts";
import { asError, UnsupportedSystemMessageError } from "../errors.ts";
import { attachTyped, type PayloadCodec } from "../internal/codec.ts";
import { type EnvelopeKind, ShardingControlAck, ShardingEnvelope, type WireMessage } from "../internal/messages.ts";
import type { ShardingSpan, ShardingTracer } from "../tracing/sharding-tracer.ts";
import { requireType, type TypeState } from "./node-core.ts";
import { endSpan, type NodeShell } from "./node-shell.ts";

/**
 * The caller side of routing (docs/protocol.md §8.1), behind every `ShardedEntityRef`: validates the call, builds the
 * envelope (shard, settings key, payload encoded once, the typed value riding along) and hands it to the node core,
 * which decides where it goes.
 */
export class CallerRouter implements EntityRouter {
  private readonly remoteEntry: ActorRef<unknown>;
  private readonly passivationEntry: ActorRef<unknown>;

  constructor(
    private readonly shell: NodeShell,
    private readonly codec: PayloadCodec,
  ) {
    this.remoteEntry = shell.entry(true);
    this.passivationEntry = shell.entry(false);
  }

  /** Behind `ClusterSharding.activate`: an Activate envelope through the coordinator, answered by its owner. */
  activate(entityType: string, entityId: string, timeoutMs: number): Promise<ShardingControlAck> {
    try {
      const t = requireType(this.shell.state, entityType);
      requireDurationMs("activate timeout", timeoutMs);
      const envelope = this.envelopeFor(t, "Activate", entityId, null, timeoutMs);
      return askVia(this.shell.system, this.remoteEntry, envelope, ShardingControlAck, timeoutMs);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** Behind `ShardedEntityRef.tell`. */
  route(
    entityType: string,
    entityId: string,
    message: unknown,
    sender: ActorRef<unknown> | null,
    memo?: EntityRouteMemo,
  ): void {
    this.shell.counters.routes++;
    if (message === undefined || message === null) throw new InvalidMessageError("tell needs a message value");
    const t = requireType(this.shell.state, entityType);
    const tracer = this.shell.tracer;
    if (tracer === null) {
      if (t.settings.routing === "direct") this.tellDirect(t, entityId, message, sender, memo);
      else this.shell.route({ envelope: this.envelopeFor(t, "User", entityId, message, null), sender }, true);
      return;
    }
    const call = new TracedCall(this.shell, tracer, "tell");
    try {
      this.shell.route({ envelope: this.envelopeFor(t, "User", entityId, message, null, call), sender }, true);
    } catch (error) {
      endSpan(call.span, error);
      throw error;
    }
    endSpan(call.span, undefined);
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
      this.shell.counters.routes++;
      if (message === undefined || message === null) throw new InvalidMessageError("ask needs a message value");
      requireDurationMs("ask timeout", timeoutMs);
      const t = requireType(this.shell.state, entityType);
      const tracer = this.shell.tracer;
      if (tracer === null) {
        const envelope = this.envelopeFor(t, "User", entityId, message, timeoutMs);
        return askVia(this.shell.system, this.remoteEntry, envelope, replyType, timeoutMs, options);
      }
      return this.tracedAsk(tracer, t, entityId, message, replyType, timeoutMs, options);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** Behind `ShardedEntityRef.sendSystem`. */
  passivate(entityType: string, entityId: string, message: SystemMessage): void {
    if (!(message instanceof Stop)) throw new UnsupportedSystemMessageError(typeNameOf(message));
    const t = requireType(this.shell.state, entityType);
    this.shell.counters.passivationRequests++;
    const envelope = this.envelopeFor(t, "Passivate", entityId, null, null);
    // docs/protocol.md §16.2: remoteRoutes counts routes and activations sent to a remote coordinator, not passivations.
    this.passivationEntry.tell(envelope, null);
  }

  /** An ask inside the caller's span, which ends with the reply or the failure. */
  private tracedAsk<R>(
    tracer: ShardingTracer,
    t: TypeState,
    entityId: string,
    message: unknown,
    replyType: Class<R>,
    timeoutMs: number,
    options: AskOptions | undefined,
  ): Promise<R> {
    const call = new TracedCall(this.shell, tracer, "ask");
    let reply: Promise<R>;
    try {
      const envelope = this.envelopeFor(t, "User", entityId, message, timeoutMs, call);
      reply = askVia(this.shell.system, this.remoteEntry, envelope, replyType, timeoutMs, options);
    } catch (error) {
      endSpan(call.span, error);
      throw error;
    }
    const span = call.span;
    return reply.then(
      (value) => {
        endSpan(span, undefined);
        return value;
      },
      (error: unknown) => {
        endSpan(span, error);
        throw error;
      },
    );
  }

  /**
   * An untraced tell of a type with direct routing: straight into its owner's batch when the core routes it there
   * (NodeShell.tellDirect), else as any tell. The same checks, in the same order, as {@link envelopeFor}'s.
   */
  private tellDirect(
    t: TypeState,
    entityId: string,
    message: unknown,
    sender: ActorRef<unknown> | null,
    memo: EntityRouteMemo | undefined,
  ): void {
    let shardId: number;
    // A ref's entity keeps its shard while its type's registration (and so its settings) and its id stay: the id
    // was checked and hashed at the ref's first tell under them.
    if (memo !== undefined && memo.registration === t && memo.entityId === entityId) shardId = memo.shard;
    else {
      requireEntityId(entityId);
      const settings = t.settings;
      shardId = settings.partitioner.shardFor(t.name, entityId, settings.shardCount);
      if (memo !== undefined) {
        memo.registration = t;
        memo.entityId = entityId;
        memo.shard = shardId;
      }
    }
    const wire = this.codec.encode(message);
    if (this.shell.tellDirect(t, entityId, shardId, wire, message, sender)) return;
    const envelope = hop0Envelope(t, "User", entityId, shardId, wire, message, null, null);
    this.shell.route({ envelope, sender }, true);
  }

  private envelopeFor(
    t: TypeState,
    kind: EnvelopeKind,
    entityId: string,
    message: unknown,
    askTimeoutMs: number | null,
    traced: TracedCall | null = null,
  ): ShardingEnvelope {
    requireEntityId(entityId);
    const settings = t.settings;
    const shardId = settings.partitioner.shardFor(t.name, entityId, settings.shardCount);
    // The caller's span starts once the shard is known (an attribute), and only for a valid id.
    const traceparent = traced === null ? null : traced.start(t.name, entityId, shardId);
    const wire = kind === "User" ? this.codec.encode(message) : null;
    return hop0Envelope(t, kind, entityId, shardId, wire, message, askTimeoutMs, traceparent);
  }
}

/** A local caller's envelope to the coordinator (hop 0), a User one with its typed value attached. */
function hop0Envelope(
  t: TypeState,
  kind: EnvelopeKind,
  entityId: string,
  shardId: number,
  wire: WireMessage | null,
  message: unknown,
  askTimeoutMs: number | null,
  traceparent: string | null,
): ShardingEnvelope {
  const envelope = new ShardingEnvelope(
    kind,
    t.name,
    entityId,
    shardId,
    t.settings.key,
    0,
    null,
    askTimeoutMs,
    false,
    wire,
    0,
    traceparent,
  );
  if (kind === "User") attachTyped(envelope, message);
  return envelope;
}

/** One traced call's span, started by `envelopeFor` once the shard is known; null when the tracer failed. */
class TracedCall {
  span: ShardingSpan | null = null;

  constructor(
    private readonly shell: NodeShell,
    private readonly tracer: ShardingTracer,
    private readonly kind: "tell" | "ask",
  ) {}

  /** Starts the span; returns its traceparent for the envelope. A tracer that throws costs the span, not the call. */
  start(entityType: string, entityId: string, shardId: number): string | null {
    try {
      this.span = this.tracer.startCall(this.kind, { entityType, entityId, shardId });
      return this.span.traceparent;
    } catch (error) {
      this.shell.system.log.warn({ error: asError(error).message }, "sharding tracer failed to start a call span");
      return null;
    }
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
