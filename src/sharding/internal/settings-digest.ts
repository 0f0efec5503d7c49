import { Fnv1a64 } from "../hash/fnv1a64.ts";

/**
 * The settings digest a direct envelope carries instead of the settings key (docs/protocol.md §8.8): the low 52 bits of
 * the key's FNV-1a 64 hash, an integer a float64 holds exactly. The key is about 100 characters; a direct envelope is
 * the data path, so it carries 8 bytes, and the receiver maps the digest back to the key of settings this process
 * built (every `ShardingSettings` remembers its key) — the same string its checks compare with, so nothing downstream
 * of the decode changes. A digest no local settings have maps to a key no type has, and the envelope is refused as
 * for any other settings mismatch.
 *
 * A 52-bit digest is a check against misconfiguration, not an authentication: a direct envelope's origin is the
 * remoting-authenticated sender, and the sender's settings were already compared in full when the owner granted the
 * route (the DirectProbe carries the whole key).
 */

/** Keys remembered at most: far above the settings one process builds; past it a key is still digested, not kept. */
const rememberedMax = 1_024;
/** Local keys → their digest (so a sender pays one map lookup per envelope, not a hash of ~100 characters). */
const digests = new Map<string, number>();
/** Digest → the one remembered key that has it; null when two remembered keys share one (then neither resolves). */
const keys = new Map<number, string | null>();
const hasher = new Fnv1a64();

/** Largest digest (exclusive): 2^52. */
export const settingsDigestLimit = 2 ** 52;

/** The digest of `key` (one map lookup for the key of settings built here). */
export function settingsDigest(key: string): number {
  const known = digests.get(key);
  if (known !== undefined) return known;
  hasher.reset().utf8(key);
  return (hasher.hi & 0xfffff) * 2 ** 32 + hasher.lo;
}

/**
 * Remembers the key of settings built here, so a received digest resolves to it. Only `ShardingSettings` calls it: a
 * key that arrives from a peer is never remembered, so no peer can fill the table.
 */
export function rememberSettingsKey(key: string): void {
  if (digests.has(key) || digests.size >= rememberedMax) return;
  const digest = settingsDigest(key);
  digests.set(key, digest);
  const other = keys.get(digest);
  keys.set(digest, other === undefined ? key : null);
}

/**
 * The remembered settings key with `digest`, or a text that is no settings key (it names the digest, for the
 * mismatch error), so the receiver's settings check refuses the envelope.
 */
export function settingsKeyOfDigest(digest: number): string {
  return keys.get(digest) ?? `(settings digest ${digest.toString(16)}, unknown here)`;
}
