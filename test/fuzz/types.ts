/**
 * The message classes the fuzz target registers, one per way a payload is rebuilt: plain prototype assignment, a
 * getter-only property, a Standard Schema written the naive way, `fromJSON` (one that validates, one that throws what
 * it was given), and binary codecs (direct, and through `fromJSON`). Shared by the target and the generator.
 */
import type { FieldList, StandardSchemaV1 } from "../../src/remote/index.ts";
import { MessageRegistry } from "../../src/remote/index.ts";

export class FzPlain {
  constructor(
    readonly a: number,
    readonly b: string,
    readonly c: unknown,
  ) {}
}

export class FzGetter {
  constructor(readonly n: number) {}
  /** Getter-only: a payload with a `kind` key cannot be assigned onto an instance. */
  get kind(): string {
    return "getter";
  }
}

/** Reads fields without checking the input is an object first, as a hand-written schema often does. */
const naiveSchema: StandardSchemaV1 = {
  "~standard": {
    version: 1,
    vendor: "fuzz",
    validate: (value) => {
      const n = (value as { n: { toFixed(d: number): string } }).n;
      return n.toFixed(0).length > 0 ? { value } : { issues: [{ message: "n is empty" }] };
    },
  },
};

export class FzSchema {
  constructor(readonly n: number) {}
}

export class FzFromJson {
  constructor(readonly x: number) {}
  static fromJSON(json: unknown): FzFromJson {
    const x = (json as { x?: unknown } | null)?.x;
    if (typeof x !== "number") throw new TypeError("x must be a number");
    return new FzFromJson(x);
  }
}

/** A fromJSON that throws the offending value itself (legal JavaScript: anything can be thrown). */
export class FzThrowsValue {
  constructor(readonly x: number) {}
  static fromJSON(json: unknown): FzThrowsValue {
    const x = (json as { x?: unknown } | null)?.x;
    if (typeof x !== "number") throw x;
    return new FzThrowsValue(x);
  }
}

export const binaryFields = {
  n: "number",
  i: "int32",
  b: "boolean",
  s: "string",
  j: "json",
  o: "string?",
} as const satisfies FieldList;

export class FzBinary {
  constructor(
    readonly n: number,
    readonly i: number,
    readonly b: boolean,
    readonly s: string,
    readonly j: unknown,
    readonly o: string | null,
  ) {}
}

export class FzBinaryFromJson {
  constructor(
    readonly n: number,
    readonly i: number,
    readonly b: boolean,
    readonly s: string,
    readonly j: unknown,
    readonly o: string | null,
  ) {}
  static fromJSON(json: unknown): FzBinaryFromJson {
    const v = json as Record<string, unknown>;
    if (typeof v.s !== "string") throw new TypeError("s must be a string");
    return new FzBinaryFromJson(v.n as number, v.i as number, v.b as boolean, v.s, v.j, (v.o ?? null) as string | null);
  }
}

/** Wire names of the fuzz classes. */
export const fuzzTypeNames = {
  plain: "fuzz.plain",
  getter: "fuzz.getter",
  schema: "fuzz.schema",
  fromJson: "fuzz.from-json",
  throwsValue: "fuzz.throws-value",
  binary: "fuzz.binary",
  binaryFromJson: "fuzz.binary-from-json",
} as const;

/** Registers the fuzz classes with the process-wide registry (idempotent per process: call once). */
export function registerFuzzTypes(): void {
  MessageRegistry.register(FzPlain, { name: fuzzTypeNames.plain });
  MessageRegistry.register(FzGetter, { name: fuzzTypeNames.getter });
  MessageRegistry.register(FzSchema, { name: fuzzTypeNames.schema, schema: naiveSchema });
  MessageRegistry.register(FzFromJson, { name: fuzzTypeNames.fromJson });
  MessageRegistry.register(FzThrowsValue, { name: fuzzTypeNames.throwsValue });
  MessageRegistry.register(FzBinary, { name: fuzzTypeNames.binary, fields: binaryFields });
  MessageRegistry.register(FzBinaryFromJson, { name: fuzzTypeNames.binaryFromJson, fields: binaryFields });
}
