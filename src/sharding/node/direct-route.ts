import type { UniqueAddress } from "../../actor/index.ts";

/**
 * The state of the direct route (docs/protocol.md §8.8) that the node core keeps per type: on the caller side, one
 * route per shard; on the owner side, the marker book of announced handoffs. Plain data; the rules are in
 * node-core.ts.
 */

/**
 * A caller's route to one shard, when it is not the plain coordinator route:
 * - `probing`: a DirectProbe went to `coordinator`; the shard's new deliveries wait (held) for the grant, so none
 *   sent through the coordinator after the probe can be overtaken by a direct one;
 * - `direct`: `owner` granted the route under `coordinator`'s plan of `generation`;
 * - `cooling`: a probe was declined, expired or a handoff was announced: the coordinator route, no probe before
 *   `untilMs`.
 */
export type DirectRoute =
  | { readonly phase: "probing"; readonly token: number; readonly coordinator: UniqueAddress }
  | {
      readonly phase: "direct";
      readonly owner: UniqueAddress;
      readonly coordinator: UniqueAddress;
      readonly generation: number;
    }
  | { readonly phase: "cooling"; readonly untilMs: number };

/** What an owner's drain of a shard waits for: the markers of `waitFor` for the handoff `token` of `coordinator`. */
export interface DrainGate {
  /** UniqueAddress text of the coordinator that announced the handoff. */
  readonly coordinator: string;
  readonly token: number;
  /** UniqueAddress texts of the members whose marker is waited for. */
  readonly waitFor: readonly string[];
  /** When the drain started waiting (the step's clock): it gives up `handoffTimeoutMs` later. */
  readonly sinceMs: number;
}

/** Marker sets kept per shard at most (a marker may arrive before the PassivateShard it belongs to). */
const markerSetsPerShard = 4;

/**
 * The markers an owner received, per shard and announced handoff (`coordinator token`): bounded, at most
 * {@link markerSetsPerShard} handoffs per shard (the oldest forgotten first) and one entry per member in each.
 */
export class MarkerBook {
  private readonly shards = new Map<number, Map<string, Set<string>>>();

  /** Records `caller`'s marker of `coordinator`'s handoff `token` of `shard`. */
  add(shard: number, coordinator: string, token: number, caller: string): void {
    let sets = this.shards.get(shard);
    if (sets === undefined) {
      sets = new Map();
      this.shards.set(shard, sets);
    }
    const key = `${coordinator} ${token}`;
    let set = sets.get(key);
    if (set === undefined) {
      if (sets.size >= markerSetsPerShard) sets.delete(sets.keys().next().value!);
      set = new Set();
      sets.set(key, set);
    }
    set.add(caller);
  }

  /** Whether `caller`'s marker of the handoff `gate` names has arrived. */
  has(shard: number, gate: DrainGate, caller: string): boolean {
    return this.shards.get(shard)?.get(`${gate.coordinator} ${gate.token}`)?.has(caller) === true;
  }

  /** Forgets every marker set of `shard` but the one of `gate` (a newer drain gate replaces the older handoffs). */
  keepOnly(shard: number, gate: DrainGate): void {
    const sets = this.shards.get(shard);
    if (sets === undefined) return;
    const key = `${gate.coordinator} ${gate.token}`;
    for (const k of [...sets.keys()]) if (k !== key) sets.delete(k);
  }

  /** Forgets the markers of `shard` (its drain ran). */
  forget(shard: number): void {
    this.shards.delete(shard);
  }
}
