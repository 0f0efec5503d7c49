/**
 * What sharding asks of a tracer: a span around each sharded `tell`/`ask` on the caller, whose `traceparent` travels
 * in the envelope, and a span on the node that delivers it to the entity, a child of the caller's. The sharding layer
 * holds one or none (`ClusterSharding.useTracer`); with none, routing pays one null check per message.
 * `registerOpenTelemetryTracing` in `movie/management` implements it on the user's OpenTelemetry API; any other
 * tracer can implement it too.
 */

/** Where a sharded message is going, as span attributes. */
export interface ShardedCall {
  readonly entityType: string;
  readonly entityId: string;
  readonly shardId: number;
}

/** A span in progress; end it once, with the error if the call failed. */
export interface ShardingSpan {
  /** The `traceparent` to put in the envelope (see traceparent.ts), or null to send none. */
  readonly traceparent: string | null;
  /** Ends the span; `error` marks it failed (the call's error, or undefined when it succeeded). */
  end(error?: unknown): void;
}

/** The tracer sharding calls. Implementations must not throw (a throw is caught and the call goes on untraced). */
export interface ShardingTracer {
  /** Starts the caller's span of a sharded `tell` or `ask`, a child of the caller's current span if any. */
  startCall(kind: "tell" | "ask", call: ShardedCall): ShardingSpan;
  /** Starts the owner's span of a delivery to the entity, a child of the span that `traceparent` names. */
  startDelivery(traceparent: string, kind: "tell" | "ask", call: ShardedCall): ShardingSpan;
}
