/**
 * The W3C Trace Context `traceparent` value a sharding envelope carries (docs/protocol.md §7.2):
 * `00-<trace-id: 32 lowercase hex>-<parent-id: 16 lowercase hex>-<flags: 2 lowercase hex>`, 55 characters.
 *
 * Only version 00 is accepted, exactly as written, and neither id may be all zeros (the format's invalid values). A
 * peer's value that does not match is not an error of the envelope: the message is still delivered, without a parent
 * span, and the node counts it (`ShardingStats.malformedTraceContexts`). Pure: no clock, no I/O.
 */

/** A trace context parsed from, or written to, a `traceparent`. */
export interface TraceContext {
  /** 32 lowercase hex digits, not all zeros. */
  readonly traceId: string;
  /** The sending span's id: 16 lowercase hex digits, not all zeros. */
  readonly spanId: string;
  /** The trace flags byte (bit 0: sampled). */
  readonly traceFlags: number;
}

/** Length of a version-00 `traceparent`. */
export const traceparentLength = 55;

const traceparentPattern = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
const zeroTraceId = "0".repeat(32);
const zeroSpanId = "0".repeat(16);

/** The trace context of `value`, or null when it is not a valid version-00 `traceparent` (any type is accepted). */
export function parseTraceparent(value: unknown): TraceContext | null {
  // The length check first: a hostile megabyte string is refused without running the pattern over it.
  if (typeof value !== "string" || value.length !== traceparentLength) return null;
  const m = traceparentPattern.exec(value);
  if (m === null) return null;
  const [, traceId, spanId, flags] = m as unknown as [string, string, string, string];
  if (traceId === zeroTraceId || spanId === zeroSpanId) return null;
  return { traceId, spanId, traceFlags: Number.parseInt(flags, 16) };
}

/**
 * The `traceparent` of `context`, or null when its ids are not valid (a no-op tracer's span has all-zero ids: there
 * is nothing to continue, so nothing is sent).
 */
export function formatTraceparent(context: TraceContext): string | null {
  const flags = context.traceFlags;
  if (!Number.isInteger(flags) || flags < 0 || flags > 0xff) return null;
  const text = `00-${context.traceId}-${context.spanId}-${flags.toString(16).padStart(2, "0")}`;
  return parseTraceparent(text) === null ? null : text;
}
