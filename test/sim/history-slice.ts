// One slice of the node simulator's seeded histories (test/sim/node-sim.ts), as `npm test` runs them: the suite's
// 10,000 histories are split over test/sim/node-sim-histories-<n>.test.ts so that the runner's parallel files share
// them (each file stays well inside the runner's 120 s per-file bound). `MOVIE_SIM_HISTORIES` changes the total;
// `MOVIE_SIM_SEED` replays one seed in test/sim/node-sim.test.ts instead, and the slices then skip.
import assert from "node:assert/strict";
import { test } from "node:test";
import { directBySeed, type HistoryResult, runHistory } from "./node-sim.ts";

/** How many histories `npm test` runs in all, and over how many files. */
export const historiesInSuite = Number(process.env.MOVIE_SIM_HISTORIES ?? 10_000);
export const sliceCount = 8;

/** Registers the test of slice `slice` (1-based) of {@link sliceCount}: its seeds run, every invariant checked. */
export function historySlice(slice: number): void {
  const per = Math.ceil(historiesInSuite / sliceCount);
  const from = (slice - 1) * per + 1;
  const to = Math.min(historiesInSuite, slice * per);
  const replaying = process.env.MOVIE_SIM_SEED !== undefined;
  test(`seeded node histories ${from}..${to} keep every safety invariant and are live after healing`, {
    skip: replaying ? "MOVIE_SIM_SEED replays one seed in node-sim.test.ts" : false,
  }, () => {
    if (to < from) return;
    const totals = {
      delivered: 0,
      handoffs: 0,
      generations: 0,
      writes: 0,
      staleWrites: 0,
      localDeliveries: 0,
      remoteShortcuts: 0,
      directShortcuts: 0,
      ownDirectShortcuts: 0,
      callerShortcuts: 0,
      direct: 0,
      directSeeds: 0,
    };
    const notLive: number[] = [];
    for (let seed = from; seed <= to; seed++) {
      const result: HistoryResult = runHistory({ seed });
      totals.delivered += result.delivered;
      totals.handoffs += result.handoffs;
      totals.generations += result.maxGeneration;
      totals.writes += result.writes;
      totals.staleWrites += result.staleWrites;
      totals.localDeliveries += result.localDeliveries;
      totals.remoteShortcuts += result.remoteShortcuts;
      totals.directShortcuts += result.directShortcuts;
      totals.ownDirectShortcuts += result.ownDirectShortcuts;
      totals.callerShortcuts += result.callerShortcuts;
      totals.direct += result.directDelivered;
      if (directBySeed(seed)) totals.directSeeds++;
      // Every history is live after healing (docs/protocol.md §14.8): none is allowed not to be.
      if (result.liveness !== null && result.liveness !== undefined) notLive.push(seed);
    }
    const count = to - from + 1;
    // The histories did real work: messages flowed, shards moved, plans were republished, persistent entities
    // wrote (even seeds), and some writes met the fence.
    assert.ok(totals.delivered > count * 40, `delivered ${totals.delivered}`);
    assert.ok(totals.handoffs > count * 3, `handoffs ${totals.handoffs}`);
    assert.ok(totals.generations > count * 5, `generations ${totals.generations}`);
    assert.ok(count < 2 || totals.writes > count * 20, `writes ${totals.writes}`);
    assert.ok(count < 500 || totals.staleWrites > 0, `stale writes ${totals.staleWrites}`);
    // The node shell's shortcut for a local caller was checked against the full step many times (347 in seeds 1..40).
    assert.ok(totals.localDeliveries > count * 2, `local deliveries checked ${totals.localDeliveries}`);
    // The shell's shortcuts for a remote envelope (coordinator routing, owner delivery) were checked against the full
    // step too (62,030 times in seeds 1..600, about 100 a history).
    assert.ok(totals.remoteShortcuts > count * 20, `remote shortcuts checked ${totals.remoteShortcuts}`);
    // Among them the owner's shortcut for a direct envelope (directDeliveryType), in the seeds that route directly.
    assert.ok(
      totals.directShortcuts > totals.directSeeds * 5,
      `direct shortcuts checked ${totals.directShortcuts} in ${totals.directSeeds} histories`,
    );
    // And the caller's own direct delivery (callerOwnDirect: the shard is this node's, under its own grant).
    assert.ok(
      totals.ownDirectShortcuts > totals.directSeeds * 5,
      `own direct shortcuts checked ${totals.ownDirectShortcuts} in ${totals.directSeeds} histories`,
    );
    // And the shortcut for a member's caller (callerRouteTarget), about 100 a history in seeds 1..300.
    assert.ok(totals.callerShortcuts > count * 20, `caller shortcuts checked ${totals.callerShortcuts}`);
    // Half of the seeds route directly (docs/protocol.md §8.8), and there about a quarter of the messages go direct.
    assert.ok(
      totals.direct > totals.directSeeds * 10,
      `${totals.direct} delivered directly in ${totals.directSeeds} histories`,
    );
    assert.deepEqual(
      notLive,
      [],
      `not live after healing: seeds ${notLive.join(", ")} (replay one with MOVIE_SIM_SEED=<n> npm run test:only -- node-sim)`,
    );
  });
}
