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
/** Histories with operator moves in every run (`MOVIE_SIM_OPERATOR_HISTORIES` changes it). */
const operatorMoveHistories = Number(process.env.MOVIE_SIM_OPERATOR_HISTORIES ?? 200);
/** Measured before the membership fixes of seeds 176 and 1471: 7 of 1,000 not live (membership views); a rise above 2 % is a regression. */
const operatorMovesNotLiveShare = 0.02;
/** Histories with coordinator churn in every run (`MOVIE_SIM_CHURN_HISTORIES` changes it). */
const coordinatorChurnHistories = Number(process.env.MOVIE_SIM_CHURN_HISTORIES ?? 200);

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
// abortHandoffsToDepartedOwners). Since the liveness phase waits for handoffs under way to finish before it probes,
// the history is live either way; what the fix changes is how soon: 225 virtual ms from healing to the last probe
// delivered with it, 925 without (the ask's 2 s timeout, measured 2026-12-05).
test("a handoff whose next owner is removed mid-prepare gives way at once (seed 689 settles soon after healing)", () => {
  const result = runHistory({ seed: 689, liveness: true, direct: false });
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
    const result = runHistory({ seed, liveness: true, direct: false });
    assert.equal(result.liveness ?? null, null);
    assert.equal(result.operatorRestarts, 0);
  });
}

// The last five histories of seeds 1..10,000 that were not live after healing (6963, 7003, 7024, 8426, 8780), fixed
// (docs/protocol.md §14.9). The fixes change the messages sent, and so the histories from the first message that
// differs; measured 2026-12-06 by turning each fix off in the histories as they are now:
//  - 6963: a coordinator elected after the old one crashed takes the plan of a Leaving member that still owns shards
//    (node-core.ts: bootstrap asks Up, Leaving and Exiting peers); without it, not live ("a dead owner");
//  - 7003, 8426: a joiner whose seed and records' leader are dead asks the other members it knows (membership.ts,
//    joinTick); without it, not live ("plans differ");
//  - 8780: an Up node nobody answers (its admitting leader crashed) joins again (membership.ts, isOrphan); without it,
//    not live ("plans differ");
//  - 2690: a member answers gossip from an incarnation it removed with its tombstone (membership.ts, receive); without
//    it the operator had to stop two nodes whose member tables never converged (seed 7024's history changed with
//    the other fixes and is live without this one).
for (const seed of [6963, 7003, 8426, 8780, 2690]) {
  test(`seed ${seed} is live after healing with no operator restart (a membership or bootstrap fix)`, () => {
    const result = runHistory({ seed, liveness: true, direct: false });
    assert.equal(result.liveness ?? null, null);
    assert.equal(result.operatorRestarts, 0);
  });
}

// Operators moving shards (POST .../rebalance) during the same faults: a move is the coordinator's ordinary handoff, so
// every invariant must hold as before. Measured (2026-12-05, seeds 1..1,000): 1,356 moves started, no safety failure,
// 7 histories not live after healing (62, 425, 563, 633, 759, 839, 844), membership views like the default ones; since
// the cancel of stale preparations and the re-own of a drained shard (2026-12-06, seeds 1..3,000, either routing): 0.
test("operator shard moves during faults keep every safety invariant, and nearly all histories are live", () => {
  const count = only === undefined ? operatorMoveHistories : 1;
  const seeds = only === undefined ? Array.from({ length: count }, (_, i) => i + 1) : [Number(only)];
  let moves = 0;
  const notLive: number[] = [];
  for (const seed of seeds) {
    const result = runHistory({ seed, operatorMoves: true, liveness: only !== undefined });
    moves += result.operatorMoves;
    if (result.liveness !== null && result.liveness !== undefined) notLive.push(seed);
  }
  // Not vacuous: the cores started moves (many requests are refused: not the coordinator, already the owner, undone).
  assert.ok(moves > seeds.length / 2, `${moves} moves started in ${seeds.length} histories`);
  assert.ok(
    notLive.length <= Math.max(1, seeds.length * operatorMovesNotLiveShare),
    `${notLive.length} of ${seeds.length} histories not live after healing: ${notLive.join(", ")}`,
  );
});

