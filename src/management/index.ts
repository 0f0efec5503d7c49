/**
 * Operating a Movie cluster from outside the process (`movie/management`): `startManagement(system, options)` serves
 * the HTTP management API (members, shards, entities, stats, leases, down/leave), health probes, Prometheus metrics
 * and a live dashboard; `createManagementHandler` gives the same as a fetch-style handler to mount elsewhere.
 */
export { ManagementConfigurationError, ManagementRequestError } from "./errors.ts";
export {
  createManagementHandler,
  type ManagementHandler,
  type ManagementHandlerOptions,
  type RequestContext,
} from "./handler.ts";
export type { HealthCheck, HealthReport } from "./health.ts";
export { renderMetrics } from "./metrics.ts";
export { otelName, registerOpenTelemetryMetrics } from "./opentelemetry.ts";
export {
  type OpenTelemetryTraceApi,
  type OpenTelemetryTracingOptions,
  openTelemetryShardingTracer,
  registerOpenTelemetryTracing,
} from "./opentelemetry-tracing.ts";
export type { OperatorAction, OperatorLog } from "./operator-log.ts";
export { type ManagementOptions, type ManagementServer, requestBodyBytesMax, startManagement } from "./server.ts";
export type { MembersView, MemberView, ShardView, StatsView, TypeShardsView, TypeSummaryView } from "./views.ts";
