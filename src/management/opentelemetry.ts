/**
 * The same instruments as `GET /metrics`, on an OpenTelemetry `Meter`: `@opentelemetry/api` is an optional peer
 * dependency and is only imported for its types here, so nothing loads it unless the user passes a Meter from their
 * own SDK. Counters become observable counters, gauges observable gauges, with the Prometheus family name in OTel's
 * dotted style (`movie_sharding_routes_total` → `movie.sharding.routes`) and the same labels as attributes. One batch
 * callback collects every value once per export. Histograms (`movie_sharding_handoff_duration_seconds`) become
 * OpenTelemetry histograms with the same bucket bounds, recorded as values are observed: OpenTelemetry has no
 * observable histogram, so the bridge subscribes to each Movie histogram (those created later, such as a new entity
 * type's, at the next collection) and records what it observes from then on.
 */
import type {
  Attributes,
  BatchObservableResult,
  Meter,
  Observable,
  Histogram as OtelHistogram,
} from "@opentelemetry/api";
import type { ActorSystem, ReadonlyHistogram } from "../actor/index.ts";
import type { Labels, MetricFamily } from "./exposition.ts";
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
  const histograms = new Map<string, OtelHistogram>();
  const subscriptions = new Map<ReadonlyHistogram, () => void>();
  const follow = (family: MetricFamily): void => {
    let instrument = histograms.get(family.name);
    if (instrument === undefined) {
      const first = family.histograms[0]?.histogram;
      // The unit travels as the instrument's unit, not in its name: movie_sharding_handoff_duration_seconds → …duration, "s".
      instrument = meter.createHistogram(otelName(family.name).replace(/\.seconds$/, ""), {
        description: family.help,
        ...(family.unit === undefined ? {} : { unit: family.unit }),
        ...(first === undefined ? {} : { advice: { explicitBucketBoundaries: [...first.bounds] } }),
      });
      histograms.set(family.name, instrument);
    }
    const target = instrument;
    for (const { histogram, labels } of family.histograms) {
      if (subscriptions.has(histogram)) continue;
      const attrs = attributes(labels);
      subscriptions.set(
        histogram,
        histogram.subscribe((value) => target.record(value, attrs)),
      );
    }
  };
  for (const family of collectMetrics(system, operatorLog).data()) {
    if (family.kind === "histogram") {
      follow(family);
      continue;
    }
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
      if (family.kind === "histogram") {
        follow(family);
        continue;
      }
      const instrument = instruments.get(family.name);
      if (instrument === undefined) continue;
      for (const v of family.values) result.observe(instrument, v.value, attributes(v.labels));
    }
  };
  const all = [...instruments.values()];
  meter.addBatchObservableCallback(callback, all);
  return () => {
    meter.removeBatchObservableCallback(callback, all);
    for (const stop of subscriptions.values()) stop();
    subscriptions.clear();
  };
}
