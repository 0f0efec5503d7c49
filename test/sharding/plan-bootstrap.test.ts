// A coordinator's bootstrap over the in-process fake cluster: how many plan messages it takes to publish a plan.
import assert from "node:assert/strict";
import { test } from "node:test";
import { UniqueAddress } from "../../src/actor/index.ts";
import { shardingConstants } from "../../src/sharding/index.ts";
import { PlanRequest, PlanSnapshotRequest, PlanUpdate } from "../../src/sharding/internal/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { FakeCluster } from "./fixtures/fake-cluster.ts";
import { OrderCommand, orderClasses, SequenceBehavior } from "./fixtures/order.ts";

test("a bootstrap re-asks each planless peer once per reconcile round, not once per PlanRequest it gets back", async () => {
  const cluster = new FakeCluster(orderClasses);
  try {
    const nodes = ["boot-a", "boot-b", "boot-c"].map((name) => cluster.addNode(name));
    const counts = { snapshotRequests: 0, planRequests: 0, planUpdates: 0 };
    cluster.onDeliver = ({ message }) => {
      if (message instanceof PlanSnapshotRequest) counts.snapshotRequests++;
      else if (message instanceof PlanRequest) counts.planRequests++;
      else if (message instanceof PlanUpdate) counts.planUpdates++;
    };
    // The coordinator (lowest address) last, so that its peers have the type, but no plan, when it bootstraps: each
    // snapshot request it sends comes back as a PlanRequest.
    const sorted = [...nodes].sort((x, y) => UniqueAddress.compare(x.address, y.address));
    for (const n of [...sorted.slice(1), sorted[0]!]) {
      n.sharding.init("Boot", OrderCommand, { shardCount: 8 }, (id) => new SequenceBehavior(id));
    }
    await eventually(() => nodes.every((n) => n.sharding.allocations("Boot").size === 8), {
      what: "the plan on every node",
      describe: () => counts,
    });
    // One round at the start and one per reconcile interval until the window closes, to each of the two peers. The
    // bound is loose (a slow machine makes fewer rounds, never more); a ping-pong ran into the thousands.
    const { bootstrapSnapshotWindowMs, reconcileIntervalMs } = shardingConstants;
    const rounds = Math.ceil(bootstrapSnapshotWindowMs / reconcileIntervalMs) + 1;
    assert.ok(counts.snapshotRequests <= 2 * (rounds + 1), `snapshot requests ${JSON.stringify(counts)}`);
  } finally {
    await cluster.shutdown();
  }
});
