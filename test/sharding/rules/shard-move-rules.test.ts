// Rules of an operator's shard move (src/sharding/coordinator/shard-move.ts), one scenario per rule, on the pure
// decision: who may move, which shard, to whom, and which moves are refused because the rebalance policy would undo
// them. The move itself is the coordinator's ordinary handoff (tested by the handoff rules and the node simulator).
import assert from "node:assert/strict";
import { test } from "node:test";
import type { UniqueAddress } from "../../../src/actor/index.ts";
import type { PlanState } from "../../../src/sharding/coordinator/plan.ts";
import { decideShardMove, type ShardMoveContext } from "../../../src/sharding/coordinator/shard-move.ts";
import {
  LeastLoadedAllocation,
  NoRebalance,
  RateLimitedRebalance,
  RoleAwareAllocation,
  type ShardingMember,
} from "../../../src/sharding/index.ts";
import { AllocationPlanner } from "../../../src/sharding/internal/index.ts";
import { addr, member } from "../fixtures/members.ts";

const a = addr("a");
const b = addr("b");
const c = addr("c");
const balanced = new AllocationPlanner(6, new LeastLoadedAllocation(), new RateLimitedRebalance({ threshold: 1 }));
const manual = new AllocationPlanner(6, new LeastLoadedAllocation(), new NoRebalance());

/** A plan authored by `a`: shard i → owners[i]. */
function planOf(...owners: UniqueAddress[]): PlanState {
  return { allocations: new Map(owners.map((o, i) => [i, o])), author: a, generation: 7, bootstrap: null };
}

function ctx(overrides: Partial<ShardMoveContext> = {}): ShardMoveContext {
  return {
    coordinator: a,
    drivesHandoffs: true,
    members: [member("a"), member("b"), member("c")],
    planner: balanced,
    handoffs: new Set(),
    ...overrides,
  };
}

const reasonOf = (d: ReturnType<typeof decideShardMove>) => (d.kind === "refused" ? d.reason : d.kind);
const target = (d: ReturnType<typeof decideShardMove>) => (d.kind === "moving" ? d.to.address.system : d.reason);

// a: 0,1,2  b: 3,4  c: 5 — loads 3, 2, 1.
const uneven = planOf(a, a, a, b, b, c);

test("only the node that drives handoffs moves shards; others refuse and name the coordinator", () => {
  const d = decideShardMove(uneven, 0, null, ctx({ drivesHandoffs: false, coordinator: b }));
  assert.equal(d.kind, "refused");
  assert.equal(reasonOf(d), "NotCoordinator");
  assert.ok(d.kind === "refused" && d.coordinator?.equals(b));
  assert.match(d.kind === "refused" ? d.message : "", /coordinator movie\.tcp:\/\/b@/);
  const none = decideShardMove(uneven, 0, null, ctx({ drivesHandoffs: false, coordinator: null }));
  assert.equal(reasonOf(none), "NotCoordinator");
  assert.match(none.kind === "refused" ? none.message : "", /no converged coordinator/);
});

test("a shard outside 0..shardCount-1 (or not an integer) is refused", () => {
  for (const shard of [-1, 6, 1.5, Number.NaN, Number.MAX_SAFE_INTEGER + 2]) {
    assert.equal(reasonOf(decideShardMove(uneven, shard, null, ctx())), "ShardOutOfRange", `shard ${shard}`);
  }
});

test("a shard already in a handoff, or without an owner, is refused", () => {
  assert.equal(reasonOf(decideShardMove(uneven, 1, null, ctx({ handoffs: new Set([1]) }))), "HandoffInProgress");
  const partial: PlanState = { ...uneven, allocations: new Map([...uneven.allocations].filter(([s]) => s !== 4)) };
  assert.equal(reasonOf(decideShardMove(partial, 4, null, ctx())), "ShardNotAllocated");
});

test("without a target the shard goes to the least-loaded other host, the lowest address on a tie", () => {
  const d = decideShardMove(uneven, 0, null, ctx());
  assert.equal(target(d), "c");
  assert.ok(d.kind === "moving" && d.from.equals(a));
  // b: 0,1  a: 2,3  c: 4,5 — moving b's shard with ties at 2 picks a (lower address than c).
  const even = planOf(b, b, a, a, c, c);
  assert.equal(target(decideShardMove(even, 0, null, ctx({ planner: manual }))), "a");
});

test("a named target must be an Up host other than the owner that the strategy accepts", () => {
  const anyMove = ctx({ planner: manual });
  assert.equal(target(decideShardMove(uneven, 0, b, anyMove)), "b");
  assert.equal(reasonOf(decideShardMove(uneven, 0, a, anyMove)), "AlreadyOwner");
  const leaving = [member("a"), member("b", { status: "Leaving" }), member("c")];
  assert.equal(reasonOf(decideShardMove(uneven, 0, b, ctx({ members: leaving, planner: manual }))), "IneligibleTarget");
  assert.equal(reasonOf(decideShardMove(uneven, 0, addr("stranger"), anyMove)), "IneligibleTarget");
  const roles: ShardingMember[] = [
    member("a", { roles: ["backend"] }),
    member("b", { roles: ["backend"] }),
    member("c", { roles: ["frontend"] }),
  ];
  const backendOnly = new AllocationPlanner(6, new RoleAwareAllocation(new LeastLoadedAllocation(), ["backend"]), {
    configurationKey: "none",
    selectShards: () => [],
  });
  assert.equal(
    reasonOf(decideShardMove(uneven, 0, c, ctx({ members: roles, planner: backendOnly }))),
    "IneligibleTarget",
  );
  // Without a target the frontend is never picked, though it holds the fewest shards.
  assert.equal(target(decideShardMove(uneven, 0, null, ctx({ members: roles, planner: backendOnly }))), "b");
});

test("with nobody else to host the shard the move is refused", () => {
  const alone = [member("a"), member("b", { status: "Leaving" })];
  assert.equal(reasonOf(decideShardMove(planOf(a, a, a, a, a, a), 0, null, ctx({ members: alone }))), "NoOtherHost");
});

test("a move the rebalance policy would undo at once is refused; NoRebalance keeps any move", () => {
  // Balanced 2/2/2 equal to the least-loaded target: any move leaves counts 1 and 3, out of the threshold of 1, and
  // the moved shard is the one the policy puts back.
  const target2 = planOf(a, b, c, a, b, c);
  const undone = decideShardMove(target2, 0, b, ctx());
  assert.equal(reasonOf(undone), "WouldBeUndone");
  assert.match(undone.kind === "refused" ? undone.message : "", /NoRebalance/);
  assert.equal(target(decideShardMove(target2, 0, b, ctx({ planner: manual }))), "b");
  // From the most loaded owner to the least loaded one the counts stay within the threshold: nothing follows.
  const d = decideShardMove(uneven, 0, c, ctx());
  assert.deepEqual(d.kind === "moving" ? d.followUpMoves : d.reason, []);
});
