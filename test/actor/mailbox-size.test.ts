// ActorContext.mailboxSize: what waits behind the message being handled. The sharding daemon's gauge
// (ClusterSharding.daemonMailboxSize, movie_sharding_daemon_mailbox_size) reads it: messages queued at
// /system/sharding count until the daemon takes them.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { AbstractBehavior, type ActorContext, ActorSystem, silentLogger } from "../../src/actor/index.ts";
import { renderMetrics } from "../../src/management/index.ts";
import { eventually } from "../fixtures/eventually.ts";
import { settled, startShardingNode, terminateAll } from "../sharding/fixtures/tcp-nodes.ts";

const system = ActorSystem.create("mailbox-size", { logger: silentLogger });
after(() => system.terminate());

let openGate: () => void = () => {};
const gate = new Promise<void>((resolve) => {
  openGate = resolve;
});

/** Records the mailbox size it sees at each message; "hold" waits for the gate so the rest queue behind it. */
class Recorder extends AbstractBehavior<string> {
  readonly seen: [string, number][] = [];
  started = false;
  async receive(message: string, context: ActorContext<string>): Promise<void> {
    this.seen.push([message, context.mailboxSize]);
    if (message === "hold") {
      this.started = true;
      await gate;
    }
  }
}

test("mailboxSize counts the messages queued behind the one being handled", async () => {
  const recorder = new Recorder();
  const ref = system.spawn(recorder, "recorder");
  ref.tell("hold");
  await eventually(() => recorder.started, { what: "the hold to start", describe: () => recorder.seen });
  for (const m of ["a", "b", "c"]) ref.tell(m);
  openGate();
  await eventually(() => recorder.seen.length === 4, { what: "all four handled", describe: () => recorder.seen });
  assert.deepEqual(recorder.seen, [
    ["hold", 0],
    ["a", 2],
    ["b", 1],
    ["c", 0],
  ]);
});

test("the sharding daemon's mailbox size is what waits at /system/sharding, in the metrics too", async () => {
  const node = await startShardingNode(null);
  try {
    await eventually(() => settled(node, 1), { what: "one node Up" });
    const daemon = node.system.actorSelection(`${node.system.address}/system/sharding`);
    assert.equal(node.sharding.daemonMailboxSize, 0);
    // Told in one synchronous run: the daemon cannot take any before this test yields.
    for (let i = 0; i < 5; i++) daemon.tell(`not-a-sharding-message-${i}`);
    assert.equal(node.sharding.daemonMailboxSize, 5);
    assert.match(renderMetrics(node.system, null), /^movie_sharding_daemon_mailbox_size 5$/m);
    await eventually(() => node.sharding.daemonMailboxSize === 0, {
      what: "the daemon to take them",
      describe: () => node.sharding.daemonMailboxSize,
    });
    assert.equal(node.sharding.stats.rejectedEnvelopes, 5, "the daemon handled (and refused) the five");
  } finally {
    await terminateAll([node]);
  }
});
