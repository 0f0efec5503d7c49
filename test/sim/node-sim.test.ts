// The seeded simulator of whole sharding nodes (test/sim/node-sim.ts): the production membership and sharding node
// cores under link drops, partitions, crashes, restarts with a new uid, joins, leaves, operator downs, impostor
// forwards, late replays of old control messages, paused nodes and database outages, with the safety invariants and
// message accounting checked after every event and liveness after healing. A failing seed prints itself, the last
// events, and replays alone with `MOVIE_SIM_SEED=<n> npm run test:only -- test/sim/node-sim`; `MOVIE_SIM_HISTORIES`
// changes how many run here; `npm run sim -- --seeds N --from S` runs long campaigns.
import assert from "node:assert/strict";
import { test } from "node:test";
import type { PlantedBugs } from "../../src/sharding/node/node-core.ts";
import { type HistoryResult, runHistory, SimFailure } from "./node-sim.ts";

const only = process.env.MOVIE_SIM_SEED;
const historyCount = Number(process.env.MOVIE_SIM_HISTORIES ?? 1_000);
/**
 * The share of histories allowed not to be live after healing. Measured: 5 in 1,000 (seeds 321, 354, 525, 600, 948;
 * open, see docs/protocol.md §14.9): a rise above this bound is a regression, and each such seed is printed.
 */
const notLiveAllowed = 0.02;

test(`${only === undefined ? historyCount : 1} seeded node histories keep every safety invariant, and nearly all are live after healing`, () => {
  const seeds = only === undefined ? Array.from({ length: historyCount }, (_, i) => i + 1) : [Number(only)];
  const totals = {
    delivered: 0,
    rejected: 0,
    handoffs: 0,
    generations: 0,
    relayed: 0,
    flushes: 0,
    notLive: [] as number[],
  };
  for (const seed of seeds) {
    const result: HistoryResult = runHistory({ seed, liveness: only !== undefined });
    totals.delivered += result.delivered;
    totals.rejected += result.rejected;
    totals.handoffs += result.handoffs;
    totals.relayed += result.relayedDelivered;
    totals.flushes += result.flushes;
    totals.generations += result.maxGeneration;
    if (result.liveness !== null && result.liveness !== undefined) totals.notLive.push(seed);
  }
  // The histories did real work: messages flowed, shards moved and plans were republished.
  assert.ok(totals.delivered > seeds.length * 40, `delivered ${totals.delivered}`);
  assert.ok(totals.handoffs > seeds.length * 3, `handoffs ${totals.handoffs}`);
  assert.ok(totals.generations > seeds.length * 5, `generations ${totals.generations}`);
  if (totals.notLive.length > 0) {
    console.log(`not live after healing: seeds ${totals.notLive.join(", ")} (replay one with MOVIE_SIM_SEED=<n>)`);
  }
  assert.ok(
    totals.notLive.length <= Math.max(1, seeds.length * notLiveAllowed),
    `${totals.notLive.length} of ${seeds.length} histories not live after healing: ${totals.notLive.join(", ")}`,
  );
});

// Seed 689: the coordinator's handoff of a shard to a node that was downed and removed while the prepare was
// outstanding kept buffering the shard's traffic until the prepare's ask timed out, and a probe after healing was
// rejected. The handoff now fails its step as soon as the membership shows the next owner gone (node-core.ts,
// failHandoffsToDepartedOwners); without that, this history is not live.
test("a handoff whose next owner is removed mid-prepare gives way at once (seed 689 is live after healing)", () => {
  // Without coordinator churn: the history as it was when the bug was found.
  const result = runHistory({ seed: 689, liveness: true, coordinatorChurn: false });
  assert.equal(result.liveness ?? null, null);
});

/** The first seed in 1..`maxSeeds` whose history fails with `bugs` planted, and how. */
function firstCaught(bugs: PlantedBugs, maxSeeds: number): SimFailure | null {
  for (let seed = 1; seed <= maxSeeds; seed++) {
    try {
      runHistory({ seed, bugs });
    } catch (error) {
      if (!(error instanceof SimFailure)) throw error;
      return error;
    }
  }
  return null;
}

// Each planted bug is caught within the stated number of seeds; the same seeds pass without it (they are among the
// histories of the test above). Measured: the early flush first at seed 12, the unchecked forward at seed 9, the
// unchecked plan generation at seed 4 (a late replay of an old plan update).
test("a planted bug, the handoff buffer flushed before the old owner drained, is caught within 30 seeds", () => {
  const caught = firstCaught({ flushBeforeDrained: true }, 30);
  assert.ok(caught !== null, "no seed caught the early flush");
  assert.match(caught.reason, /has live entities on .* and /);
});

test("a planted bug, forwarded traffic accepted from a non-coordinator, is caught within 30 seeds", () => {
  const caught = firstCaught({ acceptForwardFromAnyone: true }, 30);
  assert.ok(caught !== null, "no seed caught the unchecked forward");
  assert.match(caught.reason, /neither owns nor was prepared/);
});

test("a planted bug, a plan update accepted without its generation check, is caught within 20 seeds", () => {
  const caught = firstCaught({ skipPlanGenerationCheck: true }, 20);
  assert.ok(caught !== null, "no seed caught the unchecked generation");
  assert.match(caught.reason, /plan generation went down/);
});