// Seed 42 with operator moves once showed a handoff whose next owner was downed waiting one more attempt before it
// aborted (node-core.ts, abortHandoffsToDepartedOwners). Since the coordinator-change flush and the membership fixes
// of 2026-12-06 no history of seeds 1 to 2,600 with operator moves reaches that state any more (checked with the rule
// switched off); the rule is pinned at the core in test/sharding/rules/node-edges-rules.test.ts ("a next owner that
// departs aborts the handoff whether it is passivating, preparing or waiting to retry").

// Coordinator churn (docs/protocol.md §8.7): with the same faults, the coordinator leaves or a member with a lower
// address joins and takes over while clients send, so messages are in flight to an old coordinator at every change
// and callers flush them to the new one. Measured 2026-12-06 (`npm run sim -- --seeds 5000 --churn`), seeds
// 1..5,000: no safety failure, 14,725 flushes answered, 15,712 envelopes relayed by an old coordinator (14,723 of them
// delivered, the rest rejected and counted), every history of 1..3,000 live after healing; 4 of 3,001..5,000 not
// (3386, 4084, 4552, 4744: not traced yet). Before the orphan fixes of the tests below, 461, 667, 862 and 1204 were
// not live, and seed 3009 broke safety (one shard live on two nodes: the departure guard, below). 516 and 749, not
// live when first measured, were already live before those fixes (749: the churn no longer counts a member asked to
// leave as staying; 516's history changed with later fixes, not re-traced). One history is not live by design: 862
// (below), whose healed leader refuses, as it must, a non-leader's tombstone of a node it never knew.
/**
 * Churn histories not live after healing for a reason the protocol accepts, each named. 862: the healed cluster's
 * leader never knew a node that joined and left on another side of a partition, and refuses its tombstone from the
 * member (that side's leader then) that removed it: no member but the leader may bar an incarnation a node never knew
 * (docs/security.md), so the two member tables differ for good. A fix that keeps that rule (a tombstone of a node
 * unknown here left out of convergence, say) is open.
 */
const notLiveByDesign = new Set([862]);

test("coordinator churn during faults keeps every safety invariant, and every history is live but the named ones", () => {
  const count = only === undefined ? coordinatorChurnHistories : 1;
  const seeds = only === undefined ? Array.from({ length: count }, (_, i) => i + 1) : [Number(only)];
  let flushes = 0;
  let relayed = 0;
  const notLive: number[] = [];
  for (const seed of seeds) {
    const result = runHistory({ seed, coordinatorChurn: true, liveness: only !== undefined });
    flushes += result.flushes;
    relayed += result.relayed;
    if (result.liveness !== null && result.liveness !== undefined) notLive.push(seed);
  }
  // Not vacuous: coordinators changed with messages in flight, and old coordinators relayed them.
  assert.ok(flushes > seeds.length, `${flushes} flushes answered in ${seeds.length} histories`);
  assert.ok(relayed > seeds.length, `${relayed} envelopes relayed in ${seeds.length} histories`);
  const unexplained = notLive.filter((seed) => !notLiveByDesign.has(seed));
  assert.deepEqual(unexplained, [], `${notLive.length} of ${seeds.length} histories not live after healing`);
});

// Churn seeds whose membership never converged again (docs/protocol.md §4.4, §4.5; rule tests in
// test/cluster/orphan-rules.test.ts, gossip-rules.test.ts, cut-off-rules.test.ts). In the first four the joiner with
// the lowest address was promoted by a leader that crashed before its gossip reached the others (an orphan), and:
//  - 461: the orphan led itself and promoted a joiner that asked it, and the two formed a cluster of their own with
//    the old members unreachable for good (an orphan now promotes nobody);
//  - 667, 1204: re-admitted by the other members' leader at a higher revision, the orphan, their leader by address,
//    refused its own new record as no leader's work (1204: so did a member that had heard its first promotion), and
//    the digests differed for good (the orphan takes its re-admission from its author, the others from the orphan);
//  - 862: the orphan, re-admitted, left; the member that removed it led its side of a partition, and the healed
//    cluster's leader never knew the orphan and refuses its tombstone (by design: notLiveByDesign above);
//  - 671 (once the departure guard below changed its history): a leave the leaver applied itself while cut off, then
//    a leader since removed applied again; the leader now held that later record, not its own work, and a member
//    refused it (a record the leader relays that says the same at a later revision passes).
// Seed 3009 broke safety: a leader that had just joined held no plan and read "no shard on it" for a paused Leaving
// owner, which it moved on to Removed; the next coordinator handed its shard on without a drain, and the owner,
// resumed, still hosted entities of it (the departure guard now needs a plan: node-lifecycle-rules.test.ts).
for (const seed of [461, 667, 671, 1204, 3009]) {
  test(`churn seed ${seed} is live after healing with no operator restart (a membership or departure-guard fix)`, () => {
    const result = runHistory({ seed, coordinatorChurn: true, liveness: true });
    assert.equal(result.liveness ?? null, null);
    assert.equal(result.operatorRestarts, 0);
  });
}

