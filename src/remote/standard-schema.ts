/**
 * The part of the Standard Schema v1 interface (https://standardschema.dev) that remoting uses, typed structurally so
 * zod, valibot, arktype and hand-written validators all fit without a dependency.
 */
export interface StandardSchemaV1<Input = unknown, Output = Input> {
  readonly "~standard": {
    readonly version: 1;
    readonly vendor: string;
    readonly validate: (value: unknown) => StandardSchemaResult<Output> | Promise<StandardSchemaResult<Output>>;
    readonly types?: { readonly input: Input; readonly output: Output } | undefined;
  };
}

/** The result of a Standard Schema validation: a value, or issues. */
export type StandardSchemaResult<Output> =
  | { readonly value: Output; readonly issues?: undefined }
  | { readonly issues: readonly { readonly message: string; readonly path?: readonly unknown[] }[] };

/** True when `value` looks like a Standard Schema v1 object. */
export function isStandardSchema(value: unknown): value is StandardSchemaV1 {
  if (value === null || (typeof value !== "object" && typeof value !== "function")) return false;
  const standard = (value as { "~standard"?: { version?: unknown; validate?: unknown } })["~standard"];
  return standard !== undefined && standard.version === 1 && typeof standard.validate === "function";
}
