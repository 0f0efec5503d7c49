// The seeded simulator of whole sharding nodes (test/sim/node-sim.ts): the production membership and sharding node
// cores under link drops, partitions, crashes, restarts with a new uid, joins, leaves, operator downs, impostor
// forwards, late replays of old control messages, paused nodes and database outages, with the safety invariants and
// message accounting checked after every event and liveness after healing. The suite's 10,000 histories run in
// node-sim-histories-<n>.test.ts; this file replays one (`MOVIE_SIM_SEED=<n> npm run test:only -- node-sim`), pins
// seeds that once failed, and checks that planted bugs are caught. `npm run sim -- --seeds N --from S` runs long
// campaigns.
import assert from "node:assert/strict";
import { test } from "node:test";
import type { PlantedBugs } from "../../src/sharding/node/node-core.ts";
import { runHistory, SimFailure } from "./node-sim.ts";

const only = process.env.MOVIE_SIM_SEED;

// The suite's histories run in test/sim/node-sim-histories-<n>.test.ts (history-slice.ts); here, a replay of one.
test("one seeded node history, replayed (MOVIE_SIM_SEED), keeps every safety invariant and is live after healing", {
  skip: only === undefined ? "set MOVIE_SIM_SEED=<n> to replay a seed" : false,
}, () => {
  const result = runHistory({ seed: Number(only), liveness: true });
  assert.equal(result.liveness ?? null, null);
});

// Seed 689: the coordinator's handoff of a shard to a node that was downed and removed while the prepare was
// outstanding kept buffering the shard's traffic until the prepare's ask timed out, and a probe after healing was
// rejected. The handoff now fails its step as soon as the membership shows the next owner gone (node-core.ts,
// failHandoffsToDepartedOwners). Since the liveness phase waits for handoffs under way to finish before it probes,
// the history is live either way; what the fix changes is how soon: 225 virtual ms from healing to the last probe
// delivered with it, 925 without (the ask's 2 s timeout, measured 2026-12-05).
test("a handoff whose next owner is removed mid-prepare gives way at once (seed 689 settles soon after healing)", () => {
  const result = runHistory({ seed: 689, liveness: true });
  assert.equal(result.liveness ?? null, null);
  assert.ok(result.afterHealMs < 600, `${result.afterHealMs} virtual ms from healing to the probes delivered`);
});

// Seeds 176 and 1471: membership views that never converged again after a node left while cut off. In 176 the
// leaving node, cut off, led itself; the member that moved it on and removed it was not its leader, and it refused
// its own Removed record. In 1471 the leaving node, paused, applied its own leave; the leader came to hold that
// record and the third member refused it. Fixed in src/cluster/membership.ts (rule tests in
// test/cluster/cut-off-rules.test.ts); both are now live without the operator stopping a node.
for (const seed of [176, 1471]) {
  test(`a node that left while cut off is moved on and removed (seed ${seed} is live, no operator restart)`, () => {
    const result = runHistory({ seed, liveness: true });
    assert.equal(result.liveness ?? null, null);
    assert.equal(result.operatorRestarts, 0);
  });
}

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
