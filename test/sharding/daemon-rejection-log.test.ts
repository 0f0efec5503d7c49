// The sharding daemon counts every message it rejects, but a peer that repeats a bad one must not get a log line
// per message (a flood of refused control messages would flood the log): each sender and error is logged once.
import assert from "node:assert/strict";
import { test } from "node:test";
import { PassivateShard, PlanRequest } from "../../src/sharding/internal/messages.ts";
import { eventually } from "../fixtures/eventually.ts";
import { OrderCommand, SequenceBehavior } from "./fixtures/order.ts";
import { recordingLogger, settled, startShardingNode, terminateAll } from "./fixtures/tcp-nodes.ts";

test("the sharding daemon logs a repeated rejection once per sender and error, and counts every one", async () => {
  const logger = recordingLogger();
  const node = await startShardingNode(null, { logger });
  try {
    node.sharding.init("Logged", OrderCommand, {}, (id) => new SequenceBehavior(id));
    await eventually(() => settled(node, 1), { what: "one node Up" });
    const daemon = node.system.actorSelection(`${node.system.address}/system/sharding`);
    const before = node.sharding.stats.rejectedEnvelopes;
    const rejected = () => logger.warnings.filter((w) => w.message.startsWith("sharding daemon rejected a message"));
    for (let i = 0; i < 50; i++) {
      daemon.tell(new PassivateShard("Logged", "not-the-settings-key", 0, node.cluster.selfAddress.toString(), null));
    }
    await eventually(() => node.sharding.stats.rejectedEnvelopes === before + 50, {
      what: "fifty rejections counted",
      describe: () => node.sharding.stats,
    });
    assert.equal(rejected().length, 1, "one line for fifty identical rejections");
    // Another error is news: it gets its own line.
    daemon.tell(new PlanRequest("NotRegistered", "k", "no-address"));
    await eventually(() => node.sharding.stats.rejectedEnvelopes === before + 51, { what: "the other rejection" });
    assert.equal(rejected().length, 2);
  } finally {
    await terminateAll([node]);
  }
});
