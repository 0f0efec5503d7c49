/**
 * Sharded calls as OpenTelemetry spans. Like the metrics bridge, `@opentelemetry/api` is only imported for its types:
 * the user passes the API objects of their own installation (`trace`, `context`) and a `Tracer`, so Movie never loads
 * the package and works with whichever SDK the application set up.
 *
 * On the caller a span per `tell` (kind producer, ended once routed) or `ask` (kind client, ended with the reply or
 * the failure), a child of the caller's active span; its W3C `traceparent` travels in the sharding envelope
 * (docs/protocol.md §7.2). The coordinator forwards it unchanged, and the node that hands the message to the entity
 * starts a child of the caller's span (kind consumer for a tell, server for an ask). Each span carries
 * `movie.entity.type`, `movie.entity.id` and `movie.shard.id`.
 */
import type { Attributes, ContextAPI, Span, SpanKind, SpanStatusCode, TraceAPI, Tracer } from "@opentelemetry/api";
import type { ActorSystem } from "../actor/index.ts";
import {
  ClusterSharding,
  formatTraceparent,
  parseTraceparent,
  type ShardedCall,
  type ShardingSpan,
  type ShardingTracer,
} from "../sharding/index.ts";

/** The parts of `@opentelemetry/api` the bridge uses: pass `{ trace, context }` from your own import of it. */
export interface OpenTelemetryTraceApi {
  readonly trace: Pick<TraceAPI, "setSpanContext">;
  readonly context: Pick<ContextAPI, "active">;
}

/** Options of {@link registerOpenTelemetryTracing}. */
export interface OpenTelemetryTracingOptions {
  /** The tracer spans are started on (`trace.getTracer("movie")` of your SDK). */
  readonly tracer: Tracer;
  /** `trace` and `context` of your `@opentelemetry/api`. */
  readonly api: OpenTelemetryTraceApi;
}

// The API's numeric enum values (stable since 1.0), written here because the package is only imported for types.
const producer = 3 as SpanKind;
const client = 2 as SpanKind;
const consumer = 4 as SpanKind;
const server = 1 as SpanKind;
const statusError = 2 as SpanStatusCode;

function attributesOf(call: ShardedCall): Attributes {
  return { "movie.entity.type": call.entityType, "movie.entity.id": call.entityId, "movie.shard.id": call.shardId };
}

function wrap(span: Span, traceparent: string | null): ShardingSpan {
  return {
    traceparent,
    end(error?: unknown): void {
      if (error !== undefined) {
        if (error instanceof Error) span.recordException(error);
        span.setStatus({ code: statusError, message: error instanceof Error ? error.message : "failed" });
      }
      span.end();
    },
  };
}

/** A {@link ShardingTracer} on an OpenTelemetry `Tracer`. */
export function openTelemetryShardingTracer(options: OpenTelemetryTracingOptions): ShardingTracer {
  const { tracer, api } = options;
  return {
    startCall(kind, call) {
      const span = tracer.startSpan(
        `${call.entityType} ${kind}`,
        { kind: kind === "tell" ? producer : client, attributes: { ...attributesOf(call), "movie.call": kind } },
        api.context.active(),
      );
      return wrap(span, formatTraceparent(span.spanContext()));
    },
    startDelivery(traceparent, kind, call) {
      const parent = parseTraceparent(traceparent);
      // The envelope's value was validated on decode (or written by this node); a null here starts a root span.
      const context =
        parent === null
          ? api.context.active()
          : api.trace.setSpanContext(api.context.active(), { ...parent, isRemote: true });
      const span = tracer.startSpan(
        `${call.entityType} ${kind} deliver`,
        { kind: kind === "tell" ? consumer : server, attributes: { ...attributesOf(call), "movie.call": kind } },
        context,
      );
      return wrap(span, null);
    },
  };
}

/**
 * Traces `system`'s sharded calls on `options.tracer` (enable sharding first); returns the function that stops.
 * @throws Error when sharding is not enabled on `system`
 */
export function registerOpenTelemetryTracing(system: ActorSystem, options: OpenTelemetryTracingOptions): () => void {
  const sharding = ClusterSharding.get(system);
  sharding.useTracer(openTelemetryShardingTracer(options));
  return () => sharding.useTracer(null);
}
