/**
 * An entity actor is bound to the lease epoch it was activated under (docs/protocol.md §11.3): every write it makes carries
 * that epoch, so it must never outlive its lease. A cached actor from an older (or, after a local loss and
 * re-acquire, different) epoch is stopped and replaced rather than reused.
 */

/** What to do with a cached entity actor before delivering under the current lease. */
export type EntityBinding =
  /** No actor is cached: create one bound to the current epoch. */
  | { readonly kind: "create"; readonly epoch: number }
  /** The cached actor was activated under the current epoch: deliver to it. */
  | { readonly kind: "reuse"; readonly epoch: number }
  /** The cached actor belongs to another epoch: stop it, then create one bound to the current epoch. */
  | { readonly kind: "replace"; readonly staleEpoch: number; readonly epoch: number };

/**
 * Decides whether a cached entity actor may receive a delivery made under the lease at `currentEpoch`.
 * @param cachedEpoch the epoch the cached actor was activated under, or `null` when none is cached
 * @param currentEpoch the epoch of the lease the delivery was granted under (1 or more)
 */
export function bindEntity(cachedEpoch: number | null, currentEpoch: number): EntityBinding {
  if (cachedEpoch === null) return { kind: "create", epoch: currentEpoch };
  if (cachedEpoch === currentEpoch) return { kind: "reuse", epoch: currentEpoch };
  return { kind: "replace", staleEpoch: cachedEpoch, epoch: currentEpoch };
}
