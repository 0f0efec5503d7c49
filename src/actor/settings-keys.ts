import { UnknownSettingError } from "./errors.ts";

/**
 * The keys a settings object may have: `true` for a value, a nested shape for an object whose own keys are checked
 * too. Declare one with `satisfies SettingsShapeOf<TheSettings>` so the compiler keeps it in step with the type.
 */
export interface SettingsShape {
  readonly [key: string]: true | SettingsShape;
}

/** A shape naming exactly the keys of `T`. */
export type SettingsShapeOf<T> = { readonly [K in keyof Required<T>]-?: true | SettingsShape };

/**
 * Refuses a settings object with a key its shape does not have, naming the key and the known setting probably meant:
 * the same name at another level (a misplaced setting) first, else the closest name by edit distance. Only own
 * enumerable string keys are looked at; values are left to the caller's validation.
 * @throws UnknownSettingError
 */
export function checkSettingKeys(owner: string, settings: unknown, shape: SettingsShape): void {
  const unknown = firstUnknown(settings, shape, "");
  if (unknown === null) return;
  throw new UnknownSettingError(owner, unknown.path, suggestionFor(unknown.key, unknown.path, shape));
}

function firstUnknown(settings: unknown, shape: SettingsShape, prefix: string): { key: string; path: string } | null {
  if (settings === null || typeof settings !== "object" || Array.isArray(settings)) return null;
  for (const key of Object.keys(settings)) {
    const path = prefix + key;
    if (!Object.hasOwn(shape, key)) return { key, path };
    const nested = shape[key]!;
    if (nested !== true) {
      const inner = firstUnknown((settings as Record<string, unknown>)[key], nested, `${path}.`);
      if (inner !== null) return inner;
    }
  }
  return null;
}

/** Every known setting as a path (`failureDetector.heartbeatInterval`). */
function paths(shape: SettingsShape, prefix = ""): string[] {
  const found: string[] = [];
  for (const [key, nested] of Object.entries(shape)) {
    found.push(prefix + key);
    if (nested !== true) found.push(...paths(nested, `${prefix}${key}.`));
  }
  return found;
}

function suggestionFor(key: string, path: string, shape: SettingsShape): string | null {
  const known = paths(shape).filter((p) => p !== path);
  const lower = key.toLowerCase();
  const last = (p: string) => p.slice(p.lastIndexOf(".") + 1).toLowerCase();
  const misplaced = known.find((p) => last(p) === lower);
  if (misplaced !== undefined) return misplaced;
  let best: string | null = null;
  let bestDistance = Number.POSITIVE_INFINITY;
  for (const p of known) {
    const name = last(p);
    // "path" for "dbPath": a known name that contains the unknown one (or the reverse) is a likely meaning.
    const distance = name.includes(lower) || lower.includes(name) ? 1 : editDistance(lower, name);
    if (distance < bestDistance) {
      best = p;
      bestDistance = distance;
    }
  }
  return bestDistance <= Math.max(2, Math.floor(key.length / 3)) ? best : null;
}

/** Levenshtein distance; settings names are short, so the quadratic table is fine. */
function editDistance(a: string, b: string): number {
  if (a.length > 64 || b.length > 64) return Number.POSITIVE_INFINITY;
  let previous = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      current[j] = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + cost);
    }
    previous = current;
  }
  return previous[b.length]!;
}
