/**
 * The application version a member runs (`enableCluster({ appVersion })` or `MOVIE_APP_VERSION`), carried in its
 * membership record so that sharding can tell a rolling update apart from a scale-out: while members of two
 * versions host an entity type, shards move only onto members of the newest one (docs/sharding.md, "Rolling updates").
 */

/** What an app version may look like: 1-64 characters of letters, digits and `. + _ -` (semver fits). */
const appVersionPattern = /^[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}$/;

/** True for a string that is a valid app version. */
export function isAppVersion(value: unknown): value is string {
  return typeof value === "string" && appVersionPattern.test(value);
}

/**
 * Orders two versions (undefined, a member that declares none, is older than any version). Both are split into
 * runs of digits and of other characters: digit runs compare as numbers, others as text, so `1.10.0` is newer than
 * `1.9.2` and `2.0.0-rc.2` newer than `2.0.0-rc.1`. A version that is a prefix of the other is older (`1.2` before
 * `1.2.1`); a pre-release is not ranked below its release (use build numbers if that matters).
 */
export function compareAppVersions(a: string | undefined, b: string | undefined): number {
  if (a === b) return 0;
  if (a === undefined) return -1;
  if (b === undefined) return 1;
  const left = a.match(/\d+|\D+/g) ?? [];
  const right = b.match(/\d+|\D+/g) ?? [];
  for (let i = 0; i < Math.min(left.length, right.length); i++) {
    const x = left[i]!;
    const y = right[i]!;
    if (x === y) continue;
    const numeric = /^\d/.test(x) && /^\d/.test(y);
    if (numeric) {
      // Compare digit runs without Number(): a run may exceed 2^53. Strip leading zeros, then length, then text.
      const xs = x.replace(/^0+(?=\d)/, "");
      const ys = y.replace(/^0+(?=\d)/, "");
      if (xs.length !== ys.length) return xs.length < ys.length ? -1 : 1;
      if (xs !== ys) return xs < ys ? -1 : 1;
      continue;
    }
    return x < y ? -1 : 1;
  }
  if (left.length !== right.length) return left.length < right.length ? -1 : 1;
  // Equal by parts but different text (leading zeros: "1.01" and "1.1"): fall back to the text for a total order.
  return a < b ? -1 : 1;
}
