// A non-coordinator polls the coordinator for the plan every 250 ms (docs/protocol.md §6.4: PLAN_SYNC_INTERVAL); the request
// names the plan it holds, and the coordinator answers only when its own differs. A steady cluster therefore sends no
// plans on the poll, while a member that missed an update still gets it on its next poll.
import assert from "node:assert/strict";
import { test } from "node:test";
import { ManualScheduler } from "../../src/actor/index.ts";
import { LeastLoadedAllocation, NoRebalance } from "../../src/sharding/index.ts";
import { PlanRequest, PlanUpdate } from "../../src/sharding/internal/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { FakeCluster, type Node } from "./fixtures/fake-cluster.ts";
import { OrderCommand, orderClasses, SequenceBehavior } from "./fixtures/order.ts";

test("the coordinator answers a plan poll only when the poller's plan differs from its own", async () => {
  const clock = new ManualScheduler();
  const cluster = new FakeCluster(orderClasses, { scheduler: clock });
  try {
    const [a, b] = cluster.addNodesInAddressOrder("a-node", "b-node") as [Node, Node];
    const polls: PlanRequest[] = [];
    const updatesToB: PlanUpdate[] = [];
    cluster.onDeliver = ({ to, message }) => {
      if (message instanceof PlanRequest && to.equals(a.address)) polls.push(message);
      if (message instanceof PlanUpdate && to.equals(b.address)) updatesToB.push(message);
    };
    const settings = { shardCount: 4, allocation: new LeastLoadedAllocation(), rebalance: new NoRebalance() };
    for (const n of [a, b]) n.sharding.init("Poll", OrderCommand, settings, (id) => new SequenceBehavior(id));
    const following = () =>
      b.sharding.planGeneration("Poll") > 0 && b.sharding.planGeneration("Poll") === a.sharding.planGeneration("Poll");
    await eventually(
      () => {
        if (following()) return true;
        clock.advance(50);
        return false;
      },
      {
        what: "b follows a's plan",
        describe: () => ({ a: a.sharding.planGeneration("Poll"), b: b.sharding.planGeneration("Poll") }),
      },
    );
    const generation = a.sharding.planGeneration("Poll");

    // Steady state: eight polls, each naming the plan b holds, and not one plan sent back.
    const pollsBefore = polls.length;
    const updatesBefore = updatesToB.length;
    for (let i = 1; i <= 8; i++) {
      clock.advance(250);
      await eventually(() => polls.length >= pollsBefore + i, {
        what: `poll ${i} to arrive`,
        describe: () => polls.length,
      });
    }
    const steady = polls.slice(pollsBefore);
    assert.ok(
      steady.every((p) => p.knownGeneration === generation && p.knownAuthor === a.address.toString()),
      `every poll names the plan b holds: ${JSON.stringify(steady.map((p) => [p.knownAuthor, p.knownGeneration]))}`,
    );
    // The last poll's answer, had there been one, would be on the link before anything sent after it (FIFO): a
    // request from b that names an older generation is answered, so its update marks the end of the poll answers.
    b.system
      .actorSelection(`${a.address.address}/system/sharding`)
      .tell(
        new PlanRequest("Poll", steady[0]!.settingsKey, b.address.toString(), a.address.toString(), generation - 1),
        b.system.actorSelection(`${b.address.address}/system/sharding`),
      );
    await eventually(() => updatesToB.length > updatesBefore, { what: "the answer to a poll that is behind" });
    assert.equal(updatesToB.length, updatesBefore + 1, "only the poll that was behind got a plan");
    assert.equal(updatesToB.at(-1)!.generation, generation);

    // A poll that names another author (or none: a member that has no plan yet) is answered too.
    b.system
      .actorSelection(`${a.address.address}/system/sharding`)
      .tell(
        new PlanRequest("Poll", steady[0]!.settingsKey, b.address.toString(), null, 0),
        b.system.actorSelection(`${b.address.address}/system/sharding`),
      );
    await eventually(() => updatesToB.length === updatesBefore + 2, { what: "the answer to a planless poll" });
  } finally {
    await cluster.shutdown();
  }
});
