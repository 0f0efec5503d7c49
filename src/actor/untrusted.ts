/**
 * Helpers for values that came from outside the process (a peer's JSON, a stored payload) or from code that may have
 * been handed such a value: they describe a value and rebuild an instance from a parsed object without ever calling
 * code the value brings along (no `toString`, `valueOf`, `toJSON`, getters, setters or Proxy traps), with bounded
 * output, and they never throw. Error texts and log lines about untrusted input go through here instead of `String()`
 * or template interpolation, which run the value's own `toString` (`{"toString":1}` makes that throw, and a
 * 20,000-deep array overflows the stack).
 */

/** Longest excerpt of an untrusted string {@link describe} quotes, in UTF-16 code units. */
export const describedStringMax = 64;

/**
 * A short text naming `value` for an error message or a log line: the JSON of a primitive (strings quoted and cut to
 * {@link describedStringMax} characters), else only its kind ("an array", "an object", "a function"). Never calls
 * code of the value and never throws.
 */
export function describe(value: unknown): string {
  switch (typeof value) {
    case "string": {
      // JSON.stringify escapes control characters and lone surrogates, so the text is safe to log as it is.
      if (value.length <= describedStringMax) return JSON.stringify(value);
      return `${JSON.stringify(value.slice(0, describedStringMax))}… (${value.length} characters)`;
    }
    case "number":
      // String() of a number primitive runs no user code; JSON would print NaN and Infinity as null.
      return Object.is(value, -0) ? "-0" : String(value);
    case "boolean":
      return value ? "true" : "false";
    case "undefined":
      return "undefined";
    case "bigint":
      return "a bigint";
    case "symbol":
      return "a symbol";
    case "function":
      return "a function";
    default:
      if (value === null) return "null";
      try {
        // Array.isArray looks through a Proxy and throws on a revoked one.
        return Array.isArray(value) ? "an array" : "an object";
      } catch {
        return "an object";
      }
  }
}

/**
 * The name of the class of object `value` (from its prototype's `constructor`, so an own `constructor` key does not
 * count), or null for a null-prototype object, a nameless class or anything that throws on the way (a Proxy).
 */
export function classNameOf(value: object): string | null {
  try {
    const proto: unknown = Object.getPrototypeOf(value);
    if (proto === null || typeof proto !== "object") return null;
    const name: unknown = (proto as { constructor?: { name?: unknown } }).constructor?.name;
    return typeof name === "string" && name.length > 0 && name.length <= 64 ? name : null;
  } catch {
    return null;
  }
}

/**
 * The `name` of a thrown value when it is an `Error` whose name is a short string, else "NonError" (the key under
 * which an unexpected error is counted). Never throws.
 */
export function errorName(error: unknown): string {
  try {
    if (!(error instanceof Error)) return "NonError";
    const name: unknown = error.name;
    return typeof name === "string" && name.length > 0 && name.length <= 64 ? name : "Error";
  } catch {
    return "NonError";
  }
}

/** `"Name: message"` of a thrown value (the message cut to 200 characters), or {@link describe} of a non-Error. */
export function errorText(error: unknown): string {
  try {
    if (!(error instanceof Error)) return `a non-Error (${describe(error)})`;
    const message: unknown = error.message;
    const text = typeof message === "string" ? message : describe(message);
    return `${errorName(error)}: ${text.length > 200 ? `${text.slice(0, 200)}…` : text}`;
  } catch {
    return "an error that cannot be described";
  }
}

/** Why {@link instanceFromFields} refused a parsed value. */
export type FieldsProblem = "notAnObject" | "protoKey";

/**
 * Builds an object with prototype `proto` from the own enumerable fields of the parsed JSON object `json`, or returns
 * the problem: a value that is not a plain JSON object, or one with a `__proto__` key (assigning it would swap the
 * prototype). A key that names a member of `proto`'s chain (a method, an accessor, `constructor`, `toString`, …) is
 * skipped: it is the class's own, never data, and copying it would either run a setter, throw on a getter-only
 * property, or shadow a method (an own `constructor` makes the instance unrecognisable to the registry that sends it
 * on). Every other key becomes an own data property by plain assignment, which runs no code because nothing on the
 * chain has that name. The check costs one `in` per key; the copy is the same native one as before.
 */
export function instanceFromFields(proto: object, json: unknown): object | FieldsProblem {
  if (json === null || typeof json !== "object" || Array.isArray(json)) return "notAnObject";
  const source = json as Record<string, unknown>;
  const keys = Object.keys(source);
  for (let i = 0; i < keys.length; i++) {
    if (keys[i]! in proto) return copyOwnFields(proto, source, keys);
  }
  // No key is on the chain ("__proto__" is, on Object.prototype), so no assignment can reach a setter or the
  // prototype: Object.assign is safe here, and its native copy keeps the common case as cheap as it always was.
  return Object.assign(Object.create(proto) as object, source);
}

/** The slow path of {@link instanceFromFields}, for a payload with a key that names a member of the chain. */
function copyOwnFields(
  proto: object,
  source: Record<string, unknown>,
  keys: readonly string[],
): object | FieldsProblem {
  const target = Object.create(proto) as Record<string, unknown>;
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i]!;
    if (key === "__proto__") return "protoKey";
    if (key in proto) continue;
    target[key] = source[key];
  }
  return target;
}

/** Whether `text` is well-formed UTF-16 (no lone surrogate), so that UTF-8 can carry it exactly. */
export function isWellFormedText(text: string): boolean {
  // ES2024's String#isWellFormed (Node 20 has it; the project's TypeScript lib is older).
  return (text as string & { isWellFormed(): boolean }).isWellFormed();
}
