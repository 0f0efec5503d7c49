// Types of the one function parse-prometheus-text-format exports (the package ships none).
declare module "parse-prometheus-text-format" {
  export interface ParsedSample {
    readonly value: string;
    readonly labels?: Readonly<Record<string, string>>;
    readonly timestamp_ms?: string;
  }
  export interface ParsedFamily {
    readonly name: string;
    readonly help: string;
    readonly type: "COUNTER" | "GAUGE" | "SUMMARY" | "HISTOGRAM" | "UNTYPED";
    readonly metrics: readonly ParsedSample[];
  }
  export default function parsePrometheusTextFormat(text: string): ParsedFamily[];
}