// Seed 754 with operator moves: a move's handoff aborted after its next owner prepared (the paused coordinator found
// the plan authored elsewhere at completion), and the next owner kept the preparation and renewed the shard's lease,
// so the plan's owner was fenced out of its own shard after healing. The coordinator now cancels preparations it no
// longer stands by (docs/protocol.md §9.3; prepare-cancel-rules.test.ts).
test("a preparation left by a handoff aborted after its prepare is cancelled (operator-move seed 754 is live)", () => {
  const result = runHistory({ seed: 754, operatorMoves: true, liveness: true, direct: false });
  assert.equal(result.liveness ?? null, null);
});

// Seed 2490 with operator moves: a move aborted after the old owner drained and the next owner prepared. The old owner,
// still the plan's owner, refused the shard as handing off until a next plan that never came, and the next owner's
// lease, renewed until its next plan request brought the cancel, outlasted the old owner's retry window. Both fixed
// (docs/protocol.md §9.4 "an aborted handoff"; aborted-handoff-rules.test.ts).
test("an owner that drained for an aborted handoff serves its shard again (operator-move seed 2490 is live)", () => {
  const result = runHistory({ seed: 2490, operatorMoves: true, liveness: true, direct: false });
  assert.equal(result.liveness ?? null, null);
});

/** The first seed in 1..`maxSeeds` whose history fails with `bugs` planted, and how. */
function firstCaught(
  bugs: PlantedBugs,
  maxSeeds: number,
  options: { readonly direct?: boolean; readonly coordinatorChurn?: boolean; readonly heldBound?: number } = {},
): SimFailure | null {
  for (let seed = 1; seed <= maxSeeds; seed++) {
    try {
      // Liveness on when the mode is named: a safety check that fails after healing is reported as itself, not as a
      // history not live.
      const { direct, coordinatorChurn = false, heldBound } = options;
      runHistory({
        seed,
        bugs,
        coordinatorChurn,
        ...(direct === undefined ? {} : { direct, liveness: true }),
        ...(heldBound === undefined ? {} : { heldBound }),
      });
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

// The flush of a coordinator change (docs/protocol.md §8.7), planted off: callers route through the new coordinator
// at once. Among the churn histories with coordinator routing (seeds 1..200 pass without it), measured 2026-12-06: first
// caught at seed 4 (an envelope the old coordinator held is never relayed: it vanishes), FIFO broken first at seed
// 55. A planted early end of the snapshot bootstrap (§6.3: start the term at the first peer's answer) was tried the
// same way and not caught in 300 histories with or without churn, nor did liveness change (0 and 1 of 300 not live):
// a coordinator that misses a peer's newer plan is repaired by the publish-above rule of §6.4, so no switch for it.
test("a planted bug, routing through a new coordinator without the flush, is caught within 10 churn seeds", () => {
  const caught = firstCaught({ skipCoordinatorFlush: true }, 10, { coordinatorChurn: true, direct: false });
  assert.ok(caught !== null, "no seed caught the skipped flush");
  assert.match(caught.reason, /vanished|FIFO broken/);
});

// Direct routing (docs/protocol.md §8.8): half of the suite's histories route directly (directBySeed), with every
// invariant above plus "a direct delivery is accepted only by the owner of its shard in the plan it names" and FIFO
// across every switch between routes. The planted bug goes direct from the plan alone, without the owner's grant: a
// delivery sent through the coordinator just before can then be overtaken by a direct one. Measured 2026-12-06: first
// caught at seed 3 (FIFO broken at the entity).
test("a planted bug, the direct route taken from the plan without the owner's grant, is caught within 20 seeds", () => {
  const caught = firstCaught({ directWithoutGrant: true }, 20, { direct: true });
  assert.ok(caught !== null, "no seed caught the ungranted direct route");
  assert.match(caught.reason, /FIFO broken/);
});

// A burst past the held bound while a probe is out (docs/protocol.md §8.8 "Caller"): the waiting deliveries go
// through the coordinator, then the burst's newest, and a new probe follows them. The suite's traffic never fills a
// held queue, so these histories hold at most 2 deliveries per shard and send bursts of one to four tells; their
// liveness probes go once every caller's held queue drained (a call past the bound is refused by design). The planted
// bug opens the shard to the new probe before the waiting ones go: measured 2026-12-07, FIFO broken at seed 1.
// `npm run sim -- --liveness --direct --held-bound 1` (also `--held-bound 2 --moves`, `--held-bound 2 --churn`):
// 1,500 seeds each keep every invariant and are live, 4,154-9,001 burst probes.
test("a planted bug, a burst's new probe sent before its waiting deliveries went through the coordinator, is caught within 10 bursty seeds", () => {
  const caught = firstCaught({ probeBeforeBurstFlush: true }, 10, { direct: true, heldBound: 2 });
  assert.ok(caught !== null, "no seed caught the early probe");
  assert.match(caught.reason, /FIFO broken/);
});

test("bursty direct histories (held bound 2) keep every invariant without the planted bug and are live after healing, and bursts probed again", () => {
  let burstProbes = 0;
  let directDelivered = 0;
  for (let seed = 1; seed <= 150; seed++) {
    const result = runHistory({ seed, direct: true, heldBound: 2, liveness: true });
    burstProbes += result.directBurstProbes;
    directDelivered += result.directDelivered;
  }
  assert.ok(burstProbes > 100, `${burstProbes} probes sent again after a burst`);
  assert.ok(directDelivered > 1_000, `${directDelivered} messages delivered by the direct route`);
});

test("direct routing: the same seeds without the planted bug keep every invariant, and messages went direct", () => {
  let directDelivered = 0;
  for (let seed = 1; seed <= 20; seed++) {
    const result = runHistory({ seed, direct: true, liveness: true });
    directDelivered += result.directDelivered;
  }
  assert.ok(directDelivered > 200, `${directDelivered} messages delivered by the direct route`);
});

// Direct routing's refusals are monotone for a grant (docs/protocol.md §8.8): the simulator fails a history in which a
// direct call is delivered that its caller sent under a grant after an earlier call of that grant was refused. The
// planted bug refuses a direct delivery while the owner has no accepting coordinator, instead of holding it: the
// caller falls back, and a later direct call of the same grant is accepted once the owner's view converged. Measured
// 2026-12-06: first caught at seed 79 (direct, with liveness); the entity-level FIFO check alone did not catch it in
// 2,000 direct seeds (the reorder needs the later call and the fallback to address one entity).
test("a planted bug, a direct delivery refused for want of an accepting coordinator, is caught within 100 direct seeds", () => {
  const caught = firstCaught({ refuseDirectWithoutCoordinator: true }, 100, { direct: true });
  assert.ok(caught !== null, "no seed caught the non-monotone refusal");
  assert.match(caught.reason, /not monotone/);
});

// Direct seeds 89 and 164: raising the ownership's floor past a refused grant (a rejected fix of the refusal above)
// refused the first direct delivery after a lost DirectRefused on the healed cluster, and these histories were not
// live. With the owner's hold they are live.
for (const seed of [89, 164]) {
  test(`direct seed ${seed} is live after healing (the owner holds, rather than refuses, without a coordinator)`, () => {
    const result = runHistory({ seed, direct: true, liveness: true });
    assert.equal(result.liveness ?? null, null);
  });
}
