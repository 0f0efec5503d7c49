/**
 * The same instruments as `GET /metrics`, on an OpenTelemetry `Meter`: `@opentelemetry/api` is an optional peer
 * dependency and is only imported for its types here, so nothing loads it unless the user passes a Meter from their
 * own SDK. Counters become observable counters, gauges observable gauges, with the Prometheus family name in OTel's
 * dotted style (`movie_sharding_routes_total` → `movie.sharding.routes`) and the same labels as attributes. One batch
 * callback collects every value once per export.
 */
import type { Attributes, BatchObservableResult, Meter, Observable } from "@opentelemetry/api";
import type { ActorSystem } from "../actor/index.ts";
import type { Labels } from "./exposition.ts";
import { collectMetrics } from "./metrics.ts";
import type { OperatorLog } from "./operator-log.ts";

/** `movie_sharding_routes_total` → `movie.sharding.routes`. */
export function otelName(prometheusName: string): string {
  return prometheusName.replace(/_total$/, "").replace(/_/g, ".");
}

function attributes(labels: Labels): Attributes {
  const out: Attributes = {};
  // Label names are this module's constants (type, status, reason, error), never user input.
  for (const [k, v] of labels) out[k] = v;
  return out;
}

/**
 * Registers `system`'s metrics on `meter`. Families are those that exist now (enable remoting, cluster, sharding and
 * persistence first); per-type values of entity types registered later appear as new attribute sets. Returns the
 * function that removes the callback.
 */
export function registerOpenTelemetryMetrics(
  system: ActorSystem,
  meter: Meter,
  operatorLog: OperatorLog | null = null,
): () => void {
  const instruments = new Map<string, Observable>();
  for (const family of collectMetrics(system, operatorLog).data()) {
    const name = otelName(family.name);
    const options = { description: family.help };
    instruments.set(
      family.name,
      family.kind === "counter"
        ? meter.createObservableCounter(name, options)
        : meter.createObservableGauge(name, options),
    );
  }
  const callback = (result: BatchObservableResult): void => {
    if (system.isTerminated) return;
    for (const family of collectMetrics(system, operatorLog).data()) {
      const instrument = instruments.get(family.name);
      if (instrument === undefined) continue;
      for (const v of family.values) result.observe(instrument, v.value, attributes(v.labels));
    }
  };
  const all = [...instruments.values()];
  meter.addBatchObservableCallback(callback, all);
  return () => meter.removeBatchObservableCallback(callback, all);
}
