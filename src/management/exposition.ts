/**
 * A writer of the Prometheus text exposition format (version 0.0.4): one `# HELP` and `# TYPE` line per family, then
 * its samples, families in the order first written. Label values are escaped as the format requires (backslash,
 * double quote, line feed), so names that come from users or peers cannot break a line or forge a sample.
 */

import type { HistogramSnapshot, ReadonlyHistogram } from "../actor/index.ts";

/** The content type of {@link Exposition.render}'s text. */
export const expositionContentType = "text/plain; version=0.0.4; charset=utf-8";

/** The metric kinds this writer emits. */
export type MetricKind = "counter" | "gauge" | "histogram";

const metricName = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const labelName = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

interface Family {
  readonly kind: MetricKind;
  readonly help: string;
  readonly unit: string | undefined;
  readonly samples: string[];
  readonly values: { readonly value: number; readonly labels: Labels }[];
  readonly histograms: { readonly histogram: ReadonlyHistogram; readonly labels: Labels }[];
}

/** One family as data, for exporters other than the text format (OpenTelemetry). */
export interface MetricFamily {
  readonly name: string;
  readonly kind: MetricKind;
  readonly help: string;
  readonly values: readonly { readonly value: number; readonly labels: Labels }[];
  /** For a histogram family: each labelled histogram itself (OpenTelemetry records its later observations). */
  readonly histograms: readonly { readonly histogram: ReadonlyHistogram; readonly labels: Labels }[];
  /** The unit of a histogram's values (`s` for seconds, `1` for counts); undefined for counters and gauges. */
  readonly unit: string | undefined;
}

/** Label name → value; values may be anything a user or peer named (they are escaped). */
export type Labels = readonly (readonly [string, string])[];

/** Collects metric families and renders them as one exposition text. */
export class Exposition {
  private readonly families = new Map<string, Family>();

  /** Adds a counter sample (`name` must end in `_total`). */
  counter(name: string, help: string, value: number, labels: Labels = []): void {
    if (!name.endsWith("_total")) throw new Error(`counter ${name} must end in _total`);
    this.sample("counter", name, help, value, labels);
  }

  /** Adds a gauge sample. */
  gauge(name: string, help: string, value: number, labels: Labels = []): void {
    this.sample("gauge", name, help, value, labels);
  }

  /**
   * Adds a histogram: cumulative `name_bucket{le="…"}` samples (the last `le="+Inf"`, equal to the count), then
   * `name_sum` and `name_count`. `name` carries the unit (`_seconds`, `_size`); `unit` says it for OpenTelemetry.
   */
  histogram(name: string, help: string, histogram: ReadonlyHistogram, labels: Labels = [], unit = "1"): void {
    if (name.endsWith("_total") || name.endsWith("_bucket") || name.endsWith("_count") || name.endsWith("_sum")) {
      throw new Error(`histogram ${name} must not end in a reserved suffix`);
    }
    if (labels.some(([k]) => k === "le")) throw new Error(`histogram ${name} must not have a label named le`);
    const family = this.family("histogram", name, help, unit);
    const s: HistogramSnapshot = histogram.snapshot();
    let cumulative = 0;
    for (let i = 0; i <= s.bounds.length; i++) {
      cumulative += s.counts[i]!;
      const le = i < s.bounds.length ? renderValue(s.bounds[i]!) : "+Inf";
      family.samples.push(`${name}_bucket${renderLabels([...labels, ["le", le]])} ${cumulative}`);
    }
    family.samples.push(`${name}_sum${renderLabels(labels)} ${renderValue(s.sum)}`);
    family.samples.push(`${name}_count${renderLabels(labels)} ${s.count}`);
    family.histograms.push({ histogram, labels });
  }

  private family(kind: MetricKind, name: string, help: string, unit?: string): Family {
    // Names are this module's constants: a bad one is a programming error, caught by the metrics test.
    if (!metricName.test(name)) throw new Error(`invalid metric name ${name}`);
    let family = this.families.get(name);
    if (family === undefined) {
      family = { kind, help, unit, samples: [], values: [], histograms: [] };
      this.families.set(name, family);
    } else if (family.kind !== kind) {
      throw new Error(`metric ${name} written as ${kind} and ${family.kind}`);
    }
    return family;
  }

  private sample(kind: MetricKind, name: string, help: string, value: number, labels: Labels): void {
    const family = this.family(kind, name, help);
    family.samples.push(`${name}${renderLabels(labels)} ${renderValue(value)}`);
    family.values.push({ value, labels });
  }

  /** Every family written, in order, as data. */
  data(): MetricFamily[] {
    return [...this.families].map(([name, f]) => ({
      name,
      kind: f.kind,
      help: f.help,
      values: f.values,
      histograms: f.histograms,
      unit: f.unit,
    }));
  }

  /** The exposition text, ending in a line feed. */
  render(): string {
    const lines: string[] = [];
    for (const [name, family] of this.families) {
      lines.push(`# HELP ${name} ${escapeHelp(family.help)}`, `# TYPE ${name} ${family.kind}`, ...family.samples);
    }
    return lines.length === 0 ? "" : `${lines.join("\n")}\n`;
  }
}

function renderLabels(labels: Labels): string {
  if (labels.length === 0) return "";
  const parts: string[] = [];
  for (const [name, value] of labels) {
    if (!labelName.test(name) || name.startsWith("__")) throw new Error(`invalid label name ${name}`);
    parts.push(`${name}="${escapeLabelValue(value)}"`);
  }
  return `{${parts.join(",")}}`;
}

/** Escapes a label value: `\` → `\\`, `"` → `\"`, line feed → `\n` (the format's three escapes). */
export function escapeLabelValue(value: string): string {
  return value.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}

function escapeHelp(help: string): string {
  return help.replace(/\\/g, "\\\\").replace(/\n/g, "\\n");
}

function renderValue(value: number): string {
  if (Number.isNaN(value)) return "NaN";
  if (value === Number.POSITIVE_INFINITY) return "+Inf";
  if (value === Number.NEGATIVE_INFINITY) return "-Inf";
  return String(value);
}
