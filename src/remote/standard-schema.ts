/**
 * Standard Schema v1 (https://standardschema.dev), the interface zod, valibot, arktype and hand-written validators
 * share. The types come from `@standard-schema/spec` (types only, nothing of it runs); the guard below is the one piece
 * of it remoting executes, on a value a caller passed as `schema`.
 */
import type { StandardSchemaV1 } from "@standard-schema/spec";

export type { StandardSchemaV1 } from "@standard-schema/spec";

/** The result of a Standard Schema validation: a value, or issues. */
export type StandardSchemaResult<Output> = StandardSchemaV1.Result<Output>;

/** True when `value` looks like a Standard Schema v1 object. */
export function isStandardSchema(value: unknown): value is StandardSchemaV1 {
  if (value === null || (typeof value !== "object" && typeof value !== "function")) return false;
  const standard = (value as { "~standard"?: { version?: unknown; validate?: unknown } })["~standard"];
  return standard !== undefined && standard.version === 1 && typeof standard.validate === "function";
}
