// Per-key linearizability of an append-only object whose final order is known (a list's values, a counter's applied
// operations). Writes are linearized in final order, so a write at final index i has rank 2i+1 and a read that saw
// the first k writes has rank 2k (between write k-1 and write k). A linearization exists exactly when no operation
// must come after one that finished before it began: for ranks r(x) < r(y), never y.complete < x.invoke (operations
// are intervals, so this pairwise condition suffices). Checked in O(n log n) by a sweep over ranks.

export interface RankedOp {
  readonly rank: number;
  readonly invoke: number;
  /** Infinity when the outcome never came back (the op may take effect any time after its invoke). */
  readonly complete: number;
  readonly label: string;
}

/** Pairs (earlier-ranked x, later-ranked y) where y completed before x was invoked; at most `limit`. */
export function realTimeInversions(ops: readonly RankedOp[], limit = 5): [RankedOp, RankedOp][] {
  const sorted = [...ops].sort((a, b) => a.rank - b.rank);
  const found: [RankedOp, RankedOp][] = [];
  let latest: RankedOp | null = null; // the latest-invoked op among strictly lower ranks
  let i = 0;
  while (i < sorted.length) {
    let j = i;
    while (j < sorted.length && sorted[j]!.rank === sorted[i]!.rank) j++;
    for (let k = i; k < j; k++) {
      const y = sorted[k]!;
      if (latest !== null && y.complete < latest.invoke) {
        found.push([latest, y]);
        if (found.length >= limit) return found;
      }
    }
    for (let k = i; k < j; k++) if (latest === null || sorted[k]!.invoke > latest.invoke) latest = sorted[k]!;
    i = j;
  }
  return found;
}
